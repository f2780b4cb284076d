package workers

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// CPU priority of the children (issue 28). When the children saturate the
// CPU, the gateway must keep its share: an admin must still see and reap
// them, a quiet socket must still be answered. Linux keeps the nice value
// and the scheduling policy per thread, and a new thread or process
// inherits them from the thread that made it (sched(7)). So:
//
//   - SCHED_BATCH, for batch and idle, is the spawning thread's: there is
//     one per policy, set once, and every child it forks has it from its
//     first instruction, each thread and each descendant of it too;
//     Pdeathsig and the cgroup (CLONE_INTO_CGROUP) are set by that same
//     fork, as before;
//   - the nice value and SCHED_IDLE are set after the fork returns (the
//     child has exec'd), before Start returns, on every thread of the
//     child and of what it started, pass after pass until none is left
//     without them. Not on the spawning thread: the fork's own work and
//     the child's until its exec would then run at that priority, with
//     spawnMu held, and on a saturated CPU every spawn queued behind one
//     that waits for its turn (at SCHED_IDLE seconds; at nice 19 the
//     churn of sessions fell by a fifth; BENCHMARKS.md, issues 28 and 43).
//     What the child forks in the moment between its exec and that pass
//     keeps the inherited priority.
//
// A renice of the pid after the start, instead, misses the threads: the
// Go runtime of a worker has several by then.

// ChildSched is a Linux scheduling policy of the children (--child-sched).
type ChildSched string

const (
	SchedOther ChildSched = "other" // SCHED_OTHER: the default time sharing
	SchedBatch ChildSched = "batch" // SCHED_BATCH: as other, but never preempts a waking gateway thread
	SchedIdle  ChildSched = "idle"  // SCHED_IDLE: runs only on CPU time no other thread wants
)

// DefaultChildSched and DefaultChildCPUWeight are the defaults of
// --child-sched and --child-cpu-weight; --child-nice's is AutoChildNice.
// The policy is dashgate's own by default: SCHED_IDLE holds the gateway
// best when its children saturate the CPU, but it also starves a user's
// shell whenever anything else on the machine runs (BENCHMARKS.md, issue
// 28): it is for a machine that runs nothing but dashgate. (Children
// killed at SCHED_IDLE once outlived the SIGKILL wait; a close now
// restores dashgate's own priority first: restoreTree.) The cgroup
// weight, where the cpu controller is delegated, favours the gateway only
// while it wants the CPU, and is on.
const (
	DefaultChildSched     = SchedOther
	DefaultChildCPUWeight = 20
)

// AutoChildNice is the children's nice value when --child-nice is auto:
// 19 where the kernel shares the CPU between sessions first (autogroup,
// sched(7): on by default, /proc/sys/kernel/sched_autogroup_enabled),
// else 0, dashgate's own.
//
// With autogroups a nice value ranks a thread only against the threads of
// its own session's group. The workers stay in dashgate's session (their
// own process group), so at 19 they yield to the gateway and to nothing
// else on the machine: another user's build, in another session, competes
// with dashgate's whole group as before. A terminal program starts a
// session of its own, where its nice value ranks it against nothing but
// its own processes: with auto, dashgate leaves it at its own
// (Config.PTYPriority), which spares each terminal's start and close a
// pass over its threads (terminal connect p99 +38 % with it). Under 300
// streaming workers the quiet call's p99 fell from 194 to 35 ms and the
// admin page's from 594 to 216, the load's deltas undiminished
// (BENCHMARKS.md, issue 43). Without autogroups a nice value ranks the
// children against every process of the machine, and dashgate leaves it
// at 0.
func AutoChildNice() int {
	b, err := os.ReadFile("/proc/sys/kernel/sched_autogroup_enabled")
	if err != nil || strings.TrimSpace(string(b)) != "1" {
		return 0
	}
	return 19
}

// DefaultGatewaySlice is --gateway-slice's default: the scheduling slice
// dashgate's own threads ask the kernel for (SetGatewaySlice).
const DefaultGatewaySlice = 300 * time.Microsecond

// ErrSliceIgnored is SetGatewaySlice's answer on a kernel that keeps its
// own slice (before Linux 6.12's EEVDF): nothing changed.
var ErrSliceIgnored = errors.New("the kernel ignores a thread's requested slice (sched_runtime of SCHED_OTHER: Linux 6.12 and later)")

