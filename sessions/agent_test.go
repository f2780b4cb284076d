package sessions

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/workers"
)

// agentTurn starts a prompt whose worker sends the events the test puts
// on h.sp.events.
func agentTurn(t *testing.T, h *harness, v Viewer, sid string) {
	t.Helper()
	if h.sp.events == nil {
		h.sp.events, h.sp.acked = make(chan workers.Event), make(chan struct{})
	}
	_, start, err := h.r.Prompt(v, sid, "do it")
	if err != nil {
		t.Fatal(err)
	}
	start()
}

func event(name string, fields map[string]any) workers.Event {
	fields["event"] = name
	b, _ := json.Marshal(fields)
	return workers.Event{Name: name, Line: b}
}

// send has the worker send ev and returns once it was handled.
func send(h *harness, ev workers.Event) {
	h.sp.events <- ev
	<-h.sp.acked
}

// askApproval has the worker ask for an approval numbered id and returns
// the id viewers know it by.
func askApproval(h *harness, id string) string {
	send(h, event("approval", map[string]any{"request_id": id, "tool": "shell", "command": "touch " + id}))
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	for _, s := range h.r.sessions {
		if s.turn == nil {
			continue
		}
		for pub, a := range s.turn.approvals {
			if a.workerID == id {
				return pub
			}
		}
	}
	h.t.Fatalf("no pending approval %s", id)
	return ""
}

func resolved(v *recViewer) []string {
	var out []string
	for _, ev := range v.ofType("approval.resolved") {
		p := ev.Payload.(map[string]string)
		out = append(out, fmt.Sprintf("%s:%s:%s", p["request_id"], p["choice"], p["by"]))
	}
	return out
}

func (w *fakeWorker) answered() []map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]map[string]string(nil), w.answers...)
}

// TestApprovalOnceEver: every viewer hears the request; the first answer
// resolves it, a second gets false; the worker is told exactly once; the
// request, the answer and the tool's run are history.
func TestApprovalOnceEver(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	v1, v2 := &recViewer{}, &recViewer{}
	in, _ := h.r.Create(v1, NewSession{Title: ""})
	h.r.Resume(v2, in.ID)
	agentTurn(t, h, v1, in.ID)
	r1 := askApproval(h, "r1")
	if !strings.HasSuffix(r1, "-r1") || r1 == "r1" {
		t.Fatalf("the viewers' id of the worker's r1: %q", r1)
	}
	for _, v := range []*recViewer{v1, v2} {
		if evs := v.ofType("approval.request"); len(evs) != 1 || evs[0].Payload.(Approval).Command != "touch r1" {
			t.Fatalf("approval.request: %+v", evs)
		}
	}
	if res, _ := h.r.Resume(v2, in.ID); len(res.PendingApprovals) != 1 || res.PendingApprovals[0].RequestID != r1 {
		t.Fatalf("pending approvals: %+v", res.PendingApprovals)
	}
	first, err := h.r.RespondApproval(t.Context(), v1, in.ID, r1, ChoiceOnce)
	second, err2 := h.r.RespondApproval(t.Context(), v2, in.ID, r1, ChoiceDeny)
	if !first || second || err != nil || err2 != nil {
		t.Fatalf("answers: %v %v (%v %v), want true then false", first, second, err, err2)
	}
	w := h.sp.workers()[0]
	if got := w.answered(); len(got) != 1 || got[0]["choice"] != "once" || got[0]["by"] != "viewer" || got[0]["request_id"] != "r1" {
		t.Fatalf("the worker was told %+v", got)
	}
	for _, v := range []*recViewer{v1, v2} {
		if got := resolved(v); len(got) != 1 || got[0] != r1+":once:viewer" {
			t.Fatalf("approval.resolved: %v", got)
		}
	}
	send(h, event("tool_start", map[string]any{"tool_id": "t1", "name": "shell", "command": "touch r1"}))
	send(h, event("tool_complete", map[string]any{"tool_id": "t1", "exit_code": 0, "output": "done", "duration_ms": 3}))
	close(h.sp.events)
	h.r.Wait()
	if evs := v2.ofType("tool.complete"); len(evs) != 1 {
		t.Fatalf("tool.complete: %+v", evs)
	}
	res, _ := h.r.Resume(v1, in.ID)
	// The reply had no text before the tool ran: it comes after it.
	wantKinds(t, "history", res.History, "prompt:do it", "approval_request:touch r1", "approval_resolved:once",
		"tool_call:touch r1", "tool_result:done", "reply:")
	if res.History[5].Status != "complete" || len(res.PendingApprovals) != 0 {
		t.Fatalf("after the turn: %+v %+v", res.History[5], res.PendingApprovals)
	}
	wantKinds(t, "store", stored(t, h, in.ID), kinds(res.History)...)
}

