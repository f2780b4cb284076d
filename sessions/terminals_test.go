package sessions

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/workers"
)

// Issue 42: several terminals per session (terminals.go).

// attachTerm attaches p to terminal tid of sid, failing the test on error.
func attachTerm(t *testing.T, h *harness, p Principal, sid, tid string, o TerminalOptions) *Attachment {
	t.Helper()
	o.Terminal = tid
	a, err := h.r.AttachTerminal(t.Context(), p, sid, o)
	if err != nil {
		t.Fatalf("attach terminal %q of %s: %v", tid, sid, err)
	}
	return a
}

// chatSession makes a session of p's, viewed by a chat viewer of p's.
func chatSession(t *testing.T, h *harness, p Principal) string {
	t.Helper()
	in, err := h.r.Create(viewerOf(p), NewSession{Title: ""})
	if err != nil {
		t.Fatal(err)
	}
	return in.ID
}

// terminalsOf is Info.Terminals of sid, as p sees it.
func terminalsOf(t *testing.T, h *harness, p Principal, sid string) []TerminalInfo {
	t.Helper()
	in, ok := h.r.Get(p, sid)
	if !ok {
		t.Fatalf("session %s is not live", sid)
	}
	return in.Terminals
}

// TestTwoTerminalsInASession: two terminal ids of one session are two
// programs, each its own child, listed in Info in the order they started
// (PTYPID the first's); a second socket on an id shares that terminal and
// starts nothing; "" is the first terminal, DefaultTerminal.
func TestTwoTerminalsInASession(t *testing.T) {
	t.Parallel()
	h := termHarness(t, 0, nil)
	sid := chatSession(t, h, alice)
	a1 := attachTerm(t, h, alice, sid, "", TerminalOptions{})
	defer a1.Detach(workers.ReasonDetach)
	a2 := attachTerm(t, h, alice, sid, "b2", TerminalOptions{})
	defer a2.Detach(workers.ReasonDetach)
	ptys := h.sp.terminals()
	if len(ptys) != 2 || a1.PID() == a2.PID() || a1.PID() != ptys[0].pid || a2.PID() != ptys[1].pid {
		t.Fatalf("two terminal ids started %d programs: pids %d, %d", len(ptys), a1.PID(), a2.PID())
	}
	if a1.Terminal != DefaultTerminal || a2.Terminal != "b2" {
		t.Fatalf("hello's terminal ids: %q, %q; want %q, b2", a1.Terminal, a2.Terminal, DefaultTerminal)
	}
	want := []TerminalInfo{{DefaultTerminal, ptys[0].pid}, {"b2", ptys[1].pid}}
	if got := terminalsOf(t, h, alice, sid); !slices.Equal(got, want) {
		t.Fatalf("Info.Terminals = %v, want %v", got, want)
	}
	if in, _ := h.r.Get(alice, sid); in.PTYPID != ptys[0].pid {
		t.Fatalf("PTYPID = %d, want the first's %d", in.PTYPID, ptys[0].pid)
	}
	// The ids are the session's: its first again, by its id and by "".
	for _, tid := range []string{DefaultTerminal, "", "b2"} {
		a := attachTerm(t, h, alice, sid, tid, TerminalOptions{Share: true})
		if n := len(h.sp.terminals()); n != 2 {
			t.Fatalf("an attach of terminal %q started a program (%d now)", tid, n)
		}
		if want := map[string]int{"": a1.PID(), DefaultTerminal: a1.PID(), "b2": a2.PID()}[tid]; a.PID() != want {
			t.Fatalf("terminal %q attached pid %d, want %d", tid, a.PID(), want)
		}
		a.Detach(workers.ReasonDetach)
	}
}

