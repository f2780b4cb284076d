package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
)

// The agents of the Agent Client Protocol through dashgate (issue 40):
// the ACP library's own demo agent (github.com/coder/acp-go-sdk's
// example/agent: no model, no key; per prompt it streams text, reads a
// file as tool call_1, asks permission for an edit as call_2 with the
// options allow / reject, then ends its turn, about 5 s in all) behind
// dashgate's bridge, as a user of the chat socket sees it.

// acpBuilds holds the agent programs the ACP tests build, by import
// path: each is built once per test process, beside the suite's dashgate
// binary (removed with it at the end of TestMain).
var acpBuilds sync.Map // import path → func() (string, error)

// buildAgent builds the program at import path pkg (once) and returns its
// path; another account runs it through testkit.ExecutableByAll.
func buildAgent(t *testing.T, pkg string) string {
	t.Helper()
	f, _ := acpBuilds.LoadOrStore(pkg, sync.OnceValues(func() (string, error) {
		bin := filepath.Join(filepath.Dir(dashgateBin), "agents", filepath.Base(pkg))
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
		return bin, nil
	}))
	bin, err := f.(func() (string, error))()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// acpDemoAgent is the ACP library's demo agent (its program is named
// "agent").
func acpDemoAgent(t *testing.T) string {
	return buildAgent(t, "github.com/coder/acp-go-sdk/example/agent")
}

// startACP starts dashgate with the demo agent as --agent demo (the
// default agent of a session that names none).
func startACP(t *testing.T, extra ...string) *dashgate {
	t.Helper()
	return startDashgate(t, append([]string{"--agent", "demo=" + acpDemoAgent(t)}, extra...)...)
}

// waitEvent waits up to 30 s for an event of typ in sid.
func (c *chatConn) waitEvent(typ, sid string) testkit.Event {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.t.Context(), 30*time.Second)
	defer cancel()
	ev, err := c.WaitEvent(ctx, typ, sid)
	if err != nil {
		c.t.Fatalf("%s: waiting for %s in %s: %v; events %v", c.name, typ, sid, err, c.Events())
	}
	return ev
}

// waitTurnEvent waits up to 30 s for an event of typ of turn turnID in
// sid.
func (c *chatConn) waitTurnEvent(typ, sid, turnID string) testkit.Event {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.t.Context(), 30*time.Second)
	defer cancel()
	ev, err := c.WaitEventWhere(ctx, typ, sid, func(p map[string]any) bool { return p["turn_id"] == turnID })
	if err != nil {
		c.t.Fatalf("%s: waiting for %s of turn %s in %s: %v; events %v", c.name, typ, turnID, sid, err, c.Events())
	}
	return ev
}

// agentProcs lists the processes under d (its children and theirs)
// whose command name is comm.
func agentProcs(t *testing.T, d *dashgate, comm string) []testkit.Proc {
	t.Helper()
	procs, err := d.Procs()
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(procs, func(p testkit.Proc) bool { return p.Comm != comm })
}

// chatWorkers lists d's chat workers (an ACP session's: its bridge).
func chatWorkers(d *dashgate) []apiWorker {
	return slices.DeleteFunc(d.Workers(), func(w apiWorker) bool { return w.Kind != "chat" })
}

