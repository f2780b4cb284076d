package workers

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNotDescendant is returned by ReapUnowned for a pid that is neither an
// unowned descendant of dashgate nor a worker.
var ErrNotDescendant = errors.New("not an unowned descendant of dashgate")

// EnableSubreaper marks the calling process as a child subreaper
// (prctl(2), PR_SET_CHILD_SUBREAPER): orphaned descendants are reparented
// to it instead of to init, so dashgate sees and reaps them.
func EnableSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// reapOrphan reaps pid if it is a zombie child of dashgate that os/exec does
// not own (of any Manager: see unreaped). It never waits for any other pid.
// pid must have been seen before a lockSettled (a child of a fork still in
// flight is not registered yet).
func (m *Manager) reapOrphan(pid int) bool {
	regMu.Lock()
	defer regMu.Unlock()
	if unreaped[pid] > 0 {
		return false
	}
	var ws unix.WaitStatus
	got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	return err == nil && got == pid
}

// RunReaper reaps zombie orphans adopted by dashgate (see EnableSubreaper)
// every interval and ReapCoalesce after a SIGCHLD, until ctx is done. It
// blocks.
func (m *Manager) RunReaper(ctx context.Context, interval time.Duration) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	defer signal.Stop(sigs)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	pause := time.NewTimer(ReapCoalesce)
	pause.Stop() // armed by a SIGCHLD (Reset); Go 1.23 timers keep no stale tick
	all := true  // the first pass and each tick read every thread's children
	for {
		m.reapZombieOrphans(all)
		all = false
		select {
		case <-ctx.Done():
			return
		case <-sigs:
			// One scan covers the SIGCHLDs of a burst (a tree ending, a
			// close per connect): each scan reads a children file per
			// thread, which at a terminal per few ms was a fifth of
			// dashgate's CPU (BENCHMARKS.md, issue 18).
			pause.Reset(ReapCoalesce)
			select {
			case <-ctx.Done():
				return
			case <-pause.C:
			}
		case <-tick.C:
			all = true
		}
	}
}

// ReapCoalesce is how long RunReaper waits after a SIGCHLD before it
// scans: an adopted orphan's zombie lingers at most that much longer, and
// the SIGCHLDs meanwhile cost one scan.
const ReapCoalesce = 25 * time.Millisecond

// reapZombieOrphans reaps dashgate's zombie orphans and, when this process
// holds the Manager's instance, records the live ones in the instance's
// directory (Instance.recordAdopted) for the Sweep after a crash. It
// reads the stat of the children os/exec does not own only: the others
// are reaped by their own Wait (300 workers' stat files at every scan
// were a sixth of a loaded gateway's CPU; BENCHMARKS.md, issue 28).
func (m *Manager) reapZombieOrphans(all bool) {
	kids := childrenOfSelf(all)
	lockSettled() // a child listed above is registered by now
	kids = slices.DeleteFunc(kids, func(pid int) bool { return unreaped[pid] > 0 })
	regMu.Unlock()
	stat := m.statOrphan
	if stat == nil {
		stat = readStat
	}
	var adopted []int
	for _, pid := range kids {
		st, ok := stat(pid)
		switch {
		case ok && st.zombie():
			m.reapOrphan(pid)
		case ok:
			adopted = append(adopted, pid)
		}
	}
	in := heldInstance(m.cfg.Instance)
	if in == nil {
		return
	}
	if err := in.recordAdopted(adopted); err != nil {
		m.log.Warn("adopted processes not recorded", "instance", in.ID, "err", err)
	}
}

// childrenOfSelf lists dashgate's children from the children files of
// its threads (proc(5); a child is listed under the thread that forked
// it, an adopted orphan under the thread group leader): of those that can
// have any (selfChildPIDs), or with all of every thread's, which also
// finds a child forked outside Start and the spawning threads; or by
// scanning /proc when that file is missing.
func childrenOfSelf(all bool) []int {
	var out []int
	if all {
		out = childPIDs(nil, "self")
	} else {
		out = selfChildPIDs(nil)
	}
	if len(out) > 0 || taskChildrenFiles() {
		return out
	}
	self := os.Getpid()
	for _, st := range listProcs() {
		if st.ppid == self {
			out = append(out, st.pid)
		}
	}
	return out
}

// taskChildrenFiles reports whether this kernel has the children files
// (CONFIG_PROC_CHILDREN).
func taskChildrenFiles() bool {
	return unix.Access("/proc/self/task/"+strconv.Itoa(unix.Gettid())+"/children", unix.R_OK) == nil
}

// Unowned is a descendant of dashgate that no live child's tree claims: an
// orphan adopted through the subreaper, or a zombie not yet reaped.
type Unowned struct {
	PID    int
	PPID   int
	State  string // one letter of proc(5), "Z" for a zombie
	Marker string // DASHGATE_WORKER_ID it carries, if any
}

