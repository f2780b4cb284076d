package sessions

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
)

// clusterPair is two real registries (real workers) on one SQLite file
// sharing a MemoryBus, claimed as nodes "a" and "b", both running.
func clusterPair(t *testing.T) (a, b *harness) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dashgate.db")
	bus := &MemoryBus{}
	a, _ = realHarnessWith(t, time.Second, func(c *Config) { c.Store = openShared(t, path); c.Changes = bus })
	b, _ = realHarnessWith(t, time.Second, func(c *Config) { c.Store = openShared(t, path); c.Changes = bus })
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for node, h := range map[string]*harness{"a": a, "b": b} {
		if _, err := h.r.Claim(t.Context(), node, time.Hour); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { h.r.Run(ctx) })
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	testkit.WaitFor(t, 5*time.Second, "both registries subscribed", func() bool {
		bus.mu.Lock()
		defer bus.mu.Unlock()
		return len(bus.subs) == 2
	})
	return a, b
}

// recordWith waits for h's record msg whose key is val.
func recordWith(t *testing.T, h *harness, msg, key string, val any) map[string]any {
	t.Helper()
	var out map[string]any
	testkit.WaitFor(t, 10*time.Second, msg+" "+key, func() bool {
		for _, rec := range h.logs.Records(msg) {
			if rec[key] == val {
				out = rec
				return true
			}
		}
		return false
	})
	return out
}

// TestRemoteReap: an admin on node b forwards the reap of node a's worker
// and of a's session over the bus; a reaps them with the records of a
// local admin reap (by= the admin) and one "remote reap" record each; a
// reap naming another node's pid, or a session a does not hold, is
// ignored with a DEBUG record. b lists a's sessions (Elsewhere) with
// their node.
func TestRemoteReap(t *testing.T) {
	t.Parallel()
	a, b := clusterPair(t)
	ctx := t.Context()
	va := viewerOf(alice)
	in, _ := a.r.Create(va, NewSession{Title: "on a"})
	if _, err := a.r.Exec(ctx, va, in.ID, "/echo hi"); err != nil {
		t.Fatal(err)
	}
	info, _ := a.r.Get(alice, in.ID)
	pid := info.WorkerPID

	if a.r.Admin().Node() != "a" || b.r.Admin().Node() != "b" {
		t.Fatalf("nodes %q, %q", a.r.Admin().Node(), b.r.Admin().Node())
	}
	a.r.FlushStore(ctx)
	a.r.lease.renew(ctx) // its lease in the store, as Run renews it
	others, err := b.r.Admin().Elsewhere(ctx, time.Now())
	if err != nil || len(others) != 1 || others[0].Node != "a" || others[0].ID != in.ID || others[0].Owner != "alice" || others[0].Title != "on a" {
		t.Fatalf("b's Elsewhere = %+v, %v; want a's session %s", others, err, in.ID)
	}
	if mine, err := a.r.Admin().Elsewhere(ctx, time.Now()); err != nil || len(mine) != 0 {
		t.Fatalf("a's Elsewhere = %+v, %v; want none (its own are not elsewhere)", mine, err)
	}

	// Ignored: a pid of node c, a session a does not hold.
	if err := b.r.Admin().ForwardReap(carol, RemoteReap{Node: "c", PID: pid}); err != nil {
		t.Fatal(err)
	}
	if err := b.r.Admin().ForwardReap(carol, RemoteReap{Node: "a", SessionID: "0000000000000000deadbeef"}); err != nil {
		t.Fatal(err)
	}
	// The worker, by the admin token.
	if err := b.r.Admin().ForwardReap(AdminPrincipal, RemoteReap{Node: "a", PID: pid}); err != nil {
		t.Fatal(err)
	}
	rec := recordWith(t, a, "worker closed", "worker_pid", float64(pid))
	if rec["by"] != "admin-token" || rec["reason"] != "admin_reap" || rec["user"] != "alice" {
		t.Fatalf("a's worker closed record %v; want by=admin-token reason=admin_reap", rec)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("kill(%d, 0) = %v after the remote reap; want ESRCH", pid, err)
	}
	if rec := recordWith(t, a, "remote reap", "target", "worker "+strconv.Itoa(pid)); rec["by"] != "admin-token" || rec["from_node"] != "b" || rec["node"] != "a" || rec["level"] != "INFO" {
		t.Fatalf("a's remote reap record %v", rec)
	}
	// The two before it were handled first (the bus is in order): ignored.
	if got := a.logs.Records("remote reap not for this node"); len(got) != 2 || got[0]["level"] != "DEBUG" {
		t.Fatalf("ignored remote reaps: %v; want two DEBUG records", got)
	}
	if in2, _ := a.r.Get(alice, in.ID); in2.State == "" || in2.WorkerPID != 0 {
		t.Fatalf("after a worker reap the session is %+v; want it live without a worker", in2)
	}

	// The session, by an admin user.
	if err := b.r.Admin().ForwardReap(carol, RemoteReap{Node: "a", SessionID: in.ID}); err != nil {
		t.Fatal(err)
	}
	recordWith(t, a, "session closed", "sid", in.ID)
	a.wantOneClose(in.ID, EndAdminReap)
	if rec := a.closedRecords(in.ID)[0]; rec["by"] != "carol" || rec["user"] != "alice" {
		t.Fatalf("a's session closed record %v; want by=carol", rec)
	}
	if got := b.logs.Records("remote reap"); len(got) != 0 {
		t.Fatalf("b reaped its own forwards: %v", got)
	}
}

// TestForwardReapRefused: only an admin forwards, only on a cluster node,
// only to another node, and only one target.
func TestForwardReapRefused(t *testing.T) {
	t.Parallel()
	_, b := clusterPair(t)
	alone := newHarness(t, func(c *Config) { c.Changes = &MemoryBus{} })
	for _, c := range []struct {
		name string
		h    *harness
		by   Principal
		rr   RemoteReap
		want error
	}{
		{"not an admin", b, alice, RemoteReap{Node: "a", PID: 42}, ErrNotFound},
		{"a node alone", alone, AdminPrincipal, RemoteReap{Node: "a", PID: 42}, ErrNoCluster},
		{"this node", b, AdminPrincipal, RemoteReap{Node: "b", PID: 42}, nil},
		{"no node", b, AdminPrincipal, RemoteReap{PID: 42}, nil},
		{"two targets", b, AdminPrincipal, RemoteReap{Node: "a", PID: 42, SessionID: "x"}, nil},
		{"no target", b, AdminPrincipal, RemoteReap{Node: "a"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.h.r.Admin().ForwardReap(c.by, c.rr)
			if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
				t.Fatalf("ForwardReap = %v; want %v (or an error)", err, c.want)
			}
		})
	}
}
