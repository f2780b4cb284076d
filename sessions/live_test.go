package sessions

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/workers"
)

// Issue 27, the dashboard live: every viewer is told every entry, a viewer
// coming back mid-turn gets the reply so far, one outcome one card, titles
// from the first prompt.

// sharedEntries lists kind:text of the history.entry events v got.
func sharedEntries(t *testing.T, v *recViewer) []string {
	t.Helper()
	var out []string
	for _, ev := range v.ofType("history.entry") {
		if ev.Seq != 0 {
			t.Errorf("history.entry has seq %d, want 0", ev.Seq)
		}
		m := ev.Payload.(map[string]any)["entry"].(Message)
		out = append(out, m.Kind+":"+m.Text)
	}
	return out
}

// TestEntriesReachEveryOtherViewer: a prompt, a slash command and its
// output reach the other viewers of the session as history.entry; the
// viewer that made them gets none, and its seqs have no gaps.
func TestEntriesReachEveryOtherViewer(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	v1, v2 := &recViewer{}, &recViewer{}
	in, _ := h.r.Create(v1, NewSession{Title: ""})
	if _, err := h.r.Resume(v2, in.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.r.Exec(t.Context(), v1, in.ID, "/a"); err != nil {
		t.Fatal(err)
	}
	_, start, err := h.r.Prompt(v1, in.ID, "hi")
	if err != nil {
		t.Fatal(err)
	}
	start()
	testkit.WaitFor(t, 5*time.Second, "turn done", func() bool { got, _ := h.r.Get(anon, in.ID); return !got.Running })
	if got, want := strings.Join(sharedEntries(t, v2), " "), "slash:/a slash_output:/a prompt:hi"; got != want {
		t.Errorf("the other viewer got %q, want %q", got, want)
	}
	if got := sharedEntries(t, v1); len(got) != 0 {
		t.Errorf("the viewer that made them got %q, want none", got)
	}
	v1.mu.Lock()
	defer v1.mu.Unlock()
	for i, e := range v1.events {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d of the sender has seq %d", i, e.Seq)
		}
	}
}

// TestResumeMidTurnHasTheReplySoFar: a viewer resuming while a reply
// streams gets it in the history with its text so far, status streaming,
// at its place; the store keeps it interrupted until it completes.
func TestResumeMidTurnHasTheReplySoFar(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	v := &recViewer{}
	in, _ := h.r.Create(v, NewSession{Title: ""})
	agentTurn(t, h, v, in.ID)
	send(h, workers.Event{Name: "delta", Text: "so "})
	send(h, workers.Event{Name: "delta", Text: "far"})
	res, err := h.r.Resume(&recViewer{}, in.ID)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(res.History); n != 2 {
		t.Fatalf("history %+v, want the prompt and the reply so far", res.History)
	}
	r := res.History[1]
	if r.Kind != store.KindReply || r.Text != "so far" || r.Status != StatusStreaming || r.Interrupted || r.Seq != 2 {
		t.Fatalf("the reply so far: %+v", r)
	}
	close(h.sp.events)
	testkit.WaitFor(t, 5*time.Second, "turn done", func() bool { got, _ := h.r.Get(anon, in.ID); return !got.Running })
	res, _ = h.r.Resume(&recViewer{}, in.ID)
	if r := res.History[1]; r.Status != "complete" || r.Text != "so far" {
		t.Fatalf("the completed reply: %+v", r)
	}
}

// TestTurnOutcomes: each way a turn ends is one card in the history: a
// failure before any text is its error alone; a worker reaped mid-reply
// is the text so far, interrupted, and the worker's notice (no error); a
// shutdown that suspends the session says dashgate stopped.
func TestTurnOutcomes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		delta string
		end   func(h *harness, w *fakeWorker)
		want  []string // kind:text of the history after the prompt
	}{
		{"fails before text", "", func(h *harness, w *fakeWorker) {
			w.Close(workers.ReasonTimeout)
		}, []string{"error:", "notice:worker ended (timeout)"}},
		{"reaped mid-reply", "some text", func(h *harness, w *fakeWorker) {
			w.Close(workers.ReasonAdminReap)
		}, []string{"reply:some text", "notice:worker ended by an administrator"}},
		{"shutdown mid-reply", "some text", func(h *harness, w *fakeWorker) {
			h.r.Shutdown(context.Background())
		}, []string{"reply:some text", "notice:" + shutdownTurnNotice}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, func(c *Config) {
				c.SuspendOnShutdown = true
				c.Spawner = reasonSpawner{c.Spawner.(*fakeSpawner)}
			})
			v := &recViewer{}
			in, _ := h.r.Create(v, NewSession{Title: ""})
			agentTurn(t, h, v, in.ID)
			if tt.delta != "" {
				send(h, workers.Event{Name: "delta", Text: tt.delta})
			} else {
				send(h, workers.Event{Name: "noop"}) // the worker is in the call (ignored)
			}
			w := h.sp.workers()[0]
			tt.end(h, w)
			h.r.Wait()
			testkit.WaitFor(t, 5*time.Second, "turn done", func() bool {
				h.r.mu.Lock()
				defer h.r.mu.Unlock()
				s := h.r.sessions[in.ID]
				return s == nil || s.turn == nil
			})
			es := stored(t, h, in.ID)
			var got []string
			for _, e := range es[1:] {
				text := e.Text
				if e.Kind == store.KindError {
					text = "" // the worker's words
				}
				got = append(got, e.Kind+":"+text)
			}
			slices.Sort(got) // a worker's exit and its call's failure race
			want := slices.Sorted(slices.Values(tt.want))
			if strings.Join(got, "|") != strings.Join(want, "|") {
				t.Fatalf("history after the prompt %q, want %q", got, tt.want)
			}
			for _, e := range es {
				if e.Kind == store.KindReply && !e.Interrupted {
					t.Errorf("the reply is not interrupted: %+v", e)
				}
			}
		})
	}
}

