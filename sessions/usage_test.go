package sessions

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/workers"
)

var (
	alice = Principal{User: "alice"}
	bob   = Principal{User: "bob"}
	carol = Principal{User: "carol", Admin: true} // an admin user (--admin-users)
)

// viewerOf is a viewer (one that can leave) acting for p.
func viewerOf(p Principal) *recViewer {
	v := leavingViewer()
	v.p = p
	return v
}

// counts is one user's figures in the usage index: sessions, workers,
// terminals.
type counts [3]int

// usageNow is the usage index, user by user.
func (h *harness) usageNow() map[string]counts {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	scan := 0
	for _, s := range h.r.sessions {
		if s.live() {
			scan++
		}
	}
	if h.r.usage.live != scan {
		h.t.Fatalf("the usage index counts %d live sessions, the registry holds %d", h.r.usage.live, scan)
	}
	out := map[string]counts{}
	for user, u := range h.r.usage.byUser {
		out[user] = counts{len(u.sessions), len(u.children[kindWorker]), len(u.children[kindTerminal])}
	}
	return out
}

// wantUsage asserts the usage index holds exactly want (users with
// nothing live are absent), and that UsersSummary says the same.
func (h *harness) wantUsage(what string, want map[string]counts) {
	h.t.Helper()
	got := h.usageNow()
	if len(want) == 0 && len(got) == 0 {
		if sum := h.r.Admin().UsersSummary(); len(sum) != 0 {
			h.t.Fatalf("%s: UsersSummary %+v, want none", what, sum)
		}
		return
	}
	if len(got) != len(want) {
		h.t.Fatalf("%s: usage %v, want %v", what, got, want)
	}
	for u, c := range want {
		if got[u] != c {
			h.t.Fatalf("%s: usage %v, want %v", what, got, want)
		}
	}
	for _, s := range h.r.Admin().UsersSummary() {
		if c := want[s.User]; (counts{s.Sessions, s.Workers, s.Terminals}) != c {
			h.t.Fatalf("%s: UsersSummary row %+v, want %v", what, s, c)
		}
	}
}

// wantUserCap asserts err is the per-user cap of limit at max.
func wantUserCap(t *testing.T, what string, err error, limit string, max int) {
	t.Helper()
	var uc *UserCapacityError
	if !errors.As(err, &uc) || uc.Limit != limit || uc.Max != max || !errors.Is(err, ErrCapacity) {
		t.Fatalf("%s: %v, want the per-user cap %s (%d) matching ErrCapacity", what, err, limit, max)
	}
	want := fmt.Sprintf("user capacity reached: %s (%d)", limit, max)
	if err.Error() != want {
		t.Fatalf("%s: message %q, want %q", what, err.Error(), want)
	}
}

func TestUserCapSessions(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.MaxSessionsPerUser = 2; c.MaxSessions = 4 })
	va, vb := viewerOf(alice), viewerOf(bob)
	for range 2 {
		if _, err := h.r.Create(va, NewSession{Title: ""}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := h.r.Create(va, NewSession{Title: ""})
	wantUserCap(t, "alice's third session", err, LimitSessionsPerUser, 2)
	// A terminal-only session is a session too.
	if _, err := h.r.AttachTerminal(t.Context(), alice, "", TerminalOptions{}); !errors.As(err, new(*UserCapacityError)) {
		t.Fatalf("alice's terminal-only session at the cap: %v", err)
	}
	// bob is not alice.
	for range 2 {
		if _, err := h.r.Create(vb, NewSession{Title: ""}); err != nil {
			t.Fatalf("bob beside alice at her cap: %v", err)
		}
	}
	h.wantUsage("two each", map[string]counts{"alice": {2, 0, 0}, "bob": {2, 0, 0}})
	// The global cap still applies: carol (an admin, under her own cap) finds
	// MaxSessions live and none detached.
	_, err = h.r.Create(viewerOf(carol), NewSession{Title: ""})
	if !errors.Is(err, ErrCapacity) || errors.As(err, new(*UserCapacityError)) {
		t.Fatalf("at --max-sessions: %v, want the global ErrCapacity", err)
	}
}

// TestUserCapEvictsOwnLRU: at the per-user cap a create evicts the
// owner's least recently active detached session (lru_evict), never
// another user's older one; with none of its own detached it fails; a
// reopen is held to the cap the same way.
func TestUserCapEvictsOwnLRU(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.MaxSessionsPerUser = 2 })
	vb, va := viewerOf(bob), viewerOf(alice)
	old, _ := h.r.Create(vb, NewSession{Title: ""})
	h.r.Leave(vb, old.ID) // bob's: detached, the oldest of all
	a1, _ := h.r.Create(va, NewSession{Title: ""})
	h.r.Leave(va, a1.ID)
	a2, _ := h.r.Create(va, NewSession{Title: ""})
	a3, err := h.r.Create(va, NewSession{Title: ""})
	if err != nil {
		t.Fatal(err)
	}
	h.wantOneClose(a1.ID, EndLRUEvict)
	if _, ok := h.r.Get(bob, old.ID); !ok {
		t.Fatal("bob's detached session was evicted for alice")
	}
	_, err = h.r.Create(va, NewSession{Title: ""})
	wantUserCap(t, "alice with none detached", err, LimitSessionsPerUser, 2)

	if _, err := h.r.Close(alice, a3.ID, EndClientClose); err != nil {
		t.Fatal(err)
	}
	if _, err := h.r.Create(va, NewSession{Title: ""}); err != nil {
		t.Fatal(err)
	}
	_, err = h.r.Reopen(t.Context(), va, a3.ID)
	wantUserCap(t, "reopen at the cap", err, LimitSessionsPerUser, 2)
	h.wantUsage("after", map[string]counts{"alice": {2, 0, 0}, "bob": {1, 0, 0}})
	_ = a2
}