// SetGatewaySlice asks the kernel for a slice of d (sched_setattr(2)'s
// sched_runtime, clamped by the kernel to 0.1–100 ms; 0: the kernel's
// default) for every thread of dashgate but the spawning ones, pass after
// pass until none is left without it: a thread the Go runtime makes later
// inherits it from the thread that made it. Each thread keeps its policy
// and nice value.
//
// EEVDF gives a waking thread a deadline one slice ahead and runs the
// earliest eligible deadline first, so a short slice is a short wait for
// a CPU: a gateway thread woken by a quiet socket's frame runs before the
// busy threads around it, which the default slice (0.7 ms times 1 plus
// the log2 of the CPUs) left waiting for rounds of theirs. The share of
// the CPU is the weight's (the nice value), not the slice's. The spawning
// threads keep the kernel's default (spawnLoop), so children start with
// it, as anything else on the machine. Under 300 streaming workers on 2
// cores the quiet call's p99 fell from 23.6 to 14.7 ms, and a gateway's
// GET /healthz from 26.2 to 17.4, at the same CPU (5 runs each,
// BENCHMARKS.md, issue 43).
//
// It returns ErrSliceIgnored when the kernel reads the slice back
// unchanged, and the first other error of a pass.
func SetGatewaySlice(d time.Duration) error {
	forkThreads.Lock()
	skip := slices.Clone(forkThreads.tids)
	forkThreads.Unlock()
	want := uint64(d.Nanoseconds())
	for pass := 0; pass < 100; pass++ {
		changed := false
		for _, tid := range tasksOf(os.Getpid()) {
			if slices.Contains(skip, strconv.Itoa(tid)) {
				continue
			}
			cur, err := unix.SchedGetAttr(tid, 0)
			if err != nil {
				continue // gone
			}
			if !fairPolicy(cur.Policy) || d > 0 && cur.Runtime == want {
				continue // a real-time or deadline thread has no slice to ask for
			}
			attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: cur.Policy, Nice: cur.Nice, Runtime: want}
			if err := unix.SchedSetAttr(tid, &attr, 0); err != nil {
				if errors.Is(err, unix.ESRCH) {
					continue
				}
				return fmt.Errorf("slice %v for thread %d: %w", d, tid, err)
			}
			if d == 0 {
				continue // nothing to read back: the kernel's own
			}
			if got, err := unix.SchedGetAttr(tid, 0); err == nil && got.Runtime != want {
				return ErrSliceIgnored
			}
			changed = true
		}
		if !changed {
			return nil
		}
	}
	return fmt.Errorf("slice %v: dashgate's threads kept changing", d)
}

// defaultSlice gives the calling thread the kernel's default slice (the
// thread that made it may have had the gateway's), its policy and nice
// value unchanged. The calling goroutine must be locked to its thread.
func defaultSlice() {
	if cur, err := unix.SchedGetAttr(0, 0); err == nil && fairPolicy(cur.Policy) {
		attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: cur.Policy, Nice: cur.Nice}
		unix.SchedSetAttr(0, &attr, 0)
	}
}

// fairPolicy reports whether policy is one of the fair scheduler's
// (SCHED_OTHER, SCHED_BATCH, SCHED_IDLE), the ones a slice is asked for
// with sched_runtime; a real-time or deadline policy reads it otherwise.
func fairPolicy(policy uint32) bool {
	return policy == unix.SCHED_NORMAL || policy == unix.SCHED_BATCH || policy == unix.SCHED_IDLE
}

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

// priorityOf is the priority of a child of kind k: PTYPriority for a pty
// program when set, else Priority.
func (c *Config) priorityOf(k Kind) Priority {
	if k == KindPTY && c.PTYPriority != nil {
		return *c.PTYPriority
	}
	return c.Priority
}

// inherited is what a child takes from its spawning thread: p's policy,
// with batch in place of idle, and dashgate's nice value.
func (p Priority) inherited() Priority {
	if p.Sched == SchedIdle {
		p.Sched = SchedBatch
	}
	return Priority{Sched: p.Sched}
}