// TestSessionCloseEndsEveryTerminal: closing a session ends each of its
// terminals (reason session_closed) before its one close record, which
// names the first.
func TestSessionCloseEndsEveryTerminal(t *testing.T) {
	t.Parallel()
	h := termHarness(t, 0, nil)
	sid := chatSession(t, h, alice)
	var atts []*Attachment
	for _, tid := range []string{"", "x", "y"} {
		atts = append(atts, attachTerm(t, h, alice, sid, tid, TerminalOptions{Keepalive: true}))
	}
	if ok, err := h.r.Close(alice, sid, EndClientClose); !ok || err != nil {
		t.Fatalf("close: %v, %v", ok, err)
	}
	for i, p := range h.sp.terminals() {
		if r := p.reason(); r != workers.ReasonSessionClosed {
			t.Errorf("terminal %d (pid %d) closed with %q, want session_closed", i, p.pid, r)
		}
	}
	h.wantOneClose(sid, EndClientClose)
	if rec := h.closedRecords(sid)[0]; rec["pty_pid"] != float64(h.sp.terminals()[0].pid) {
		t.Fatalf("close record's pty_pid %v, want the first terminal's %d", rec["pty_pid"], h.sp.terminals()[0].pid)
	}
	for _, a := range atts {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		if _, err := a.Next(ctx, make([]byte, 16)); !errors.Is(err, ErrTerminalClosed) {
			t.Errorf("terminal %s's socket after the close: %v, want ErrTerminalClosed", a.Terminal, err)
		}
		cancel()
		a.Detach(workers.ReasonDetach)
	}
}

// TestCloseTerminal: terminal.close ends that terminal alone (reason
// terminal_closed), its socket hears the end, the session and its other
// terminal stay; a second close answers false; the id can start anew.
func TestCloseTerminal(t *testing.T) {
	t.Parallel()
	h := termHarness(t, 0, nil)
	sid := chatSession(t, h, alice)
	a1 := attachTerm(t, h, alice, sid, "", TerminalOptions{})
	defer a1.Detach(workers.ReasonDetach)
	a2 := attachTerm(t, h, alice, sid, "two", TerminalOptions{})
	defer a2.Detach(workers.ReasonDetach)
	p1, p2 := h.sp.terminals()[0], h.sp.terminals()[1]

	if closed, err := h.r.CloseTerminal(bob, sid, "two"); !errors.Is(err, ErrNotFound) || closed {
		t.Fatalf("bob closes alice's terminal: %v, %v; want ErrNotFound", closed, err)
	}
	if closed, err := h.r.CloseTerminal(alice, sid, "two"); !closed || err != nil {
		t.Fatalf("CloseTerminal: %v, %v", closed, err)
	}
	if r := p2.reason(); r != workers.ReasonTerminalClosed {
		t.Fatalf("the closed terminal's program closed with %q, want terminal_closed", r)
	}
	if r := p1.reason(); r != "" {
		t.Fatalf("the other terminal closed too (%q)", r)
	}
	if _, err := a2.Next(t.Context(), make([]byte, 16)); !errors.Is(err, ErrTerminalClosed) {
		t.Fatalf("its socket's Next: %v, want ErrTerminalClosed", err)
	}
	if got, want := terminalsOf(t, h, alice, sid), []TerminalInfo{{DefaultTerminal, p1.pid}}; !slices.Equal(got, want) {
		t.Fatalf("terminals after the close: %v, want %v", got, want)
	}
	if closed, err := h.r.CloseTerminal(alice, sid, "two"); closed || err != nil {
		t.Fatalf("closing it again: %v, %v; want false, nil", closed, err)
	}
	if recs := h.closedRecords(sid); len(recs) != 0 {
		t.Fatalf("the session closed with its terminal: %v", recs)
	}
	a3 := attachTerm(t, h, alice, sid, "two", TerminalOptions{})
	defer a3.Detach(workers.ReasonDetach)
	if a3.PID() == p2.pid || len(h.sp.terminals()) != 3 {
		t.Fatalf("terminal two again: pid %d (the closed one's %d)", a3.PID(), p2.pid)
	}
	// The first one too, by "".
	if closed, err := h.r.CloseTerminal(alice, sid, ""); !closed || err != nil || p1.reason() != workers.ReasonTerminalClosed {
		t.Fatalf("closing the first: %v, %v, %q", closed, err, p1.reason())
	}
	if _, err := h.r.CloseTerminal(alice, sid, "Two!"); !errors.Is(err, ErrTerminalID) {
		t.Fatalf("a malformed id: %v, want ErrTerminalID", err)
	}
}