func TestUserCapWorkers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.MaxWorkersPerUser = 1 })
	h.sp.maxLive = 3 // --max-workers
	va, vb := viewerOf(alice), viewerOf(bob)
	a1, _ := h.r.Create(va, NewSession{Title: ""})
	a2, _ := h.r.Create(va, NewSession{Title: ""})
	if _, err := h.r.Exec(t.Context(), va, a1.ID, "/x"); err != nil {
		t.Fatal(err)
	}
	_, err := h.r.Exec(t.Context(), va, a2.ID, "/x")
	wantUserCap(t, "alice's second worker", err, LimitWorkersPerUser, 1)
	if n := len(h.sp.workers()); n != 1 {
		t.Fatalf("%d spawns, want 1: the refused call must not spawn", n)
	}
	b1, _ := h.r.Create(vb, NewSession{Title: ""})
	b2, _ := h.r.Create(vb, NewSession{Title: ""})
	if _, err := h.r.Exec(t.Context(), vb, b1.ID, "/x"); err != nil {
		t.Fatalf("bob beside alice at her cap: %v", err)
	}
	h.wantUsage("one each", map[string]counts{"alice": {2, 1, 0}, "bob": {2, 1, 0}})
	// alice's worker crashes: her slot is free at once.
	h.sp.workers()[0].crash()
	if _, err := h.r.Exec(t.Context(), va, a2.ID, "/x"); err != nil {
		t.Fatalf("after her worker's crash: %v", err)
	}
	// The global cap still applies (3 live: alice's, bob's, and one more).
	c1, _ := h.r.Create(viewerOf(carol), NewSession{Title: ""})
	if _, err := h.r.Exec(t.Context(), viewerOf(carol), c1.ID, "/x"); err != nil {
		t.Fatal(err)
	}
	vd := viewerOf(Principal{User: "dave"})
	d1, _ := h.r.Create(vd, NewSession{Title: ""})
	_, err = h.r.Exec(t.Context(), vd, d1.ID, "/x")
	if !errors.Is(err, workers.ErrCapacity) || errors.As(err, new(*UserCapacityError)) {
		t.Fatalf("at --max-workers: %v, want workers.ErrCapacity", err)
	}
	// ... and its refusal gave dave's slot back.
	h.wantUsage("at the global cap", map[string]counts{"alice": {2, 1, 0}, "bob": {2, 1, 0}, "carol": {1, 1, 0}, "dave": {1, 0, 0}})
	_ = b2
}

