package workers

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dashgate/dashgate/internal/testkit"
)

// threadPriority is the nice value and the scheduling policy of thread
// tid of pid: fields 19 and 41 of /proc/<pid>/task/<tid>/stat.
func threadPriority(pid, tid int) (nice, policy int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	if err != nil {
		return 0, 0, err
	}
	// The fields after the command name, which may hold spaces, in ().
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	nice, err1 := strconv.Atoi(f[19-3])
	policy, err2 := strconv.Atoi(f[41-3])
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("stat of %d/%d: %q", pid, tid, b)
	}
	return nice, policy, nil
}

// threads are the thread ids of pid.
func threads(t *testing.T, pid int) []int {
	t.Helper()
	es, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range es {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, tid)
		}
	}
	return out
}

// TestChildPriority: a child runs at the Manager's Priority once Start
// returned, every thread of it (the built-in worker is a Go program,
// several threads by the time it answers) and what it starts in turn, a
// pty program too; dashgate's own threads keep theirs.
func TestChildPriority(t *testing.T) {
	t.Parallel()
	selfNice, selfPolicy, err := threadPriority(os.Getpid(), unix.Gettid())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		prio   Priority
		nice   int
		policy int
	}{
		{"batch nice 7", Priority{Nice: 7, Sched: SchedBatch}, 7, unix.SCHED_BATCH},
		{"idle", Priority{Sched: SchedIdle}, 0, unix.SCHED_IDLE},
		{"other nice 3", Priority{Nice: 3, Sched: SchedOther}, 3, unix.SCHED_NORMAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.nice < selfNice {
				t.Skipf("the test runs at nice %d: a child cannot be given less", selfNice)
			}
			m, _ := newTestManager(t, Config{Priority: tc.prio})
			check := func(what string, pid int) {
				t.Helper()
				for _, tid := range threads(t, pid) {
					nice, policy, err := threadPriority(pid, tid)
					if err != nil {
						t.Fatal(err)
					}
					if nice != tc.nice || policy != tc.policy {
						t.Errorf("%s %d thread %d: nice %d policy %d, want nice %d policy %d", what, pid, tid, nice, policy, tc.nice, tc.policy)
					}
				}
			}
			w := startWorker(t, m, helperSpec(t, "builtin"))
			if _, err := callW(t, w, "slash", map[string]string{"command": "/echo up"}); err != nil {
				t.Fatal(err)
			}
			if n := len(threads(t, w.PID())); n < 2 {
				t.Logf("the worker has %d thread(s) only", n)
			}
			check("worker", w.PID())

			// The pty program starts its child once told (the fifo): after
			// Start returned, as a shell's commands come.
			dir := t.TempDir()
			if err := unix.Mkfifo(filepath.Join(dir, "go"), 0o600); err != nil {
				t.Fatal(err)
			}
			sh, err := m.Start(Spec{Kind: KindPTY, SessionID: "s-prio", Path: "/bin/sh",
				Args: []string{"-c", `read x <"$0/go"; sleep 300 & echo $! >"$0/pid.tmp" && mv "$0/pid.tmp" "$0/pid"; wait`, dir}, Env: []string{"PATH=" + os.Getenv("PATH")}})
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "go"), []byte("go\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			defer sh.Close(ReasonSessionClosed)
			go func() { // drain the pty: its output must not fill
				buf := make([]byte, 4096)
				for {
					if _, err := sh.PTY().Read(buf); err != nil {
						return
					}
				}
			}()
			check("pty program", sh.PID())
			var grandchild int
			testkit.WaitFor(t, 10*time.Second, "the pty program's child", func() bool {
				b, err := os.ReadFile(filepath.Join(dir, "pid"))
				grandchild, _ = strconv.Atoi(strings.TrimSpace(string(b)))
				return err == nil && grandchild > 0
			})
			check("the pty program's child", grandchild)

			nice, policy, err := threadPriority(os.Getpid(), unix.Gettid())
			if err != nil || nice != selfNice || policy != selfPolicy {
				t.Errorf("the test's own thread: nice %d policy %d (%v), want nice %d policy %d", nice, policy, err, selfNice, selfPolicy)
			}
		})
	}
}

