package workers

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
)

// TestOutputSurvivesTheOrphanReaper: a helper command run through Output
// keeps its exit status from the orphan reaper. The reaper's pass runs
// while the command is a zombie not yet waited for (the window in which
// a plain exec raced it: accounts' id(1) failed with ECHILD); Wait still
// gets the status and the output.
func TestOutputSurvivesTheOrphanReaper(t *testing.T) {
	m, _ := newTestManager(t, Config{})
	passes := 0
	outputStarted = func(pid int) {
		testkit.WaitFor(t, 10*time.Second, "the command to exit", func() bool {
			st, ok := readStat(pid)
			return ok && st.zombie()
		})
		m.reapZombieOrphans(true)
		passes++
	}
	t.Cleanup(func() { outputStarted = nil })
	out, err := Output(exec.Command("sh", "-c", "echo 100 1000; exit 0"))
	if err != nil {
		t.Fatalf("Output: %v (the reaper took the exit status?)", err)
	}
	if got := strings.TrimSpace(string(out)); got != "100 1000" || passes != 1 {
		t.Fatalf("Output = %q after %d reaper passes, want %q after 1", got, passes, "100 1000")
	}
	_, err = Output(exec.Command("sh", "-c", "echo why >&2; exit 3"))
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 3 || strings.TrimSpace(string(ee.Stderr)) != "why" {
		t.Fatalf("failing command: err = %v, want exit status 3 with stderr %q", err, "why")
	}
}

// TestUnexecdForkIsNoEscapee: a plain fork of dashgate's (not through
// Start) in the moment before its exec holds a copy of every descriptor,
// a worker's pipes and the fork mark among them; the worker's close must
// not take it for an escapee and kill it (a parallel test's groupdel got
// SIGTERM in CI that way). The fork is stood in for by a sleep given the
// worker's stdin pipe and the mark, as the fork's table has them; a holder
// of the pipe without the mark is ended (TestStartedChildIsNoEscapee).
func TestUnexecdForkIsNoEscapee(t *testing.T) {
	t.Parallel()
	if forkMark.name == "" {
		t.Fatal("no fork mark was made at start")
	}
	m, _ := newTestManager(t, Config{})
	p, err := m.Start(Spec{SessionID: "s-fork", Path: "/bin/sh", Args: []string{"-c", "exec sleep 30"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(ReasonShutdown) })
	fork := exec.Command("/bin/sleep", "300")
	fork.ExtraFiles = []*os.File{p.stdin, forkMark.f}
	if err := fork.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { fork.Wait(); close(done) }()
	t.Cleanup(func() { fork.Process.Kill(); <-done })
	if res := p.Close(ReasonShutdown); res.Descendants != 0 {
		t.Errorf("close result %+v: the fork counted as a descendant", res)
	}
	if isClosed(done) || testkit.Gone(fork.Process.Pid) {
		t.Fatalf("a fork holding the fork mark was ended by the worker's close: %v", fork.ProcessState)
	}
}

// TestStartedChildIsNoEscapee: a child of dashgate's own started through
// Start is never taken for a worker's escapee, although it holds a copy of
// the worker's pipes, as every fork does between its fork and its exec (a
// worker's close SIGKILLed a plain fork of a parallel test in that window:
// TestSweep's helper never wrote its pid file, in CI). The same child
// started by a plain exec is taken for one, as it should be: a process of
// no worker that holds a worker's pipes is judged by them.
func TestStartedChildIsNoEscapee(t *testing.T) {
	t.Parallel()
	m, _ := newTestManager(t, Config{})
	for _, through := range []string{"Start", "exec"} {
		p, err := m.Start(Spec{SessionID: "s-" + through, Path: "/bin/sh", Args: []string{"-c", "exec sleep 30"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close(ReasonShutdown) })
		child := exec.Command("/bin/sleep", "300")
		child.ExtraFiles = []*os.File{p.stdin} // the worker's stdin pipe
		var reaped <-chan struct{}
		if through == "Start" {
			reaped = startChild(t, child)
		} else {
			if err := child.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { child.Wait(); close(done) }()
			t.Cleanup(func() { child.Process.Kill(); <-done })
			reaped = done
		}
		p.Close(ReasonShutdown)
		switch {
		case through == "Start" && (testkit.Gone(child.Process.Pid) || isClosed(reaped)):
			t.Fatalf("a child started through Start was ended by the worker's close: %v", child.ProcessState)
		case through == "exec":
			testkit.WaitFor(t, 10*time.Second, "the plain exec holding the worker's pipe ended by its close", func() bool { return isClosed(reaped) })
		}
	}
}
