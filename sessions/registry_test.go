package sessions

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/workers"
	"github.com/dashgate/dashgate/workers/builtin"
)

func TestMain(m *testing.M) {
	// Re-executed as the built-in worker by the real-process tests.
	if os.Getenv("DASHGATE_TEST_WORKER") == "1" {
		os.Exit(builtin.Main())
	}
	// adopt_test.go's PostgreSQL server is a child process: stopped here.
	testkit.VerifyNoLeaks(m, goleak.Cleanup(func(code int) {
		if err := testkit.StopPostgres(); err != nil {
			fmt.Fprintln(os.Stderr, "stop PostgreSQL:", err)
			code = max(code, 1)
		}
		os.Exit(code)
	}))
}

type harness struct {
	t    *testing.T
	r    *Registry
	sp   *fakeSpawner
	logs *testkit.LogBuffer
}

// newHarness makes a registry over fake children. Tests that move time
// (advance) run it inside synctest.Test.
func newHarness(t *testing.T, mod func(*Config)) *harness {
	t.Helper()
	log, lb := testkit.NewLogger()
	h := &harness{t: t, sp: &fakeSpawner{}, logs: lb}
	cfg := Config{Spawner: h.sp, Log: log, DetachedTTL: time.Minute, MaxSessions: 1000}
	if mod != nil {
		mod(&cfg)
	}
	h.r = New(cfg)
	t.Cleanup(func() {
		h.r.Shutdown(context.Background())
		h.r.Wait()
		h.r.FlushStore(context.Background()) // its drain must not outlive a synctest bubble
	})
	return h
}

// advance moves the bubble's clock by d and lets every timer that came due
// run until it is done or blocked. Only inside synctest.Test.
func (h *harness) advance(d time.Duration) {
	<-time.After(d) // the bubble's clock jumps to the timer: no real wait
	synctest.Wait()
}

// loseTimers stops every session's TTL timer, as if it were lost.
func (h *harness) loseTimers() {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	for _, s := range h.r.sessions {
		if s.ttlTimer != nil {
			s.ttlTimer.Stop()
		}
	}
}

func (h *harness) closedRecords(sid string) []map[string]any {
	var out []map[string]any
	for _, rec := range h.logs.Records("session closed") {
		if rec["sid"] == sid {
			out = append(out, rec)
		}
	}
	return out
}

// wantOneClose asserts exactly one "session closed" record for sid, with
// reason, once the teardown finished.
func (h *harness) wantOneClose(sid string, reason EndReason) {
	h.t.Helper()
	h.r.Wait()
	recs := h.closedRecords(sid)
	if len(recs) != 1 {
		h.t.Fatalf("session %s: %d close records, want 1: %v", sid, len(recs), recs)
	}
	rec := recs[0]
	if rec["end_reason"] != string(reason) || rec["level"] != "INFO" {
		h.t.Fatalf("close record = %v, want INFO end_reason=%s", rec, reason)
	}
	for _, k := range []string{"sid", "end_reason", "duration_ms", "worker_pid", "pty_pid", "turns"} {
		if _, ok := rec[k]; !ok {
			h.t.Fatalf("close record lacks %q: %v", k, rec)
		}
	}
}

func TestTransitions(t *testing.T) {
	t.Parallel()
	all := []State{StateCreated, StateAttached, StateDetached, StateClosing, StateClosed}
	legalMoves := map[[2]State]bool{
		{StateCreated, StateAttached}:  true,
		{StateCreated, StateDetached}:  true,
		{StateCreated, StateClosing}:   true,
		{StateAttached, StateDetached}: true,
		{StateAttached, StateClosing}:  true,
		{StateDetached, StateAttached}: true,
		{StateDetached, StateClosing}:  true,
		{StateClosing, StateClosed}:    true,
	}
	for _, from := range all {
		for _, to := range all {
			t.Run(fmt.Sprintf("%s->%s", from, to), func(t *testing.T) {
				s := &Session{state: from}
				err := s.setState(to)
				if legalMoves[[2]State{from, to}] {
					if err != nil || s.state != to {
						t.Fatalf("legal move refused: %v", err)
					}
					return
				}
				if !errors.Is(err, ErrIllegalTransition) || s.state != from {
					t.Fatalf("illegal move allowed: err=%v state=%s", err, s.state)
				}
			})
		}
	}
}

