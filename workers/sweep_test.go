package workers

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
)

// startInstanceProc starts a helper that carries DASHGATE_INSTANCE=inst, as
// a child of the test (so its exit is waited for here), and returns its pid
// and a channel closed once it was reaped.
func startInstanceProc(t *testing.T, inst string, ignoreTerm bool) (int, <-chan struct{}) {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd := exec.Command(helperPath(t))
	cmd.Env = append(os.Environ(), helperEnv+"=linger", pidFileEnv+"="+pidFile, EnvInstance+"="+inst, EnvSessionID+"=sess-"+inst)
	if ignoreTerm {
		cmd.Env = append(cmd.Env, ignoreTermEnv+"=1")
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := make(chan struct{})
	go func() { cmd.Wait(); close(reaped) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-reaped })
	readPidFile(t, pidFile) // it ignores SIGTERM from here on
	return cmd.Process.Pid, reaped
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Sweep ends the processes of a dead instance (a lock file nobody holds),
// SIGKILLing those that ignore SIGTERM, removes its lock file, and leaves
// alone the processes of an instance whose lock is held.
func TestSweep(t *testing.T) {
	t.Parallel()
	stateDir := t.TempDir()
	live, err := AcquireInstance(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Release()
	self, err := AcquireInstance(stateDir) // the sweeping instance
	if err != nil {
		t.Fatal(err)
	}
	defer self.Release()

	dead := "dead" + newMarker()
	deadLock := filepath.Join(stateDir, "instances", dead+".lock")
	if err := os.WriteFile(deadLock, []byte("1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	politePid, politeReaped := startInstanceProc(t, dead, false)
	stubbornPid, stubbornReaped := startInstanceProc(t, dead, true)
	livePid, liveReaped := startInstanceProc(t, live.ID, true)
	selfPid, selfReaped := startInstanceProc(t, self.ID, true)

	log, lb := testkit.NewLogger()
	res, err := Sweep(stateDir, self.ID, testGrace, nil, log)
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if res.Instances != 1 || res.Processes != 2 {
		t.Errorf("SweepResult %+v, want 1 instance, 2 processes", res)
	}
	for name, pid := range map[string]int{"polite": politePid, "stubborn": stubbornPid} {
		if !testkit.Gone(pid) {
			t.Errorf("%s process %d of the dead instance still alive", name, pid)
		}
	}
	testkit.WaitFor(t, 5*time.Second, "swept processes reaped", func() bool { return isClosed(politeReaped) && isClosed(stubbornReaped) })
	if _, err := os.Stat(deadLock); !os.IsNotExist(err) {
		t.Errorf("dead instance's lock file still there: %v", err)
	}
	for name, pid := range map[string]int{"live instance": livePid, "own instance": selfPid} {
		if testkit.Gone(pid) {
			t.Errorf("process %d of the %s was ended", pid, name)
		}
	}
	if isClosed(liveReaped) || isClosed(selfReaped) {
		t.Errorf("a protected process exited")
	}
	for _, in := range []*Instance{live, self} {
		if _, err := os.Stat(in.path); err != nil {
			t.Errorf("lock file of a running instance removed: %v", err)
		}
	}

	recs := lb.Records("worker closed")
	if len(recs) != 2 {
		t.Fatalf("%d sweep records, want 2: %v", len(recs), recs)
	}
	want := map[float64]string{float64(politePid): "term", float64(stubbornPid): "kill"}
	for _, rec := range recs {
		pid, _ := rec["worker_pid"].(float64)
		esc, ok := want[pid]
		if !ok {
			t.Errorf("record for unexpected pid: %v", rec)
			continue
		}
		if rec["level"] != "INFO" || rec["reason"] != "startup_sweep" || rec["instance"] != dead || rec["sid"] != "sess-"+dead ||
			rec["process"] != "orphan" || rec["kind"] != nil {
			t.Errorf("record %v: want INFO, reason startup_sweep, instance %s, sid sess-%s, process orphan, no kind", rec, dead, dead)
		}
		if rec["escalation"] != esc {
			t.Errorf("pid %v: escalation %v, want %s", pid, rec["escalation"], esc)
		}
	}

	// A second sweep finds nothing to do.
	if res, err := Sweep(stateDir, self.ID, testGrace, nil, slog.New(slog.DiscardHandler)); err != nil || res != (SweepResult{}) {
		t.Errorf("second Sweep: %+v %v, want nothing", res, err)
	}
}

// A state directory that does not exist yet is not an error.
func TestSweepNoStateDir(t *testing.T) {
	t.Parallel()
	res, err := Sweep(filepath.Join(t.TempDir(), "missing"), "x", testGrace, nil, slog.New(slog.DiscardHandler))
	if err != nil || res != (SweepResult{}) {
		t.Errorf("Sweep of a missing dir: %+v %v", res, err)
	}
}

// AcquireInstance holds a flock: a second lock attempt on the same file
// fails until Release, which also removes the file.
func TestAcquireInstanceHoldsLock(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in, err := AcquireInstance(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Sweeping from another instance id treats a held lock as live.
	if res, err := Sweep(dir, "other", testGrace, nil, slog.New(slog.DiscardHandler)); err != nil || res.Instances != 0 {
		t.Errorf("Sweep found %+v (%v), want no dead instance", res, err)
	}
	if _, err := os.Stat(in.path); err != nil {
		t.Fatalf("held lock file removed by Sweep: %v", err)
	}
	in.Release()
	in.Release() // safe twice
	if _, err := os.Stat(in.path); !os.IsNotExist(err) {
		t.Errorf("lock file kept after Release: %v", err)
	}
}
