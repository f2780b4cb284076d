package workers

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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
	reaped := startChild(t, cmd)
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

// Environment of the instance helper.
const (
	stateDirEnv   = "DASHGATE_TEST_STATE_DIR"   // its --state-dir
	cgroupRootEnv = "DASHGATE_TEST_CGROUP_ROOT" // its --cgroup-root
	dirEnv        = "DASHGATE_TEST_DIR"         // where its terminal's leaver publishes its pid
)

// instanceHelper is a dashgate in small, for a test to kill -9: a
// subreaper holding an instance in the state dir, in cgroup mode, with its
// reaper running. Its terminal starts a process that leaves the terminal's
// cgroup for the cgroup2 root, drops the marker and every stdio of the
// terminal, and is adopted. Once the reaper recorded it (at most 10 s: the
// test then says it was not), it writes "<instance> <leaver pid> <terminal
// pid>" to the pid file and waits to be killed.
func instanceHelper() int {
	if err := EnableSubreaper(); err != nil {
		return 20
	}
	in, err := AcquireInstance(os.Getenv(stateDirEnv))
	if err != nil {
		return 21
	}
	cg, err := SetupCgroups(CgroupOptions{Mode: CgroupOn, Root: os.Getenv(cgroupRootEnv), Instance: in.ID})
	if err != nil {
		return 22
	}
	mount, err := cgroup2Mount()
	if err != nil {
		return 22
	}
	m := NewManager(Config{Instance: in.ID, Grace: testGrace, Cgroups: cg})
	go m.RunReaper(context.Background(), 10*time.Millisecond)
	d := os.Getenv(dirEnv)
	p, err := m.Start(Spec{Kind: KindPTY, SessionID: "s-crash", Path: "/bin/sh", Args: []string{"-c",
		`( setsid sh -c 'echo $$ >"$R/cgroup.procs" && printf %s $$ >"$D/leaver.tmp" && mv "$D/leaver.tmp" "$D/leaver" && exec env -i /bin/sleep 300' </dev/null >/dev/null 2>&1 & )
exec sleep 300`},
		Env: []string{"D=" + d, "R=" + mount, "PATH=" + os.Getenv("PATH")}})
	if err != nil {
		return 23
	}
	var leaver int
	if !testkit.Until(10*time.Second, func() bool {
		b, err := os.ReadFile(filepath.Join(d, "leaver"))
		_, serr := fmt.Sscan(string(b), &leaver)
		return err == nil && serr == nil
	}) {
		return 24
	}
	testkit.Until(10*time.Second, func() bool {
		in.mu.Lock()
		defer in.mu.Unlock()
		_, ok := in.adopted[leaver]
		return ok
	})
	if err := writeFileAtomic(os.Getenv(pidFileEnv), fmt.Sprintf("%s %d %d", in.ID, leaver, p.PID())); err != nil {
		return 25
	}
	blockForever()
	return 0
}

