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

// DefaultSnapshotMaxAge is Config.SnapshotMaxAge when zero: how old the
// figures of a slow read may get before a call of Snapshot starts the
// next one. On a saturated machine a read of
// 300 children takes seconds and its CPU is taken from the load (13 % of
// the gateway's in the stall benchmark when every call started one):
// reads then come at most this often, whoever asks (the admin page, its
// API, the plots' sampler every DefaultSampleEvery).
const DefaultSnapshotMaxAge = 5 * time.Second

// snapshotDuty bounds the share of time slow reads take: after a slow
// read of d, the next starts d×snapshotDuty after it began at the
// earliest (a tenth of the time), and SnapshotMaxAge at the latest. A read
// that was slow by a hair (a test's three children on a busy machine)
// holds the next back by a fraction of a second, not by SnapshotMaxAge.
const snapshotDuty = 10

// snapshots keeps the last Snapshot read (Table and Unowned) for the
// calls that come while the machine is saturated.
type snapshots struct {
	mu      sync.Mutex
	rows    map[int]ProcInfo // by pid; nil before the first read ended
	unowned []Unowned
	self    Stats         // dashgate's own (SelfStats), read with rows
	took    time.Duration // how long the last read ended took
	began   time.Time     // when the last read that ended began
	reading chan struct{} // non-nil while a read runs; closed when it ends
	reads   int           // reads started (tests)
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
// a loaded page's time (BENCHMARKS.md, issue 28); nor does it start a
// read before that one is Config.SnapshotMaxAge old, or ten times as old
// as it took, whichever comes first (snapshotDuty). Each row's ReadAt says when
// its figures were read (zero for none yet).
func (m *Manager) Snapshot(ctx context.Context) (table []ProcInfo, unowned []Unowned, stale bool) {
	slow := m.cfg.SlowSnapshot
	if slow <= 0 {
		slow = DefaultSlowSnapshot
	}
	maxAge := m.cfg.SnapshotMaxAge
	if maxAge <= 0 {
		maxAge = DefaultSnapshotMaxAge
	}
	s := &m.snap
	s.mu.Lock()
	first := s.rows == nil
	wasSlow := s.took > slow
	done := s.reading
	if done == nil && (first || !wasSlow || time.Since(s.began) >= min(maxAge, snapshotDuty*s.took)) {
		done = make(chan struct{})
		s.reading = done
		s.reads++
		go m.readSnapshot(done)
	}
	s.mu.Unlock()

	switch {
	case first: // nothing to answer with: wait for the read
		select {
		case <-done:
		case <-ctx.Done():
		}
	case wasSlow:
		select {
		case <-done: // nil (no read started): not ready
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

// SnapshotSelf is dashgate's own figures (SelfStats) as the last
// Snapshot read found them; zero before one ended. The admin page reads
// them from there, not on its own path: with 300 sockets and their
// workers' pipes, dashgate's /proc/self/fd lists a thousand entries
// (2 ms of the page's 8 ms of CPU under the stall's load).
func (m *Manager) SnapshotSelf() Stats {
	m.snap.mu.Lock()
	defer m.snap.mu.Unlock()
	return m.snap.self
}

// readSnapshot reads Table, Unowned and SelfStats afresh, keeps them, and
// closes done.
func (m *Manager) readSnapshot(done chan struct{}) {
	start := time.Now()
	table := m.Table(context.Background())
	unowned := m.Unowned()
	self := SelfStats(context.Background())
	rows := make(map[int]ProcInfo, len(table))
	for _, r := range table {
		r.ReadAt = start
		rows[r.PID] = r
	}
	s := &m.snap
	s.mu.Lock()
	s.rows, s.unowned, s.self, s.reading, s.took, s.began = rows, unowned, self, nil, time.Since(start), start
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
