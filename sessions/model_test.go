package sessions

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/workers"
)

// checkInvariants asserts, between two operations, what must always hold.
// What it reads under the registry's lock it judges there but reports after
// unlocking: t.Fatalf under the lock would leave it held for the cleanup's
// Shutdown, and the test would hang instead of failing.
func checkInvariants(t *testing.T, h *harness, ended map[string]bool, step int, op string) {
	t.Helper()
	liveWorkers, bad := lockedInvariants(h.r)
	if bad != "" {
		t.Fatalf("step %d (%s): %s", step, op, bad)
	}
	for _, w := range h.sp.workers() {
		if !w.Closing() && !liveWorkers[w.pid] {
			t.Fatalf("step %d (%s): worker %d alive but owned by no attached session", step, op, w.pid)
		}
	}
	counts := map[string]int{}
	for _, rec := range h.logs.Records("session closed") {
		counts[rec["sid"].(string)]++
	}
	for sid, n := range counts {
		if n != 1 {
			t.Fatalf("step %d (%s): %d close records for %s", step, op, n, sid)
		}
		ended[sid] = true
	}
}

// lockedInvariants checks, holding r.mu, what the registry's own state must
// hold, and returns the pids of the live workers of sessions and the first
// broken invariant ("" if none).
func lockedInvariants(r *Registry) (liveWorkers map[int]bool, bad string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	liveWorkers = map[int]bool{}
	for id, s := range r.sessions {
		if s.worker != nil {
			if s.state != StateAttached && s.state != StateCreated {
				return nil, fmt.Sprintf("session %s is %s but holds worker %d", id, s.state, s.worker.PID())
			}
			if !s.worker.Closing() {
				liveWorkers[s.worker.PID()] = true
			}
		}
		if s.state == StateAttached && len(s.viewers) == 0 {
			return nil, fmt.Sprintf("session %s attached without viewers", id)
		}
		for v := range s.viewers {
			if _, ok := r.viewers.byViewer[v][s]; !ok {
				return nil, fmt.Sprintf("viewer index out of step for %s", id)
			}
		}
	}
	for v, set := range r.viewers.byViewer {
		if len(set) > r.cfg.MaxViewed {
			return nil, fmt.Sprintf("a viewer views %d sessions, over the cap %d", len(set), r.cfg.MaxViewed)
		}
		for s := range set {
			if _, ok := s.viewers[v]; !ok {
				return nil, "viewing index names a session that does not count the viewer"
			}
		}
	}
	return liveWorkers, ""
}

func TestRandomizedModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("DASHGATE_MODEL_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	steps := 10000
	if testing.Short() {
		steps = 2000
	}
	t.Logf("seed %d (set DASHGATE_MODEL_SEED to replay)", seed)
	synctest.Test(t, func(t *testing.T) { runModel(t, seed, steps) })
}

// runModel runs steps seeded random operations on a registry over fake
// workers, checking the invariants after each. It runs in a synctest
// bubble: "advance" moves the bubble's clock.
func runModel(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	h := newHarness(t, func(c *Config) { c.MaxSessions = 20; c.DetachedTTL = 30 * time.Second; c.MaxViewed = 8 })
	viewers := make([]*recViewer, 5)
	for i := range viewers {
		viewers[i] = &recViewer{}
	}
	var sids []string
	ended := map[string]bool{}
	pickSid := func() string {
		if len(sids) == 0 || rng.IntN(20) == 0 {
			return "unknown"
		}
		return sids[rng.IntN(len(sids))]
	}
	ctx := t.Context()
	for step := range steps {
		v := viewers[rng.IntN(len(viewers))]
		var op string
		switch rng.IntN(11) {
		case 0:
			op = "create"
			if in, err := h.r.Create(v, NewSession{Title: "", CloseOnDisconnect: rng.IntN(4) == 0}); err == nil {
				sids = append(sids, in.ID)
			}
		case 1:
			op = "resume"
			h.r.Resume(v, pickSid())
		case 2:
			op = "detach"
			h.r.DetachViewer(v, workers.ReasonDetach)
		case 3:
			op = "close"
			h.r.Close(anon, pickSid(), EndClientClose)
		case 4:
			op = "slash"
			h.r.Exec(ctx, v, pickSid(), "/echo")
		case 5:
			op = "prompt"
			if _, start, err := h.r.Prompt(v, pickSid(), "hi"); err == nil {
				start()
			}
		case 6:
			op = "interrupt"
			h.r.Interrupt(v, pickSid())
		case 7:
			op = "advance"
			h.advance(time.Duration(rng.IntN(40)) * time.Second)
		case 8:
			op = "admin reap"
			h.r.Close(anon, pickSid(), EndAdminReap)
		case 9:
			op = "crash"
			if ws := h.sp.workers(); len(ws) > 0 {
				ws[rng.IntN(len(ws))].crash()
			}
		case 10:
			op = "sweep"
			if rng.IntN(3) == 0 {
				h.loseTimers()
			}
			h.r.Sweep()
		}
		h.r.Wait()
		checkInvariants(t, h, ended, step, op)
	}
	h.r.Shutdown(context.Background())
	h.r.Wait()
	checkInvariants(t, h, ended, steps, "shutdown")
	for _, sid := range sids {
		if !ended[sid] {
			t.Fatalf("session %s never logged its close", sid)
		}
	}
	for _, w := range h.sp.workers() {
		if !w.Closing() {
			t.Fatalf("worker %d alive after shutdown", w.pid)
		}
	}
}

