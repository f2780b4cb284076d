package workers

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dashgate/dashgate/internal/testkit"
)

// closeRecordKeys are the keys of the "worker closed" record: PROTOCOL.md §6
// (sid, worker_pid, kind, reason, exit_code or signal, escalation,
// duration_ms), slog's own (time, level, msg), and the extras the Manager
// adds (signals, descendants, lifetime_ms).
func closeRecordKeys(exitKey string) []string {
	keys := []string{"time", "level", "msg", "sid", "worker_pid", "kind", "reason", exitKey,
		"escalation", "duration_ms", "signals", "descendants", "lifetime_ms"}
	slices.Sort(keys)
	return keys
}

// politeEnd reports whether a worker that exits on stdin EOF and dies of
// SIGTERM ended without SIGKILL. Close closes stdin and sends SIGTERM at
// once to whatever still runs, so either may end it.
func politeEnd(r CloseResult) bool {
	return r.Escalation != EscalationKill &&
		((r.ExitCode == 0 && r.Signal == "") || r.Signal == "SIGTERM")
}

func sortedKeys(rec map[string]any) []string {
	return slices.Sorted(maps.Keys(rec))
}

// oneCloseRecord asserts exactly one INFO "worker closed" record and
// returns it.
func oneCloseRecord(t *testing.T, lb *testkit.LogBuffer) map[string]any {
	t.Helper()
	recs := lb.Records("worker closed")
	if len(recs) != 1 {
		t.Fatalf("%d \"worker closed\" records, want 1: %v", len(recs), recs)
	}
	if recs[0]["level"] != "INFO" {
		t.Errorf("level %v, want INFO", recs[0]["level"])
	}
	return recs[0]
}

// A worker that ignores SIGTERM is killed at the grace, and both the
// CloseResult and the one log record say so.
func TestCloseEscalatesToKillAtGrace(t *testing.T) {
	t.Parallel()
	m, lb := newTestManager(t, Config{})
	w := startWorker(t, m, helperSpec(t, "ignore-term"))
	pid := ping(t, w) // answered only once SIGTERM is ignored
	killOnCleanup(t, pid)
	if pid != w.PID() {
		t.Fatalf("helper says pid %d, worker is %d", pid, w.PID())
	}

	res := w.Close(ReasonDetach)

	want := CloseResult{
		PID: pid, Kind: KindChat, SessionID: w.SessionID(), Reason: ReasonDetach,
		ExitCode: -1, Signal: "SIGKILL", Escalation: EscalationKill,
		Signals: []string{"SIGTERM", "SIGKILL"}, Descendants: 0,
	}
	got := res
	got.Duration = 0
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CloseResult\n got %+v\nwant %+v", got, want)
	}
	if res.Duration < m.Grace() {
		t.Errorf("Duration %v shorter than the grace %v: SIGKILL came before the grace", res.Duration, m.Grace())
	}
	if !testkit.Reaped(pid) {
		t.Errorf("pid %d still exists after Close", pid)
	}
	if m.Lookup(pid) != nil || m.Count() != 0 {
		t.Errorf("Manager still lists the worker")
	}

	rec := oneCloseRecord(t, lb)
	if got, want := sortedKeys(rec), closeRecordKeys("signal"); !slices.Equal(got, want) {
		t.Errorf("record keys\n got %v\nwant %v", got, want)
	}
	wantVals := map[string]any{
		"sid": w.SessionID(), "worker_pid": float64(pid), "kind": "chat", "reason": "detach",
		"signal": "SIGKILL", "escalation": "kill", "signals": "SIGTERM,SIGKILL", "descendants": float64(0),
	}
	for k, v := range wantVals {
		if rec[k] != v {
			t.Errorf("record %s = %v, want %v", k, rec[k], v)
		}
	}
	if d, ok := rec["duration_ms"].(float64); !ok || d < float64(m.Grace().Milliseconds()) {
		t.Errorf("duration_ms = %v, want at least the grace (%d)", rec["duration_ms"], m.Grace().Milliseconds())
	}
}