// TestApprovalDenied: interrupt, detach, close and the timeout each deny a
// pending approval, once, saying which; an answer after it is false.
func TestApprovalDenied(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		end  func(h *harness, v *recViewer, sid string)
		by   string
		told bool   // the worker is told (it still runs the turn)
		why  string // the model hears on the next prompt
	}{
		{"interrupt", func(h *harness, v *recViewer, sid string) { h.r.Interrupt(v, sid) }, ByInterrupt, false, "the user interrupted the turn"},
		{"detach", func(h *harness, v *recViewer, sid string) { h.r.DetachViewer(v, workers.ReasonDetach) }, ByDetach, false, "the user left before approving it"},
		{"close", func(h *harness, v *recViewer, sid string) { h.r.Close(anon, sid, EndClientClose) }, ByClose, false, "the session ended before it was approved"},
		{"timeout", func(h *harness, v *recViewer, sid string) { h.advance(5 * time.Minute) }, ByTimeout, true, "nobody approved it in time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, nil)
				v := &recViewer{}
				in, _ := h.r.Create(v, NewSession{Title: ""})
				agentTurn(t, h, v, in.ID)
				rid := askApproval(h, "r")
				tt.end(h, v, in.ID)
				synctest.Wait()
				// The history says who denied it (after a detach or close no
				// viewer is left to hear approval.resolved).
				es, _, _ := h.r.History(t.Context(), anon, in.ID, 0, 100)
				var got []string
				for _, e := range es {
					if e.Kind == KindApprovalResolved {
						got = append(got, string(e.Data))
					}
				}
				if len(got) != 1 || got[0] != `{"by":"`+tt.by+`","choice":"deny","request_id":"`+rid+`"}` {
					t.Fatalf("approval_resolved entries: %v", got)
				}
				if evs := resolved(v); tt.by == ByInterrupt && (len(evs) != 1 || evs[0] != rid+":deny:interrupt") {
					t.Fatalf("approval.resolved: %v", evs)
				}
				if ok, _ := h.r.RespondApproval(t.Context(), &recViewer{}, in.ID, rid, ChoiceOnce); ok {
					t.Fatal("an answer after the denial resolved it")
				}
				told := h.sp.workers()[0].answered()
				if tt.told != (len(told) == 1 && told[0]["choice"] == "deny") {
					t.Fatalf("the worker was told %+v", told)
				}
				close(h.sp.events)
				synctest.Wait()
				// The next prompt tells the model the command did not run, and why.
				v2 := &recViewer{}
				if tt.by == ByClose {
					if _, err := h.r.Reopen(t.Context(), v2, in.ID); err != nil {
						t.Fatal(err)
					}
				}
				_, start, err := h.r.Prompt(v2, in.ID, "next")
				if err != nil {
					t.Fatal(err)
				}
				start()
				synctest.Wait()
				ws := h.sp.workers()
				p := ws[len(ws)-1].prompts
				hist, _ := json.Marshal(p[len(p)-1]["history"])
				want := `[{"kind":"prompt","role":"user","text":"do it"},` +
					`{"kind":"tool_call","role":"tool","text":"touch r"},{"kind":"tool_result","role":"tool","text":"not run: ` + tt.why + `"},`
				if !strings.HasPrefix(string(hist), want) {
					t.Fatalf("the next prompt's history %s, want it to start %s", hist, want)
				}
			})
		})
	}
}

