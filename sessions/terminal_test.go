package sessions

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dashgate/dashgate/workers"
)

// termHarness is a registry over fake terminals that write flood bytes.
func termHarness(t *testing.T, flood int, mod func(*Config)) *harness {
	t.Helper()
	return newHarness(t, func(c *Config) {
		c.Spawner.(*fakeSpawner).ptyFlood = flood
		c.PTYBuffer = 1 << 20
		c.PTYPending = 64 << 10
		c.PTYKeepalive = time.Minute
		c.DetachedTTL = 24 * time.Hour
		if mod != nil {
			mod(c)
		}
	})
}

// TestTerminalBackpressure: with a client that stops reading, the pty is
// no longer read once PTYPending bytes wait unsent, far below the ring's
// size; reading again lets the program go on.
func TestTerminalBackpressure(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := termHarness(t, 8<<20, nil)
		a, err := h.r.AttachTerminal(t.Context(), anon, "", TerminalOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Detach(workers.ReasonDetach)
		p := h.sp.terminals()[0]
		synctest.Wait() // the reader is blocked, on the pty or on room
		stalled := p.bytesRead()
		if stalled < 64<<10 || stalled > 64<<10+MaxFrame {
			t.Fatalf("pty read %d bytes with nothing sent; want the pending bound, 64 KiB (+ one frame)", stalled)
		}
		buf := make([]byte, MaxFrame)
		for range 4 {
			if _, err := a.Next(t.Context(), buf); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		if got := p.bytesRead(); got <= stalled || got > stalled+4*MaxFrame {
			t.Fatalf("after the client took 4 frames the pty was read to %d bytes (from %d)", got, stalled)
		}
	})
}

// TestTerminalKeepalive: a terminal attached with keepalive is parked when
// its socket goes, survives until PTYKeepalive passed, then ends with
// reason keepalive_expired; a reattach in time keeps it.
func TestTerminalKeepalive(t *testing.T) {
	t.Parallel()
	for _, reattach := range []bool{false, true} {
		name := "expires"
		if reattach {
			name = "reattach in time"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				h := termHarness(t, 0, nil)
				a, err := h.r.AttachTerminal(t.Context(), anon, "", TerminalOptions{Keepalive: true})
				if err != nil {
					t.Fatal(err)
				}
				p := h.sp.terminals()[0]
				a.Detach(workers.ReasonDetach)
				if recs := h.logs.Records("terminal parked"); len(recs) != 1 {
					t.Fatalf("parked records: %v", recs)
				}
				h.advance(time.Minute - time.Millisecond)
				if r := p.reason(); r != "" {
					t.Fatalf("parked terminal closed (%s) before its keepalive", r)
				}
				if reattach {
					b, err := h.r.AttachTerminal(t.Context(), anon, a.SessionID, TerminalOptions{ResumeToken: a.ResumeToken})
					if err != nil {
						t.Fatal(err)
					}
					h.advance(time.Hour)
					if r := p.reason(); r != "" {
						t.Fatalf("reattached terminal closed (%s)", r)
					}
					b.Detach(workers.ReasonDetach)
					synctest.Wait()
					if r := p.reason(); r != workers.ReasonDetach {
						t.Fatalf("terminal closed with %q after its socket went without keepalive", r)
					}
					return
				}
				h.advance(time.Millisecond)
				if r := p.reason(); r != workers.ReasonKeepaliveExpired {
					t.Fatalf("terminal closed with %q, want keepalive_expired", r)
				}
				h.wantOneClose(a.SessionID, EndCloseOnDisconnect)
			})
		})
	}
}

// TestTerminalEnds: how a terminal-only session ends says why its program
// ended.
func TestTerminalEnds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		end    func(h *harness, a *Attachment, p *fakePTY)
		reason workers.Reason
		want   EndReason
		next   func(error) bool // what the attachment's Next returns at the end
	}{
		{"admin reap while its socket is open", func(h *harness, a *Attachment, p *fakePTY) {
			if err := h.r.ReapWorker(anon, p.pid); err != nil {
				h.t.Fatal(err)
			}
		}, workers.ReasonAdminReap, EndAdminReap, func(err error) bool { return errors.Is(err, ErrTerminalClosed) }},
		{"program exits", func(h *harness, a *Attachment, p *fakePTY) { p.exit(3) },
			workers.ReasonExited, EndPTYExit, func(err error) bool {
				var ex *ExitError
				return errors.As(err, &ex) && ex.Code == 3
			}},
		{"socket goes", func(h *harness, a *Attachment, p *fakePTY) { a.Detach(workers.ReasonDetach) },
			workers.ReasonDetach, EndCloseOnDisconnect, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				h := termHarness(t, 0, nil)
				a, err := h.r.AttachTerminal(t.Context(), anon, "", TerminalOptions{})
				if err != nil {
					t.Fatal(err)
				}
				p := h.sp.terminals()[0]
				tt.end(h, a, p)
				synctest.Wait()
				if r := p.reason(); r != tt.reason {
					t.Fatalf("program closed with %q, want %q", r, tt.reason)
				}
				h.wantOneClose(a.SessionID, tt.want)
				// Issue 16 item 8: the record names the terminal it ended with.
				if rec := h.closedRecords(a.SessionID)[0]; rec["pty_pid"] != float64(p.pid) {
					t.Fatalf("session closed record has pty_pid %v, want %d", rec["pty_pid"], p.pid)
				}
				if tt.next != nil {
					ctx, cancel := context.WithTimeout(t.Context(), time.Second)
					defer cancel()
					if _, err := a.Next(ctx, make([]byte, 10)); !tt.next(err) {
						t.Fatalf("Next at the end: %v", err)
					}
					a.Detach(workers.ReasonDetach)
				}
			})
		})
	}
}

func TestReapWorkerUnknown(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	if err := h.r.ReapWorker(anon, 12345); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReapWorker of no child: %v", err)
	}
}

// TestReapChatWorkerKeepsSession: an admin reap of a chat worker closes it
// with admin_reap; its session stays and its viewers hear worker.exited.
func TestReapChatWorkerKeepsSession(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	v := &recViewer{}
	in, _ := h.r.Create(v, NewSession{Title: ""})
	h.r.Exec(t.Context(), v, in.ID, "/x")
	w := h.sp.workers()[0]
	if err := h.r.ReapWorker(anon, w.pid); err != nil {
		t.Fatal(err)
	}
	if w.reason != workers.ReasonAdminReap {
		t.Fatalf("worker closed with %q", w.reason)
	}
	if got, ok := h.r.Get(anon, in.ID); !ok || got.WorkerPID != 0 {
		t.Fatalf("session after the reap: %+v %v", got, ok)
	}
	if evs := v.ofType("worker.exited"); len(evs) != 1 || evs[0].Payload.(map[string]any)["reason"] != workers.ReasonAdminReap {
		t.Fatalf("worker.exited events: %+v", evs)
	}
}