// A worker whose grandchildren escape its process group (setsid, and a
// double fork under nohup that also changes group) leaves nothing behind
// after Close, and the record counts the descendants.
func TestCloseEndsWholeTree(t *testing.T) {
	// Not parallel: it runs a reaper (see startReaper).
	m, lb := newTestManager(t, Config{})
	startReaper(t, m)
	w := startWorker(t, m, helperSpec(t, "proto"))
	dir := t.TempDir()
	if _, err := callW(t, w, "spawn-tree", map[string]any{"dir": dir}); err != nil {
		t.Fatalf("spawn-tree: %v", err)
	}
	names := []string{"group", "setsid", "nohup"}
	pids := map[string]int{}
	for _, n := range names {
		pids[n] = readPidFile(t, filepath.Join(dir, n))
		killOnCleanup(t, pids[n])
	}
	// The shapes the test means: each grandchild escaped differently.
	self := os.Getpid()
	for n, pid := range pids {
		st, ok := readStat(pid)
		if !ok {
			t.Fatalf("%s grandchild %d: no stat", n, pid)
		}
		switch n {
		case "group":
			if st.pgrp != w.PID() {
				t.Fatalf("group grandchild in group %d, want %d", st.pgrp, w.PID())
			}
		case "setsid":
			if st.sid != pid || st.ppid != w.PID() {
				t.Fatalf("setsid grandchild: sid %d ppid %d", st.sid, st.ppid)
			}
		case "nohup":
			if st.pgrp != pid || st.ppid != self {
				t.Fatalf("nohup grandchild: pgrp %d ppid %d (want its own group, orphaned to the test)", st.pgrp, st.ppid)
			}
		}
	}
	desc := w.Descendants()
	for n, pid := range pids {
		if !slices.Contains(desc, pid) {
			t.Errorf("Descendants() %v misses the %s grandchild %d", desc, n, pid)
		}
	}

	res := w.Close(ReasonSessionClosed)

	for n, pid := range pids {
		if !testkit.Gone(pid) {
			t.Errorf("%s grandchild %d still alive after Close", n, pid)
		}
	}
	waitVanished(t, 5*time.Second, append(slices.Collect(maps.Values(pids)), w.PID())...)
	if res.Descendants != len(pids) {
		t.Errorf("Descendants = %d, want %d", res.Descendants, len(pids))
	}
	// The grandchildren ignore SIGTERM: only SIGKILL ends them.
	if res.Escalation != EscalationKill {
		t.Errorf("Escalation = %q, want kill", res.Escalation)
	}
	rec := oneCloseRecord(t, lb)
	if rec["descendants"] != float64(len(pids)) || rec["reason"] != "session_closed" || rec["escalation"] != "kill" {
		t.Errorf("record %v: want descendants=3 reason=session_closed escalation=kill", rec)
	}
	if u := m.Unowned(); len(u) != 0 {
		t.Errorf("Unowned after Close: %+v", u)
	}
	if d := myDescendants(t); len(d) != 0 {
		t.Errorf("the test process still has descendants %v", d)
	}
}

// Close is idempotent and safe from many goroutines: every caller gets the
// same result, and there is one record and one OnClose call.
func TestCloseConcurrentIdempotent(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var cfgCalls, specCalls int
	m, lb := newTestManager(t, Config{Grace: 5 * time.Second, OnClose: func(CloseResult) { mu.Lock(); cfgCalls++; mu.Unlock() }})
	spec := helperSpec(t, "proto")
	spec.OnClose = func(CloseResult) { mu.Lock(); specCalls++; mu.Unlock() }
	w := startWorker(t, m, spec)
	ping(t, w)

	const n = 10
	results := make([]CloseResult, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			results[i] = w.Close(ReasonDetach)
		})
	}
	close(start)
	wg.Wait()

	for i := range results {
		if !reflect.DeepEqual(results[i], results[0]) {
			t.Errorf("Close #%d returned %+v, #0 returned %+v", i, results[i], results[0])
		}
	}
	if r := results[0]; r.Reason != ReasonDetach || !politeEnd(r) {
		t.Errorf("result %+v: want reason detach, ended by stdin EOF or SIGTERM", r)
	}
	oneCloseRecord(t, lb)
	mu.Lock()
	defer mu.Unlock()
	if cfgCalls != 1 || specCalls != 1 {
		t.Errorf("OnClose calls: Config %d, Spec %d; want 1 and 1", cfgCalls, specCalls)
	}
}