// TestUnansweredRunReachesModel: an approval the history has no answer
// for (dashgate stopped before one) is a run that did not run for the
// model; an approved run is there once, as its own tool entries.
func TestUnansweredRunReachesModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	v := &recViewer{}
	in, _ := h.r.Create(v, NewSession{Title: ""})
	h.r.mu.Lock()
	s := h.r.sessions[in.ID]
	for _, m := range []Message{
		{Role: store.RoleUser, Kind: store.KindPrompt, Text: "do it", TurnID: "t1"},
		{Role: store.RoleSystem, Kind: KindApprovalRequest, Text: "touch a", Data: mustJSON(map[string]string{"request_id": "x-a1", "tool": "shell"})},
		{Role: store.RoleSystem, Kind: KindApprovalResolved, Text: "once", Data: mustJSON(map[string]string{"request_id": "x-a1", "choice": "once", "by": "viewer"})},
		{Role: store.RoleTool, Kind: KindToolCall, Text: "touch a"},
		{Role: store.RoleTool, Kind: KindToolResult, Text: "ok"},
		{Role: store.RoleSystem, Kind: KindApprovalRequest, Text: "touch b", Data: mustJSON(map[string]string{"request_id": "x-a2", "tool": "shell"})},
	} {
		h.r.appendLocked(s, m)
	}
	h.r.mu.Unlock()
	_, start, err := h.r.Prompt(v, in.ID, "next")
	if err != nil {
		t.Fatal(err)
	}
	start()
	h.r.Wait()
	hist, _ := json.Marshal(h.sp.workers()[0].prompts[0]["history"])
	want := `[{"kind":"prompt","role":"user","text":"do it"},{"kind":"tool_call","role":"tool","text":"touch a"},{"kind":"tool_result","role":"tool","text":"ok"},` +
		`{"kind":"tool_call","role":"tool","text":"touch b"},{"kind":"tool_result","role":"tool","text":"not run: dashgate restarted before it was approved"}]`
	if string(hist) != want {
		t.Fatalf("history %s, want %s", hist, want)
	}
}

// TestConversationReachesNewWorker: each prompt carries the earlier
// prompts, replies and tool entries (not commands or notices), oldest
// first, within AgentContext bytes, and the session's model; a worker
// spawned after a detach gets the conversation the last one had.
func TestConversationReachesNewWorker(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.AgentContext = 30 })
	v := leavingViewer()
	in, _ := h.r.Create(v, NewSession{Title: ""})
	for _, p := range []string{"one", "two", "three"} {
		_, start, _ := h.r.Prompt(v, in.ID, p)
		start()
		h.r.Wait()
	}
	h.r.Exec(t.Context(), v, in.ID, "/not for the model")
	if err := h.r.Configure(v, in.ID, "qwen3:8b"); err != nil {
		t.Fatal(err)
	}
	v.leave()
	h.r.DetachViewer(v, workers.ReasonDetach)
	h.r.Wait()

	v2 := &recViewer{}
	_, start, _ := h.r.Prompt(v2, in.ID, "four")
	start()
	h.r.Wait()
	ws := h.sp.workers()
	if len(ws) != 2 {
		t.Fatalf("%d workers, want a new one after the detach", len(ws))
	}
	p := ws[1].prompts[0]
	hist, _ := json.Marshal(p["history"])
	// 30 bytes: "two" (3) + "echo two" (8) + "three" (5) + "echo three" (10) = 26; "echo one" would not fit.
	want := `[{"kind":"prompt","role":"user","text":"two"},{"kind":"reply","role":"assistant","text":"echo two"},` +
		`{"kind":"prompt","role":"user","text":"three"},{"kind":"reply","role":"assistant","text":"echo three"}]`
	if string(hist) != want || p["model"] != "qwen3:8b" || p["text"] != "four" {
		t.Fatalf("the new worker's prompt: history %s, model %v, text %v", hist, p["model"], p["text"])
	}
	if got, _ := h.r.Get(anon, in.ID); got.Model != "qwen3:8b" {
		t.Fatalf("session model: %+v", got)
	}
}

// TestDetachTurnGrace: with a grace, a streaming turn whose last viewer
// left may finish (its reply saved whole), then its worker is closed with
// the detach reason; a turn still streaming at the end of the grace is
// interrupted then; an approval it asks for meanwhile waits, and is
// denied with the turn interrupted when the grace ends.
func TestDetachTurnGrace(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		after       func(t *testing.T, h *harness)
		interrupted bool
	}{
		{"finishes", func(t *testing.T, h *harness) {
			send(h, event("delta", map[string]any{"text": " rest"}))
			close(h.sp.events)
		}, false},
		{"expires", func(t *testing.T, h *harness) { h.advance(10 * time.Second) }, true},
		{"asks approval", func(t *testing.T, h *harness) {
			send(h, event("approval", map[string]any{"request_id": "r", "command": "x"}))
			synctest.Wait()
			if w := h.sp.workers()[0]; w.Closing() {
				t.Fatal("an approval asked within the grace ended it at once")
			}
			h.advance(10 * time.Second)
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, func(c *Config) { c.DetachTurnGrace = 10 * time.Second })
				v := leavingViewer()
				in, _ := h.r.Create(v, NewSession{Title: ""})
				agentTurn(t, h, v, in.ID)
				send(h, workers.Event{Name: "delta", Text: "first"})
				v.leave()
				h.r.DetachViewer(v, workers.ReasonDetach)
				synctest.Wait()
				w := h.sp.workers()[0]
				if w.Closing() {
					t.Fatal("the worker was closed at the detach despite the grace")
				}
				tt.after(t, h)
				synctest.Wait()
				h.r.Wait()
				if !w.Closing() || w.reason != workers.ReasonDetach {
					t.Fatalf("worker closing=%v reason=%q, want closed with detach", w.Closing(), w.reason)
				}
				es := stored(t, h, in.ID)
				var reply Message
				for _, e := range es {
					if e.Kind == "reply" {
						reply = e
					}
				}
				if reply.Interrupted != tt.interrupted || !strings.HasPrefix(reply.Text, "first") {
					t.Fatalf("the reply: %+v", reply)
				}
				if got, _ := h.r.Get(anon, in.ID); got.State != StateDetached || got.WorkerPID != 0 {
					t.Fatalf("after the grace: %+v", got)
				}
				if !tt.interrupted {
					return
				}
				close(h.sp.events)
			})
		})
	}
}

