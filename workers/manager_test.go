package workers

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func unownedPIDs(m *Manager) []int {
	var out []int
	for _, u := range m.Unowned() {
		out = append(out, u.PID)
	}
	return out
}

// An orphan that escaped its worker entirely (own session, its marker
// dropped) outlives the worker's death; it shows up in Unowned, and
// ReapUnowned ends it (it ignores SIGTERM: SIGKILL after the grace) and
// reaps it.
func TestUnownedOrphanReaped(t *testing.T) {
	// Not parallel: it runs a reaper (see startReaper).
	m, _ := newTestManager(t, Config{})
	startReaper(t, m)
	w := startWorker(t, m, helperSpec(t, "proto"))
	pidFile := filepath.Join(t.TempDir(), "orphan")
	if _, err := callW(t, w, "orphan", map[string]any{"pid_file": pidFile, "keep_marker": false}); err != nil {
		t.Fatal(err)
	}
	orphan := readPidFile(t, pidFile)
	killOnCleanup(t, orphan)
	if slices.Contains(unownedPIDs(m), orphan) {
		t.Fatalf("orphan %d listed as unowned while its worker (its parent) lives", orphan)
	}

	// The worker leader dies from outside, not through Close.
	if err := unix.Kill(w.PID(), unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	res := closedWith(t, w)
	if res.Reason != ReasonExited {
		t.Errorf("worker closed with %q, want exited", res.Reason)
	}
	if gone(orphan) {
		t.Fatalf("the orphan died with its worker; the test needs it alive")
	}

	var u Unowned
	waitFor(t, 5*time.Second, "orphan listed in Unowned", func() bool {
		for _, x := range m.Unowned() {
			if x.PID == orphan {
				u = x
				return true
			}
		}
		return false
	})
	if u.PPID != os.Getpid() || u.State == "Z" || u.Marker != "" {
		t.Errorf("Unowned row %+v: want ppid %d (subreaper), not a zombie, no marker", u, os.Getpid())
	}

	if err := m.ReapUnowned(orphan); err != nil {
		t.Fatalf("ReapUnowned(%d): %v", orphan, err)
	}
	if !gone(orphan) {
		t.Errorf("orphan %d still alive after ReapUnowned", orphan)
	}
	// A multi-threaded process shows as a zombie before it can be waited
	// for, so ReapUnowned's own wait may miss it: the reaper gets it then.
	waitVanished(t, 5*time.Second, orphan)
	if slices.Contains(unownedPIDs(m), orphan) {
		t.Errorf("orphan still listed in Unowned")
	}
	if err := m.ReapUnowned(orphan); !errors.Is(err, ErrNotDescendant) {
		t.Errorf("second ReapUnowned: %v, want ErrNotDescendant", err)
	}
}

// A grandchild that left its worker's group and parent but carries the
// worker's marker belongs to that live worker's tree: Unowned must not
// offer it (doc: "descendants of dashgate that no live child's tree
// claims"), and Close ends it.
func TestUnownedSkipsLiveWorkersMarkedOrphans(t *testing.T) {
	// Not parallel: it runs a reaper (see startReaper).
	m, _ := newTestManager(t, Config{})
	startReaper(t, m)
	w := startWorker(t, m, helperSpec(t, "proto"))
	dir := t.TempDir()
	if _, err := callW(t, w, "spawn-tree", map[string]any{"dir": dir}); err != nil {
		t.Fatal(err)
	}
	nohup := readPidFile(t, filepath.Join(dir, "nohup")) // orphaned to the test, own group, marker kept
	for _, n := range []string{"group", "setsid"} {
		killOnCleanup(t, readPidFile(t, filepath.Join(dir, n)))
	}
	killOnCleanup(t, nohup)
	if !slices.Contains(w.Descendants(), nohup) {
		t.Fatalf("the worker's tree does not claim %d", nohup)
	}
	if u := unownedPIDs(m); slices.Contains(u, nohup) {
		t.Errorf("Unowned() = %v lists %d, which the live worker %d's tree claims (marker)", u, nohup, w.PID())
	}
	w.Close(ReasonDetach)
	waitVanished(t, 5*time.Second, nohup)
}

// ReapUnowned refuses any pid that is not an unowned descendant, and
// signals nothing.
func TestReapUnownedRefusesOthers(t *testing.T) {
	t.Parallel()
	m, _ := newTestManager(t, Config{})
	w := startWorker(t, m, helperSpec(t, "proto"))
	ping(t, w)
	tests := []struct {
		name string
		pid  int
	}{
		{"init", 1},
		{"the test's parent", os.Getppid()},
		{"the test itself", os.Getpid()},
		{"a live worker", w.PID()},
		{"no such pid", 1 << 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := m.ReapUnowned(tt.pid); !errors.Is(err, ErrNotDescendant) {
				t.Errorf("ReapUnowned(%d) = %v, want ErrNotDescendant", tt.pid, err)
			}
		})
	}
	// Nothing was signalled: the worker still answers, the parent runs.
	ping(t, w)
	if w.Closing() {
		t.Errorf("the worker is closing")
	}
	if gone(os.Getppid()) {
		t.Errorf("the test's parent is gone")
	}
}

// fdCount is the number of open fds of the test process.
func fdCount(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// 300 start/call/close cycles of the built-in worker leave no child, no
// zombie and no fd behind.
func TestChurnLeavesNothing(t *testing.T) {
	// Not parallel: it counts the process's fds and children.
	const cycles = 300
	const fdSlack = 2 // the runtime may open a poller or pidfd lazily
	m, lb := newTestManager(t, Config{})
	fds := fdCount(t)
	for i := range cycles {
		w, err := m.StartWorker(helperSpec(t, "builtin"))
		if err != nil {
			t.Fatalf("cycle %d: StartWorker: %v", i, err)
		}
		raw, err := callW(t, w, "slash", map[string]string{"command": "/echo hi"})
		if err != nil || string(raw) != `{"output":"hi"}` {
			w.Close(ReasonShutdown)
			t.Fatalf("cycle %d: /echo: %s %v", i, raw, err)
		}
		if res := w.Close(ReasonDetach); !politeEnd(res) {
			t.Fatalf("cycle %d: %+v: want an end by stdin EOF or SIGTERM", i, res)
		}
	}
	if n := m.Count(); n != 0 {
		t.Errorf("Manager still lists %d children", n)
	}
	if d := myDescendants(); len(d) != 0 {
		t.Errorf("live descendants left: %v", d)
	}
	if z := myZombies(); len(z) != 0 {
		t.Errorf("zombie children left: %v", z)
	}
	if now := fdCount(t); now > fds+fdSlack {
		t.Errorf("fds: %d before, %d after (slack %d)", fds, now, fdSlack)
	}
	if n := len(lb.records(t, "worker closed")); n != cycles {
		t.Errorf("%d close records, want %d", n, cycles)
	}
}
