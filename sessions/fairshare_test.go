package sessions

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/workers"
)

// TestFairShareEviction: at --max-sessions the session evicted is the
// least recently active detached one of the user most over their fair
// share (MaxSessions over the users with live sessions, the one asking
// counted with the session it asks for), never one of a user at or under
// it, even when that one is the oldest of all (global LRU would take it).
func TestFairShareEviction(t *testing.T) {
	t.Parallel()
	carolUser := Principal{User: "carol"}
	type step struct {
		p        Principal
		detached bool
	}
	tests := []struct {
		name  string
		max   int
		made  []step // in this order: the first is the least recently active
		asker Principal
		evict int // index into made of the session evicted; -1: ErrCapacity, nothing evicted
	}{
		{"alice at her share cannot evict bob's older detached session", 4,
			[]step{{bob, true}, {bob, true}, {alice, false}, {alice, false}}, alice, -1},
		{"alice at her share evicts her own detached session, not bob's older one", 4,
			[]step{{bob, true}, {bob, true}, {alice, true}, {alice, false}}, alice, 2},
		{"bob under his share takes alice's, over hers, not his own older one", 4,
			[]step{{bob, true}, {alice, true}, {alice, true}, {alice, false}}, bob, 1},
		{"a new user takes from the one most over, not from one at the share", 6,
			[]step{{bob, true}, {bob, true}, {alice, true}, {alice, true}, {alice, true}, {carolUser, false}}, carolUser, 2},
		{"the one over has nothing detached: capacity, bob's kept", 4,
			[]step{{bob, true}, {alice, false}, {alice, false}, {alice, false}}, bob, -1},
		{"a tie between the asker and another goes to the asker's own", 4,
			[]step{{bob, true}, {alice, true}, {carolUser, true}, {bob, false}}, alice, 1},
		{"a lone user evicts its own least recently active, as always", 2,
			[]step{{alice, true}, {alice, true}}, alice, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, func(c *Config) { c.MaxSessions = tt.max })
			viewers := map[string]*recViewer{}
			viewer := func(p Principal) *recViewer {
				if viewers[p.User] == nil {
					viewers[p.User] = viewerOf(p)
				}
				return viewers[p.User]
			}
			sids := make([]string, len(tt.made))
			for i, st := range tt.made {
				in, err := h.r.Create(viewer(st.p), NewSession{Title: ""})
				if err != nil {
					t.Fatal(err)
				}
				sids[i] = in.ID
				if st.detached {
					h.r.Leave(viewer(st.p), in.ID)
				}
			}
			_, err := h.r.Create(viewer(tt.asker), NewSession{Title: ""})
			h.r.Wait()
			if tt.evict < 0 {
				if !errors.Is(err, ErrCapacity) || errors.As(err, new(*UserCapacityError)) {
					t.Fatalf("create: %v, want the global ErrCapacity", err)
				}
				if recs := h.logs.Records("session closed"); len(recs) != 0 {
					t.Fatalf("sessions closed: %v", recs)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				h.wantOneClose(sids[tt.evict], EndLRUEvict)
				if rec := h.closedRecords(sids[tt.evict])[0]; rec["user"] != tt.made[tt.evict].p.User {
					t.Fatalf("evicted %v, want a session of %q", rec, tt.made[tt.evict].p.User)
				}
				if recs := h.logs.Records("session closed"); len(recs) != 1 {
					t.Fatalf("sessions closed: %v, want one", recs)
				}
			}
			for i, sid := range sids {
				if _, ok := h.r.Get(tt.made[i].p, sid); !ok && i != tt.evict {
					t.Fatalf("session %d (%s's) is gone", i, tt.made[i].p.User)
				}
			}
		})
	}
}

// workerClosed is the "worker closed" records of pid.
func (h *harness) workerClosed(pid int) []testkit.Record {
	var out []testkit.Record
	for _, rec := range h.logs.Records("worker closed") {
		if rec["worker_pid"] == float64(pid) {
			out = append(out, rec)
		}
	}
	return out
}