// TestApprovalIDsUniqueAcrossWorkers: a new worker numbers its requests
// from the start again; the ids viewers get differ, and an answer goes to
// the request it names.
func TestApprovalIDsUniqueAcrossWorkers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	v := &recViewer{}
	in, _ := h.r.Create(v, NewSession{Title: ""})
	agentTurn(t, h, v, in.ID)
	first := askApproval(h, "a1")
	h.r.RespondApproval(t.Context(), v, in.ID, first, ChoiceDeny)
	close(h.sp.events)
	h.r.Wait()
	h.sp.workers()[0].crash() // the next turn gets a new worker

	h.sp.events = nil
	agentTurn(t, h, v, in.ID)
	second := askApproval(h, "a1")
	if second == first {
		t.Fatalf("both workers' a1 is %q to viewers", first)
	}
	if ok, _ := h.r.RespondApproval(t.Context(), v, in.ID, first, ChoiceOnce); ok {
		t.Fatal("the first turn's approval resolved the second's")
	}
	if ok, _ := h.r.RespondApproval(t.Context(), v, in.ID, second, ChoiceOnce); !ok {
		t.Fatal("the second approval was not resolved")
	}
	if got := h.sp.workers()[1].answered(); len(got) != 1 || got[0]["request_id"] != "a1" || got[0]["choice"] != "once" {
		t.Fatalf("the new worker was told %+v", got)
	}
	close(h.sp.events)
}

// A slash command carries the session's model (as a prompt does), so
// that the agent worker's /model names the one its prompts go to.
func TestSlashCarriesTheModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	v := &recViewer{}
	in, _ := h.r.Create(v, NewSession{Title: ""})
	for _, model := range []string{"", "qwen3:8b"} {
		if err := h.r.Configure(v, in.ID, model); err != nil {
			t.Fatal(err)
		}
		if out, err := h.r.Exec(t.Context(), v, in.ID, "/model"); err != nil || out != "model "+model {
			t.Errorf("/model with the session's model %q: %q, %v", model, out, err)
		}
	}
}

// TestDetachGraceKeepsPendingApproval: an approval pending when the last
// viewer leaves waits through the grace: a viewer back in time gets it
// from session.resume and answers it, and the worker hears the answer.
func TestDetachGraceKeepsPendingApproval(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.DetachTurnGrace = 10 * time.Second })
		v := leavingViewer()
		in, _ := h.r.Create(v, NewSession{Title: ""})
		agentTurn(t, h, v, in.ID)
		rid := askApproval(h, "r")
		v.leave()
		h.r.DetachViewer(v, workers.ReasonDetach)
		synctest.Wait()
		w := h.sp.workers()[0]
		if w.Closing() {
			t.Fatal("the worker was closed at the detach of a turn waiting for an approval")
		}
		back := &recViewer{}
		res, err := h.r.Resume(back, in.ID)
		if err != nil || len(res.PendingApprovals) != 1 || res.PendingApprovals[0].RequestID != rid {
			t.Fatalf("resume within the grace: %v, pending %+v; want %s", err, res.PendingApprovals, rid)
		}
		if ok, err := h.r.RespondApproval(t.Context(), back, in.ID, rid, ChoiceOnce); !ok || err != nil {
			t.Fatalf("the answer after coming back: %v %v", ok, err)
		}
		synctest.Wait()
		if told := w.answered(); len(told) != 1 || told[0]["choice"] != "once" {
			t.Fatalf("the worker was told %v; want once", told)
		}
		close(h.sp.events)
	})
}
