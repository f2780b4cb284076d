package handlers_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/sessions"
)

// changes returns the session.changed payloads of sid that cc got so far,
// in order, as "state title end_reason".
func (cc *chatClient) changes(sid string) []string {
	var out []string
	for _, ev := range cc.Events() {
		p := ev.Payload()
		if ev.Type() != "session.changed" || p["session_id"] != sid {
			continue
		}
		if ev.SessionID() != "" {
			cc.t.Errorf("session.changed carries params.session_id %q: it is not one of the session's events", ev.SessionID())
		}
		if seq, _ := ev["seq"].(float64); seq != 0 {
			cc.t.Errorf("session.changed has seq %v, want 0 (not one of the session's numbered events)", seq)
		}
		out = append(out, fmt.Sprintf("%v %v %v", p["state"], p["title"], p["end_reason"]))
	}
	return out
}

// waitChange waits until cc got a session.changed of sid reading want.
func (cc *chatClient) waitChange(sid, want string) {
	cc.t.Helper()
	ok := testkit.Until(10*time.Second, func() bool {
		for _, c := range cc.changes(sid) {
			if c == want {
				return true
			}
		}
		return false
	})
	if !ok {
		cc.t.Fatalf("no session.changed %q for %s; got %q", want, sid, cc.changes(sid))
	}
}

// Every chat socket, viewing the session or not, hears of its create,
// rename, close by an administrator, reopen and delete (session.changed).
func TestSessionChangedReachesEverySocket(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	a, other := e.chat(), e.chat()

	sid := a.call("session.create", map[string]any{"title": "one"})["session_id"].(string)
	other.waitChange(sid, "attached one <nil>")

	a.call("session.rename", map[string]any{"session_id": sid, "title": "two"})
	other.waitChange(sid, "attached two <nil>")

	if ok, err := e.reg.Close(sessions.Principal{}, sid, sessions.EndAdminReap); !ok || err != nil {
		t.Fatalf("reap: %v %v", ok, err)
	}
	other.waitChange(sid, "closed two admin_reap")

	a.call("session.reopen", map[string]any{"session_id": sid})
	a.call("session.delete", map[string]any{"session_id": sid})
	other.waitChange(sid, "deleted  <nil>")

	want := []string{
		"attached one <nil>",       // create
		"attached two <nil>",       // rename
		"closing two admin_reap",   // the reap
		"closed two admin_reap",    //
		"attached two <nil>",       // reopen
		"closing two client_close", // delete: a live session is closed first
		"closed two client_close",  //
		"deleted  <nil>",           // then deleted
	}
	// The socket that made the changes hears them as the other one does.
	a.waitChange(sid, "deleted  <nil>")
	for _, cc := range []*chatClient{other, a} {
		if got := cc.changes(sid); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("session.changed events:\n got %q\nwant %q", got, want)
		}
	}
}

// session.interrupt stops a running slash command too: /sleep ends at
// once with the worker's "sleep cancelled".
func TestInterruptStopsSlashCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	cc := e.chat()
	sid := cc.create()
	if m := interruptSleep(t, cc, sid); errCode(m) != 5004 {
		t.Fatalf("the interrupted /sleep answered %v, want error 5004 (sleep cancelled)", m)
	}
	// Its error entry says it was interrupted; a command that failed by
	// itself does not.
	if m := cc.callRaw("slash.exec", map[string]any{"session_id": sid, "command": "/nosuchcommand"}); errCode(m) == 0 {
		t.Fatalf("/nosuchcommand answered %v, want an error", m)
	}
	var flags []any
	for _, x := range cc.call("session.resume", map[string]any{"session_id": sid})["history"].([]any) {
		if m, _ := x.(map[string]any); m["kind"] == "error" {
			flags = append(flags, m["interrupted"])
		}
	}
	if fmt.Sprint(flags) != "[true <nil>]" {
		t.Errorf("the error entries' interrupted: %v, want [true <nil>] (the stopped /sleep, then /nosuchcommand)", flags)
	}
}

// interruptSleep runs /sleep 60 in sid and session.interrupt until it says
// it interrupted the command, and returns the command's answer, failing
// the test when there is none 10 s later.
func interruptSleep(t *testing.T, cc *chatClient, sid string) map[string]any {
	t.Helper()
	done := make(chan map[string]any, 1)
	go func() { done <- cc.callRaw("slash.exec", map[string]any{"session_id": sid, "command": "/sleep 60"}) }()
	testkit.WaitFor(t, 10*time.Second, "session.interrupt says it interrupted the command", func() bool {
		return cc.call("session.interrupt", map[string]any{"session_id": sid})["status"] == "interrupted"
	})
	select {
	case m := <-done:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("/sleep 60 still runs after session.interrupt (and the cancel grace)")
		return nil
	}
}

// An interrupted slash command whose worker gives no answer of its own (it
// ignores the cancel, as one still starting does) fails with a clear
// "command interrupted" (5004) once the worker is recycled, and the error
// is kept in the history; not with the -32603 of a socket that went.
func TestInterruptedCommandWorkerSilent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{reg: func(c *sessions.Config) {
		sp := c.Spawner.(sessions.ProcSpawner)
		sp.WorkerCmd = []string{"/bin/sh", "-c", "while read -r line; do :; done"} // reads every request, answers none
		c.Spawner = sp
		c.InterruptGrace = 100 * time.Millisecond
	}})
	cc := e.chat()
	sid := cc.create()
	m := interruptSleep(t, cc, sid)
	if e, _ := m["error"].(map[string]any); errCode(m) != 5004 || e["message"] != "command interrupted" {
		t.Fatalf("the interrupted command answered %v, want error 5004 command interrupted", m)
	}
	// The history keeps it (followed by the recycled worker's notice).
	h := cc.call("session.resume", map[string]any{"session_id": sid})["history"].([]any)
	kept := false
	for _, x := range h {
		m, _ := x.(map[string]any)
		kept = kept || m["kind"] == "error" && m["text"] == "command interrupted" && m["interrupted"] == true
	}
	if !kept {
		t.Errorf("history %v lacks the error entry command interrupted", h)
	}
}
