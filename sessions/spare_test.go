package sessions

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dashgate/dashgate/workers"
)

// sparesOf returns the fake terminals started as spares: not closed and
// serving no attachment in atts. It fails unless there are want.
func (h *harness) sparesOf(want int, atts ...*Attachment) []*fakePTY {
	h.t.Helper()
	var out []*fakePTY
	for _, p := range h.sp.terminals() {
		if p.reason() == "" && !slices.ContainsFunc(atts, func(a *Attachment) bool { return a.PID() == p.pid }) {
			out = append(out, p)
		}
	}
	if len(out) != want {
		h.t.Fatalf("%d spare terminals, want %d", len(out), want)
	}
	return out
}

// attachFirst attaches a terminal without a session and takes its first
// output (a fake terminal of termHarness(t, 5, ...) writes "yyyyy").
func (h *harness) attachFirst(o TerminalOptions) *Attachment {
	h.t.Helper()
	a, err := h.r.AttachTerminal(h.t.Context(), anon, "", o)
	if err != nil {
		h.t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := a.Next(h.t.Context(), buf); err != nil || string(buf[:n]) != "yyyyy" {
		h.t.Fatalf("first output %q, %v", buf[:n], err)
	}
	synctest.Wait()
	return a
}

// TestTerminalSpare (issue 18): with PTYSpare, once a terminal asked for
// without a session handed out its first output, spareCount terminals are
// started ahead at its size; the next such request gets one, its output
// from offset 0, and a session with the id its program was given; and
// the spares are topped up again after that request's first output.
func TestTerminalSpare(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := termHarness(t, 5, func(c *Config) { c.PTYSpare = true })
		a1, err := h.r.AttachTerminal(t.Context(), anon, "", TerminalOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer a1.Detach(workers.ReasonDetach)
		synctest.Wait()
		h.sparesOf(0, a1) // nothing starts beside the request's own path
		if _, err := a1.Next(t.Context(), make([]byte, 64)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		spares := h.sparesOf(spareCount, a1)
		for _, sp := range spares {
			if c, r := sp.req.Cols, sp.req.Rows; c != 80 || r != 24 {
				t.Errorf("spare started at %dx%d, want the request's 80x24", c, r)
			}
			if _, ok := h.r.Get(anon, sp.req.SessionID); ok {
				t.Errorf("the spare's session %s is listed before anyone took it", sp.req.SessionID)
			}
		}

		a2, err := h.r.AttachTerminal(t.Context(), anon, "", TerminalOptions{Cols: 80, Rows: 24})
		if err != nil {
			t.Fatal(err)
		}
		defer a2.Detach(workers.ReasonDetach)
		i := slices.IndexFunc(spares, func(p *fakePTY) bool { return p.pid == a2.PID() })
		if i < 0 || a2.SessionID != spares[i].req.SessionID {
			t.Fatalf("second terminal: pid %d session %s, not a spare's", a2.PID(), a2.SessionID)
		}
		if in, ok := h.r.Get(anon, a2.SessionID); !ok || in.State != StateAttached {
			t.Errorf("the spare's session once taken: %+v, %v; want attached", in, ok)
		}
		synctest.Wait()
		h.sparesOf(spareCount-1, a1, a2) // not topped up before its output went out
		buf := make([]byte, 64)
		if n, err := a2.Next(t.Context(), buf); err != nil || a2.Offset != 0 || string(buf[:n]) != "yyyyy" {
			t.Errorf("spare's output: %q, %v at offset %d; want yyyyy from 0", buf[:n], err, a2.Offset)
		}
		synctest.Wait()
		for _, sp := range h.sparesOf(spareCount, a1, a2) {
			if sp.req.SessionID == a2.SessionID {
				t.Errorf("a new spare has the taken one's session id")
			}
		}
	})
}

// TestTerminalSpareOtherSize: a request of another size takes no spare:
// they are ended (spare_unused) and the next ones have the new size.
func TestTerminalSpareOtherSize(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := termHarness(t, 5, func(c *Config) { c.PTYSpare = true })
		a1 := h.attachFirst(TerminalOptions{})
		defer a1.Detach(workers.ReasonDetach)
		old := h.sparesOf(spareCount, a1)
		a2 := h.attachFirst(TerminalOptions{Cols: 100, Rows: 30})
		defer a2.Detach(workers.ReasonDetach)
		for _, sp := range old {
			if a2.PID() == sp.pid {
				t.Fatalf("a 100x30 request took an 80x24 spare")
			}
			if got := sp.reason(); got != workers.ReasonSpareUnused {
				t.Errorf("an 80x24 spare was closed with %q, want spare_unused", got)
			}
		}
		for _, sp := range h.sparesOf(spareCount, a1, a2) {
			if sp.req.Cols != 100 || sp.req.Rows != 30 {
				t.Errorf("new spare is %dx%d, want 100x30", sp.req.Cols, sp.req.Rows)
			}
		}
	})
}

