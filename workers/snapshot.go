package workers

import (
	"context"
	"sync"
	"time"
)

// DefaultSlowSnapshot is Config.SlowSnapshot when zero.
const DefaultSlowSnapshot = 100 * time.Millisecond

// snapshots keeps the last Snapshot read (Table and Unowned) for the
// calls that come while the machine is saturated.
type snapshots struct {
	mu         sync.Mutex
	rows       map[int]ProcInfo // by pid
	unowned    []Unowned
	took       time.Duration // how long the last read of both took
	refreshing chan struct{} // non-nil while a read runs in the background; closed when it ends
}

// Snapshot returns Table and Unowned for the admin page. When the previous
// read of both took longer than Config.SlowSnapshot, which happens when
// children saturate the CPU (each /proc read then waits for a CPU, and a
// page of 300 children took 3 s: BENCHMARKS.md, issue 28), it answers at
// once instead: the children live now, each with the figures of the
// previous read (one started since has zero Stats and no Descendants), the
// previous read's Unowned, and stale true; and it starts a new read in the
// background (one at a time) for the next call. Reaps act on pids, which
// are always current. The first call, and every call on a quick machine,
// reads afresh.
func (m *Manager) Snapshot(ctx context.Context) (table []ProcInfo, unowned []Unowned, stale bool) {
	slow := m.cfg.SlowSnapshot
	if slow <= 0 {
		slow = DefaultSlowSnapshot
	}
	s := &m.snap
	s.mu.Lock()
	if s.rows == nil || s.took <= slow {
		s.mu.Unlock()
		return m.readSnapshot(ctx)
	}
	rows, unowned := s.rows, s.unowned
	if s.refreshing == nil {
		done := make(chan struct{})
		s.refreshing = done
		go func() {
			defer close(done)
			m.readSnapshot(context.Background())
		}()
	}
	s.mu.Unlock()

	procs := m.Procs()
	table = make([]ProcInfo, 0, len(procs))
	for _, p := range procs {
		row, ok := rows[p.pid]
		if !ok {
			row = ProcInfo{PID: p.pid, Kind: p.spec.Kind, SessionID: p.spec.SessionID,
				StartedAt: p.started, UnixUser: p.unixUser(), CgroupStats: CgroupStats{CPUUsec: -1, MemoryBytes: -1, Pids: -1}}
			if p.cg != nil {
				row.Cgroup = p.cg.dir
			}
		}
		row.State = p.tableState()
		table = append(table, row)
	}
	return table, unowned, true
}

// readSnapshot reads Table and Unowned afresh and keeps them.
func (m *Manager) readSnapshot(ctx context.Context) ([]ProcInfo, []Unowned, bool) {
	start := time.Now()
	table := m.Table(ctx)
	unowned := m.Unowned()
	rows := make(map[int]ProcInfo, len(table))
	for _, r := range table {
		rows[r.PID] = r
	}
	s := &m.snap
	s.mu.Lock()
	s.rows, s.unowned, s.took, s.refreshing = rows, unowned, time.Since(start), nil
	s.mu.Unlock()
	return table, unowned, false
}

// waitSnapshot waits for the background read, if one runs (Manager.Wait).
func (m *Manager) waitSnapshot() {
	m.snap.mu.Lock()
	done := m.snap.refreshing
	m.snap.mu.Unlock()
	if done != nil {
		<-done
	}
}