// realHarness runs the registry over real built-in workers: the test binary
// re-executed (see TestMain).
func realHarness(t *testing.T, grace time.Duration) (*harness, *workers.Manager) {
	t.Helper()
	return realHarnessWith(t, grace, nil)
}

// realHarnessWith is realHarness with mod applied to the registry's Config.
func realHarnessWith(t *testing.T, grace time.Duration, mod func(*Config)) (*harness, *workers.Manager) {
	t.Helper()
	return realHarnessOf(t, workers.Config{Grace: grace}, mod)
}

// realHarnessOf is realHarnessWith over a manager of wc (its Log and
// Instance are the harness's), e.g. with a MaxWorkers.
func realHarnessOf(t *testing.T, wc workers.Config, mod func(*Config)) (*harness, *workers.Manager) {
	t.Helper()
	log, lb := testkit.NewLogger()
	wc.Log, wc.Instance = log, "test"
	mgr := workers.NewManager(wc)
	h := &harness{t: t, logs: lb}
	cfg := Config{
		Spawner: ProcSpawner{
			Manager: mgr, WorkerCmd: []string{os.Args[0]}, PTYCmd: []string{"/bin/sh"},
			Env: []string{"DASHGATE_TEST_WORKER=1", "PATH=" + os.Getenv("PATH")},
		},
		Log: log, DetachedTTL: time.Minute, PTYKeepalive: time.Minute,
	}
	if mod != nil {
		mod(&cfg)
	}
	h.r = New(cfg)
	t.Cleanup(func() {
		h.r.Shutdown(context.Background())
		h.r.Wait()
		h.r.FlushStore(context.Background())
		mgr.CloseAll(workers.ReasonShutdown)
		mgr.Wait()
	})
	return h, mgr
}

func TestRealWorkerDetachResume(t *testing.T) {
	h, mgr := realHarness(t, time.Second)
	v := leavingViewer()
	in, _ := h.r.Create(v, NewSession{Title: ""})
	out, err := h.r.Exec(t.Context(), v, in.ID, "/echo hi")
	if err != nil || out != "hi" {
		t.Fatalf("Exec = %q, %v", out, err)
	}
	pid := mgr.Procs()[0].PID()

	// Mid-turn: the worker is streaming a long reply (its first delta has
	// arrived) when the last viewer goes.
	_, start, err := h.r.Prompt(v, in.ID, strings.Repeat("word ", 500))
	if err != nil {
		t.Fatal(err)
	}
	start()
	testkit.WaitFor(t, 5*time.Second, "the reply streaming", func() bool { return len(v.ofType("message.delta")) > 0 })
	v.leave()
	h.r.DetachViewer(v, workers.ReasonDetach)
	h.r.Wait()
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Fatalf("worker %d still exists after detach: kill(0) = %v", pid, err)
	}
	var recs []map[string]any
	for _, rec := range h.logs.Records("worker closed") {
		if rec["worker_pid"] == float64(pid) {
			recs = append(recs, rec)
		}
	}
	if len(recs) != 1 || recs[0]["reason"] != "detach" || recs[0]["sid"] != in.ID || recs[0]["level"] != "INFO" {
		t.Fatalf("worker closed records for %d: %v", pid, recs)
	}

	// Resume on a new viewer: the next command gets a new worker.
	v2 := &recViewer{}
	res, err := h.r.Resume(v2, in.ID)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(res.History); n != 4 || !res.History[3].Interrupted || res.History[3].Role != "assistant" {
		t.Fatalf("history after the detach mid-turn: %+v", res.History)
	}
	if out, err := h.r.Exec(t.Context(), v2, in.ID, "/echo again"); err != nil || out != "again" {
		t.Fatalf("Exec after resume = %q, %v", out, err)
	}
	got, _ := h.r.Get(anon, in.ID)
	if got.WorkerPID == 0 || got.WorkerPID == pid {
		t.Fatalf("resumed session's worker pid = %d (old %d)", got.WorkerPID, pid)
	}
	h.r.Close(anon, in.ID, EndClientClose)
	h.wantOneClose(in.ID, EndClientClose)
	if !testkit.Gone(got.WorkerPID) {
		t.Fatalf("worker %d survived session.close", got.WorkerPID)
	}
}

