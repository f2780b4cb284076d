package workers

import (
	"fmt"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// CPU priority of the children (issue 28). When the children saturate the
// CPU, the gateway must keep its share: an admin must still see and reap
// them, a quiet socket must still be answered. Linux keeps the nice value
// and the scheduling policy per thread, and a forked child inherits them
// from the thread that forked it (sched(7)); so each priority gets a
// spawning thread of its own, set once to that priority, and every child it
// forks (and whatever that child starts, each of its threads) starts with
// it, before its first instruction: no window at the parent's priority, no
// thread left out, as a renice of the pid after the start would (it changes
// one thread, and the Go runtime of a worker has several by then).
// Pdeathsig and the cgroup (CLONE_INTO_CGROUP) are set by that same fork,
// as before.

// ChildSched is a Linux scheduling policy of the children (--child-sched).
type ChildSched string

const (
	SchedOther ChildSched = "other" // SCHED_OTHER: the default time sharing
	SchedBatch ChildSched = "batch" // SCHED_BATCH: as other, but never preempts a waking gateway thread
	SchedIdle  ChildSched = "idle"  // SCHED_IDLE: runs only on CPU time no other thread wants
)

// DefaultChildNice, DefaultChildSched and DefaultChildCPUWeight are the
// defaults of --child-nice, --child-sched and --child-cpu-weight. Idle
// because nice alone does not hold the gateway: 300 runnable workers at
// nice 10 (weight 110 each) still outweigh its few threads (1024 each)
// thirty to one, and at nice 19 its own spawns starve (BENCHMARKS.md,
// issue 28); the nice value counts where --child-sched other is chosen.
const (
	DefaultChildNice      = 10
	DefaultChildSched     = SchedIdle
	DefaultChildCPUWeight = 20
)

// ParseChildSched parses other, batch or idle.
func ParseChildSched(s string) (ChildSched, error) {
	switch p := ChildSched(s); p {
	case SchedOther, SchedBatch, SchedIdle:
		return p, nil
	}
	return "", fmt.Errorf("--child-sched %q: want other, batch or idle", s)
}

func (p ChildSched) policy() uint32 {
	switch p {
	case SchedBatch:
		return unix.SCHED_BATCH
	case SchedIdle:
		return unix.SCHED_IDLE
	}
	return unix.SCHED_NORMAL
}

// Priority is the CPU priority children start with: a nice value (0 to 19,
// added to nothing: it is the value, not an increment over dashgate's) and
// a policy ("" is SchedOther). The zero value leaves them as dashgate is.
type Priority struct {
	Nice  int
	Sched ChildSched
}

func (p Priority) zero() bool { return p.Nice == 0 && (p.Sched == "" || p.Sched == SchedOther) }

// apply sets the calling thread's policy and nice value (sched_setattr on
// its tid). The calling goroutine must be locked to its thread.
func (p Priority) apply() error {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: p.Sched.policy(), Nice: int32(p.Nice)}
	if err := unix.SchedSetAttr(unix.Gettid(), &attr, 0); err != nil {
		return fmt.Errorf("set the spawning thread's priority (nice %d, %s): %w", p.Nice, p.Sched, err)
	}
	return nil
}

// spawner is one spawning thread (spawnLoop) and the priority it has.
type spawner struct {
	reqs    chan func()
	err     error // why its priority could not be set: it then starts no child
	capsErr error // why it could not drop the capabilities children would inherit (dropInheritedCaps)
}

var (
	spawnersMu sync.Mutex
	spawners   = map[Priority]*spawner{} // one per priority, never removed; guarded by spawnersMu
)

// spawnerFor returns the spawning thread of priority p, started on first
// use; it lives as long as the process (Pdeathsig is tied to it).
func spawnerFor(p Priority) *spawner {
	if p.zero() {
		p = Priority{}
	}
	spawnersMu.Lock()
	defer spawnersMu.Unlock()
	s := spawners[p]
	if s == nil {
		s = &spawner{reqs: make(chan func())}
		spawners[p] = s
		ready := make(chan struct{})
		go spawnLoop(p, s, ready)
		<-ready
	}
	return s
}

// spawnLoop is a spawning goroutine; it never returns.
func spawnLoop(p Priority, s *spawner, ready chan<- struct{}) {
	runtime.LockOSThread() // never unlocked: see the Pdeathsig note in proc.go
	s.capsErr = dropInheritedCaps()
	if !p.zero() {
		s.err = p.apply()
	}
	close(ready)
	for f := range s.reqs {
		f()
	}
}

// run runs f on s's thread and waits for it.
func (s *spawner) run(f func()) {
	done := make(chan struct{})
	s.reqs <- func() { defer close(done); f() }
	<-done
}