// Unowned lists the descendants of dashgate that belong to no live child.
func (m *Manager) Unowned() []Unowned {
	self := os.Getpid()
	procs := ownDescendants()
	children := newChildIndex(procs) // one index for every walk: one per child was 300 maps of the whole listing a snapshot
	desc := children.descendants(self)
	m.mu.Lock()
	owners := make([]int, 0, len(m.procs))
	markers := make(map[string]bool, len(m.procs))
	var cgroups []*cgroup
	for pid, p := range m.procs {
		owners = append(owners, pid)
		markers[p.marker] = true
		if p.cg != nil {
			cgroups = append(cgroups, p.cg)
		}
	}
	m.mu.Unlock()
	owned := make(map[int]bool, len(procs))
	for _, pid := range owners {
		owned[pid] = true
		children.addDescendants(owned, pid)
	}
	for _, g := range cgroups { // a member of a child's cgroup is that child's, wherever it went
		for _, pid := range g.procs() {
			owned[pid] = true
		}
	}
	var out []Unowned
	for _, st := range procs {
		if !desc[st.pid] || owned[st.pid] {
			continue
		}
		marker := environValue(st.pid, EnvWorkerID)
		if markers[marker] {
			continue // it left its worker's group, but the worker's tree still claims it
		}
		out = append(out, Unowned{PID: st.pid, PPID: st.ppid, State: string(st.state), Marker: marker})
	}
	return out
}

// ReapUnowned ends an unowned descendant of dashgate: its process group and
// itself get SIGTERM, then SIGKILL after the grace, and it is waited for
// when it is dashgate's child. Any other pid gets ErrNotDescendant and
// nothing is signalled. It blocks until the process is gone or killWait passed.
func (m *Manager) ReapUnowned(pid int) error {
	var target *Unowned
	for _, u := range m.Unowned() {
		if u.PID == pid {
			target = &u
			break
		}
	}
	if target == nil {
		return ErrNotDescendant
	}
	if target.State == "Z" {
		// Already dead, yet perhaps not waitable: a zombie whose other
		// threads are still exiting (node) fails one wait4, and dashgate
		// then exited leaving it to its own parent (seen in the e2e leak
		// check at shutdown). Poll as for a killed one.
		m.awaitPidGone(pid, killWait)
	} else {
		pgid, _ := unix.Getpgid(pid)
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
			if pgid > 1 && pgid != unix.Getpgrp() {
				unix.Kill(-pgid, sig)
			}
			unix.Kill(pid, sig)
			wait := m.cfg.Grace
			if sig == syscall.SIGKILL {
				wait = killWait
			}
			if m.awaitPidGone(pid, wait) {
				break
			}
		}
	}
	m.reapOrphan(pid)
	return nil
}

// awaitPidGone polls until pid is gone and, when it is dashgate's zombie,
// reaped; it reports whether that happened within d. A zombie whose other
// threads are still exiting cannot be waited for yet, so one try is not
// enough.
func (m *Manager) awaitPidGone(pid int, d time.Duration) bool {
	self := os.Getpid()
	deadline := time.Now().Add(d)
	for {
		st, ok := readStat(pid)
		switch {
		case !ok:
			return true
		case st.zombie() && st.ppid != self:
			return true // someone else's to reap
		case st.zombie() && m.reapOrphan(pid):
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		t := time.NewTimer(5 * time.Millisecond)
		<-t.C
	}
}

// Procs returns the live children, in no order.
func (m *Manager) Procs() []*Proc {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*Proc, 0, len(m.procs))
	for _, p := range m.procs {
		out = append(out, p)
	}
	return out
}

// Lookup returns the live child with that pid, or nil.
func (m *Manager) Lookup(pid int) *Proc {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.procs[pid]
}

// Count is the number of live children.
func (m *Manager) Count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.procs)
}

// CloseAll closes every live child concurrently with reason and waits.
func (m *Manager) CloseAll(reason Reason) {
	procs := m.Procs()
	done := make(chan struct{}, len(procs))
	for _, p := range procs {
		go func() { p.Close(reason); done <- struct{}{} }()
	}
	for range procs {
		<-done
	}
}

// Wait joins the goroutines of every child that was closed. Call it after
// CloseAll at shutdown and at the end of tests.
func (m *Manager) Wait() {
	m.wg.Wait()
	m.waitSnapshot()
}

// Descendants lists the pids of the live (non-zombie) members of the child's
// tree other than the leader.
func (p *Proc) Descendants() []int {
	var out []int
	for _, pid := range p.tree() {
		if pid != p.pid {
			out = append(out, pid)
		}
	}
	return out
}

// ReapAdopted ends every unowned process (Unowned: a descendant of
// dashgate, adopted as a subreaper, that no child owns: one that left its
// worker's or terminal's tree and marker, like `setsid env -i sleep 777 &`),
// concurrently, each with SIGTERM then SIGKILL after the grace, and waits.
// It logs one INFO "worker closed" record per process (`process=adopted`,
// the reason given) and returns how many it ended. dashgate calls it at
// shutdown, after CloseAll, so nothing reparented to it survives its exit.
func (m *Manager) ReapAdopted(reason Reason) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	n := 0
	for _, u := range m.Unowned() {
		wg.Go(func() {
			start := time.Now()
			if err := m.ReapUnowned(u.PID); err != nil {
				return // gone meanwhile
			}
			m.log.Info("worker closed", "sid", "", "worker_pid", u.PID, "process", "adopted",
				"reason", string(reason), "duration_ms", time.Since(start).Milliseconds())
			mu.Lock()
			n++
			mu.Unlock()
		})
	}
	wg.Wait()
	return n
}
