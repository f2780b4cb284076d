package workers

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dashgate/dashgate/internal/testkit"
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
// waits for it (PROTOCOL.md §5: "killed with its process group and waited
// for").
func TestUnownedOrphanReaped(t *testing.T) {
	// Not parallel: the orphan becomes the test process's child. No reaper
	// runs: reaping it is what ReapUnowned must do.
	m, _ := newTestManager(t, Config{})
	w := startWorker(t, m, helperSpec(t, "proto"))
	pidFile := filepath.Join(t.TempDir(), "orphan")
	if _, err := callW(t, w, "orphan", map[string]any{"pid_file": pidFile, "keep_marker": false}); err != nil {
		t.Fatal(err)
	}
	orphan := readPidFile(t, pidFile)
	t.Cleanup(func() { // runs after the kill below: no zombie is left to later tests
		var ws unix.WaitStatus
		unix.Wait4(orphan, &ws, 0, nil)
	})
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
	if testkit.Gone(orphan) {
		t.Fatalf("the orphan died with its worker; the test needs it alive")
	}

	var u Unowned
	testkit.WaitFor(t, 5*time.Second, "orphan listed in Unowned", func() bool {
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
	if !testkit.Gone(orphan) {
		t.Fatalf("orphan %d still alive after ReapUnowned", orphan)
	}
	if !testkit.Reaped(orphan) {
		st, _ := readStat(orphan)
		t.Errorf("orphan %d is a zombie (state %c) when ReapUnowned returned: it was not waited for", orphan, st.state)
	}
	if slices.Contains(unownedPIDs(m), orphan) {
		t.Errorf("orphan still listed in Unowned")
	}
	if err := m.ReapUnowned(orphan); !errors.Is(err, ErrNotDescendant) {
		t.Errorf("second ReapUnowned: %v, want ErrNotDescendant", err)
	}
}

// A worker that exits by itself while a process that escaped its tree (its
// marker dropped, a session of its own) still holds its stdout and stderr:
// the fallback finds the holder by the pipes it holds and ends it with the
// worker, and Close returns. Under -race it also checks that the drain
// goroutines are counted before the supervisor may wait for them.
func TestWorkerExitEndsEscapedPipeHolder(t *testing.T) {
	// Not parallel: it runs a reaper (see startReaper).
	m, _ := newTestManager(t, Config{})
	startReaper(t, m)
	closed := make(chan CloseResult, 1)
	pidFile := filepath.Join(t.TempDir(), "holder")
	// The holder drops the marker and starts a session of its own: nothing
	// ties it to the worker once the shell exits. It writes its pid once in
	// its own session, and the shell exits only then (a fifo): before
	// setsid the holder is still in the worker's process group, and a
	// teardown scanning then ends it with the group. No Call is made: the
	// exit is noticed by the supervisor alone.
	spec := Spec{SessionID: "s-holder", Path: "/bin/sh", Args: []string{"-c",
		`mkfifo "$0".fifo || exit 9; env -u ` + EnvWorkerID + ` setsid sh -c 'printf %s $$ >"$0".tmp && mv "$0".tmp "$0"; echo >"$0".fifo; exec sleep 300' "$0" & read _ <"$0".fifo; exit 4`, pidFile}}
	spec.OnClose = func(r CloseResult) { closed <- r }
	startWorker(t, m, spec)
	holder := readPidFile(t, pidFile)
	killOnCleanup(t, holder)

	res := testkit.Recv(t, 10*time.Second, "OnClose", closed)
	if res.Reason != ReasonExited || res.ExitCode != 4 || res.Descendants != 1 {
		t.Errorf("result %+v: want reason exited, exit code 4, 1 descendant (the holder)", res)
	}
	waitVanished(t, 5*time.Second, holder)
}

// A process that escaped its worker's tree and holds nothing of it (no
// marker, a session of its own, its stdio elsewhere) is left to Unowned and
// ReapUnowned when the worker exits.
func TestWorkerExitLeavesUnclaimedEscapeToUnowned(t *testing.T) {
	// Not parallel: it runs a reaper (see startReaper).
	m, _ := newTestManager(t, Config{})
	startReaper(t, m)
	pidFile := filepath.Join(t.TempDir(), "escaped")
	w := startWorker(t, m, Spec{SessionID: "s-escaped", Path: "/bin/sh", Args: []string{"-c",
		// The escaped process publishes its pid once it is in its own
		// session; the worker exits only then (a fifo).
		`mkfifo "$0".fifo || exit 9; env -u ` + EnvWorkerID + ` setsid sh -c 'printf %s $$ >"$0".tmp && mv "$0".tmp "$0"; echo >"$0".fifo; exec sleep 300' "$0" </dev/null >/dev/null 2>&1 & read _ <"$0".fifo; exit 4`, pidFile}})
	escaped := readPidFile(t, pidFile)
	killOnCleanup(t, escaped)
	<-w.Closed()
	if testkit.Gone(escaped) {
		t.Fatalf("the escaped process died; the test needs it alive")
	}
	if !slices.Contains(unownedPIDs(m), escaped) {
		t.Errorf("the escaped process %d is not in Unowned %v", escaped, unownedPIDs(m))
	}
	if err := m.ReapUnowned(escaped); err != nil {
		t.Fatal(err)
	}
	waitVanished(t, 5*time.Second, escaped)
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

// Every live process of a worker's tree is on the admin page somewhere:
// in its worker's row (Table, the /admin/api/workers "children") or among
// the unowned processes, each with a reap button (PROTOCOL.md §5).
func TestEveryDescendantListed(t *testing.T) {
	// Not parallel: it runs a reaper (see startReaper).
	m, _ := newTestManager(t, Config{})
	startReaper(t, m)
	w := startWorker(t, m, helperSpec(t, "proto"))
	dir := t.TempDir()
	if _, err := callW(t, w, "spawn-tree", map[string]any{"dir": dir}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"group", "setsid", "nohup"} {
		pid := readPidFile(t, filepath.Join(dir, n))
		killOnCleanup(t, pid)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rows := m.Table(ctx)
		cancel()
		listed := slices.Contains(unownedPIDs(m), pid)
		for _, r := range rows {
			listed = listed || (r.PID == w.PID() && slices.Contains(r.Descendants, pid))
		}
		if !listed {
			t.Errorf("%s grandchild %d (in the worker's tree: %v) is neither in Table %+v nor in Unowned",
				n, pid, slices.Contains(w.Descendants(), pid), rows)
		}
	}
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
	if testkit.Gone(os.Getppid()) {
		t.Errorf("the test's parent is gone")
	}
}

// fileClosed reports whether f was closed.
func fileClosed(f *os.File) bool {
	_, err := f.Stat()
	return errors.Is(err, os.ErrClosed)
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
	// A long grace: a worker ends by stdin EOF or SIGTERM; a slow exit on a
	// loaded box must not look like an escalation.
	m, lb := newTestManager(t, Config{Grace: 5 * time.Second})
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
		// A leaked *os.File is closed by its finalizer at some GC, which
		// would hide it from the fd count: check Close closed each pipe.
		for name, f := range map[string]*os.File{"stdin": w.stdin, "stdout": w.stdout, "stderr": w.stderr} {
			if !fileClosed(f) {
				t.Fatalf("cycle %d: the worker's %s pipe is still open after Close", i, name)
			}
		}
	}
	if n := m.Count(); n != 0 {
		t.Errorf("Manager still lists %d children", n)
	}
	if d := myDescendants(t); len(d) != 0 {
		t.Errorf("live descendants left: %v", d)
	}
	if z, err := testkit.ZombieChildren(os.Getpid()); err != nil || len(z) != 0 {
		t.Errorf("zombie children left: %v (%v)", z, err)
	}
	if now := fdCount(t); now > fds+fdSlack {
		t.Errorf("fds: %d before, %d after (slack %d)", fds, now, fdSlack)
	}
	if n := len(lb.Records("worker closed")); n != cycles {
		t.Errorf("%d close records, want %d", n, cycles)
	}
}
