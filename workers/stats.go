package workers

import (
	"context"
	"os"
	"time"

	"github.com/shirou/gopsutil/v4/process"
)

func init() {
	// A process's CPU figure needs the boot time: read it once, not from
	// /proc/stat for every process of every snapshot (gopsutil's default).
	process.EnableBootTimeCache(true)
}

// Stats are a process's resource figures, read with gopsutil. Zero values
// mean the figure could not be read (the process went meanwhile).
type Stats struct {
	RSSBytes   uint64
	CPUPercent float64 // since the process started, 100 = one core
	NumFDs     int32
	NumThreads int32
}

// ReadStats reads the figures of pid. It reads /proc and never blocks on
// dashgate's locks; ctx bounds it.
func ReadStats(ctx context.Context, pid int) Stats {
	p, err := process.NewProcessWithContext(ctx, int32(pid))
	if err != nil {
		return Stats{}
	}
	var s Stats
	if mi, err := p.MemoryInfoWithContext(ctx); err == nil {
		s.RSSBytes = mi.RSS
	}
	if c, err := p.CPUPercentWithContext(ctx); err == nil {
		s.CPUPercent = c
	}
	if n, err := p.NumFDsWithContext(ctx); err == nil {
		s.NumFDs = n
	}
	if n, err := p.NumThreadsWithContext(ctx); err == nil {
		s.NumThreads = n
	}
	return s
}

// ProcInfo is one row of the process table.
type ProcInfo struct {
	PID         int
	Kind        Kind
	SessionID   string
	State       string // "running" or "closing"
	StartedAt   time.Time
	Descendants []int
	Stats
	// Cgroup is the child's cgroup directory and CgroupStats its figures;
	// "" and zero in the fallback.
	Cgroup      string
	CgroupStats CgroupStats
	// UnixUser is the Unix account the child runs as (Spec.Account's
	// Name); "" when it runs as dashgate.
	UnixUser string
	// ReadAt is when Stats, Descendants and CgroupStats were read: by
	// Snapshot, the start of the read they come from (zero for a child
	// started since, which has none); zero from Table, read just now.
	ReadAt time.Time
}

// Table lists every live child with its stats and descendants. The stats
// are read after the child list was copied, never under a lock.
func (m *Manager) Table(ctx context.Context) []ProcInfo {
	procs := m.Procs()
	if m.cfg.Cgroups != nil {
		return m.cgroupTable(ctx, procs)
	}
	all := ownDescendants() // one listing for every row
	// Descendants of dashgate that left their worker's group and parent are
	// found by their marker; only those are read (/proc/<pid>/environ).
	byMarker := make(map[string]int, len(procs))
	for _, p := range procs {
		byMarker[p.marker] = p.pid
	}
	claimedBy := map[int]int{}     // pid -> worker pid, by marker
	children := newChildIndex(all) // one index for every walk below
	for pid := range children.descendants(os.Getpid()) {
		if w, ok := byMarker[environValue(pid, EnvWorkerID)]; ok && w != pid {
			claimedBy[pid] = w
		}
	}
	out := make([]ProcInfo, 0, len(procs))
	for _, p := range procs {
		desc := children.descendants(p.pid)
		var tree []int
		for _, st := range all {
			if st.pid != p.pid && !st.zombie() && (desc[st.pid] || st.pgrp == p.pid ||
				(p.spec.Kind == KindPTY && st.sid == p.pid) || claimedBy[st.pid] == p.pid) {
				tree = append(tree, st.pid)
			}
		}
		out = append(out, ProcInfo{
			PID: p.pid, Kind: p.spec.Kind, SessionID: p.spec.SessionID, State: p.tableState(),
			StartedAt: p.started, Descendants: tree, Stats: ReadStats(ctx, p.pid), UnixUser: p.unixUser(),
		})
	}
	return out
}

// SelfStats reads dashgate's own figures.
func SelfStats(ctx context.Context) Stats { return ReadStats(ctx, os.Getpid()) }

// cgroupTable is Table in cgroup mode: each child's tree is its cgroup's
// member list, with no walk of /proc.
func (m *Manager) cgroupTable(ctx context.Context, procs []*Proc) []ProcInfo {
	out := make([]ProcInfo, 0, len(procs))
	for _, p := range procs {
		var tree []int
		for _, pid := range p.cg.procs() {
			if pid != p.pid {
				tree = append(tree, pid)
			}
		}
		out = append(out, ProcInfo{
			PID: p.pid, Kind: p.spec.Kind, SessionID: p.spec.SessionID, State: p.tableState(),
			StartedAt: p.started, Descendants: tree, Stats: ReadStats(ctx, p.pid),
			Cgroup: p.cg.dir, CgroupStats: p.cg.stats(), UnixUser: p.unixUser(),
		})
	}
	return out
}

// unixUser is the name of the account the child runs as, or "".
func (p *Proc) unixUser() string {
	if p.spec.Account == nil {
		return ""
	}
	return p.spec.Account.Name
}

// tableState is "running" or "closing", for the process table.
func (p *Proc) tableState() string {
	if p.Closing() {
		return "closing"
	}
	return "running"
}

// Containment describes how children are contained: "cgroup" with the
// instance's cgroup directory, or "fallback" with "".
func (m *Manager) Containment() (mode, dir string) {
	if c := m.cfg.Cgroups; c != nil {
		return "cgroup", c.Dir
	}
	return "fallback", ""
}
