package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"go.uber.org/goleak"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/workers"
	"github.com/dashgate/dashgate/workers/builtin"
)

// mainEnv makes the test binary run Main with its arguments: it is then
// dashgate itself (and, with "worker", its built-in worker), built with the
// test's flags (-race included).
const mainEnv = "DASHGATE_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		if len(os.Args) > 1 && os.Args[1] == stubbornWorker {
			// The built-in worker without its own ways to die with
			// dashgate (parent watchdog, exit on stdin EOF, SIGHUP): only
			// Pdeathsig, or a signal, ends it.
			signal.Ignore(syscall.SIGHUP)
			builtin.Run(context.Background(), os.Stdin, os.Stdout, os.Stderr)
			for {
				unix.Pause() // until a signal ends the process (pause(2))
			}
		}
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	// Orphans of a killed dashgate come back to the test process (pid 1 of
	// this box is a VM agent, not an init that reaps); the tests reap them
	// by pid, never with wait(-1), which would steal the instances' statuses.
	if err := workers.EnableSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, "EnableSubreaper:", err)
		os.Exit(1)
	}
	// no ignores of its own: every socket and client is closed by the
	// tests; the PostgreSQL server (a child process) is stopped at exit.
	testkit.VerifyNoLeaks(m, goleak.Cleanup(func(code int) {
		if err := testkit.StopPostgres(); err != nil {
			fmt.Fprintln(os.Stderr, "stop PostgreSQL:", err)
			code = max(code, 1)
		}
		os.Exit(code)
	}))
}

const testToken = "test-token-0123456789"

// stubbornWorker, as the first argument, makes the test binary a worker
// that only Pdeathsig (or a signal) ends.
const stubbornWorker = "stubborn-worker"

// ---------------------------------------------------------------------------
// Instances and clients, on the shared test kit.

// startInstance runs this test binary as dashgate on 127.0.0.1:0 with
// stateDir and waits until it listens. The kit's cleanup kills it and
// anything carrying its instance id if the test did not stop it.
func startInstance(t *testing.T, name, stateDir string, extra ...string) *testkit.Instance {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--state-dir", stateDir, "--worker-grace", "300ms",
		"--pty-cmd", "/bin/bash --norc --noprofile -i",
		// the workers are this binary too; GORACE: no 1 s sleep at exit
		"--pass-env", mainEnv + ",GORACE"}, extra...)
	in := testkit.StartT(t, testkit.Options{
		Bin: self, Args: args, Token: testToken,
		// the caller's environment as is: TestChildrenGetNoToken sets
		// DASHGATE_* variables for dashgate to read
		Env: append(os.Environ(), mainEnv+"=1", "GORACE=atexit_sleep_ms=0", "SHELL=/bin/bash"),
	})
	t.Logf("%s: dashgate %d on %s, instance %s", name, in.PID(), in.Addr, in.ID)
	return in
}

// workerOf returns the worker of kind for session sid, failing the test
// when there is none.
func workerOf(t *testing.T, in *testkit.Instance, kind, sid string) testkit.APIWorker {
	t.Helper()
	ws, err := in.Workers(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.Kind == kind && w.SessionID == sid {
			return w
		}
	}
	t.Fatalf("no %s worker for session %s in %+v", kind, sid, ws)
	return testkit.APIWorker{}
}

