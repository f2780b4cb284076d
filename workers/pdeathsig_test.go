package workers

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dashgate/dashgate/internal/testkit"
)

func threadExists(tid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", tid))
	return err == nil
}

// onDyingThread runs f on a goroutine locked to a thread that exits when f
// returns, and returns that thread's id. The main thread is never used: Go
// wedges it rather than let it exit (runtime.mexit).
func onDyingThread(f func()) int {
	var holders []chan struct{}
	defer func() {
		for _, h := range holders {
			close(h)
		}
	}()
	for {
		tidc := make(chan int)
		release := make(chan bool)
		go func() {
			runtime.LockOSThread()
			tidc <- unix.Gettid()
			if <-release {
				f()
				return // locked: the thread exits with the goroutine
			}
		}()
		tid := <-tidc
		if tid != unix.Getpid() {
			release <- true
			return tid
		}
		// The main thread: keep it busy so the next goroutine gets another.
		hold := make(chan struct{})
		holders = append(holders, hold)
		go func() {
			<-hold
			release <- false
		}()
	}
}

// TestPdeathsigIsPerThread shows the hazard the spawning thread avoids: a
// child forked from a thread that then exits gets its Pdeathsig although
// the process lives on (prctl(2)).
func TestPdeathsigIsPerThread(t *testing.T) {
	cmd := exec.Command("sleep", "20")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var err error
	started := make(chan struct{})
	tid := onDyingThread(func() { err = cmd.Start(); close(started) })
	<-started
	if err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	testkit.WaitFor(t, 5*time.Second, "the forking thread to exit", func() bool { return !threadExists(tid) })
	testkit.WaitFor(t, 5*time.Second, "the child to get its Pdeathsig", func() bool { return testkit.Gone(cmd.Process.Pid) })
}

// TestStartSurvivesCallerThreadExit: a child started by Manager.Start from a
// goroutine whose thread then exits lives on; it dies with the process only.
func TestStartSurvivesCallerThreadExit(t *testing.T) {
	m := NewManager(Config{Grace: 200 * time.Millisecond})
	var p *Proc
	var err error
	started := make(chan struct{})
	tid := onDyingThread(func() {
		p, err = m.Start(Spec{Kind: KindChat, Path: "sleep", Args: []string{"60"}, Env: os.Environ()})
		close(started)
	})
	<-started
	if err != nil {
		t.Fatal(err)
	}
	s := struct{ p *Proc }{p}
	defer func() { s.p.Close(ReasonShutdown); m.Wait() }()
	testkit.WaitFor(t, 5*time.Second, "the caller's thread to exit", func() bool { return !threadExists(tid) })
	// Had the fork run on the caller's thread, the child would be dying now.
	select {
	case <-s.p.Exited():
		t.Fatal("the child died with its caller's thread")
	default:
	}
	if testkit.Gone(s.p.PID()) {
		t.Fatal("the child died with its caller's thread")
	}
}