// afterExec reports whether p is set on a child after it started
// (applyTree): a nice value, or SCHED_IDLE.
func (p Priority) afterExec() bool { return p.Nice != 0 || p.Sched == SchedIdle }

// apply sets the calling thread's policy and nice value (sched_setattr on
// its tid). The calling goroutine must be locked to its thread.
func (p Priority) apply() error {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: p.Sched.policy(), Nice: int32(p.Nice)}
	if err := unix.SchedSetAttr(unix.Gettid(), &attr, 0); err != nil {
		return fmt.Errorf("set the spawning thread's priority (nice %d, %s): %w", p.Nice, p.Sched, err)
	}
	return nil
}

// applyTree sets p on every thread of pid and of its descendants, pass
// after pass until a pass finds none to change: a thread a child creates
// meanwhile inherits its creator's priority, so once every thread has p,
// every later one has it too. A process that is gone meanwhile is skipped.
func (p Priority) applyTree(pid int) error {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: p.Sched.policy(), Nice: int32(p.Nice)}
	for pass := 0; pass < 100; pass++ {
		changed := false
		var firstErr error
		for _, proc := range treeOf(pid) {
			for _, tid := range tasksOf(proc) {
				cur, err := unix.SchedGetAttr(tid, 0)
				if err != nil {
					continue // gone
				}
				if cur.Policy == attr.Policy && cur.Nice == attr.Nice {
					continue
				}
				err = unix.SchedSetAttr(tid, &attr, 0)
				if err == nil && attr.Policy == unix.SCHED_IDLE && cur.Nice != attr.Nice {
					// sched_setattr(2) leaves the nice value of a thread it
					// makes SCHED_IDLE as it was; setpriority sets it.
					err = unix.Setpriority(unix.PRIO_PROCESS, tid, p.Nice)
				}
				if err != nil {
					if !errors.Is(err, unix.ESRCH) && firstErr == nil {
						firstErr = fmt.Errorf("nice %d, %s for thread %d of %d: %w", p.Nice, p.Sched, tid, proc, err)
					}
					continue
				}
				changed = true
			}
		}
		if firstErr != nil {
			return firstErr
		}
		if !changed {
			return nil
		}
	}
	return fmt.Errorf("nice %d, %s for %d: its threads kept changing", p.Nice, p.Sched, pid)
}

// ownPriority is dashgate's own policy and nice value, read once from a
// thread that is not a spawning one (those have the children's).
var ownPriority = sync.OnceValue(func() unix.SchedAttr {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL}
	if cur, err := unix.SchedGetAttr(0, 0); err == nil {
		attr.Policy, attr.Nice = cur.Policy, cur.Nice
	}
	return attr
})

// restoreTree gives every thread of pid and of its descendants dashgate's
// own priority, once, before a close signals them: a process killed at
// SCHED_IDLE or a high nice value waits for the CPU to exit (each of its
// threads ends at its own priority, and wait(2) returns only once all
// have), and on a CPU saturated by the gateway's own closes it outlived
// killWait (BENCHMARKS.md, issue 28). Errors are ignored: without
// CAP_SYS_NICE a process may not leave SCHED_IDLE nor lower its nice value
// (sched(7)), and then it ends at the priority it has.
func restoreTree(pid int) {
	attr := ownPriority()
	for _, proc := range treeOf(pid) {
		for _, tid := range tasksOf(proc) {
			unix.SchedSetAttr(tid, &attr, 0)
		}
	}
}

// tasksOf lists the thread ids of pid (none when it is gone).
func tasksOf(pid int) []int {
	es, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	out := make([]int, 0, len(es))
	for _, e := range es {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, tid)
		}
	}
	return out
}

// treeOf is pid and its descendants, from /proc/<pid>/task/<tid>/children.
func treeOf(pid int) []int {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		for _, tid := range tasksOf(out[i]) {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(out[i]) + "/task/" + strconv.Itoa(tid) + "/children")
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil && !slices.Contains(out, c) {
					out = append(out, c)
				}
			}
		}
	}
	return out
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
	noteForkThread()
	s.capsErr = dropInheritedCaps()
	if !p.zero() {
		s.err = p.apply() // with the kernel's default slice
	} else {
		// Best effort: a child that keeps the gateway's slice has a
		// shorter wait for a CPU and the same share of it.
		defaultSlice()
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