// TestCloseTerminalEndsTerminalOnlySession: a terminal-only session has
// its terminal alone; closing it ends the session as its user's close.
func TestCloseTerminalEndsTerminalOnlySession(t *testing.T) {
	t.Parallel()
	h := termHarness(t, 0, nil)
	a := attachTerm(t, h, alice, "", "", TerminalOptions{})
	defer a.Detach(workers.ReasonDetach)
	if closed, err := h.r.CloseTerminal(alice, a.SessionID, ""); !closed || err != nil {
		t.Fatalf("CloseTerminal: %v, %v", closed, err)
	}
	h.wantOneClose(a.SessionID, EndClientClose)
	if _, err := h.r.AttachTerminal(t.Context(), alice, "", TerminalOptions{Terminal: "two"}); !errors.Is(err, ErrTerminalID) {
		t.Fatalf("a second terminal for a session the attach makes: %v, want ErrTerminalID", err)
	}
}

// TestTerminalsPerSessionCap: the ninth terminal of a session is refused
// (ErrTerminalsFull, an ErrCapacity) and nothing is spawned for it; once
// one is closed a new one starts.
func TestTerminalsPerSessionCap(t *testing.T) {
	t.Parallel()
	h := termHarness(t, 0, nil)
	sid := chatSession(t, h, alice)
	for i := range MaxTerminalsPerSession {
		a := attachTerm(t, h, alice, sid, fmt.Sprint("t", i), TerminalOptions{})
		defer a.Detach(workers.ReasonDetach)
	}
	_, err := h.r.AttachTerminal(t.Context(), alice, sid, TerminalOptions{Terminal: "ninth"})
	if !errors.Is(err, ErrTerminalsFull) || !errors.Is(err, ErrCapacity) {
		t.Fatalf("the ninth terminal: %v, want ErrTerminalsFull (ErrCapacity)", err)
	}
	if n := len(h.sp.terminals()); n != MaxTerminalsPerSession {
		t.Fatalf("%d programs started, want %d", n, MaxTerminalsPerSession)
	}
	// Another session of hers is not full.
	other := chatSession(t, h, alice)
	b := attachTerm(t, h, alice, other, "ninth", TerminalOptions{})
	defer b.Detach(workers.ReasonDetach)
	if _, err := h.r.CloseTerminal(alice, sid, "t3"); err != nil {
		t.Fatal(err)
	}
	c := attachTerm(t, h, alice, sid, "ninth", TerminalOptions{})
	defer c.Detach(workers.ReasonDetach)
}

// TestUserCapCountsEveryTerminal: --max-terminals-per-user counts each
// terminal of a session; a closed one gives its slot back.
func TestUserCapCountsEveryTerminal(t *testing.T) {
	t.Parallel()
	h := termHarness(t, 0, func(c *Config) { c.MaxTerminalsPerUser = 2 })
	sid := chatSession(t, h, alice)
	a1 := attachTerm(t, h, alice, sid, "", TerminalOptions{})
	defer a1.Detach(workers.ReasonDetach)
	a2 := attachTerm(t, h, alice, sid, "b", TerminalOptions{})
	defer a2.Detach(workers.ReasonDetach)
	_, err := h.r.AttachTerminal(t.Context(), alice, sid, TerminalOptions{Terminal: "c"})
	wantUserCap(t, "alice's third terminal, in the same session", err, LimitTerminalsPerUser, 2)
	if n := len(h.sp.terminals()); n != 2 {
		t.Fatalf("%d programs started, want 2", n)
	}
	h.wantUsage("two terminals in one session", map[string]counts{"alice": {1, 0, 2}})
	if _, err := h.r.CloseTerminal(alice, sid, "b"); err != nil {
		t.Fatal(err)
	}
	a3 := attachTerm(t, h, alice, sid, "c", TerminalOptions{})
	defer a3.Detach(workers.ReasonDetach)
	h.wantUsage("one closed, another started", map[string]counts{"alice": {1, 0, 2}})
}