func TestEndReasons(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		reason EndReason
		run    func(h *harness, v *recViewer) string // returns the sid expected to end
		viewer bool                                  // the event reaches a viewer
	}{
		{"client_close", EndClientClose, func(h *harness, v *recViewer) string {
			in, _ := h.r.Create(v, NewSession{Title: "a"})
			if closed, err := h.r.Close(anon, in.ID, EndClientClose); !closed || err != nil {
				h.t.Fatalf("Close = %v, %v", closed, err)
			}
			return in.ID
		}, true},
		{"close_on_disconnect", EndCloseOnDisconnect, func(h *harness, v *recViewer) string {
			in, _ := h.r.Create(v, NewSession{Title: "a", CloseOnDisconnect: true})
			h.r.DetachViewer(v, workers.ReasonDetach)
			return in.ID
		}, false}, // the only viewer is the one that left
		{"detached_ttl by timer", EndDetachedTTL, func(h *harness, v *recViewer) string {
			in, _ := h.r.Create(v, NewSession{Title: "a"})
			h.r.DetachViewer(v, workers.ReasonDetach)
			h.advance(time.Minute)
			return in.ID
		}, false},
		{"detached_ttl by sweep after a lost timer", EndDetachedTTL, func(h *harness, v *recViewer) string {
			in, _ := h.r.Create(v, NewSession{Title: "a"})
			h.r.DetachViewer(v, workers.ReasonDetach)
			h.loseTimers()
			h.advance(2 * time.Minute)
			if n := h.r.Sweep(); n != 1 {
				h.t.Fatalf("Sweep ended %d sessions, want 1", n)
			}
			return in.ID
		}, false},
		{"lru_evict", EndLRUEvict, func(h *harness, v *recViewer) string {
			old, _ := h.r.Create(v, NewSession{Title: "old"})
			h.r.DetachViewer(v, workers.ReasonDetach)
			h.advance(time.Second)
			other := &recViewer{}
			h.r.Create(other, NewSession{Title: "newer"}) // max is 2: fits
			h.r.DetachViewer(other, workers.ReasonDetach)
			third := &recViewer{}
			if _, err := h.r.Create(third, NewSession{Title: "third"}); err != nil {
				h.t.Fatalf("Create at capacity: %v", err)
			}
			return old.ID
		}, false},
		{"admin_reap", EndAdminReap, func(h *harness, v *recViewer) string {
			in, _ := h.r.Create(v, NewSession{Title: "a"})
			h.r.Close(anon, in.ID, EndAdminReap)
			return in.ID
		}, true},
		{"shutdown", EndShutdown, func(h *harness, v *recViewer) string {
			in, _ := h.r.Create(v, NewSession{Title: "a"})
			h.r.Exec(h.t.Context(), v, in.ID, "/x")
			h.r.Shutdown(context.Background())
			if w := h.sp.workers()[0]; w.reason != workers.ReasonShutdown {
				h.t.Fatalf("worker closed with %q, want shutdown", w.reason)
			}
			return in.ID
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, func(c *Config) { c.MaxSessions = 2 })
				v := &recViewer{}
				sid := tt.run(h, v)
				h.wantOneClose(sid, tt.reason)
				if _, ok := h.r.Get(anon, sid); ok {
					t.Fatal("session still listed")
				}
				if tt.viewer {
					evs := v.ofType("session.closed")
					if len(evs) != 1 || evs[0].SessionID != sid || evs[0].Payload.(map[string]any)["end_reason"] != tt.reason {
						t.Fatalf("session.closed events = %+v", evs)
					}
				}
			})
		})
	}
}

func TestCloseTwice(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	in, _ := h.r.Create(&recViewer{}, NewSession{Title: ""})
	if closed, err := h.r.Close(anon, in.ID, EndClientClose); !closed || err != nil {
		t.Fatalf("first Close = %v, %v", closed, err)
	}
	if closed, err := h.r.Close(anon, in.ID, EndClientClose); closed || err != nil {
		t.Fatalf("second Close = %v, %v; want false, nil", closed, err)
	}
	if _, err := h.r.Close(anon, "no-such-id", EndClientClose); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Close of unknown id: %v", err)
	}
	if _, err := h.r.Resume(&recViewer{}, in.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Resume of closed session: %v", err)
	}
	h.wantOneClose(in.ID, EndClientClose)
}

func TestLRUCapacityWithoutDetached(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.MaxSessions = 1 })
	h.r.Create(&recViewer{}, NewSession{Title: ""})
	if _, err := h.r.Create(&recViewer{}, NewSession{Title: ""}); !errors.Is(err, ErrCapacity) {
		t.Fatalf("Create beyond capacity with nothing detached: %v", err)
	}
}

func TestResumeCancelsTTL(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		v := &recViewer{}
		in, _ := h.r.Create(v, NewSession{Title: ""})
		h.r.DetachViewer(v, workers.ReasonDetach)
		h.advance(30 * time.Second)
		if _, err := h.r.Resume(&recViewer{}, in.ID); err != nil {
			t.Fatal(err)
		}
		h.advance(time.Hour)
		h.r.Sweep()
		if got, ok := h.r.Get(anon, in.ID); !ok || got.State != StateAttached {
			t.Fatalf("resumed session ended or not attached: %+v %v", got, ok)
		}
	})
}

