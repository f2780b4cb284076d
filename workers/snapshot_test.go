package workers

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
)

func startSleeper(t *testing.T, m *Manager) *Proc {
	t.Helper()
	p, err := m.Start(Spec{Kind: KindChat, SessionID: "s-snap", Path: "/bin/sleep", Args: []string{"300"}, Env: []string{"PATH=" + os.Getenv("PATH")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(ReasonSessionClosed) })
	return p
}

// TestSnapshotWhenSlow: a read that takes longer than SlowSnapshot is not
// waited for: Snapshot answers from the previous read (a child started
// since is listed, without figures), and the read, gone on in the
// background, brings its figures for a later call. The first Snapshot
// waits for its read; on a quick machine every one reads afresh. Each
// read brings dashgate's own figures (SnapshotSelf).
func TestSnapshotWhenSlow(t *testing.T) {
	t.Parallel()
	quick, _ := newTestManager(t, Config{SlowSnapshot: time.Hour})
	startSleeper(t, quick)
	if self := quick.SnapshotSelf(); self != (Stats{}) {
		t.Fatalf("dashgate's own figures before any read: %+v; want none", self)
	}
	for range 2 {
		if rows, _, stale := quick.Snapshot(t.Context()); stale || len(rows) != 1 || rows[0].RSSBytes == 0 {
			t.Fatalf("a quick machine's snapshot: stale %v, rows %+v; want a fresh row with its RSS", stale, rows)
		}
	}
	// The read brings dashgate's own figures too (the admin page shows
	// them from there).
	if self := quick.SnapshotSelf(); self.RSSBytes == 0 || self.NumFDs == 0 || self.NumThreads == 0 {
		t.Fatalf("dashgate's own figures after a read: %+v; want its RSS, fds and threads", self)
	}

	m, _ := newTestManager(t, Config{SlowSnapshot: time.Nanosecond, SnapshotMaxAge: time.Nanosecond}) // every read is slow, and old at once
	a := startSleeper(t, m)
	if rows, _, stale := m.Snapshot(t.Context()); stale || len(rows) != 1 || rows[0].PID != a.PID() || rows[0].RSSBytes == 0 {
		t.Fatalf("the first snapshot: stale %v, rows %+v; want one fresh row for %d", stale, rows, a.PID())
	}
	b := startSleeper(t, m)
	rows, _, stale := m.Snapshot(t.Context())
	i := slices.IndexFunc(rows, func(r ProcInfo) bool { return r.PID == b.PID() })
	if !stale || len(rows) != 2 || i < 0 || rows[i].RSSBytes != 0 || rows[1-i].RSSBytes == 0 {
		t.Fatalf("the snapshot after a slow read: stale %v, rows %+v; want the last read's figures for %d and %d listed without any", stale, rows, a.PID(), b.PID())
	}
	testkit.WaitFor(t, 10*time.Second, "the background read's figures of the new child", func() bool {
		rows, _, _ := m.Snapshot(t.Context())
		i := slices.IndexFunc(rows, func(r ProcInfo) bool { return r.PID == b.PID() })
		return i >= 0 && rows[i].RSSBytes > 0
	})
	b.Close(ReasonSessionClosed)
	if rows, _, _ := m.Snapshot(t.Context()); slices.ContainsFunc(rows, func(r ProcInfo) bool { return r.PID == b.PID() }) {
		t.Fatalf("a closed child is still listed from the last read: %+v", rows)
	}
}

// TestSnapshotAfterSlowRead: once a read took longer than SlowSnapshot,
// the next call answers from it at once (stale), not after waiting
// SlowSnapshot for a read that will be as slow; the read goes on.
func TestSnapshotAfterSlowRead(t *testing.T) {
	t.Parallel()
	m, _ := newTestManager(t, Config{SlowSnapshot: time.Hour, SnapshotMaxAge: time.Nanosecond})
	a := startSleeper(t, m)
	if _, _, stale := m.Snapshot(t.Context()); stale {
		t.Fatal("the first snapshot is stale")
	}
	m.snap.mu.Lock()
	m.snap.took = 2 * time.Hour // as if that read had been slower than SlowSnapshot
	m.snap.mu.Unlock()
	rows, _, stale := m.Snapshot(t.Context())
	if !stale || len(rows) != 1 || rows[0].PID != a.PID() || rows[0].RSSBytes == 0 {
		t.Fatalf("after a slow read: stale %v, rows %+v; want the last read's row for %d at once", stale, rows, a.PID())
	}
	m.waitSnapshot()
	if rows, _, stale := m.Snapshot(t.Context()); stale || len(rows) != 1 {
		t.Fatalf("after a quick read again: stale %v, rows %+v; want a fresh read", stale, rows)
	}
}

// TestSnapshotReadsBoundedWhenSlow: after a slow read, calls answer from
// it without starting another until it is SnapshotMaxAge old, or ten
// times as old as it took (on a saturated machine each read of the
// process table costs the load CPU); then one call starts the next.
func TestSnapshotReadsBoundedWhenSlow(t *testing.T) {
	t.Parallel()
	m, _ := newTestManager(t, Config{SlowSnapshot: time.Nanosecond, SnapshotMaxAge: time.Hour})
	a := startSleeper(t, m)
	rows, _, _ := m.Snapshot(t.Context())
	if len(rows) != 1 || rows[0].ReadAt.IsZero() {
		t.Fatalf("the first snapshot: %+v; want %d with the time of its read", rows, a.PID())
	}
	m.waitSnapshot()
	m.snap.mu.Lock()
	m.snap.took = time.Hour // slow enough that SnapshotMaxAge is the bound
	m.snap.mu.Unlock()
	for range 10 {
		if rows, _, stale := m.Snapshot(t.Context()); !stale || len(rows) != 1 || rows[0].RSSBytes == 0 {
			t.Fatalf("after a slow read: stale %v, rows %+v; want its figures, stale", stale, rows)
		}
	}
	m.snap.mu.Lock()
	reads := m.snap.reads
	m.snap.began = m.snap.began.Add(-2 * time.Hour) // as if the read were that old
	m.snap.mu.Unlock()
	if reads != 1 {
		t.Fatalf("11 calls within SnapshotMaxAge of a slow read started %d reads, want 1", reads)
	}
	m.Snapshot(t.Context())
	m.waitSnapshot()
	m.snap.mu.Lock()
	reads = m.snap.reads
	m.snap.mu.Unlock()
	if reads != 2 {
		t.Fatalf("a call once the read was SnapshotMaxAge old started %d reads in all, want 2", reads)
	}
}
