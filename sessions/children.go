package sessions

import (
	"context"
	"errors"
	"time"

	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/workers"
)

// This file owns a session's chat worker: its lazy start (one spawn at a
// time per session), its reclaim at the global child cap, its exit, and
// an administrator's reap of a session's child.

// ensureWorker returns the session's live worker, spawning one when there is
// none. Spawns are serialised per session, so concurrent calls never start
// two; a worker whose session ended while it was spawned is closed at once.
// A spawn takes a slot of the owner's MaxWorkersPerUser first (a
// *UserCapacityError when there is none), given back when the spawn fails
// or, through its OnClose, whenever the worker closes. At the global
// child cap (workers.ErrCapacity) it ends a spare, else reclaims an idle
// worker of the user most over their fair share (reclaimWorker), and
// tries again; when neither frees a slot it fails with
// workers.ErrCapacity. With Config.Accounts the worker runs as its owner's
// account; a refusal is returned as is (see accountOf) and nothing is
// spawned.
func (r *Registry) ensureWorker(ctx context.Context, s *Session) (Worker, error) {
	if err := s.spawnMu.Acquire(ctx, 1); err != nil {
		return nil, err
	}
	defer s.spawnMu.Release(1)
	r.mu.Lock()
	if !s.live() {
		r.mu.Unlock()
		return nil, ErrNotFound
	}
	if w := s.worker; w != nil && !w.Closing() {
		r.mu.Unlock()
		return w, nil
	}
	s.worker = nil
	c, err := r.usage.reserve(s.owner, kindWorker)
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}

	acct, err := r.accountOf(s)
	spawn := func() (Worker, error) {
		return r.cfg.Spawner.SpawnWorker(SpawnRequest{
			SessionID: s.id, CancelGrace: r.cfg.InterruptGrace, Owner: s.owner, Account: acct, Agent: s.agent,
			OnClose: func(res workers.CloseResult) { r.workerGone(s, c, res) },
		})
	}
	var w Worker
	if err == nil {
		w, err = spawn()
	}
	for errors.Is(err, workers.ErrCapacity) && (r.spares.drop() || r.reclaimWorker(s.owner)) {
		w, err = spawn() // a spare terminal, or an idle worker of a user over their share, held the last slot
	}
	if err != nil {
		r.mu.Lock()
		r.usage.release(c) // no OnClose comes for a child that never started
		r.mu.Unlock()
	}
	if errors.Is(err, workers.ErrCapacity) || refused(err) {
		return nil, err // a refusal was logged, and its message is the reason
	}
	if err != nil {
		r.log.Warn("worker spawn failed", "sid", s.id, "user", s.owner, "err", err)
		return nil, &workers.Error{Failure: workers.FailSpawn, Message: err.Error()}
	}
	r.mu.Lock()
	c.pid = w.PID()
	if s.state != StateAttached && s.state != StateCreated {
		detached := s.state == StateDetached
		r.mu.Unlock()
		w.Close(spawnRaceReason(detached))
		return nil, ErrNotFound
	}
	s.worker = w
	r.mu.Unlock()
	return w, nil
}

// idleWorkerLocked reports whether s has a chat worker that nothing uses
// or is about to: no turn (so no pending approval; Prompt sets s.turn
// before it asks for the worker), no slash command (Exec counts s.execs
// first), no detach grace, not closing. r.mu must be held.
func (s *Session) idleWorkerLocked() bool {
	return s.worker != nil && !s.worker.Closing() && s.turn == nil && s.execs == 0 && s.grace == nil
}