// TestACPAgentTurn: agent.list names the built-in worker and the demo
// agent (the default); a session made without an agent talks to the demo
// agent: its text streams, its read shows as a tool card that completes,
// its permission request arrives with the agent's options and, approved
// once, lets the turn complete; the bridge and the agent are the
// session's one worker, logged with its agent's name when they go.
func TestACPAgentTurn(t *testing.T) {
	d := startACP(t)
	c := d.chat(t)
	var list struct {
		Agents []struct {
			Name    string `json:"name"`
			Kind    string `json:"kind"`
			Default bool   `json:"default"`
		} `json:"agents"`
	}
	c.mustCall("agent.list", nil, &list)
	if len(list.Agents) != 2 || list.Agents[0].Name != "dashgate" || list.Agents[0].Kind != "builtin" || list.Agents[0].Default ||
		list.Agents[1].Name != "demo" || list.Agents[1].Kind != "acp" || !list.Agents[1].Default {
		t.Fatalf("agent.list: %+v", list.Agents)
	}
	sid := newSession(t, c, "acp")
	if s, ok := d.Session(sid); !ok {
		t.Fatalf("session %s not listed", sid)
	} else if s.Agent != "demo" {
		t.Fatalf("session %s talks to %q, want the default agent demo", sid, s.Agent)
	}

	c.mustCall("prompt.submit", map[string]any{"session_id": sid, "text": "tidy the config"}, nil)
	req := c.waitEvent("approval.request", sid).Payload()
	opts, _ := req["options"].([]any)
	if req["tool"] == "" || len(opts) != 2 {
		t.Fatalf("approval.request: %v", req)
	}
	kinds := []string{}
	for _, o := range opts {
		kinds = append(kinds, o.(map[string]any)["kind"].(string))
	}
	if !slices.Equal(kinds, []string{"allow_once", "reject_once"}) {
		t.Fatalf("approval options: %v", opts)
	}
	start := c.waitEvent("tool.start", sid).Payload()
	if start["kind"] != "read" || start["name"] != "Reading project files" {
		t.Fatalf("tool.start: %v", start)
	}
	if done := c.waitEvent("tool.complete", sid).Payload(); done["tool_id"] != start["tool_id"] || !strings.Contains(done["output"].(string), "My Project") {
		t.Fatalf("tool.complete %v after tool.start %v", done, start)
	}
	agents, bridges := agentProcs(t, d, "agent"), chatWorkers(d)
	if len(agents) != 1 || len(bridges) != 1 || !slices.Contains(bridges[0].Children, agents[0].PID) {
		t.Fatalf("the demo agent %+v, the chat workers %+v: want one bridge, the agent its child", agents, bridges)
	}
	var resolved struct {
		Resolved bool `json:"resolved"`
	}
	c.mustCall("approval.respond", map[string]any{"session_id": sid, "request_id": req["request_id"], "choice": "once"}, &resolved)
	if !resolved.Resolved {
		t.Fatal("approval.respond: not resolved")
	}
	end := c.waitEvent("message.complete", sid).Payload()
	text, _ := end["text"].(string)
	if end["status"] != "complete" || !strings.Contains(text, "ACP Go Example Agent") || !strings.Contains(text, "successfully updated") {
		t.Fatalf("message.complete: %v", end)
	}

	// The history keeps what a card shows after a reload: the tool's kind
	// and files, the agent's options of the approval.
	var r struct {
		History []struct {
			Kind string         `json:"kind"`
			Data map[string]any `json:"data"`
		} `json:"history"`
	}
	c.mustCall("session.resume", map[string]any{"session_id": sid}, &r)
	kept := map[string]bool{}
	for _, e := range r.History {
		switch {
		case e.Kind == "tool_call" && e.Data["kind"] == "read" && fmt.Sprint(e.Data["locations"]) == "[map[path:/project/README.md]]":
			kept["tool_call"] = true
		case e.Kind == "approval_request" && len(asList(e.Data["options"])) == 2:
			kept["approval_request"] = true
		case e.Kind == "tool_result" && e.Data["status"] == "completed":
			kept["tool_result"] = true
		}
	}
	if len(kept) != 3 {
		t.Fatalf("history keeps %v of the tool call, the approval and the result: %+v", kept, r.History)
	}

	mark := d.logMark()
	c.mustCall("session.close", map[string]any{"session_id": sid}, nil)
	rec, ok := d.waitLogSince(mark, 15*time.Second, func(r logRecord) bool { return r.Msg() == "worker closed" && r.Str("sid") == sid })
	if !ok || rec.Str("agent") != "demo" || rec.Str("reason") != "session_closed" {
		t.Fatalf("worker closed record: %v (found %v); log:\n%s", rec, ok, d.logText())
	}
	testkit.WaitFor(t, 10*time.Second, "the demo agent to be gone", func() bool { return len(agentProcs(t, d, "agent")) == 0 })
}

