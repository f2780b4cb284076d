package sessions

import (
	"sync"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/workers"
)

// TestClosePathsRace: a client close, an admin reap, a detach whose TTL
// runs out at once and a sweep end one session at the same time, and all
// but the detach again while the winner tears it down (its worker's Close
// held: a turn runs, so the detach leaves the worker to its grace), many
// times: one of them claims it, and the session logs exactly one INFO
// "session closed" record, with the winner's reason; a close that lost its
// claim writes none (handlers' TestClosePathsRace proves the same through
// the sockets, with real workers).
func TestClosePathsRace(t *testing.T) {
	t.Parallel()
	hs := &heldSpawner{}
	h := newHarness(t, func(c *Config) {
		hs.fakeSpawner = c.Spawner.(*fakeSpawner)
		c.Spawner = hs
		hs.hang = true // the turn runs until the worker closes
		c.DetachTurnGrace = time.Hour
		c.DetachedTTL = time.Nanosecond
	})
	const rounds = 50
	for i := range rounds {
		hold := hs.next()
		t.Cleanup(hold.let) // a failure before the release must not hang the cleanup's Shutdown
		v := leavingViewer()
		in, err := h.r.Create(v, NewSession{Title: ""})
		if err != nil {
			t.Fatal(err)
		}
		sid := in.ID
		_, begin, err := h.r.Prompt(v, sid, "hi")
		if err != nil {
			t.Fatal(err)
		}
		begin()
		testkit.WaitFor(t, 10*time.Second, "the turn's worker", func() bool {
			h.r.mu.Lock()
			defer h.r.mu.Unlock()
			return h.r.sessions[sid].worker != nil
		})
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			claims []EndReason // the closes that said they ended it
		)
		claimed := func(ok bool, reason EndReason) {
			if ok {
				mu.Lock()
				claims = append(claims, reason)
				mu.Unlock()
			}
		}
		closes := []func(){
			func() { ok, _ := h.r.Close(anon, sid, EndClientClose); claimed(ok, EndClientClose) },
			func() { ok, _ := h.r.Close(anon, sid, EndAdminReap); claimed(ok, EndAdminReap) },
			func() { claimed(h.r.Sweep() == 1, EndDetachedTTL) },
		}
		start := make(chan struct{})
		for _, f := range append(closes, func() { v.leave(); h.r.DetachViewer(v, workers.ReasonDetach) }) { // detach: then the TTL
			wg.Go(func() { <-start; f() })
		}
		close(start)
		testkit.Recv(t, 10*time.Second, "the worker's close", hold.closing) // claimed; its teardown waits
		// The second wave loses its claim: each returns false at once, so
		// each has come and gone while the session was closing.
		var lost sync.WaitGroup
		for _, f := range closes {
			lost.Go(f)
		}
		lostDone := make(chan struct{})
		go func() { lost.Wait(); close(lostDone) }()
		testkit.Recv(t, 10*time.Second, "the closes that lost their claim (returned)", lostDone)
		hold.let()
		wg.Wait()
		testkit.WaitFor(t, 10*time.Second, "the session closed record", func() bool { return len(h.closedRecords(sid)) > 0 })
		h.r.Wait() // every close under way is done
		recs := h.closedRecords(sid)
		if len(recs) != 1 {
			t.Fatalf("round %d: %d session closed records, want 1: %v", i, len(recs), recs)
		}
		rec := recs[0]
		if rec["level"] != "INFO" || rec["worker_pid"] == float64(0) {
			t.Fatalf("round %d: close record %v, want INFO with the worker it held", i, rec)
		}
		if len(claims) > 1 {
			t.Fatalf("round %d: %d closes claimed the session: %v", i, len(claims), claims)
		}
		if len(claims) == 1 && rec["end_reason"] != string(claims[0]) {
			t.Fatalf("round %d: record says end_reason=%v, the close that claimed it %s", i, rec["end_reason"], claims[0])
		}
	}
}

// heldSpawner is a fakeSpawner whose workers' Close waits for the test:
// it tells hold.closing, then waits for hold.release.
type heldSpawner struct {
	*fakeSpawner
	mu   sync.Mutex
	hold *closeHold
}

type closeHold struct {
	closing chan struct{} // a value when Close is called
	release chan struct{} // closed by let: Close goes on
	once    sync.Once
}

func (h *closeHold) let() { h.once.Do(func() { close(h.release) }) }

// next makes the hold of the workers spawned from now on.
func (s *heldSpawner) next() *closeHold {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold = &closeHold{closing: make(chan struct{}, 1), release: make(chan struct{})}
	return s.hold
}

func (s *heldSpawner) SpawnWorker(req SpawnRequest) (Worker, error) {
	w, err := s.fakeSpawner.SpawnWorker(req)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return heldWorker{w, s.hold}, nil
}

type heldWorker struct {
	Worker
	hold *closeHold
}

func (w heldWorker) Close(r workers.Reason) workers.CloseResult {
	select {
	case w.hold.closing <- struct{}{}:
	default: // told already
	}
	<-w.hold.release
	return w.Worker.Close(r)
}