// Closing a worker that already died (killed from outside) neither panics
// nor blocks, and returns the result of the close that noticed the death.
func TestCloseAfterDeath(t *testing.T) {
	t.Parallel()
	m, lb := newTestManager(t, Config{})
	w := startWorker(t, m, helperSpec(t, "proto"))
	pid := ping(t, w)
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "supervisor closes the dead worker", func() bool {
		select {
		case <-w.Closed():
			return true
		default:
			return false
		}
	})

	done := make(chan CloseResult, 1)
	go func() { done <- w.Close(ReasonDetach) }()
	res := testkit.Recv(t, 5*time.Second, "Close of a dead worker returns", done)
	if res.Reason != ReasonExited || res.Signal != "SIGKILL" || res.ExitCode != -1 || res.Escalation != EscalationNone {
		t.Errorf("result %+v: want reason exited, signal SIGKILL, exit -1, escalation none", res)
	}
	if !testkit.Reaped(pid) {
		t.Errorf("pid %d not reaped", pid)
	}
	if _, err := callW(t, w, "ping", nil); err == nil {
		t.Errorf("Call on a closed worker succeeded")
	} else {
		workerErr(t, err, FailCrashed)
	}
	rec := oneCloseRecord(t, lb)
	if rec["reason"] != "exited" || rec["signal"] != "SIGKILL" {
		t.Errorf("record %v: want reason exited, signal SIGKILL", rec)
	}
}

// A worker that exits by itself is noticed without any Call: Spec.OnClose
// gets reason exited with its exit code. The cases cover both ways of
// noticing: stdout EOF (a chat worker) and the leader's exit alone (a plain
// Proc has no stdout reader).
func TestWorkerExitNoticed(t *testing.T) {
	t.Parallel()
	sh := func(script string) func(t *testing.T) Spec {
		return func(t *testing.T) Spec {
			return Spec{SessionID: "s-sh", Path: "/bin/sh", Args: []string{"-c", script}}
		}
	}
	helper := func(mode string, env ...string) func(t *testing.T) Spec {
		return func(t *testing.T) Spec { return helperSpec(t, mode, env...) }
	}
	tests := []struct {
		name string
		spec func(t *testing.T) Spec
		// plain starts a Proc with Start instead of a Worker.
		plain bool
		// poke, when set, makes the worker exit (through a Call whose
		// outcome is not the point).
		poke        func(t *testing.T, w *Worker)
		descendants int
		escalation  Escalation
	}{
		{name: "helper exits 3 at start", spec: helper("exit", exitCodeEnv+"=3"), escalation: EscalationNone},
		{name: "builtin /exit 3", spec: helper("builtin"), escalation: EscalationNone, poke: func(t *testing.T, w *Worker) {
			_, err := callW(t, w, "slash", map[string]string{"command": "/exit 3"})
			workerErr(t, err, FailCrashed) // /exit is never answered
		}},
		{name: "plain proc exits 3", spec: helper("exit", exitCodeEnv+"=3"), plain: true, escalation: EscalationNone},
		// sleep outlives the leader: the exit must be noticed on its own,
		// and sleep ended with the tree. (A plain Proc: for a chat Worker
		// whose drains still run, see TestWorkerExitWithEscapedPipeHolder.)
		{name: "exits 3, child lives on", spec: sh("sleep 300 & exit 3"), plain: true, descendants: 1, escalation: EscalationTerm},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, lb := newTestManager(t, Config{})
			got := make(chan CloseResult, 2)
			spec := tt.spec(t)
			spec.OnClose = func(r CloseResult) { got <- r }
			var pid int
			if tt.plain {
				spec.Kind = KindChat
				p, err := m.Start(spec)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { p.Close(ReasonShutdown) })
				pid = p.PID()
			} else {
				w := startWorker(t, m, spec)
				pid = w.PID()
				if tt.poke != nil {
					tt.poke(t, w)
				}
			}
			res := testkit.Recv(t, 5*time.Second, "OnClose", got)
			if res.Reason != ReasonExited || res.ExitCode != 3 || res.Signal != "" ||
				res.Escalation != tt.escalation || res.Descendants != tt.descendants {
				t.Errorf("result %+v: want reason exited, exit code 3, no signal, escalation %s, %d descendants",
					res, tt.escalation, tt.descendants)
			}
			if m.Lookup(pid) != nil {
				t.Errorf("Manager still lists pid %d", pid)
			}
			if !testkit.Reaped(pid) {
				t.Errorf("pid %d not reaped", pid)
			}
			rec := oneCloseRecord(t, lb)
			if got, want := sortedKeys(rec), closeRecordKeys("exit_code"); !slices.Equal(got, want) {
				t.Errorf("record keys\n got %v\nwant %v", got, want)
			}
			if rec["exit_code"] != float64(3) || rec["reason"] != "exited" {
				t.Errorf("record %v: want exit_code 3, reason exited", rec)
			}
		})
	}
}

