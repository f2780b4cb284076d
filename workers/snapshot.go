package workers

import (
	"context"
	"sync"
	"time"
)

// DefaultSlowSnapshot is Config.SlowSnapshot when zero: four times a
// quick machine's read of 300 children, and a quarter of the page's
// budget under load (issue 28: served in 200 ms).
const DefaultSlowSnapshot = 50 * time.Millisecond

// snapshots keeps the last Snapshot read (Table and Unowned) for the
// calls that come while the machine is saturated.
type snapshots struct {
	mu      sync.Mutex
	rows    map[int]ProcInfo // by pid; nil before the first read ended
	unowned []Unowned
	took    time.Duration // how long the last read ended took
	reading chan struct{} // non-nil while a read runs; closed when it ends
}

// Snapshot returns Table and Unowned for the admin page. It reads them
// afresh, but waits at most Config.SlowSnapshot for the read: when
// children saturate the CPU, each /proc read waits for a CPU, and a page
// of 300 children took 3 to 25 s (BENCHMARKS.md, issue 28). Past that it
// answers from the previous read instead, with stale true: the children
// live now, each with the figures that read had (one started since has
// zero Stats and no Descendants), and that read's Unowned. The read goes
// on in the background and is kept for the next call; calls meanwhile
// share it. Reaps act on pids, and the children listed are always the
// current ones. Before any read has ended, it waits for one. When the last
// read took longer than SlowSnapshot, it does not wait at all: on a
// saturated machine the next one will be as slow, and the wait was half of
// a loaded page's time (BENCHMARKS.md, issue 28).
func (m *Manager) Snapshot(ctx context.Context) (table []ProcInfo, unowned []Unowned, stale bool) {
	slow := m.cfg.SlowSnapshot
	if slow <= 0 {
		slow = DefaultSlowSnapshot
	}
	s := &m.snap
	s.mu.Lock()
	done := s.reading
	if done == nil {
		done = make(chan struct{})
		s.reading = done
		go m.readSnapshot(done)
	}
	first := s.rows == nil
	wasSlow := s.took > slow
	s.mu.Unlock()

	switch {
	case first: // nothing to answer with: wait for the read
		select {
		case <-done:
		case <-ctx.Done():
		}
	case wasSlow:
		select {
		case <-done:
		default:
			stale = true
		}
	default:
		timer := time.NewTimer(slow)
		defer timer.Stop()
		select {
		case <-done:
		case <-ctx.Done():
		case <-timer.C:
			stale = true
		}
	}
	s.mu.Lock()
	rows, unowned := s.rows, s.unowned
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
	return table, unowned, stale
}

// readSnapshot reads Table and Unowned afresh, keeps them, and closes done.
func (m *Manager) readSnapshot(done chan struct{}) {
	start := time.Now()
	table := m.Table(context.Background())
	unowned := m.Unowned()
	rows := make(map[int]ProcInfo, len(table))
	for _, r := range table {
		rows[r.PID] = r
	}
	s := &m.snap
	s.mu.Lock()
	s.rows, s.unowned, s.reading, s.took = rows, unowned, nil, time.Since(start)
	s.mu.Unlock()
	close(done)
}

// waitSnapshot waits for the background read, if one runs (Manager.Wait).
func (m *Manager) waitSnapshot() {
	m.snap.mu.Lock()
	done := m.snap.reading
	m.snap.mu.Unlock()
	if done != nil {
		<-done
	}
}