func TestUserCapTerminals(t *testing.T) {
	t.Parallel()
	h := termHarness(t, 0, func(c *Config) { c.MaxTerminalsPerUser = 1 })
	a, err := h.r.AttachTerminal(t.Context(), alice, "", TerminalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Detach(workers.ReasonDetach)
	_, err = h.r.AttachTerminal(t.Context(), alice, "", TerminalOptions{})
	wantUserCap(t, "alice's second terminal", err, LimitTerminalsPerUser, 1)
	if recs := h.logs.Records("session closed"); len(recs) != 0 {
		t.Fatalf("the refused attach made (and closed) a session: %v", recs)
	}
	va := viewerOf(alice)
	in, _ := h.r.Create(va, NewSession{Title: ""})
	_, err = h.r.AttachTerminal(t.Context(), alice, in.ID, TerminalOptions{})
	wantUserCap(t, "a terminal for her chat session", err, LimitTerminalsPerUser, 1)
	if n := len(h.sp.terminals()); n != 1 {
		t.Fatalf("%d programs started, want 1", n)
	}
	b, err := h.r.AttachTerminal(t.Context(), bob, "", TerminalOptions{})
	if err != nil {
		t.Fatalf("bob beside alice at her cap: %v", err)
	}
	defer b.Detach(workers.ReasonDetach)
	// The refused terminal-only attach made no session of alice's.
	h.wantUsage("one each", map[string]counts{"alice": {2, 0, 1}, "bob": {1, 0, 1}})
	// The global cap still applies.
	h.sp.mu.Lock()
	h.sp.maxLive = 2
	h.sp.mu.Unlock()
	if _, err := h.r.AttachTerminal(t.Context(), carol, "", TerminalOptions{}); !errors.Is(err, workers.ErrCapacity) {
		t.Fatalf("at --max-workers: %v, want workers.ErrCapacity", err)
	}
	h.wantUsage("the failed spawn left nothing of carol's", map[string]counts{"alice": {2, 0, 1}, "bob": {1, 0, 1}})
}

// TestUserCapKeepsTheSpare: an attach the per-user cap refuses neither
// takes nor ends a spare (it counts for nobody before it is attached); the
// next user's attach gets it, counted for that user, its close record
// naming them; a spare never attached names no one.
func TestUserCapKeepsTheSpare(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := termHarness(t, 5, func(c *Config) { c.PTYSpare = true; c.MaxTerminalsPerUser = 1 })
		a1 := h.attachFirst(TerminalOptions{}) // anon's; the spares start after its first output
		defer a1.Detach(workers.ReasonDetach)
		spares := h.sparesOf(spareCount, a1)
		h.wantUsage("spares count for no one", map[string]counts{"": {1, 0, 1}})
		for _, sp := range spares {
			if sp.req.Owner != "" {
				t.Fatalf("spare spawned for %q", sp.req.Owner)
			}
		}
		a, err := h.r.AttachTerminal(t.Context(), alice, "", TerminalOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Detach(workers.ReasonDetach)
		if !slices.ContainsFunc(spares, func(p *fakePTY) bool { return p.pid == a.PID() }) {
			t.Fatalf("alice's terminal %d is not a spare", a.PID())
		}
		for _, p := range spares {
			if p.pid == a.PID() {
				if u, _ := p.attr("user"); u != "alice" {
					t.Fatalf("the spare's close record names user %v, want alice", u)
				}
			}
		}
		if _, err := a.Next(t.Context(), make([]byte, 64)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		left := h.sparesOf(spareCount, a1, a) // refilled after her first output
		if _, err := h.r.AttachTerminal(t.Context(), alice, "", TerminalOptions{}); !errors.As(err, new(*UserCapacityError)) {
			t.Fatalf("alice's second terminal: %v", err)
		}
		synctest.Wait()
		if got := h.sparesOf(spareCount, a1, a); !slices.Equal(got, left) {
			t.Fatal("the refused attach consumed a spare")
		}
		// Past the first check (two attaches at once): the spare taken is
		// given back, first in line again.
		sp := h.r.spares.take(TerminalOptions{})
		if _, ok, err := h.r.attachSpare(t.Context(), alice, sp, TerminalOptions{}); !ok || !errors.As(err, new(*UserCapacityError)) {
			t.Fatalf("attachSpare at the cap: %v, %v", ok, err)
		}
		synctest.Wait()
		h.r.mu.Lock()
		first := h.r.spares.list[0]
		h.r.mu.Unlock()
		if got := h.sparesOf(spareCount, a1, a); first != sp || !slices.Equal(got, left) {
			t.Fatal("the spare refused by the cap was not given back")
		}
		h.wantUsage("alice's spare", map[string]counts{"": {1, 0, 1}, "alice": {1, 0, 1}})
		// Shutdown ends the unused spares: they name no one.
		h.r.Shutdown(context.Background())
		h.r.Wait()
		for _, p := range left {
			if u, ok := p.attr("user"); ok && u != "" {
				t.Fatalf("an unused spare names user %v", u)
			}
		}
		h.wantUsage("after shutdown", nil)
	})
}

// A spare refused by a cap is not given back once the spares were ended
// meanwhile (here idle): nothing would end it then.
func TestUserCapEndsSpareEndedMeanwhile(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := termHarness(t, 5, func(c *Config) { c.PTYSpare = true; c.MaxTerminalsPerUser = 1 })
		a1 := h.attachFirst(TerminalOptions{})
		defer a1.Detach(workers.ReasonDetach)
		a, err := h.r.AttachTerminal(t.Context(), alice, "", TerminalOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Detach(workers.ReasonDetach)
		if _, err := a.Next(t.Context(), make([]byte, 64)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		sp := h.r.spares.take(TerminalOptions{})
		if sp == nil {
			t.Fatal("no spare after alice's first output")
		}
		h.r.spares.expire()
		if _, ok, err := h.r.attachSpare(t.Context(), alice, sp, TerminalOptions{}); !ok || !errors.As(err, new(*UserCapacityError)) {
			t.Fatalf("attachSpare at the cap: %v, %v", ok, err)
		}
		synctest.Wait()
		h.r.mu.Lock()
		n := len(h.r.spares.list)
		h.r.mu.Unlock()
		if n != 0 {
			t.Fatalf("%d spares after they were ended idle, want 0 (the refused one given back)", n)
		}
		h.sparesOf(0, a1, a)
	})
}

// TestUsageBackToZero drives every way a session, a worker or a terminal
// ends and checks that each user's counts follow and end at zero.
func TestUsageBackToZero(t *testing.T) {
	t.Parallel()
	h := termHarness(t, 0, func(c *Config) {
		c.MaxSessionsPerUser, c.MaxWorkersPerUser, c.MaxTerminalsPerUser = 3, 2, 2
	})
	va := viewerOf(alice)
	ctx := t.Context()

	// client close of a session with a worker and a terminal
	s1, _ := h.r.Create(va, NewSession{Title: ""})
	h.r.Exec(ctx, va, s1.ID, "/x")
	t1, err := h.r.AttachTerminal(ctx, alice, s1.ID, TerminalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.wantUsage("s1 with both", map[string]counts{"alice": {1, 1, 1}})
	h.r.Close(alice, s1.ID, EndClientClose)
	t1.Detach(workers.ReasonDetach)
	h.r.Wait()
	h.wantUsage("s1 closed", nil)

	// a crash, a respawn, a detach (the worker closed), a resume, a spawn
	// the worker cap (global) refuses, an admin reap of the worker
	s2, _ := h.r.Create(va, NewSession{Title: ""})
	h.r.Exec(ctx, va, s2.ID, "/x")
	h.sp.workers()[len(h.sp.workers())-1].crash()
	h.wantUsage("crashed", map[string]counts{"alice": {1, 0, 0}})
	h.r.Exec(ctx, va, s2.ID, "/x")
	h.r.Leave(va, s2.ID)
	h.r.Wait()
	h.wantUsage("detached", map[string]counts{"alice": {1, 0, 0}})
	h.r.Resume(va, s2.ID)
	h.r.Exec(ctx, va, s2.ID, "/x")
	h.sp.mu.Lock()
	h.sp.maxLive = 1 // the next spawn fails: one child is live
	h.sp.mu.Unlock()
	s3, _ := h.r.Create(va, NewSession{Title: ""})
	if _, err := h.r.Exec(ctx, va, s3.ID, "/x"); !errors.Is(err, workers.ErrCapacity) {
		t.Fatalf("spawn at capacity: %v", err)
	}
	h.sp.mu.Lock()
	h.sp.maxLive = 0
	h.sp.mu.Unlock()
	h.wantUsage("failed spawn", map[string]counts{"alice": {2, 1, 0}})
	w, _ := h.r.Get(alice, s2.ID)
	if err := h.r.ReapWorker(carol, w.WorkerPID); err != nil {
		t.Fatal(err)
	}
	h.wantUsage("worker reaped", map[string]counts{"alice": {2, 0, 0}})

	// a spawn racing a detach: the worker arrives for a detached session
	gate := make(chan struct{})
	h.sp.mu.Lock()
	h.sp.gate, h.sp.entered = gate, make(chan struct{}, 1)
	h.sp.mu.Unlock()
	errc := make(chan error, 1)
	go func() { _, err := h.r.Exec(ctx, va, s3.ID, "/x"); errc <- err }()
	<-h.sp.entered
	h.wantUsage("a spawn in progress counts", map[string]counts{"alice": {2, 1, 0}})
	h.r.Leave(va, s3.ID)
	close(gate)
	if err := <-errc; !errors.Is(err, ErrNotFound) {
		t.Fatalf("spawn raced with detach: %v", err)
	}
	h.sp.mu.Lock()
	h.sp.gate, h.sp.entered = nil, nil
	h.sp.mu.Unlock()
	h.r.Wait()
	h.wantUsage("race lost", map[string]counts{"alice": {2, 0, 0}})

	// a terminal-only session whose program exits, one reaped by an admin,
	// a chat session's terminal reaped, an admin's reap of detached ones
	t2, _ := h.r.AttachTerminal(ctx, alice, "", TerminalOptions{})
	ptyOf := func(pid int) *fakePTY {
		for _, p := range h.sp.terminals() {
			if p.pid == pid {
				return p
			}
		}
		t.Fatalf("no fake pty %d", pid)
		return nil
	}
	ptyOf(t2.PID()).exit(0)
	t2.Detach(workers.ReasonExited)
	h.r.Wait()
	h.wantUsage("pty exited", map[string]counts{"alice": {2, 0, 0}})
	t3, _ := h.r.AttachTerminal(ctx, alice, "", TerminalOptions{})
	t4, err := h.r.AttachTerminal(ctx, alice, s2.ID, TerminalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.wantUsage("two terminals", map[string]counts{"alice": {3, 0, 2}})
	if err := h.r.ReapWorker(AdminPrincipal, t3.PID()); err != nil {
		t.Fatal(err)
	}
	if err := h.r.ReapWorker(carol, t4.PID()); err != nil {
		t.Fatal(err)
	}
	t3.Detach(workers.ReasonDetach)
	t4.Detach(workers.ReasonDetach)
	h.r.Wait()
	h.wantUsage("terminals reaped", map[string]counts{"alice": {2, 0, 0}})
	h.r.Leave(va, s2.ID)
	if n := h.r.ReapDetached(carol); n != 2 {
		t.Fatalf("ReapDetached ended %d, want 2", n)
	}
	h.r.Wait()
	h.wantUsage("reaped", nil)

	// shutdown with everything running, for two users
	vb := viewerOf(bob)
	for _, v := range []*recViewer{va, vb} {
		in, _ := h.r.Create(v, NewSession{Title: ""})
		h.r.Exec(ctx, v, in.ID, "/x")
		if _, err := h.r.AttachTerminal(ctx, v.p, in.ID, TerminalOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	h.wantUsage("before shutdown", map[string]counts{"alice": {1, 1, 1}, "bob": {1, 1, 1}})
	h.r.Shutdown(context.Background())
	h.r.Wait()
	h.wantUsage("after shutdown", nil)
}

// TestUserAndByOnRecords, over real children: every session and worker
// record names its owner (user); a close an admin caused names the admin
// (by=, "admin-token" for the admin token's principal) and an owner's own
// close has no by; a worker killed with SIGKILL frees its owner's slot.
func TestUserAndByOnRecords(t *testing.T) {
	h, _ := realHarnessWith(t, time.Second, func(c *Config) { c.MaxWorkersPerUser = 1 })
	ctx := t.Context()
	va := viewerOf(alice)
	in, _ := h.r.Create(va, NewSession{Title: ""})
	if _, err := h.r.Exec(ctx, va, in.ID, "/echo hi"); err != nil {
		t.Fatal(err)
	}
	workerRecord := func(pid int) map[string]any {
		t.Helper()
		var out map[string]any
		testkit.WaitFor(t, 5*time.Second, "the worker closed record", func() bool {
			for _, rec := range h.logs.Records("worker closed") {
				if rec["worker_pid"] == float64(pid) {
					out = rec
					return true
				}
			}
			return false
		})
		return out
	}
	info, _ := h.r.Get(alice, in.ID)
	if err := syscall.Kill(info.WorkerPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if rec := workerRecord(info.WorkerPID); rec["user"] != "alice" || rec["by"] != nil {
		t.Fatalf("a crashed worker's record: %v", rec)
	}
	testkit.WaitFor(t, 5*time.Second, "the slot of the killed worker freed", func() bool {
		return h.usageNow()["alice"] == counts{1, 0, 0}
	})
	if _, err := h.r.Exec(ctx, va, in.ID, "/echo again"); err != nil {
		t.Fatalf("after the crash: %v", err)
	}
	info, _ = h.r.Get(alice, in.ID)
	if err := h.r.ReapWorker(carol, info.WorkerPID); err != nil {
		t.Fatal(err)
	}
	if rec := workerRecord(info.WorkerPID); rec["user"] != "alice" || rec["by"] != "carol" || rec["reason"] != "admin_reap" {
		t.Fatalf("a reaped worker's record: %v", rec)
	}

	// A terminal's record names its owner.
	a, err := h.r.AttachTerminal(ctx, alice, in.ID, TerminalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pty := a.PID()
	a.Detach(workers.ReasonDetach)
	h.r.Wait()
	if rec := workerRecord(pty); rec["user"] != "alice" || rec["kind"] != "pty" {
		t.Fatalf("a terminal's record: %v", rec)
	}

	// An admin's close: by=; the admin token's: by=admin-token; the owner's: none.
	closes := []struct {
		name string
		by   Principal
		want any
	}{
		{"admin user", carol, "carol"},
		{"admin token", AdminPrincipal, "admin-token"},
		{"owner", alice, nil},
		{"admin user's own", carol, nil},
	}
	for _, c := range closes {
		v := va
		if c.name == "admin user's own" {
			v = viewerOf(carol)
		}
		s, _ := h.r.Create(v, NewSession{Title: ""})
		if _, err := h.r.Exec(ctx, v, s.ID, "/echo hi"); err != nil {
			t.Fatal(err)
		}
		w, _ := h.r.Get(v.p, s.ID)
		if ok, err := h.r.Admin().Close(c.by, s.ID, EndAdminReap); !ok || err != nil {
			t.Fatalf("%s: Close = %v, %v", c.name, ok, err)
		}
		h.wantOneClose(s.ID, EndAdminReap)
		rec := h.closedRecords(s.ID)[0]
		if rec["user"] != v.p.User || rec["by"] != c.want {
			t.Fatalf("%s: session closed record %v, want user=%s by=%v", c.name, rec, v.p.User, c.want)
		}
		if wr := workerRecord(w.WorkerPID); wr["by"] != c.want || wr["user"] != v.p.User {
			t.Fatalf("%s: its worker's record %v, want by=%v", c.name, wr, c.want)
		}
	}

	// An admin's reap of detached sessions names the admin.
	h.r.Leave(va, in.ID)
	h.r.Wait()
	if n := h.r.Admin().ReapDetached(AdminPrincipal); n != 1 {
		t.Fatalf("ReapDetached = %d", n)
	}
	h.wantOneClose(in.ID, EndAdminReap)
	if rec := h.closedRecords(in.ID)[0]; rec["by"] != "admin-token" || rec["user"] != "alice" {
		t.Fatalf("reaped detached session's record: %v", rec)
	}
	h.wantUsage("all closed", nil)
}

// TestRestoreBeyondUserCap: a restore keeps at most MaxSessionsPerUser of
// one owner's stored sessions (its most recently active) and stores the
// others as closed (lru_evict); another owner's are kept.
func TestRestoreBeyondUserCap(t *testing.T) {
	t.Parallel()
	st := store.NewMemory()
	base := time.Now().Add(-time.Hour)
	var b store.Batch
	for i, owner := range []string{"alice", "alice", "alice", "bob"} {
		b.Sessions = append(b.Sessions, store.Session{ID: fmt.Sprintf("s%d", i), Owner: owner, State: store.StateSuspended,
			CreatedAt: base, LastActive: base.Add(time.Duration(i) * time.Minute)})
	}
	st.Apply(t.Context(), b)
	h := newHarness(t, func(c *Config) { c.Store = st; c.MaxSessionsPerUser = 2 })
	if n, _ := h.r.Claim(t.Context(), "n", time.Hour); n != 3 {
		t.Fatalf("restored %d, want 3", n)
	}
	if _, ok := h.r.Get(alice, "s0"); ok {
		t.Fatal("alice's least recently active session was restored beyond her cap")
	}
	h.wantUsage("restored", map[string]counts{"alice": {2, 0, 0}, "bob": {1, 0, 0}})
	h.r.journal.flush(t.Context())
	closed, _, _ := st.Closed(t.Context(), store.ListQuery{Owner: "alice"})
	if len(closed) != 1 || closed[0].ID != "s0" || closed[0].EndReason != string(EndLRUEvict) {
		t.Fatalf("alice's closed after the restore: %+v", closed)
	}
}