func TestPromptTitle(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, text, want string }{
		{"short", "fix the build", "fix the build"},
		{"first line", "\n\n  plan   the offsite\nwith details", "plan the offsite"},
		{"cut at a word", "Plan the quarterly offsite for the whole engineering team please", "Plan the quarterly offsite for the…"},
		{"one long word", strings.Repeat("x", 60), strings.Repeat("x", 39) + "…"},
		{"blank", " \n\t", ""},
		{"runes", strings.Repeat("é ", 30), strings.TrimSpace(strings.Repeat("é ", 19)) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := promptTitle(tt.text); got != tt.want {
				t.Errorf("promptTitle(%q) = %q, want %q", tt.text, got, tt.want)
			}
		})
	}
}

// TestFirstPromptTitlesTheSession: a session with a default title takes
// its first prompt's, stored and announced; a later prompt, or a session
// its user named, keeps its title; a default title a closed session has
// is not given again.
func TestFirstPromptTitlesTheSession(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	w := &recViewer{}
	h.r.Watch(w)
	prompt := func(sid, text string) {
		t.Helper()
		_, start, err := h.r.Prompt(nil, sid, text)
		if err != nil {
			t.Fatal(err)
		}
		start()
		testkit.WaitFor(t, 5*time.Second, "turn done", func() bool { got, _ := h.r.Get(anon, sid); return !got.Running })
	}
	a, _ := h.r.Create(nil, NewSession{Title: "session 1"})
	prompt(a.ID, "Plan the quarterly offsite for the whole engineering team please")
	prompt(a.ID, "something else")
	const want = "Plan the quarterly offsite for the…"
	if got, _ := h.r.Get(anon, a.ID); got.Title != want {
		t.Errorf("title %q, want %q", got.Title, want)
	}
	testkit.WaitFor(t, 5*time.Second, "session.changed with the new title", func() bool {
		for _, ev := range w.ofType("session.changed") {
			if c := ev.Payload.(Change); c.SessionID == a.ID && c.Title == want {
				return true
			}
		}
		return false
	})
	h.r.journal.flush(t.Context())
	if row, err := h.r.cfg.Store.Get(t.Context(), "", a.ID); err != nil || row.Title != want {
		t.Errorf("stored title %q, %v", row.Title, err)
	}

	b, _ := h.r.Create(nil, NewSession{Title: "session 2"})
	if err := h.r.Rename(t.Context(), anon, b.ID, "mine"); err != nil {
		t.Fatal(err)
	}
	prompt(b.ID, "do not take this")
	if got, _ := h.r.Get(anon, b.ID); got.Title != "mine" {
		t.Errorf("a renamed session's title became %q", got.Title)
	}

	c, _ := h.r.Create(nil, NewSession{Title: "session 3"})
	h.r.Close(anon, c.ID, EndClientClose)
	d, _ := h.r.Create(nil, NewSession{Title: "session 3"})
	if d.Title != "session 4" {
		t.Errorf("a new session took the title %q of a closed one, want session 4", d.Title)
	}
	e, _ := h.r.Create(nil, NewSession{Title: "session 7"})
	if e.Title != "session 7" {
		t.Errorf("a free default title became %q", e.Title)
	}
}

// reasonSpawner spawns fakeWorkers whose calls fail, once they are closed,
// as a real worker's do: "worker closed (<reason>)".
type reasonSpawner struct{ *fakeSpawner }

func (s reasonSpawner) SpawnWorker(req SpawnRequest) (Worker, error) {
	w, err := s.fakeSpawner.SpawnWorker(req)
	if err != nil {
		return nil, err
	}
	return reasonWorker{w.(*fakeWorker)}, nil
}

type reasonWorker struct{ *fakeWorker }

func (w reasonWorker) Call(ctx context.Context, method string, params any, onEvent func(workers.Event)) (json.RawMessage, error) {
	raw, err := w.fakeWorker.Call(ctx, method, params, onEvent)
	if crashed(err) && w.Closing() {
		w.mu.Lock()
		reason := w.reason
		w.mu.Unlock()
		return nil, &workers.Error{Failure: workers.FailCrashed, Message: fmt.Sprintf("worker closed (%s)", reason)}
	}
	return raw, err
}