// wantReclaimed asserts that the worker pid of owner's session sid was
// reclaimed for forUser: gone, one INFO "worker closed" record saying so,
// its session live with no worker, and the viewer v told (worker.exited).
func (h *harness) wantReclaimed(v *recViewer, sid string, pid int, owner, forUser Principal) {
	h.t.Helper()
	if !testkit.Gone(pid) {
		h.t.Fatalf("reclaimed worker %d still exists", pid)
	}
	recs := h.workerClosed(pid)
	if len(recs) != 1 {
		h.t.Fatalf("worker closed records of %d: %v, want one", pid, recs)
	}
	rec := recs[0]
	if rec["level"] != "INFO" || rec["reason"] != string(ReasonReclaimed) || rec["sid"] != sid ||
		rec["user"] != owner.User || rec["for_user"] != forUser.User || rec["kind"] != string(workers.KindChat) {
		h.t.Fatalf("worker closed record %v, want INFO reason=reclaimed sid=%s user=%s for_user=%s", rec, sid, owner.User, forUser.User)
	}
	in, ok := h.r.Get(owner, sid)
	if !ok || in.WorkerPID != 0 {
		h.t.Fatalf("%s's session after the reclaim: %+v, %v; want it live without a worker", owner.User, in, ok)
	}
	var told []any
	for _, ev := range v.ofType("worker.exited") {
		if ev.SessionID == sid {
			told = append(told, ev.Payload.(map[string]any)["reason"])
		}
	}
	if len(told) != 1 || told[0] != ReasonReclaimed {
		h.t.Fatalf("worker.exited told %s %v, want reclaimed once", owner.User, told)
	}
}

// TestFairShareReclaimsIdleWorker: alice's idle workers (of attached
// sessions) fill --max-workers; bob's /echo still runs: the least recently
// active of alice's idle workers is closed for it (reason reclaimed), her
// session stays and respawns a worker at its next call, and her other
// worker is untouched. Then alice is at her share: bob's next worker
// reclaims his own idle one, not hers.
func TestFairShareReclaimsIdleWorker(t *testing.T) {
	t.Parallel()
	h, _ := realHarnessOf(t, workers.Config{Grace: time.Second, MaxWorkers: 2}, nil)
	ctx := t.Context()
	va, vb := viewerOf(alice), viewerOf(bob)
	var mine [2]Info
	for i := range mine {
		mine[i], _ = h.r.Create(va, NewSession{Title: ""})
		if _, err := h.r.Exec(ctx, va, mine[i].ID, "/echo hi"); err != nil {
			t.Fatal(err)
		}
		mine[i], _ = h.r.Get(alice, mine[i].ID)
	}
	b1, _ := h.r.Create(vb, NewSession{Title: ""})
	if out, err := h.r.Exec(ctx, vb, b1.ID, "/echo bob"); err != nil || out != "bob" {
		t.Fatalf("bob's /echo beside alice's idle workers: %q, %v", out, err)
	}
	h.wantReclaimed(va, mine[0].ID, mine[0].WorkerPID, alice, bob)
	if in, _ := h.r.Get(alice, mine[1].ID); in.WorkerPID != mine[1].WorkerPID {
		t.Fatalf("alice's other worker: pid %d, want %d untouched", in.WorkerPID, mine[1].WorkerPID)
	}
	if recs := h.logs.Records("worker closed"); len(recs) != 1 {
		t.Fatalf("worker closed records %v, want the reclaimed one only", recs)
	}
	h.wantUsage("after the reclaim", map[string]counts{"alice": {2, 1, 0}, "bob": {1, 1, 0}})
	// Alice's history says what happened.
	if hist := h.historyOf(mine[0].ID); hist[len(hist)-1].Text != "worker ended (reclaimed)" {
		t.Fatalf("alice's history ends with %+v", hist[len(hist)-1])
	}

	// One each: bob's second worker would put him over his share.
	b1, _ = h.r.Get(bob, b1.ID)
	b2, _ := h.r.Create(vb, NewSession{Title: ""})
	if out, err := h.r.Exec(ctx, vb, b2.ID, "/echo again"); err != nil || out != "again" {
		t.Fatalf("bob's second /echo: %q, %v", out, err)
	}
	h.wantReclaimed(vb, b1.ID, b1.WorkerPID, bob, bob)
	if in, _ := h.r.Get(alice, mine[1].ID); in.WorkerPID != mine[1].WorkerPID {
		t.Fatalf("alice's worker, at her share: pid %d, want %d untouched", in.WorkerPID, mine[1].WorkerPID)
	}
	h.wantUsage("after bob's own", map[string]counts{"alice": {2, 1, 0}, "bob": {2, 1, 0}})
}