// TestTerminalIDs: what an id may be.
func TestTerminalIDs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		id, want string
		ok       bool
	}{
		{"", DefaultTerminal, true},
		{"1", "1", true},
		{"abc123", "abc123", true},
		{strings.Repeat("z", 16), strings.Repeat("z", 16), true},
		{strings.Repeat("z", 17), "", false},
		{"Abc", "", false},
		{"a-b", "", false},
		{"a b", "", false},
		{"é", "", false},
		{"../1", "", false},
	} {
		got, err := TerminalID(tt.id)
		if got != tt.want || (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrTerminalID)) {
			t.Errorf("TerminalID(%q) = %q, %v; want %q, ok %v", tt.id, got, err, tt.want, tt.ok)
		}
	}
	h := termHarness(t, 0, nil)
	sid := chatSession(t, h, alice)
	if _, err := h.r.AttachTerminal(t.Context(), alice, sid, TerminalOptions{Terminal: "UPPER"}); !errors.Is(err, ErrTerminalID) {
		t.Fatalf("attach of a malformed id: %v, want ErrTerminalID", err)
	}
	if n := len(h.sp.terminals()); n != 0 {
		t.Fatalf("a malformed id started %d programs", n)
	}
}

// TestTerminalsParkAndExpireEach: when the page goes (each terminal's
// socket, asked with keepalive), every terminal of the session parks and
// each ends after PTYKeepalive (keepalive_expired); one reattached in time
// stays; the session is not held by a parked terminal of a chat session.
func TestTerminalsParkAndExpireEach(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := termHarness(t, 0, nil)
		sid := chatSession(t, h, alice)
		var atts []*Attachment
		for _, tid := range []string{"", "b", "c"} {
			atts = append(atts, attachTerm(t, h, alice, sid, tid, TerminalOptions{Keepalive: true}))
		}
		for _, a := range atts {
			a.Detach(workers.ReasonDetach)
		}
		if recs := h.logs.Records("terminal parked"); len(recs) != 3 {
			t.Fatalf("parked records: %v, want one per terminal", recs)
		}
		h.advance(time.Minute - time.Millisecond)
		back := attachTerm(t, h, alice, sid, "c", TerminalOptions{ResumeToken: atts[2].ResumeToken, Keepalive: true})
		h.advance(time.Millisecond)
		ptys := h.sp.terminals()
		for i, want := range []workers.Reason{workers.ReasonKeepaliveExpired, workers.ReasonKeepaliveExpired, ""} {
			if r := ptys[i].reason(); r != want {
				t.Errorf("terminal %d closed with %q, want %q", i, r, want)
			}
		}
		if got := terminalsOf(t, h, alice, sid); len(got) != 1 || got[0].ID != "c" {
			t.Fatalf("terminals after the expiry: %v, want c alone", got)
		}
		back.Detach(workers.ReasonDetach)
		h.advance(time.Minute)
		if r := ptys[2].reason(); r != workers.ReasonKeepaliveExpired {
			t.Fatalf("the reattached terminal, parked again, closed with %q", r)
		}
	})
}

// TestReapOneOfTheTerminals: an admin reap of one terminal's pid ends it
// alone; the others and the session stay.
func TestReapOneOfTheTerminals(t *testing.T) {
	t.Parallel()
	h := termHarness(t, 0, nil)
	sid := chatSession(t, h, alice)
	a1 := attachTerm(t, h, alice, sid, "", TerminalOptions{})
	defer a1.Detach(workers.ReasonDetach)
	a2 := attachTerm(t, h, alice, sid, "b", TerminalOptions{})
	defer a2.Detach(workers.ReasonDetach)
	p1, p2 := h.sp.terminals()[0], h.sp.terminals()[1]
	if err := h.r.ReapWorker(AdminPrincipal, p2.pid); err != nil {
		t.Fatal(err)
	}
	if p2.reason() != workers.ReasonAdminReap || p1.reason() != "" {
		t.Fatalf("after reaping the second: first %q, second %q", p1.reason(), p2.reason())
	}
	if got := terminalsOf(t, h, alice, sid); len(got) != 1 || got[0].PID != p1.pid {
		t.Fatalf("terminals after the reap: %v", got)
	}
}