func TestDetachClosesWorkerMidTurn(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.sp.hang = true
	v := &recViewer{}
	in, _ := h.r.Create(v, NewSession{Title: ""})
	turnID, start, err := h.r.Prompt(v, in.ID, "a long prompt")
	if err != nil {
		t.Fatal(err)
	}
	start()
	testkit.WaitFor(t, time.Second, "worker spawned", func() bool { return h.sp.spawned.Load() == 1 })
	w := h.sp.workers()[0]
	testkit.WaitFor(t, time.Second, "worker installed", func() bool { got, _ := h.r.Get(anon, in.ID); return got.WorkerPID == w.pid })

	h.r.DetachViewer(v, workers.ReasonDetach)
	h.r.Wait()
	if !w.Closing() || w.reason != workers.ReasonDetach {
		t.Fatalf("worker closing=%v reason=%s, want closed with detach", w.Closing(), w.reason)
	}
	got, _ := h.r.Get(anon, in.ID)
	if got.State != StateDetached || got.Running || got.WorkerPID != 0 {
		t.Fatalf("after detach: %+v", got)
	}
	res, err := h.r.Resume(&recViewer{}, in.ID)
	if err != nil {
		t.Fatal(err)
	}
	last := res.History[len(res.History)-1]
	if last.Role != "assistant" || !last.Interrupted || last.TurnID != turnID {
		t.Fatalf("history does not end with the interrupted turn: %+v", res.History)
	}
}

func TestSharedSocketDetachesEverySession(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	shared, other := &recViewer{}, &recViewer{}
	var sids []string
	for i := range 50 {
		in, _ := h.r.Create(shared, NewSession{Title: fmt.Sprint(i)})
		if _, err := h.r.Exec(t.Context(), shared, in.ID, "/echo"); err != nil {
			t.Fatal(err)
		}
		sids = append(sids, in.ID)
	}
	mine, _ := h.r.Create(other, NewSession{Title: "other"})
	h.r.Exec(t.Context(), other, mine.ID, "/echo")
	ws := h.sp.workers()

	h.r.DetachViewer(shared, workers.ReasonDetach)
	h.r.Wait()
	for i, w := range ws[:50] {
		if !w.Closing() || w.reason != workers.ReasonDetach {
			t.Fatalf("worker of session %d not closed with detach", i)
		}
		if got, _ := h.r.Get(anon, sids[i]); got.State != StateDetached {
			t.Fatalf("session %d state %s", i, got.State)
		}
	}
	if ws[50].Closing() {
		t.Fatal("the other socket's worker was closed")
	}
	if got, _ := h.r.Get(anon, mine.ID); got.State != StateAttached || got.WorkerPID == 0 {
		t.Fatalf("other session disturbed: %+v", got)
	}
}

func TestTwoViewersDetachOnlyWhenLastLeaves(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	a, b := &recViewer{}, &recViewer{}
	in, _ := h.r.Create(a, NewSession{Title: ""})
	h.r.Resume(b, in.ID)
	h.r.Exec(t.Context(), a, in.ID, "/x")
	w := h.sp.workers()[0]
	h.r.DetachViewer(a, workers.ReasonDetach)
	h.r.Wait()
	if w.Closing() {
		t.Fatal("worker closed while a viewer remains")
	}
	if out, err := h.r.Exec(t.Context(), b, in.ID, "/y"); err != nil || out != "/y" || h.sp.spawned.Load() != 1 {
		t.Fatalf("the remaining viewer's call: %q %v, %d spawns", out, err, h.sp.spawned.Load())
	}
	h.r.DetachViewer(b, workers.ReasonDetach)
	h.r.Wait()
	if !w.Closing() {
		t.Fatal("worker not closed when the last viewer left")
	}
}

func TestConcurrentExecSpawnsOneWorker(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	gate := make(chan struct{})
	h.sp.gate = gate
	v := &recViewer{}
	in, _ := h.r.Create(v, NewSession{Title: ""})
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := h.r.Exec(t.Context(), v, in.ID, "/echo")
			errs <- err
		}()
	}
	close(gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := h.sp.spawned.Load(); n != 1 {
		t.Fatalf("spawned %d workers, want 1", n)
	}
}

func TestCloseWhileSpawning(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	gate := make(chan struct{})
	h.sp.gate = gate
	v := &recViewer{}
	in, _ := h.r.Create(v, NewSession{Title: ""})
	h.sp.entered = make(chan struct{}, 1)
	errc := make(chan error, 1)
	go func() { _, err := h.r.Exec(t.Context(), v, in.ID, "/echo"); errc <- err }()
	<-h.sp.entered
	// Close while the spawn is held at the gate.
	h.r.Close(anon, in.ID, EndClientClose)
	close(gate)
	if err := <-errc; !errors.Is(err, ErrNotFound) {
		t.Fatalf("Exec on a session closed during spawn: %v", err)
	}
	if len(h.sp.workers()) != 1 {
		t.Fatal("the spawn did not happen")
	}
	for _, w := range h.sp.workers() {
		if !w.Closing() || w.reason != workers.ReasonSessionClosed {
			t.Fatalf("worker spawned for a closed session survived (closing=%v reason=%s)", w.Closing(), w.reason)
		}
	}
}