// TestSpawnAtOwnNice: the thread that forks children of a nice value
// keeps dashgate's own (each child gets its own after its exec): at the
// children's, every fork waited its turn behind the children it competes
// with, and on a saturated CPU sessions were opened a fifth slower at nice
// 19 (BENCHMARKS.md, issue 43).
func TestSpawnAtOwnNice(t *testing.T) {
	t.Parallel()
	selfNice, _, err := threadPriority(os.Getpid(), unix.Gettid())
	if err != nil {
		t.Fatal(err)
	}
	if selfNice >= 13 {
		t.Skipf("the test runs at nice %d: a child cannot be given more than 19", selfNice)
	}
	p := Priority{Nice: selfNice + 6, Sched: SchedBatch}
	var tid int
	spawnerFor(p.inherited()).run(func() { tid = unix.Gettid() })
	nice, policy, err := threadPriority(os.Getpid(), tid)
	if err != nil {
		t.Fatal(err)
	}
	if nice != selfNice || policy != unix.SCHED_BATCH {
		t.Fatalf("the spawning thread of children at nice %d, batch: nice %d policy %d, want dashgate's nice %d and SCHED_BATCH", p.Nice, nice, policy, selfNice)
	}
}

// TestPTYPriority: Config.PTYPriority, when set, is a pty program's
// priority, and Priority stays the workers'.
func TestPTYPriority(t *testing.T) {
	t.Parallel()
	selfNice, _, err := threadPriority(os.Getpid(), unix.Gettid())
	if err != nil {
		t.Fatal(err)
	}
	if selfNice >= 15 {
		t.Skipf("the test runs at nice %d: a child cannot be given more than 19", selfNice)
	}
	m, _ := newTestManager(t, Config{Priority: Priority{Nice: selfNice + 4}, PTYPriority: &Priority{}})
	env := []string{"PATH=" + os.Getenv("PATH")}
	w, err := m.Start(Spec{SessionID: "s-prio-w", Path: "sleep", Args: []string{"300"}, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ReasonSessionClosed)
	sh, err := m.Start(Spec{Kind: KindPTY, SessionID: "s-prio-pty", Path: "sleep", Args: []string{"300"}, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close(ReasonSessionClosed)
	for _, c := range []struct {
		what string
		pid  int
		want int
	}{{"worker", w.PID(), selfNice + 4}, {"pty program", sh.PID(), selfNice}} {
		if nice, _, err := threadPriority(c.pid, c.pid); err != nil || nice != c.want {
			t.Errorf("%s: nice %d (%v), want %d", c.what, nice, err, c.want)
		}
	}
}

// TestClosingChildOwnPriority: a close gives the child dashgate's own
// priority before its signals, so that it ends (its handler, its exit) on
// a saturated CPU as the gateway's own work would: the child's SIGTERM
// handler finds itself at SCHED_NORMAL and dashgate's nice value.
func TestClosingChildOwnPriority(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("leaving SCHED_IDLE needs CAP_SYS_NICE (sched(7)): run as root")
	}
	selfNice, _, err := threadPriority(os.Getpid(), unix.Gettid())
	if err != nil {
		t.Fatal(err)
	}
	m, _ := newTestManager(t, Config{Priority: Priority{Nice: 10, Sched: SchedIdle}})
	out := filepath.Join(t.TempDir(), "prio")
	p, err := m.Start(Spec{SessionID: "s-prio-close", Path: "/bin/sh", Env: []string{"PATH=" + os.Getenv("PATH")},
		Args: []string{"-c", `trap 'read l </proc/$$/stat; set -- $l; echo "${19} ${41}" >"$0.tmp"; mv "$0.tmp" "$0"; exit 0' TERM; echo up >"$0.up"; while :; do sleep 0.05; done`, out}})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the child's trap is set", func() bool {
		_, err := os.Stat(out + ".up")
		return err == nil
	})
	if nice, policy, err := threadPriority(p.PID(), p.PID()); err != nil || nice != 10 || policy != unix.SCHED_IDLE {
		t.Fatalf("the running child: nice %d policy %d (%v), want nice 10 policy SCHED_IDLE", nice, policy, err)
	}
	if res := p.Close(ReasonSessionClosed); res.Escalation == EscalationKill {
		t.Fatalf("the child was killed: %+v", res)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(b)), fmt.Sprintf("%d %d", selfNice, unix.SCHED_NORMAL); got != want {
		t.Errorf("the child's nice and policy in its SIGTERM handler: %q, want %q", got, want)
	}
}

