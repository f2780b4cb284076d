package workers

import (
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSelfChildrenFromForkThreads: selfChildPIDs lists each kind of
// dashgate's child (a Manager's, one Start forked on a thread other than
// the leader, an orphan adopted) from the children files of the leader
// and the threads that forked, not of every thread: with 64 threads more
// (a terminal's reader each holds one), it reads as few files as before.
func TestSelfChildrenFromForkThreads(t *testing.T) {
	m, _ := newTestManager(t, Config{})
	p, err := m.Start(Spec{Kind: KindPTY, SessionID: "s-kids", Path: "/bin/sleep", Args: []string{"60"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ReasonShutdown)

	// 64 threads, each held by a goroutine locked to it; Start runs on
	// the first of them that is not the leader.
	const extra = 64
	release := make(chan struct{})
	var held, done sync.WaitGroup
	started := make(chan *exec.Cmd, 1)
	var startErr error
	var once sync.Once
	var wait func() error
	for range extra {
		held.Add(1)
		done.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if unix.Gettid() != unix.Getpid() {
				once.Do(func() {
					cmd := exec.Command("sleep", "60")
					wait, startErr = Start(cmd)
					started <- cmd
				})
			}
			held.Done()
			<-release
		})
	}
	held.Wait()
	defer done.Wait()
	defer close(release)
	helper := <-started
	if startErr != nil {
		t.Fatal(startErr)
	}
	defer func() { helper.Process.Kill(); wait() }()

	// The orphan: sh starts sleep and exits; sleep comes to the test
	// process, a subreaper (TestMain).
	out, err := Output(exec.Command("sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"))
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("orphan's pid: %q", out)
	}
	defer func() {
		unix.Kill(orphan, unix.SIGKILL)
		var ws unix.WaitStatus
		unix.Wait4(orphan, &ws, 0, nil)
	}()

	n0 := childrenFilesRead.Load()
	all := childPIDs(nil, "self")
	everyThread := childrenFilesRead.Load() - n0
	n0 = childrenFilesRead.Load()
	kids := selfChildPIDs(nil)
	read := childrenFilesRead.Load() - n0
	for _, c := range []struct {
		what string
		pid  int
	}{{"the Manager's child", p.PID()}, {"Start's child", helper.Process.Pid}, {"the adopted orphan", orphan}} {
		if !slices.Contains(all, c.pid) {
			t.Fatalf("%s (%d) is not among every thread's children %v: the test's setup is wrong", c.what, c.pid, all)
		}
		if !slices.Contains(kids, c.pid) {
			t.Errorf("%s (%d) is not among selfChildPIDs %v", c.what, c.pid, kids)
		}
	}
	// Each forking thread is known, the Manager's spawning thread too,
	// and the orphans are found in the leader's file, whatever threads
	// forked.
	var spawnTID int
	spawnerFor(Priority{}).run(func() { spawnTID = unix.Gettid() })
	forkThreads.Lock()
	known := slices.Clone(forkThreads.tids)
	forkThreads.tids = nil
	forkThreads.Unlock()
	leaderOnly := selfChildPIDs(nil)
	forkThreads.Lock()
	forkThreads.tids = append(forkThreads.tids, known...)
	forkThreads.Unlock()
	if !slices.Contains(known, strconv.Itoa(spawnTID)) {
		t.Errorf("the Manager's spawning thread %d is not among the forking threads %v", spawnTID, known)
	}
	if !slices.Contains(leaderOnly, orphan) {
		t.Errorf("the adopted orphan (%d) is not among the leader's children %v", orphan, leaderOnly)
	}
	if everyThread < extra {
		t.Fatalf("every thread's children: %d files read, want over %d (the threads held)", everyThread, extra)
	}
	if read > everyThread/8 {
		t.Errorf("selfChildPIDs read %d children files of %d threads', want the leader's and the forking threads' only", read, everyThread)
	}
}
