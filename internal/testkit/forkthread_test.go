package testkit

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tiedHelperEnv makes this test binary TestStartTiedHelper's process.
const tiedHelperEnv = "DASHGATE_TESTKIT_TIED_HELPER"

// TestStartTiedEndsWithTheBinary: a child started through startTied (as
// Start starts dashgate) outlives the end of the thread of the goroutine
// that asked for it, and ends once the test binary that started it is
// killed. A helper process (this binary again) starts `sleep 300` from a
// goroutine locked to its thread that then exits without unlocking (Go
// ends that thread), says so, and is SIGKILLed.
func TestStartTiedEndsWithTheBinary(t *testing.T) {
	helper := exec.Command(os.Args[0], "-test.run=^TestStartTiedHelper$")
	helper.Env = append(os.Environ(), tiedHelperEnv+"=1")
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { helper.Process.Kill(); helper.Wait() })
	var sleep int
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		if v, ok := strings.CutPrefix(lines.Text(), "tied-sleep "); ok {
			sleep, _ = strconv.Atoi(v)
			break
		}
	}
	if sleep == 0 {
		t.Fatalf("the helper did not start its sleep: %v", lines.Err())
	}
	t.Cleanup(func() { unix.Kill(sleep, unix.SIGKILL) })
	if Gone(sleep) {
		t.Fatal("the sleep ended with the thread of the goroutine that started it")
	}
	helper.Process.Kill()
	helper.Wait()
	WaitFor(t, 10*time.Second, "the sleep ended after its test binary was killed", func() bool { return Gone(sleep) })
}

// TestStartTiedHelper is TestStartTiedEndsWithTheBinary's helper process:
// it prints "tied-sleep PID" once the goroutine that started the sleep
// has exited locked to its thread and that thread is gone, then waits to
// be killed.
func TestStartTiedHelper(t *testing.T) {
	if os.Getenv(tiedHelperEnv) == "" {
		t.Skip("the helper process of TestStartTiedEndsWithTheBinary")
	}
	type started struct{ pid, tid int }
	ch := make(chan started)
	var s started
	for {
		go func() {
			runtime.LockOSThread() // never unlocked: Go ends this thread when the goroutine returns
			if unix.Gettid() == unix.Getpid() {
				// The main thread, which Go never ends: try another.
				runtime.UnlockOSThread()
				ch <- started{}
				return
			}
			cmd := exec.Command("/bin/sleep", "300")
			if err := startTied(cmd, syscall.SIGTERM); err != nil {
				panic(err)
			}
			ch <- started{cmd.Process.Pid, unix.Gettid()}
		}()
		if s = <-ch; s.pid != 0 {
			break
		}
	}
	WaitFor(t, 10*time.Second, "the locked thread ended", func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", s.tid))
		return os.IsNotExist(err)
	})
	fmt.Printf("tied-sleep %d\n", s.pid)
	select {}
}