// TestRealTerminalsReaped: over real programs (/bin/sh on a pty), two
// terminals of a session are two process trees; terminal.close reaps one
// (its one "worker closed" record says terminal_closed), the session's
// close reaps the rest (one record each, session_closed) before its one
// close record, and each shell ran in its own directory (TerminalDir
// follows the terminal named).
func TestRealTerminalsReaped(t *testing.T) {
	h, _ := realHarness(t, time.Second)
	sid := chatSession(t, h, anon)
	pids := map[string]int{}
	for _, tid := range []string{"", "b", "c"} {
		a := attachTerm(t, h, anon, sid, tid, TerminalOptions{})
		defer a.Detach(workers.ReasonDetach)
		pids[a.Terminal] = a.PID()
	}
	for tid, pid := range pids {
		if testkit.Gone(pid) {
			t.Fatalf("terminal %s (pid %d) is not running", tid, pid)
		}
	}
	// Each one's shell has its own directory: b's cd is b's alone.
	dir := t.TempDir()
	b := attachTerm(t, h, anon, sid, "b", TerminalOptions{Share: true})
	if err := b.Write(t.Context(), []byte("cd "+dir+"\n")); err != nil {
		t.Fatal(err)
	}
	b.Detach(workers.ReasonDetach) // shared: the first socket keeps it
	testkit.WaitFor(t, 10*time.Second, "b's shell in "+dir, func() bool {
		d, _, err := h.r.TerminalDir(anon, sid, "b")
		return err == nil && d == dir
	})
	if d, _, err := h.r.TerminalDir(anon, sid, ""); err != nil || d == dir {
		t.Fatalf("the first terminal's directory: %q, %v; want its own", d, err)
	}

	recordsOf := func(pid int) []testkit.Record {
		var out []testkit.Record
		for _, rec := range h.logs.Records("worker closed") {
			if rec["worker_pid"] == float64(pid) {
				out = append(out, rec)
			}
		}
		return out
	}
	if closed, err := h.r.CloseTerminal(anon, sid, "c"); !closed || err != nil {
		t.Fatalf("CloseTerminal: %v, %v", closed, err)
	}
	if !testkit.Reaped(pids["c"]) {
		t.Fatalf("terminal c (pid %d) not reaped when CloseTerminal returned", pids["c"])
	}
	if recs := recordsOf(pids["c"]); len(recs) != 1 || recs[0]["reason"] != "terminal_closed" || recs[0]["kind"] != "pty" || recs[0]["sid"] != sid || recs[0]["level"] != "INFO" {
		t.Fatalf("worker closed records of terminal c: %v", recs)
	}
	for _, tid := range []string{DefaultTerminal, "b"} {
		if testkit.Gone(pids[tid]) {
			t.Fatalf("terminal %s went with c", tid)
		}
	}
	if ok, err := h.r.Close(anon, sid, EndClientClose); !ok || err != nil {
		t.Fatalf("close: %v, %v", ok, err)
	}
	h.r.Wait()
	for _, tid := range []string{DefaultTerminal, "b"} {
		pid := pids[tid]
		if !testkit.Reaped(pid) {
			t.Errorf("terminal %s (pid %d) outlived its session", tid, pid)
		}
		if recs := recordsOf(pid); len(recs) != 1 || recs[0]["reason"] != "session_closed" {
			t.Errorf("worker closed records of terminal %s: %v", tid, recs)
		}
	}
	h.wantOneClose(sid, EndClientClose)
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
}