// TestTerminalSpareYieldsCapacity: at the worker limit, a chat worker that
// needs a spare's slot gets it (spares are ended, spare_unused, until it
// fits); an attachment that never took output starts the spares at
// Detach; and Shutdown ends them.
func TestTerminalSpareYieldsCapacity(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := termHarness(t, 5, func(c *Config) { c.PTYSpare = true })
		h.sp.maxLive = 1 + spareCount
		a1 := h.attachFirst(TerminalOptions{})
		defer a1.Detach(workers.ReasonDetach)
		spares := h.sparesOf(spareCount, a1)
		v := &recViewer{}
		in, err := h.r.Create(v, NewSession{Title: "chat"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.r.Exec(t.Context(), v, in.ID, "/x"); err != nil {
			t.Fatalf("exec at the limit with spares holding the slots: %v", err)
		}
		ended := 0
		for _, sp := range spares {
			if sp.reason() == workers.ReasonSpareUnused {
				ended++
			}
		}
		if ended != 1 {
			t.Errorf("%d spares ended for one worker, want 1", ended)
		}

		h.sp.mu.Lock()
		h.sp.maxLive = 0
		h.sp.mu.Unlock()
		a1.Detach(workers.ReasonDetach)
		synctest.Wait()
		a2, err := h.r.AttachTerminal(t.Context(), anon, "", TerminalOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a2.Detach(workers.ReasonDetach) // no output taken: the spares are topped up here
		synctest.Wait()
		h.sparesOf(spareCount)
		h.r.Shutdown(t.Context())
		h.r.Wait()
		for _, p := range h.sp.terminals() {
			if p.reason() == "" {
				t.Errorf("terminal %d still running after Shutdown", p.pid)
			}
		}
	})
}

// TestTerminalSpareEnded: a spare whose program ended before anyone took
// it is not handed out (nor its session listed): the request starts a
// terminal as before.
func TestTerminalSpareEnded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := termHarness(t, 5, func(c *Config) { c.PTYSpare = true })
		a1 := h.attachFirst(TerminalOptions{})
		defer a1.Detach(workers.ReasonDetach)
		spares := h.sparesOf(spareCount, a1)
		for _, sp := range spares {
			sp.exit(0)
		}
		synctest.Wait()
		a2, err := h.r.AttachTerminal(t.Context(), anon, "", TerminalOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer a2.Detach(workers.ReasonDetach)
		for _, sp := range spares {
			if a2.PID() == sp.pid {
				t.Fatalf("the request got a spare whose program had ended")
			}
			if _, ok := h.r.Get(anon, sp.req.SessionID); ok {
				t.Errorf("the ended spare's session %s is listed", sp.req.SessionID)
			}
		}
	})
}

// TestTerminalSpareIdle: the spares end (spare_unused) once no terminal was
// asked for without a session for PTYSpareIdle, and not before: each such
// request starts the wait again.
func TestTerminalSpareIdle(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := termHarness(t, 5, func(c *Config) { c.PTYSpare, c.PTYSpareIdle = true, time.Minute })
		a1 := h.attachFirst(TerminalOptions{})
		a1.Detach(workers.ReasonDetach) // the tab goes; its spares stay for a while
		h.advance(time.Minute - time.Millisecond)
		first := h.sparesOf(spareCount)
		a2 := h.attachFirst(TerminalOptions{}) // takes one; the wait starts again
		a2.Detach(workers.ReasonDetach)
		h.advance(time.Minute - time.Millisecond)
		h.sparesOf(spareCount)
		h.advance(2 * time.Millisecond)
		h.sparesOf(0)
		for _, sp := range first {
			if sp.pid != a2.PID() && sp.reason() != workers.ReasonSpareUnused {
				t.Errorf("spare %d ended with %q, want spare_unused", sp.pid, sp.reason())
			}
		}
	})
}

// TestTerminalSpareBurst: an attach that takes a spare still starting
// (terminals opened faster than one starts) makes the spares two from the
// next refill on, until none was taken for spareBurstIdle: then the
// newest ends (spare_unused), and one is kept again.
func TestTerminalSpareBurst(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := termHarness(t, 5, func(c *Config) { c.PTYSpare, c.PTYSpareIdle = true, time.Minute })
		a1 := h.attachFirst(TerminalOptions{})
		defer a1.Detach(workers.ReasonDetach)
		h.sparesOf(spareCount, a1)
		a2 := h.attachFirst(TerminalOptions{}) // its spare was ready: no burst
		defer a2.Detach(workers.ReasonDetach)
		h.sparesOf(spareCount, a1, a2)

		// The next spare starts only when the gate opens: the attach
		// after a3 takes it while it is starting.
		gate := make(chan struct{})
		h.sp.ptyGate.Store(&gate)
		a3 := h.attachFirst(TerminalOptions{}) // takes the ready one; the refill waits at the gate
		defer a3.Detach(workers.ReasonDetach)
		attached := make(chan *Attachment)
		go func() {
			a, err := h.r.AttachTerminal(t.Context(), anon, "", TerminalOptions{})
			if err != nil {
				t.Error(err)
			}
			attached <- a
		}()
		synctest.Wait() // a4 waits for the spare it took
		h.sp.ptyGate.Store(nil)
		close(gate)
		a4 := <-attached
		if a4 == nil {
			t.FailNow()
		}
		defer a4.Detach(workers.ReasonDetach)
		if _, err := a4.Next(t.Context(), make([]byte, 64)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		h.sparesOf(burstSpares, a1, a2, a3, a4)
		h.advance(spareBurstIdle / 2)
		a5 := h.attachFirst(TerminalOptions{}) // within the burst: two again after it
		defer a5.Detach(workers.ReasonDetach)
		two := h.sparesOf(burstSpares, a1, a2, a3, a4, a5)

		h.advance(spareBurstIdle - time.Millisecond) // from a5's take: the burst goes on
		h.sparesOf(burstSpares, a1, a2, a3, a4, a5)
		h.advance(2 * time.Millisecond)
		left := h.sparesOf(spareCount, a1, a2, a3, a4, a5)
		if left[0] != two[0] || two[1].reason() != workers.ReasonSpareUnused {
			t.Fatalf("the burst's end kept spare %d and ended %d with %q; want the older kept, the newer ended spare_unused", left[0].pid, two[1].pid, two[1].reason())
		}
		a6 := h.attachFirst(TerminalOptions{}) // its spare was ready: one after it
		defer a6.Detach(workers.ReasonDetach)
		h.sparesOf(spareCount, a1, a2, a3, a4, a5, a6)
	})
}
