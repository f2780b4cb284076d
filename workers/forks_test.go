package workers

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dashgate/dashgate/internal/testkit"
)

// While spawns queue for spawnMu (forks waiting for their CPU on a
// saturated machine), a child that died is still waited for and its
// Close still ends: neither needs the fork lock, only the registry's.
func TestCloseNotBehindQueuedSpawns(t *testing.T) {
	m, lb := newTestManager(t, Config{})
	w := startWorker(t, m, helperSpec(t, "proto"))
	pid := ping(t, w)

	spawnMu.Lock() // the queue of spawns: held, no fork begun
	unlocked := false
	unlock := func() {
		if !unlocked {
			unlocked = true
			spawnMu.Unlock()
		}
	}
	t.Cleanup(unlock)

	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	done := make(chan CloseResult, 1)
	go func() { done <- w.Close(ReasonDetach) }()
	res := testkit.Recv(t, 10*time.Second, "Close while spawns hold spawnMu", done)
	unlock()
	if res.Signal != "SIGKILL" {
		t.Errorf("result %+v: want signal SIGKILL (the exit status waited for)", res)
	}
	if !testkit.Reaped(pid) {
		t.Errorf("pid %d not reaped", pid)
	}
	if recs := lb.Records("worker not reaped"); len(recs) > 0 {
		t.Errorf("ERROR records: %v", recs)
	}
}

// lockSettled returns only once the fork in flight at its call registered
// its child: a reader that listed dashgate's children then finds that
// child registered, not an orphan to reap.
func TestLockSettledWaitsForForkInFlight(t *testing.T) {
	const fake = -7 // no process has it
	spawnMu.Lock()
	beginFork()
	got := make(chan bool, 1)
	go func() {
		lockSettled()
		registered := unreaped[fake] > 0
		regMu.Unlock()
		got <- registered
	}()
	testkit.WaitFor(t, 10*time.Second, "the reader waits in lockSettled", func() bool {
		select {
		case r := <-got:
			got <- r
			return true // returned with the fork in flight: failed below
		default:
		}
		buf := make([]byte, 1<<20)
		st := string(buf[:runtime.Stack(buf, true)])
		for _, g := range strings.Split(st, "\n\n") {
			if strings.Contains(g, "workers.lockSettled") && strings.Contains(g, "sync.(*Cond).Wait") {
				return true
			}
		}
		return false
	})
	endFork(func() { unreaped[fake]++ })
	spawnMu.Unlock()
	registered := <-got
	regMu.Lock()
	delete(unreaped, fake)
	regMu.Unlock()
	if !registered {
		t.Errorf("lockSettled returned before the fork in flight registered its child")
	}
}