func TestWorkerCrashEmitsExitedAndRespawns(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	v := &recViewer{}
	in, _ := h.r.Create(v, NewSession{Title: ""})
	h.r.Exec(t.Context(), v, in.ID, "/a")
	first := h.sp.workers()[0]
	first.crash()
	evs := v.ofType("worker.exited")
	if len(evs) != 1 || evs[0].Payload.(map[string]any)["reason"] != workers.ReasonExited {
		t.Fatalf("worker.exited events = %+v", evs)
	}
	if _, err := h.r.Exec(t.Context(), v, in.ID, "/b"); err != nil {
		t.Fatal(err)
	}
	if got, _ := h.r.Get(anon, in.ID); got.WorkerPID == first.pid || got.WorkerPID == 0 {
		t.Fatalf("no new worker after the crash: %+v", got)
	}
}

func TestTurns(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.sp.hang = true
	v := &recViewer{}
	in, _ := h.r.Create(v, NewSession{Title: ""})
	if st, _ := h.r.Interrupt(v, in.ID); st != "idle" {
		t.Fatalf("Interrupt with no turn = %q", st)
	}
	_, start, _ := h.r.Prompt(v, in.ID, "one")
	start()
	if _, _, err := h.r.Prompt(v, in.ID, "two"); !errors.Is(err, ErrBusy) {
		t.Fatalf("second prompt during a turn: %v", err)
	}
	if st, err := h.r.Interrupt(v, in.ID); st != "interrupted" || err != nil {
		t.Fatalf("Interrupt = %q, %v", st, err)
	}
	if got, _ := h.r.Get(anon, in.ID); got.Running {
		t.Fatal("still running after interrupt")
	}
	if _, _, err := h.r.Prompt(v, in.ID, "three"); err != nil {
		t.Fatalf("prompt after interrupt: %v", err)
	}
}

func TestEventSeqHasNoGaps(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	v := &recViewer{}
	in, _ := h.r.Create(v, NewSession{Title: ""})
	for i := range 5 {
		_, start, err := h.r.Prompt(v, in.ID, fmt.Sprint("p", i))
		if err != nil {
			t.Fatal(err)
		}
		start()
		testkit.WaitFor(t, time.Second, "turn done", func() bool { got, _ := h.r.Get(anon, in.ID); return !got.Running })
	}
	h.r.Close(anon, in.ID, EndClientClose)
	v.mu.Lock()
	defer v.mu.Unlock()
	for i, e := range v.events {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d: %+v", i, e.Seq, v.events)
		}
	}
	if len(v.events) != 5*2+1 {
		t.Fatalf("%d events, want 11", len(v.events))
	}
}

func TestHistoryBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.HistoryMessages = 10; c.HistoryBytes = 1 << 20 })
	v := &recViewer{}
	in, _ := h.r.Create(v, NewSession{Title: ""})
	for i := range 20 {
		_, start, _ := h.r.Prompt(v, in.ID, fmt.Sprint("p", i))
		start()
		testkit.WaitFor(t, time.Second, "turn done", func() bool { got, _ := h.r.Get(anon, in.ID); return !got.Running })
	}
	res, _ := h.r.Resume(v, in.ID)
	if len(res.History) != 10 || res.History[9].Text != "echo p19" || res.History[0].Text != "p15" {
		t.Fatalf("history = %+v", res.History)
	}
}

func TestRingReplay(t *testing.T) {
	t.Parallel()
	r := NewRing(8)
	r.Write([]byte("abcdef"))
	r.Write([]byte("ghij")) // holds cdefghij
	if r.Start() != 2 || r.End() != 10 {
		t.Fatalf("start %d end %d", r.Start(), r.End())
	}
	buf := make([]byte, 16)
	if n := r.ReadAt(buf, 4); string(buf[:n]) != "efghij" {
		t.Fatalf("ReadAt(4) = %q", buf[:n])
	}
	if n := r.ReadAt(buf, 1); n != 0 {
		t.Fatal("read of a rolled-out offset")
	}
	r.Write([]byte("0123456789XY")) // larger than the ring
	if n := r.ReadAt(buf, r.Start()); string(buf[:n]) != "456789XY" || r.End() != 22 {
		t.Fatalf("after overflow: %q end %d", buf[:n], r.End())
	}
}