// stop ends in with SIGTERM and returns its exit code.
func stop(t *testing.T, in *testkit.Instance) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	code, err := in.Stop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// dialChat opens /ws/chat of in; the cleanup closes it.
func dialChat(t *testing.T, in *testkit.Instance) *testkit.Chat {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, _, err := testkit.DialChat(ctx, in.WSURL("ws/chat"), testkit.DialOptions{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// session creates a session and makes it spawn its worker with /echo.
func session(t *testing.T, c *testkit.Chat) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	sid, err := c.CreateSession(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := c.Slash(ctx, sid, "/echo hi"); err != nil || out != "hi" {
		t.Fatalf("/echo hi gave %q, %v", out, err)
	}
	return sid
}

// dialTerminal attaches a terminal to sid and types line into it; the
// cleanup closes it.
func dialTerminal(t *testing.T, in *testkit.Instance, sid, line string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	p, _, err := testkit.DialPTY(ctx, in.WSURL("ws/pty?session_id="+sid), testkit.DialOptions{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if err := p.Send(ctx, []byte(line+"\n")); err != nil {
		t.Fatalf("type into the terminal: %v", err)
	}
}

// goneReaped reports whether pid has ended; a zombie child of the test
// process (an orphan that came back to it) is reaped on the way, by pid.
func goneReaped(pid int) bool {
	if !testkit.Gone(pid) {
		return false
	}
	if p, err := testkit.ReadProc(pid); err == nil && p.Dead() && p.PPID == os.Getpid() {
		testkit.ReapChild(pid)
	}
	return true
}

// instanceProcs lists the live processes carrying in's instance id.
func instanceProcs(t *testing.T, in *testkit.Instance) map[int]testkit.Proc {
	t.Helper()
	ps, err := in.Procs()
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]testkit.Proc{}
	for _, p := range ps {
		out[p.PID] = p
	}
	return out
}

// ---------------------------------------------------------------------------

// A crashed dashgate leaves nothing for long: its workers die with it
// (Pdeathsig), the next start on the same state dir sweeps what its
// terminal started, and a second live instance is left alone.
func TestCrashRecovery(t *testing.T) {
	stateDir := t.TempDir()
	// What ran under the test binary before (a PostgreSQL server another
	// test of the package started, with -count > 1) is not this test's.
	before := map[[2]uint64]bool{}
	desc, err := testkit.Descendants(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range desc {
		before[[2]uint64{uint64(p.PID), p.Start}] = true
	}

	// Instance A: two chat sessions with workers, and a terminal on the
	// first that starts grandchildren of every escape shape.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A's workers cannot die of the built-in worker's watchdog or of stdin
	// EOF, so their end within a second is Pdeathsig's doing.
	a := startInstance(t, "A", stateDir, "--worker-cmd", self+" "+stubbornWorker)
	ca := dialChat(t, a)
	sid1, sid2 := session(t, ca), session(t, ca)
	// disown: bash, when the hangup reaches it before Pdeathsig's SIGKILL,
	// sends SIGHUP to its jobs; disowned jobs are the ones that leak.
	dialTerminal(t, a, sid1,
		`sleep 300 & setsid sleep 301 & setsid -w sleep 302 & (nohup sleep 303 >/dev/null 2>&1 &); disown -a`)
	// Wait until the tree is settled: four sleeps, the one setsid that
	// waits (-w), and no short-lived fork (the subshell, the forking
	// setsid) left. The admin API lists the terminal's descendants and
	// session members: they are among the leftovers.
	var leftovers map[int]testkit.Proc
	var w1, w2, pty testkit.APIWorker
	testkit.WaitFor(t, 20*time.Second, "the terminal's sleeps run, settled", func() bool {
		leftovers = map[int]testkit.Proc{}
		count := map[string]int{}
		for pid, p := range instanceProcs(t, a) {
			count[p.Comm]++
			if p.Comm == "sleep" || p.Comm == "setsid" {
				leftovers[pid] = p
			}
		}
		if count["sleep"] != 4 || count["setsid"] != 1 {
			return false
		}
		w1, w2, pty = workerOf(t, a, "chat", sid1), workerOf(t, a, "chat", sid2), workerOf(t, a, "pty", sid1)
		// every leftover: sleep 300, setsid -w and its sleep (by parent),
		// sleep 303 (in the terminal's session) and sleep 301 (its own
		// session, claimed by the marker it carries)
		if len(pty.Children) != len(leftovers) {
			return false
		}
		for _, c := range pty.Children {
			if _, ok := leftovers[c]; !ok {
				return false
			}
		}
		return true
	})
	direct := []int{w1.PID, w2.PID, pty.PID}
	t.Logf("A: workers %v, leftovers %v", direct, slices.Sorted(maps.Keys(leftovers)))

	// Instance B: a live neighbour on the same state dir, with its own worker.
	b := startInstance(t, "B", stateDir)
	cb := dialChat(t, b)
	sid3 := session(t, cb)
	wb := workerOf(t, b, "chat", sid3)

	// SIGKILL A: its direct children die with it.
	killed := time.Now()
	a.Kill()
	for _, pid := range direct {
		testkit.WaitFor(t, time.Until(killed.Add(time.Second)), fmt.Sprintf("A's child %d gone (Pdeathsig)", pid), func() bool { return goneReaped(pid) })
	}
	for pid, p := range leftovers {
		if goneReaped(pid) {
			t.Fatalf("%s %d died with A: nothing left for the sweep to prove", p.Comm, pid)
		}
	}

	// Instance C on the same state dir sweeps A's leftovers at start.
	c := startInstance(t, "C", stateDir)
	for pid := range leftovers {
		if p, err := testkit.ReadProc(pid); err == nil && !p.Dead() {
			t.Errorf("leftover %s %d still alive once C listens", p.Comm, pid)
		}
	}
	for pid := range leftovers {
		testkit.WaitFor(t, time.Until(c.Started.Add(time.Second)), fmt.Sprintf("leftover %d gone", pid), func() bool { return goneReaped(pid) })
	}
	swept := map[int]bool{}
	for _, rec := range c.Log.Records("worker closed") {
		if rec["reason"] != "startup_sweep" || rec["level"] != "INFO" || rec["instance"] != a.ID {
			t.Errorf("C logged %v", rec)
			continue
		}
		pid, _ := rec["worker_pid"].(float64)
		swept[int(pid)] = true
	}
	for pid, p := range leftovers {
		if !swept[pid] {
			t.Errorf("no startup_sweep record for %s %d", p.Comm, pid)
		}
	}
	if recs := c.Log.Records("startup sweep done"); len(recs) != 1 || recs[0]["dead_instances"] != float64(1) {
		t.Errorf("C's sweep summary: %v", recs)
	}
	if n := len(b.Log.Records("startup sweep done")); n != 0 {
		t.Errorf("B swept at start (%d records) though A was alive", n)
	}

	// B and its worker were left alone.
	if goneReaped(wb.PID) {
		t.Fatalf("B's worker %d was ended", wb.PID)
	}
	if out, err := cb.Slash(t.Context(), sid3, "/echo still"); err != nil || out != "still" {
		t.Errorf("B's session answered %q, %v", out, err)
	}
	if now := workerOf(t, b, "chat", sid3); now.PID != wb.PID {
		t.Errorf("B's worker changed from %d to %d", wb.PID, now.PID)
	}

	// A clean SIGTERM: each exits 0 and leaves no child.
	cc := dialChat(t, c)
	sid4 := session(t, cc)
	wc := workerOf(t, c, "chat", sid4)
	for name, in := range map[string]*testkit.Instance{"B": b, "C": c} {
		if code := stop(t, in); code != 0 {
			t.Errorf("%s exited %d after SIGTERM (%v)\n%s", name, code, in.WaitErr(), in.Log.Tail(60))
		}
		if left := instanceProcs(t, in); len(left) != 0 {
			t.Errorf("%s left processes %v", name, left)
		}
	}
	for _, pid := range []int{wb.PID, wc.PID} {
		if !goneReaped(pid) {
			t.Errorf("worker %d outlived its instance", pid)
		}
	}
	var left []testkit.Proc
	if !testkit.Until(5*time.Second, func() bool {
		desc, err := testkit.Descendants(os.Getpid())
		left = slices.DeleteFunc(desc, func(p testkit.Proc) bool { return before[[2]uint64{uint64(p.PID), p.Start}] })
		for _, p := range left {
			goneReaped(p.PID)
		}
		return err == nil && len(left) == 0
	}) {
		t.Fatalf("descendants left after 5s: %+v", left)
	}
}