// reclaimWorker frees a slot of the global child cap (--max-workers) for
// a spawn of owner's that met workers.ErrCapacity, and reports whether it
// did (the spawn may then try again). It closes the idle chat worker
// (idleWorkerLocked) of the least recently active session of the user most
// over their fair share of the children (usageIndex.fairReclaim): never
// one of a user at or under their share, and never a worker in use, so a
// running turn is not cut for anyone. The session stays, attached or
// not: its next call spawns a worker again, and its viewers get
// worker.exited with reason reclaimed. The worker's one "worker closed"
// record says reason=reclaimed and for_user, whom it made room for. It
// blocks until the worker is reaped.
func (r *Registry) reclaimWorker(owner string) bool {
	r.mu.Lock()
	s := r.usage.fairReclaim(owner)
	var w Worker
	if s != nil {
		// Claimed under the lock: no call takes it from here on (one
		// that comes finds no worker and spawns its own), and workerGone
		// leaves the session alone, as for a close the session made.
		w, s.worker = s.worker, nil
	}
	r.mu.Unlock()
	if w == nil {
		return false
	}
	if n, ok := w.(interface{ AddCloseAttr(string, any) }); ok {
		n.AddCloseAttr("for_user", owner)
	}
	res := w.Close(ReasonReclaimed)
	r.mu.Lock()
	if s.live() {
		r.exitedLocked(s, res)
	}
	r.mu.Unlock()
	return true
}

// workerGone is called once per closed worker of s, whose slot in its
// owner's count was c.
func (r *Registry) workerGone(s *Session, c *child, res workers.CloseResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.usage.release(c)
	if s.worker == nil || s.worker.PID() != res.PID {
		return // the session closed it itself, and knows
	}
	s.worker = nil
	r.denyApprovalsLocked(s, ByClose) // its tool runs went with it
	if s.execs > 0 {
		// A command it was running fails with it: its error is told first
		// (see Exec), so the history reads command, error, exit.
		s.exited = &res
		return
	}
	r.exitedLocked(s, res)
}

// exitedLocked tells the viewers, and the history, that the worker of s
// went away. r.mu must be held.
func (r *Registry) exitedLocked(s *Session, res workers.CloseResult) {
	payload := map[string]any{"reason": res.Reason, "exit_code": res.ExitCode}
	if res.Signal != "" {
		payload["signal"] = res.Signal
	}
	r.emitLocked(s, "worker.exited", payload)
	r.appendLocked(s, Message{Role: store.RoleSystem, Kind: store.KindNotice, Text: workerNotice(res)})
}

func (r *Registry) touch(s *Session) {
	r.mu.Lock()
	s.lastActive = time.Now()
	r.mu.Unlock()
}

// ReapWorker ends the child with pid of a live session, as an administrator
// asked: a chat worker is closed with reason admin_reap (its session stays,
// and its viewers get worker.exited); a terminal is ended with reason
// admin_reap, which ends a terminal-only session with end_reason
// admin_reap. It blocks until the child is reaped. ErrNotFound: no
// session p may end (its own; any for an admin) has a child with that pid.
// An admin reaping another user's child is named (by=, see byOf) on its
// "worker closed" record and on the "session closed" record of a
// terminal-only session it ends.
func (r *Registry) ReapWorker(p Principal, pid int) error {
	r.mu.Lock()
	var w Worker
	var t *Terminal
	var owner *Session
	for _, s := range r.sessions {
		if !s.live() || !authorize(p, s.owner, accessManage) {
			continue
		}
		if s.worker != nil && s.worker.PID() == pid {
			w, owner = s.worker, s
			break
		}
		if t = s.terms.byPID(pid); t != nil {
			owner = s
			break
		}
	}
	by := ""
	if owner != nil {
		by = byOf(p, owner.owner)
	}
	r.mu.Unlock()
	switch {
	case w != nil:
		if n, ok := w.(interface{ AddCloseAttr(string, any) }); ok && by != "" {
			n.AddCloseAttr("by", by)
		}
		w.Close(workers.ReasonAdminReap)
	case t != nil:
		t.endBy(workers.ReasonAdminReap, by)
		r.mu.Lock()
		if owner.live() && !owner.terminalOnly {
			// Its chat viewers, and its history, say what happened.
			r.emitLocked(owner, "notice", map[string]any{"text": terminalReapNotice})
			r.appendLocked(owner, Message{Role: store.RoleSystem, Kind: store.KindNotice, Text: terminalReapNotice})
		}
		r.mu.Unlock()
	default:
		return ErrNotFound
	}
	return nil
}