// TestACPDetachMidTurnAndResume: a browser that goes mid-turn takes the
// bridge and the agent with it once the turn's grace (--detach-turn-grace
// 1s) ends, one worker record saying why, with the grace it had;
// resumed, the session's next prompt starts the agent again, which cannot
// load the earlier conversation (the demo agent does not offer
// loadSession): one notice says so, and the turn streams; Stop ends it
// interrupted.
func TestACPDetachMidTurnAndResume(t *testing.T) {
	d := startACP(t, "--detach-turn-grace", "1s")
	c := d.chat(t)
	sid := newSession(t, c, "acp detach")
	c.mustCall("prompt.submit", map[string]any{"session_id": sid, "text": "hello"}, nil)
	c.waitEvent("message.delta", sid)
	if a, b := len(agentProcs(t, d, "agent")), len(chatWorkers(d)); a != 1 || b != 1 {
		t.Fatalf("mid-turn: %d demo agents and %d bridges, want one of each", a, b)
	}
	mark := d.logMark()
	c.drop(false)
	rec, ok := d.waitLogSince(mark, 15*time.Second, func(r logRecord) bool { return r.Msg() == "worker closed" && r.Str("sid") == sid })
	if _, graced := rec.Int("turn_grace_ms"); !ok || rec.Str("reason") != "detach" || rec.Str("agent") != "demo" || !graced {
		t.Fatalf("worker closed record: %v (found %v); log:\n%s", rec, ok, d.logText())
	}
	testkit.WaitFor(t, 10*time.Second, "the bridge and the agent to be gone", func() bool {
		return len(agentProcs(t, d, "agent")) == 0 && len(chatWorkers(d)) == 0
	})
	n := 0
	for _, r := range d.Log.Records("") {
		if r.Msg() == "worker closed" && r.Str("sid") == sid {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d worker closed records for %s, want 1", n, sid)
	}

	c2 := d.chat(t)
	resume(t, c2, sid)
	c2.mustCall("prompt.submit", map[string]any{"session_id": sid, "text": "again"}, nil)
	notice := c2.waitEvent("notice", sid).Payload()
	if !strings.Contains(notice["text"].(string), "could not load the earlier conversation") {
		t.Fatalf("notice: %v", notice)
	}
	c2.waitEvent("message.delta", sid)
	var st struct {
		Status string `json:"status"`
	}
	c2.mustCall("session.interrupt", map[string]any{"session_id": sid}, &st)
	if end := c2.waitEvent("message.complete", sid).Payload(); st.Status != "interrupted" || end["interrupted"] != true {
		t.Fatalf("Stop: %v, then message.complete %v", st, end)
	}
	r := resume(t, c2, sid)
	notices := 0
	for _, m := range r.History {
		if m.Kind == "notice" && strings.Contains(m.Text, "could not load") {
			notices++
		}
	}
	if notices != 1 {
		t.Fatalf("history has %d load notices, want 1: %+v", notices, r.History)
	}
}

// TestACPAgentThatCannotStart: an agent whose program does not exist
// fails the prompt with a sentence that says so and leaves nothing of it
// running (the bridge, the session's worker, waits alone for the next
// prompt, and goes with the session as any worker); an unknown agent's
// name is refused at session.create; the built-in worker's sessions are
// untouched.
func TestACPAgentThatCannotStart(t *testing.T) {
	d := startDashgate(t, "--agent", "ghost=/nonexistent/agent-program --acp")
	c := d.chat(t)
	var cr struct {
		SessionID string `json:"session_id"`
	}
	c.mustCall("session.create", map[string]any{"title": "ghost", "agent": "ghost"}, &cr)
	err := c.call("session.create", map[string]any{"agent": "nobody"}, nil)
	if rpc := (*testkit.RPCError)(nil); !errors.As(err, &rpc) || rpc.Code != -32602 {
		t.Fatalf("session.create with an unknown agent: %v, want -32602", err)
	}
	c.mustCall("prompt.submit", map[string]any{"session_id": cr.SessionID, "text": "hi"}, nil)
	ev := c.waitEvent("error", cr.SessionID).Payload()
	if msg, _ := ev["message"].(string); !strings.Contains(msg, "agent") {
		t.Fatalf("error event: %v", ev)
	}
	testkit.WaitFor(t, 10*time.Second, "nothing but the bridge", func() bool {
		w := chatWorkers(d)
		return len(w) == 1 && len(w[0].Children) == 0
	})
	var bi struct {
		SessionID string `json:"session_id"`
	}
	c.mustCall("session.create", map[string]any{"title": "builtin", "agent": "dashgate"}, &bi)
	c.mustEcho(bi.SessionID, "still here")
}

// TestACPKilledDashgateTakesTheAgent: dashgate killed (-9) mid-turn takes
// its ACP agents with it: the bridge dies with dashgate (its parent-death
// signal) and the agent with the bridge (the bridge arms one on it too).
func TestACPKilledDashgateTakesTheAgent(t *testing.T) {
	d := startACP(t)
	c := d.chat(t)
	sid := newSession(t, c, "acp kill")
	c.mustCall("prompt.submit", map[string]any{"session_id": sid, "text": "hello"}, nil)
	c.waitEvent("message.delta", sid)
	agents, bridges := agentProcs(t, d, "agent"), chatWorkers(d)
	if len(agents) != 1 || len(bridges) != 1 {
		t.Fatalf("mid-turn: demo agents %+v, bridges %+v", agents, bridges)
	}
	bridge := d.remember(bridges[0].PID)
	d.kill()
	// Dead, not reaped: what a killed dashgate leaves is the test
	// process's (a subreaper) to reap.
	for _, p := range []testkit.Proc{agents[0], {PID: bridges[0].PID, Start: bridge}} {
		if !testkit.Until(5*time.Second, func() bool { return !alive(p.PID, p.Start) }) {
			t.Errorf("%s outlived its dashgate's kill -9 by 5 s", testkit.Describe(p.PID))
		}
	}
}

// asList is v as a JSON array ([] when it is none).
func asList(v any) []any {
	l, _ := v.([]any)
	return l
}