// TestReaperLeavesOtherManagersChildren: reaping is process-wide, so one
// Manager's orphan reaper scanning in a loop must never take the exit
// status of a child another Manager of the process started (a CI run saw a
// "/exit 3" recorded as exit code -1 while a parallel test's teardown
// reaped zombies). Each of the children exits 3; every record must say so.
func TestReaperLeavesOtherManagersChildren(t *testing.T) {
	a, _ := newTestManager(t, Config{})
	b, _ := newTestManager(t, Config{})
	stop := make(chan struct{})
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		for {
			select {
			case <-stop:
				return
			default:
				a.reapZombieOrphans(true)
			}
		}
	}()
	defer func() { close(stop); <-scanned }()
	for i := range 100 {
		p, err := b.Start(Spec{SessionID: "s-other", Path: "/bin/sh", Args: []string{"-c", "exit 3"}})
		if err != nil {
			t.Fatal(err)
		}
		<-p.Exited()
		if res := p.Close(ReasonExited); res.ExitCode != 3 {
			t.Fatalf("child %d: exit code %d, want 3 (another Manager's reaper took its status)", i, res.ExitCode)
		}
	}
}

// TestReaperReadsOnlyUnknownChildren: the orphan reaper reads the stat of
// a child os/exec does not own (here one the test started itself) and
// not that of a Manager's child, which its own Wait reaps: with 300
// workers a scan per SIGCHLD read 300 stat files (BENCHMARKS.md, issue
// 28). Not parallel: a scan reaps any zombie child of the test process
// that no Manager owns (see startReaper).
func TestReaperReadsOnlyUnknownChildren(t *testing.T) {
	m, _ := newTestManager(t, Config{})
	p, err := m.Start(Spec{SessionID: "s-known", Path: "/bin/sh", Args: []string{"-c", "exec sleep 30"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(ReasonShutdown) })
	other := exec.Command("sleep", "30")
	// A plain fork, not startChild: the reaper must find it unknown.
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Process.Kill(); other.Wait() })
	var mu sync.Mutex
	read := map[int]bool{}
	m.statOrphan = func(pid int) (procStat, bool) {
		mu.Lock()
		read[pid] = true
		mu.Unlock()
		return readStat(pid)
	}
	m.reapZombieOrphans(true)
	mu.Lock()
	defer mu.Unlock()
	if read[p.PID()] {
		t.Errorf("the reaper read the stat of the Manager's child %d", p.PID())
	}
	if !read[other.Process.Pid] {
		t.Errorf("the reaper did not read the stat of the unknown child %d (read %v)", other.Process.Pid, read)
	}
}
