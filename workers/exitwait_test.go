package workers

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

// A child being waited for holds no OS thread (awaitExit): 32 waiting
// children add far fewer than 32 threads to dashgate, whether a Manager's
// (Proc.wait) or another fork's (Start), and each wait still returns once
// its child ends.
func TestWaitingChildrenHoldNoThreads(t *testing.T) {
	const children = 32
	t.Run("Start", func(t *testing.T) {
		testWaitsHoldNoThreads(t, "workers.Start.func", children, func() (end func()) {
			cmd := exec.Command("sleep", "60")
			wait, err := Start(cmd)
			if err != nil {
				t.Fatal(err)
			}
			waited := make(chan error, 1)
			go func() { waited <- wait() }()
			return func() {
				cmd.Process.Kill()
				if err := <-waited; err == nil || !strings.Contains(err.Error(), "killed") {
					t.Errorf("wait of a killed child: %v, want signal: killed", err)
				}
			}
		})
	})
	t.Run("Manager", func(t *testing.T) {
		m, _ := newTestManager(t, Config{})
		testWaitsHoldNoThreads(t, "workers.(*Proc).wait", children, func() (end func()) {
			p, err := m.Start(Spec{Kind: KindPTY, SessionID: "s-threads", Path: "/bin/sleep", Args: []string{"60"}})
			if err != nil {
				t.Fatal(err)
			}
			return func() {
				if res := p.Close(ReasonShutdown); res.Signals == nil {
					t.Errorf("close of a sleeping pty program: %+v, want it signalled", res)
				}
			}
		})
	})
}

// testWaitsHoldNoThreads starts n children with start, waits until the
// goroutine of each child's wait (its stack holding frame) is parked,
// checks the thread count, and ends them (end, which checks the wait's
// result).
func testWaitsHoldNoThreads(t *testing.T, frame string, n int, start func() (end func())) {
	before := threadCount(t)
	var ends []func()
	defer func() {
		for _, end := range ends {
			end()
		}
	}()
	for range n {
		ends = append(ends, start())
	}
	// Every wait has begun once n goroutines are in it and none is
	// runnable or running: each is parked on the poller (IO wait) or,
	// were it to block in waitid, in a system call.
	deadline := time.Now().Add(10 * time.Second)
	parked, other := waitStates(frame)
	for (parked+other != n || other > 0) && time.Now().Before(deadline) {
		runtime.Gosched()
		parked, other = waitStates(frame)
	}
	if grew := threadCount(t) - before; grew >= n/2 || other > 0 {
		t.Errorf("%d children waited for: %d more threads, %d waits parked on the poller, %d not (in a system call); want no thread per child",
			n, grew, parked, other)
	}
}

// waitStates counts the goroutines whose stack holds frame: parked on the
// poller, or not (in a system call, runnable, running).
func waitStates(frame string) (parked, other int) {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, frame) {
			continue
		}
		if strings.Contains(g, "[IO wait") {
			parked++
		} else {
			other++
		}
	}
	return parked, other
}

// threadCount is the number of this process's threads (/proc/self/task).
func threadCount(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
