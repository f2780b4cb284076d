package sessions

import (
	"testing"
	"testing/synctest"

	"github.com/dashgate/dashgate/workers"
)

// spareOf returns the fake terminal started as the spare: not closed and
// serving no attachment in atts.
func (h *harness) spareOf(atts ...*Attachment) *fakePTY {
	h.t.Helper()
	var out []*fakePTY
	for _, p := range h.sp.terminals() {
		if p.reason() != "" {
			continue
		}
		used := false
		for _, a := range atts {
			used = used || a.PID() == p.pid
		}
		if !used {
			out = append(out, p)
		}
	}
	if len(out) != 1 {
		h.t.Fatalf("%d spare terminals, want 1", len(out))
	}
	return out[0]
}

// TestTerminalSpare (issue 18): with PTYSpare, a terminal asked for
// without a session leaves one started ahead, at its size, for the next
// such request; that request gets it, its output from offset 0, and a
// session with the id its program was given; and the next spare starts.
func TestTerminalSpare(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := termHarness(t, 5, func(c *Config) { c.PTYSpare = true })
		a1, err := h.r.AttachTerminal(t.Context(), "", TerminalOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer a1.Detach(workers.ReasonDetach)
		synctest.Wait()
		spare := h.spareOf(a1)
		if c, r := spare.req.Cols, spare.req.Rows; c != 80 || r != 24 {
			t.Errorf("spare started at %dx%d, want the request's 80x24", c, r)
		}
		if _, ok := h.r.Get(spare.req.SessionID); ok {
			t.Errorf("the spare's session %s is listed before anyone took it", spare.req.SessionID)
		}

		a2, err := h.r.AttachTerminal(t.Context(), "", TerminalOptions{Cols: 80, Rows: 24})
		if err != nil {
			t.Fatal(err)
		}
		defer a2.Detach(workers.ReasonDetach)
		if a2.PID() != spare.pid || a2.SessionID != spare.req.SessionID {
			t.Fatalf("second terminal: pid %d session %s, want the spare's %d %s", a2.PID(), a2.SessionID, spare.pid, spare.req.SessionID)
		}
		if in, ok := h.r.Get(a2.SessionID); !ok || in.State != StateAttached {
			t.Errorf("the spare's session once taken: %+v, %v; want attached", in, ok)
		}
		buf := make([]byte, 64)
		if n, err := a2.Next(t.Context(), buf); err != nil || a2.Offset != 0 || string(buf[:n]) != "yyyyy" {
			t.Errorf("spare's output: %q, %v at offset %d; want yyyyy from 0", buf[:n], err, a2.Offset)
		}
		synctest.Wait()
		if next := h.spareOf(a1, a2); next.req.SessionID == a2.SessionID {
			t.Errorf("the next spare has the taken one's session id")
		}
	})
}

// TestTerminalSpareOtherSize: a request of another size does not take the
// spare: it is ended (spare_unused) and the next one has the new size.
func TestTerminalSpareOtherSize(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := termHarness(t, 0, func(c *Config) { c.PTYSpare = true })
		a1, err := h.r.AttachTerminal(t.Context(), "", TerminalOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer a1.Detach(workers.ReasonDetach)
		synctest.Wait()
		old := h.spareOf(a1)
		a2, err := h.r.AttachTerminal(t.Context(), "", TerminalOptions{Cols: 100, Rows: 30})
		if err != nil {
			t.Fatal(err)
		}
		defer a2.Detach(workers.ReasonDetach)
		synctest.Wait()
		if a2.PID() == old.pid {
			t.Fatalf("a 100x30 request took the 80x24 spare")
		}
		if got := old.reason(); got != workers.ReasonSpareUnused {
			t.Errorf("the 80x24 spare was closed with %q, want spare_unused", got)
		}
		if next := h.spareOf(a1, a2); next.req.Cols != 100 || next.req.Rows != 30 {
			t.Errorf("next spare is %dx%d, want 100x30", next.req.Cols, next.req.Rows)
		}
	})
}

// TestTerminalSpareYieldsCapacity: at the worker limit, a chat worker that
// needs the spare's slot gets it (the spare is ended, spare_unused), and
// Shutdown ends a spare with reason shutdown.
func TestTerminalSpareYieldsCapacity(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := termHarness(t, 0, func(c *Config) { c.PTYSpare = true })
		h.sp.maxLive = 2
		a1, err := h.r.AttachTerminal(t.Context(), "", TerminalOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer a1.Detach(workers.ReasonDetach)
		synctest.Wait()
		spare := h.spareOf(a1)
		v := &recViewer{}
		in, err := h.r.Create(v, "chat", false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.r.Exec(t.Context(), v, in.ID, "/x"); err != nil {
			t.Fatalf("exec at the limit with a spare holding a slot: %v", err)
		}
		if got := spare.reason(); got != workers.ReasonSpareUnused {
			t.Errorf("spare closed with %q, want spare_unused", got)
		}

		a1.Detach(workers.ReasonDetach)
		synctest.Wait()
		a2, err := h.r.AttachTerminal(t.Context(), "", TerminalOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a2.Detach(workers.ReasonDetach)
		synctest.Wait()
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
		h := termHarness(t, 0, func(c *Config) { c.PTYSpare = true })
		a1, err := h.r.AttachTerminal(t.Context(), "", TerminalOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer a1.Detach(workers.ReasonDetach)
		synctest.Wait()
		spare := h.spareOf(a1)
		spare.exit(0)
		synctest.Wait()
		a2, err := h.r.AttachTerminal(t.Context(), "", TerminalOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer a2.Detach(workers.ReasonDetach)
		if a2.PID() == spare.pid {
			t.Fatalf("the request got the spare whose program had ended")
		}
		if _, ok := h.r.Get(spare.req.SessionID); ok {
			t.Errorf("the ended spare's session %s is listed", spare.req.SessionID)
		}
	})
}