func writeFileAtomic(path, s string) error {
	if err := os.WriteFile(path+".tmp", []byte(s), 0o600); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// TestSweepEndsRecordedAdopted: after a crash (kill -9) of a dashgate in
// cgroup mode, the startup sweep ends a process that left its terminal's
// cgroup, marker and stdio, found only in the dead instance's list of
// adopted processes, and leaves alone a process that has a pid of that
// list but another start time (the pid was reused).
func TestSweepEndsRecordedAdopted(t *testing.T) {
	t.Parallel()
	root := testCgroupRoot(t)
	state, d := t.TempDir(), t.TempDir()
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := exec.Command(helperPath(t))
	cmd.Env = append(helperEnviron(), helperEnv+"=instance", pidFileEnv+"="+ready,
		stateDirEnv+"="+state, cgroupRootEnv+"="+root, dirEnv+"="+d)
	reaped := startChild(t, cmd)
	var (
		id               string
		leaver, terminal int
	)
	testkit.WaitFor(t, 20*time.Second, "the instance helper ready", func() bool {
		b, err := os.ReadFile(ready)
		_, serr := fmt.Sscan(string(b), &id, &leaver, &terminal)
		return err == nil && serr == nil || isClosed(reaped)
	})
	if isClosed(reaped) {
		t.Fatalf("the instance helper exited: %v", cmd.ProcessState)
	}
	killOnCleanup(t, leaver)
	killOnCleanup(t, terminal)
	if own := readString(fmt.Sprintf("/proc/%d/cgroup", leaver)); !slices.Contains(strings.Split(own, "\n"), "0::/") {
		t.Fatalf("the leaver %d is in %q, want the cgroup v2 root 0::/", leaver, own)
	}
	// It published its pid before its exec of env -i's sleep: wait for
	// that exec (the instance helper's ready file is not ordered with it).
	testkit.WaitFor(t, 10*time.Second, "the leaver without "+EnvInstance, func() bool { return environValue(leaver, EnvInstance) == "" })

	// An unrelated process with a pid the list names, started after the
	// recorded one: the list says another start time.
	decoy := exec.Command("/bin/sleep", "300")
	startChild(t, decoy)
	start, ok := startTime(decoy.Process.Pid)
	if !ok {
		t.Fatal("no start time of the decoy")
	}

	cmd.Process.Kill() // the crash
	<-reaped
	list := filepath.Join(state, "instances", id+".adopted")
	f, err := os.OpenFile(list, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("the dead instance's list of adopted processes: %v", err)
	}
	fmt.Fprintf(f, "%d %d\n", decoy.Process.Pid, start-1)
	f.Close()

	self, err := AcquireInstance(state)
	if err != nil {
		t.Fatal(err)
	}
	defer self.Release()
	log, lb := testkit.NewLogger()
	res, err := Sweep(state, self.ID, testGrace, &Cgroups{Base: root}, log)
	if err != nil {
		t.Fatal(err)
	}
	if res.Instances != 1 {
		t.Errorf("sweep %+v: want 1 dead instance", res)
	}
	if !testkit.Gone(leaver) {
		t.Errorf("the leaver %d of the dead instance is alive after the sweep", leaver)
	}
	if testkit.Gone(decoy.Process.Pid) {
		t.Errorf("the decoy %d, whose start time is not the recorded one, was ended", decoy.Process.Pid)
	}
	var recs []testkit.Record
	for _, r := range lb.Records("worker closed") {
		if pid, _ := r.Int("worker_pid"); pid == leaver || pid == decoy.Process.Pid {
			recs = append(recs, r)
		}
	}
	if len(recs) != 1 || recs[0].Str("process") != "adopted" || recs[0].Str("reason") != "startup_sweep" ||
		recs[0].Str("instance") != id || recs[0]["worker_pid"] != float64(leaver) {
		t.Errorf("records %v: want one worker closed for %d, process adopted, reason startup_sweep, instance %s", recs, leaver, id)
	}
	if _, err := os.Stat(list); !os.IsNotExist(err) {
		t.Errorf("the dead instance's list %s is still there: %v", list, err)
	}
}

// TestSweepAdoptedListBoot: a dead instance's list of adopted processes is
// read only when it was written in this boot (after a reboot, pids and
// start times repeat): a live process it names with its start time is
// ended when the list has this boot's id, and left alone when it has
// another's.
func TestSweepAdoptedListBoot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, boot string
		ended      bool
	}{
		{"this boot", bootID(), true},
		{"another boot", "00000000-0000-0000-0000-000000000000", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			state := t.TempDir()
			if err := os.MkdirAll(filepath.Join(state, "instances"), 0o700); err != nil {
				t.Fatal(err)
			}
			proc := exec.Command("/bin/sleep", "300")
			startChild(t, proc)
			start, ok := startTime(proc.Process.Pid)
			if !ok {
				t.Fatal("no start time")
			}
			dead := "dead" + newMarker()
			for name, text := range map[string]string{
				dead + ".lock":    "1\n",
				dead + ".adopted": fmt.Sprintf("boot %s\n%d %d\n", tc.boot, proc.Process.Pid, start),
			} {
				if err := os.WriteFile(filepath.Join(state, "instances", name), []byte(text), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := Sweep(state, "self", testGrace, nil, slog.New(slog.DiscardHandler)); err != nil {
				t.Fatal(err)
			}
			if testkit.Gone(proc.Process.Pid) != tc.ended {
				t.Errorf("pid %d listed with boot %s: ended %v, want %v", proc.Process.Pid, tc.boot, !tc.ended, tc.ended)
			}
		})
	}
}