// TestChildCPUWeight: with the cpu controller, the cgroup of every child
// (Dir) gets CgroupOptions.CPUWeight, and a child starts in a leaf of it.
func TestChildCPUWeight(t *testing.T) {
	t.Parallel()
	root := testCgroupRoot(t)
	if avail := strings.Fields(readString(filepath.Join(filepath.Dir(root), "cgroup.controllers"))); !slices.Contains(avail, "cpu") {
		t.Skipf("the cpu controller is not available in cgroup v2 here (cgroup.controllers of %s: %q; on a hybrid host it is bound to cgroup v1)",
			filepath.Dir(root), avail)
	}
	cg, err := SetupCgroups(CgroupOptions{Mode: CgroupOn, Root: root, Instance: newMarker(), CPUWeight: 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cg.Close(); err != nil {
			t.Errorf("Cgroups.Close: %v", err)
		}
	})
	if got := strings.TrimSpace(readString(filepath.Join(cg.Dir, "cpu.weight"))); got != "20" || cg.CPUWeight != 20 {
		t.Errorf("cpu.weight of %s: %q (CPUWeight %d), want 20", cg.Dir, got, cg.CPUWeight)
	}
	m, _ := newTestManager(t, Config{Cgroups: cg})
	p, err := m.Start(Spec{Kind: KindChat, SessionID: "s-weight", Path: "sleep", Args: []string{"300"}, Env: os.Environ()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ReasonSessionClosed)
	if !slices.Contains(p.cg.procs(), p.PID()) || filepath.Dir(p.cg.dir) != cg.Dir {
		t.Errorf("child %d is not in a leaf of %s (its cgroup %s)", p.PID(), cg.Dir, p.cg.dir)
	}
}

// TestGatewaySlice: SetGatewaySlice gives every thread of the process but
// the spawning ones the slice; a spawning thread started afterwards, on a
// thread that had it, has the kernel's default again, and so do the
// children it forks. Not parallel: it sets the slice of every thread of
// the test process (the parallel tests wait until it is done).
func TestGatewaySlice(t *testing.T) {
	const slice = 250 * time.Microsecond
	err := SetGatewaySlice(slice)
	if errors.Is(err, ErrSliceIgnored) {
		t.Skipf("%v: this kernel has no slice per thread to set", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := SetGatewaySlice(0); err != nil {
			t.Error(err)
		}
	})
	runtimeOf := func(tid int) uint64 {
		t.Helper()
		attr, err := unix.SchedGetAttr(tid, 0)
		if err != nil {
			t.Fatalf("sched_getattr %d: %v", tid, err)
		}
		return attr.Runtime
	}
	forkThreads.Lock()
	spawning := slices.Clone(forkThreads.tids)
	forkThreads.Unlock()
	for _, tid := range threads(t, os.Getpid()) {
		if !slices.Contains(spawning, strconv.Itoa(tid)) && runtimeOf(tid) != uint64(slice) {
			t.Errorf("thread %d: slice %d ns, want %d", tid, runtimeOf(tid), slice.Nanoseconds())
		}
	}

	// A spawning thread of its own, started now (spawnerFor's are shared
	// and may predate the slice).
	s := &spawner{reqs: make(chan func())}
	ready := make(chan struct{})
	go spawnLoop(Priority{}, s, ready)
	<-ready
	var own uint64
	var child *os.Process
	var startErr error
	s.run(func() {
		own = runtimeOf(unix.Gettid())
		child, startErr = os.StartProcess("/bin/sleep", []string{"sleep", "300"}, &os.ProcAttr{})
	})
	if startErr != nil {
		t.Fatal(startErr)
	}
	defer func() {
		child.Kill()
		child.Wait()
	}()
	if own == uint64(slice) {
		t.Errorf("the spawning thread has the gateway's slice (%d ns), want the kernel's default", own)
	}
	if got := runtimeOf(child.Pid); got == uint64(slice) {
		t.Errorf("a child of the spawning thread has the gateway's slice (%d ns), want the kernel's default", got)
	}
}

// TestGatewaySliceLeavesRealTime: a thread of dashgate at a real-time
// policy (an admin's chrt) keeps it and its priority: a slice is only
// asked for of the fair scheduler's threads. Not parallel, as
// TestGatewaySlice.
func TestGatewaySliceLeavesRealTime(t *testing.T) {
	tid := make(chan int)
	release := make(chan struct{})
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // the thread ends with the goroutine: its policy goes with it
		fifo := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 1}
		if err := unix.SchedSetAttr(0, &fifo, 0); err != nil {
			done <- err
			return
		}
		tid <- unix.Gettid()
		<-release
		done <- nil
	}()
	var rt int
	select {
	case rt = <-tid:
	case err := <-done:
		t.Skipf("no real-time thread here: %v", err)
	}
	defer func() {
		close(release)
		<-done
	}()
	err := SetGatewaySlice(250 * time.Microsecond)
	if errors.Is(err, ErrSliceIgnored) {
		t.Skipf("%v", err)
	}
	t.Cleanup(func() { SetGatewaySlice(0) })
	if err != nil {
		t.Fatalf("SetGatewaySlice with a SCHED_FIFO thread: %v", err)
	}
	attr, err := unix.SchedGetAttr(rt, 0)
	if err != nil {
		t.Fatal(err)
	}
	if attr.Policy != unix.SCHED_FIFO || attr.Priority != 1 {
		t.Errorf("the real-time thread has policy %d priority %d, want SCHED_FIFO 1", attr.Policy, attr.Priority)
	}
}