func TestRealWorkerCrashIsNoticed(t *testing.T) {
	h, _ := realHarness(t, time.Second)
	v := &recViewer{}
	in, _ := h.r.Create(v, NewSession{Title: ""})
	h.r.Exec(t.Context(), v, in.ID, "/echo")
	if _, err := h.r.Exec(t.Context(), v, in.ID, "/exit 3"); err == nil {
		t.Fatal("/exit answered")
	}
	testkit.WaitFor(t, 2*time.Second, "worker.exited", func() bool { return len(v.ofType("worker.exited")) == 1 })
	p := v.ofType("worker.exited")[0].Payload.(map[string]any)
	if p["reason"] != workers.ReasonExited || p["exit_code"] != 3 {
		t.Fatalf("worker.exited payload = %v", p)
	}
	if out, err := h.r.Exec(t.Context(), v, in.ID, "/echo back"); err != nil || out != "back" {
		t.Fatalf("Exec after crash = %q, %v", out, err)
	}
}

func TestRandomizedModelRealWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	h, mgr := realHarness(t, 500*time.Millisecond)
	rng := rand.New(rand.NewPCG(1, 2))
	viewers := []*recViewer{{}, {}, {}}
	var sids []string
	ended := map[string]bool{}
	for step := range 150 {
		v := viewers[rng.IntN(len(viewers))]
		var op string
		pick := func() string {
			if len(sids) == 0 {
				return "none"
			}
			return sids[rng.IntN(len(sids))]
		}
		switch rng.IntN(6) {
		case 0:
			op = "create"
			if in, err := h.r.Create(v, NewSession{Title: ""}); err == nil {
				sids = append(sids, in.ID)
			}
		case 1:
			op = "slash"
			h.r.Exec(t.Context(), v, pick(), "/echo x")
		case 2:
			op = "detach"
			h.r.DetachViewer(v, workers.ReasonDetach)
		case 3:
			op = "resume"
			h.r.Resume(v, pick())
		case 4:
			op = "close"
			h.r.Close(anon, pick(), EndClientClose)
		case 5:
			op = "prompt"
			if _, start, err := h.r.Prompt(v, pick(), "a b c"); err == nil {
				start()
			}
		}
		h.r.Wait()
		// With real workers, "no closed or detached session has a live
		// worker" is checked against the process table.
		live := map[int]bool{}
		for _, in := range h.r.List(anon) {
			if in.WorkerPID != 0 {
				if in.State != StateAttached && in.State != StateCreated {
					t.Fatalf("step %d (%s): %s session holds worker %d", step, op, in.State, in.WorkerPID)
				}
				live[in.WorkerPID] = true
			}
		}
		for _, p := range mgr.Procs() {
			if !p.Closing() && !live[p.PID()] {
				t.Fatalf("step %d (%s): process %d owned by no attached session", step, op, p.PID())
			}
		}
	}
	h.r.Shutdown(context.Background())
	h.r.Wait()
	checkInvariants(t, &harness{t: t, r: h.r, logs: h.logs, sp: &fakeSpawner{}}, ended, 150, "end")
	if n := mgr.Count(); n != 0 {
		t.Fatalf("%d children left after shutdown", n)
	}
}