// TestFairShareTerminalReclaimsIdleWorker: bob's terminal at --max-workers
// reclaims an idle worker of alice's, over her share, and leaves her
// terminal alone.
func TestFairShareTerminalReclaimsIdleWorker(t *testing.T) {
	t.Parallel()
	h, _ := realHarnessOf(t, workers.Config{Grace: time.Second, MaxWorkers: 3}, nil)
	ctx := t.Context()
	va := viewerOf(alice)
	var mine [2]Info
	for i := range mine {
		mine[i], _ = h.r.Create(va, NewSession{Title: ""})
		if _, err := h.r.Exec(ctx, va, mine[i].ID, "/echo hi"); err != nil {
			t.Fatal(err)
		}
		mine[i], _ = h.r.Get(alice, mine[i].ID)
	}
	at, err := h.r.AttachTerminal(ctx, alice, "", TerminalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer at.Detach(workers.ReasonDetach)
	bt, err := h.r.AttachTerminal(ctx, bob, "", TerminalOptions{})
	if err != nil {
		t.Fatalf("bob's terminal beside alice's children: %v", err)
	}
	defer bt.Detach(workers.ReasonDetach)
	h.wantReclaimed(va, mine[0].ID, mine[0].WorkerPID, alice, bob)
	in, _ := h.r.Get(alice, at.SessionID)
	if in.PTYPID == 0 || testkit.Gone(in.PTYPID) || len(h.workerClosed(in.PTYPID)) != 0 {
		t.Fatalf("alice's terminal %d was ended for bob's", in.PTYPID)
	}
	h.wantUsage("after the reclaim", map[string]counts{"alice": {3, 1, 1}, "bob": {1, 0, 1}})
}

// TestFairShareNeverCutsARunningTurn: alice, over her share of
// --max-workers, has only busy workers (a streaming turn, a running slash
// command): bob's call gets workers.ErrCapacity (4029), and neither of
// alice's is touched.
func TestFairShareNeverCutsARunningTurn(t *testing.T) {
	t.Parallel()
	h, mgr := realHarnessOf(t, workers.Config{Grace: time.Second, MaxWorkers: 2}, nil)
	ctx := t.Context()
	va, vb := viewerOf(alice), viewerOf(bob)
	turn, _ := h.r.Create(va, NewSession{Title: ""})
	_, start, err := h.r.Prompt(va, turn.ID, strings.Repeat("word ", 500)) // 20 s of streaming
	if err != nil {
		t.Fatal(err)
	}
	start()
	testkit.WaitFor(t, 5*time.Second, "alice's reply streaming", func() bool { return len(va.ofType("message.delta")) > 0 })
	slash, _ := h.r.Create(va, NewSession{Title: ""})
	slept := make(chan error, 1)
	go func() { _, err := h.r.Exec(ctx, va, slash.ID, "/sleep 30"); slept <- err }()
	testkit.WaitFor(t, 5*time.Second, "alice's second worker", func() bool {
		in, _ := h.r.Get(alice, slash.ID)
		return in.WorkerPID != 0 && len(mgr.Procs()) == 2
	})

	b1, _ := h.r.Create(vb, NewSession{Title: ""})
	_, err = h.r.Exec(ctx, vb, b1.ID, "/echo bob")
	if !errors.Is(err, workers.ErrCapacity) || errors.As(err, new(*UserCapacityError)) {
		t.Fatalf("bob at --max-workers with alice's workers busy: %v, want workers.ErrCapacity", err)
	}
	if recs := h.logs.Records("worker closed"); len(recs) != 0 {
		t.Fatalf("a busy worker was closed for bob: %v", recs)
	}
	h.wantUsage("bob refused", map[string]counts{"alice": {2, 2, 0}, "bob": {1, 0, 0}})
	n := len(va.ofType("message.delta"))
	testkit.WaitFor(t, 5*time.Second, "alice's reply still streaming", func() bool { return len(va.ofType("message.delta")) > n })
	select {
	case err := <-slept:
		t.Fatalf("alice's /sleep ended: %v", err)
	default:
	}
	h.r.Close(alice, slash.ID, EndClientClose)
	testkit.Recv(t, 10*time.Second, "alice's /sleep, its session closed", slept)
}

func TestDefaultUserCaps(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                   string
		maxSessions, maxWorker int
		want                   [3]int
	}{
		{"dashgate's defaults", 1000, 64, [3]int{250, 8, 8}},
		{"a small box", 40, 16, [3]int{10, 2, 2}},
		{"never 0, which is no limit", 3, 7, [3]int{1, 1, 1}},
		{"the smallest caps", 1, 1, [3]int{1, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, w, term := DefaultUserCaps(tt.maxSessions, tt.maxWorker)
			if got := [3]int{s, w, term}; got != tt.want {
				t.Fatalf("DefaultUserCaps(%d, %d) = %v, want %v", tt.maxSessions, tt.maxWorker, got, tt.want)
			}
			// Four users at their caps fit the global ones (when those
			// allow one each).
			if tt.maxSessions >= 4 && 4*s > tt.maxSessions || tt.maxWorker >= 8 && 4*(w+term) > tt.maxWorker {
				t.Fatalf("four users at (%d, %d, %d) pass the global caps", s, w, term)
			}
		})
	}
}
