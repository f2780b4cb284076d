package sessions

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/workers"
)

// This file owns a session's life: its creation, attach (resume), detach
// and the grace of a running turn, its TTL and the sweep, and the one
// close funnel (end: claim under the lock, finish outside it), shutdown
// and an administrator's reap of detached sessions.

// setState moves s to next. An illegal move is a bug: it is logged at
// ERROR and, in a test binary, panics so the test fails loudly. r.mu must
// be held.
func (r *Registry) setState(s *Session, next State) {
	if err := s.setState(next); err != nil {
		r.log.Error("session state", "sid", s.id, "err", err)
		if testing.Testing() {
			panic(err)
		}
		return
	}
	if next == StateClosing {
		r.usage.dropSession(s) // its slot is free from its claim, as the global one
	}
	r.tell.changedLocked(s)
}

// Sweep ends every detached session whose TTL has passed and returns how
// many it ended. It blocks until they are torn down.
func (r *Registry) Sweep() int {
	now := time.Now()
	r.mu.Lock()
	var due []*Session
	for _, s := range r.sessions {
		if s.state == StateDetached && now.Sub(s.detachedAt) >= r.cfg.DetachedTTL {
			due = append(due, s)
		}
	}
	r.mu.Unlock()
	return r.endAll(due, EndDetachedTTL, Principal{})
}

// endAll ends sessions concurrently, acting for p (see byOf), and returns
// how many this call ended.
func (r *Registry) endAll(ss []*Session, reason EndReason, p Principal) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	n := 0
	for _, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r.endBy(s, reason, byOf(p, s.owner)) {
				mu.Lock()
				n++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return n
}

// Create makes a session viewed by v and owned by its principal. When
// MaxSessions are live it evicts the least recently active detached
// session of the user most over their fair share (see admission.admit), or
// fails with ErrCapacity when no such user has one detached; likewise, at
// MaxSessionsPerUser, the owner's own least recently active detached
// session, or fails with a *UserCapacityError (which matches
// ErrCapacity). Other errors: ErrShuttingDown, ErrNotFound (v is gone),
// ErrViewerCapacity (v views MaxViewed sessions); ErrNotFound too for the
// admin token's principal, which owns nothing (Principal.Owns).
// An agent Config.Agents does not name is an *UnknownAgentError.
func (r *Registry) Create(v Viewer, o NewSession) (Info, error) {
	return r.create(principalOf(v), v, o, false)
}

// NewSession is what Create makes: its title ("" or a default one
// "session N": the next free number), whether it closes with its last
// viewer instead of detaching, the agent it talks to (a name of
// Config.Agents; "" for Config.DefaultAgent, BuiltinAgent for the
// built-in worker) and its model ("" for the worker's default; a user's
// default model, issue 42, as session.configure would set it).
type NewSession struct {
	Title             string
	CloseOnDisconnect bool
	Agent             string
	Model             string
}

// BuiltinAgent names the built-in worker (--worker-cmd, or dashgate's own
// agent) among the agents; sessions and their rows keep it as "".
const BuiltinAgent = "dashgate"

// UnknownAgentError: session.create named an agent that is not
// configured (--agent); the caller answers -32602.
type UnknownAgentError struct{ Name string }

func (e *UnknownAgentError) Error() string {
	return fmt.Sprintf("invalid params: no agent %q is configured (agent.list names them)", e.Name)
}

// agentFor is the agent a new session asking for name talks to, as
// sessions keep it ("" for the built-in worker).
func (c *Config) agentFor(name string) (string, error) {
	if name == "" {
		name = c.DefaultAgent
	}
	switch {
	case name == "" || name == BuiltinAgent:
		return "", nil
	case slices.Contains(c.Agents, name):
		return name, nil
	}
	return "", &UnknownAgentError{Name: name}
}

// create makes a session owned by p; v, when not nil, must carry p.
// ErrNotFound for a principal that owns nothing (the admin token's).
func (r *Registry) create(p Principal, v Viewer, o NewSession, terminalOnly bool) (Info, error) {
	owner, ok := p.owner()
	if !ok {
		return Info{}, ErrNotFound
	}
	agent, err := r.cfg.agentFor(o.Agent)
	if err != nil {
		return Info{}, err
	}
	title := o.Title
	if !terminalOnly {
		title = r.titleFor(owner, title)
	}
	s := r.newSession(owner, title, o.CloseOnDisconnect, terminalOnly)
	s.agent, s.model = agent, o.Model
	return r.register(v, s, nil)
}

// titleReadTimeout bounds the store read of titleFor: a failing store
// costs a new session no more than this.
const titleReadTimeout = 500 * time.Millisecond

// titleFor is the title a new session of owner asking for title takes
// (admission.title): a default one ("session N") is not given again. The
// first time owner asks for one, owner's latest 500 closed sessions are
// read from the store (outside the lock), once; when the store fails, the
// live ones only count, and the next ask reads again.
func (r *Registry) titleFor(owner, title string) string {
	r.mu.Lock()
	out, known := r.admission.title(owner, title)
	r.mu.Unlock()
	if known {
		return out
	}
	ctx, cancel := context.WithTimeout(context.Background(), titleReadTimeout)
	defer cancel()
	rows, _, err := r.archive.closed(ctx, owner, time.Time{}, 500)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.admission.loadTitles(owner, rows)
	}
	out, _ = r.admission.title(owner, title)
	return out
}

// newSession returns a session of owner not yet in the registry (see
// register). A terminal-only one is not stored.
func (r *Registry) newSession(owner, title string, closeOnDisconnect, terminalOnly bool) *Session {
	id := newID()
	c := conversation{sid: id, owner: owner}
	if !terminalOnly {
		c.journal = r.journal // register stamps the lease
	}
	return &Session{
		id: id, title: title, closeOnDisconnect: closeOnDisconnect, terminalOnly: terminalOnly,
		state: StateCreated, viewers: map[Viewer]struct{}{}, spawnMu: semaphore.NewWeighted(1), finished: make(chan struct{}),
		conversation: c,
	}
}

// register adds s, made by newSession, viewed by v, with the terminal t
// already started for it (a spare; nil for none), which from then counts
// for s's owner. It fails like Create, with ErrNotFound when t ended before
// it could be given to s, and with a *UserCapacityError when the owner has
// MaxTerminalsPerUser terminals (t is then left as it was).
func (r *Registry) register(v Viewer, s *Session, t *Terminal) (Info, error) {
	now := time.Now()
	s.createdAt, s.liveSince, s.lastActive = now, now, now
	r.mu.Lock()
	if r.closing {
		r.mu.Unlock()
		return Info{}, ErrShuttingDown
	}
	if v != nil && viewerGone(v) {
		r.mu.Unlock()
		return Info{}, ErrNotFound
	}
	if err := r.viewers.full(v); err != nil {
		r.mu.Unlock()
		return Info{}, err
	}
	if t != nil {
		// Lock order: r.mu, then t.mu. A terminal that ended already has
		// run the part of end that looks at its session (which did not
		// hold it); one that ends later finds it there and ends s.
		t.mu.Lock()
		ended := t.ended
		t.mu.Unlock()
		if ended || t.child.closed {
			r.mu.Unlock()
			return Info{}, ErrNotFound
		}
		if err := r.usage.room(s.owner, kindTerminal); err != nil {
			r.mu.Unlock()
			return Info{}, err
		}
	}
	evict, err := r.admission.admit(s.owner, admitCreate)
	if err != nil {
		r.mu.Unlock()
		r.finishAll(evict)
		return Info{}, err
	}
	if t != nil {
		r.usage.count(t.child, s.owner)
		if n, ok := t.pty.(interface{ AddCloseAttr(string, any) }); ok {
			n.AddCloseAttr("user", s.owner)
		}
	}
	if t != nil {
		s.terms.add(t) // a spare: its id is DefaultTerminal
	}
	if s.journal != nil {
		s.node, s.epoch, s.leaseUntil = r.lease.newRowLocked()
	}
	r.sessions[s.id] = s
	r.usage.addSession(s)
	s.save()
	r.viewLocked(s, v) // cannot fail: v is not gone and has room
	in := s.info()
	r.mu.Unlock()
	r.finishAll(evict)
	return in, nil
}

// finishAll finishes, in the background, the sessions admission.admit
// claimed.
func (r *Registry) finishAll(ss []*Session) {
	for _, s := range ss {
		r.goTracked(func() { r.finish(s) })
	}
}

// ResumeResult is what session.resume answers.
type ResumeResult struct {
	Info
	History          []Message
	PendingApprovals []Approval
	// Plan and Commands are an ACP agent's last plan and slash commands as
	// its worker gave them (nil: none yet, in this process).
	Plan, Commands json.RawMessage
	// PendingAttachments are the files uploaded into it and not sent yet,
	// in upload order (a page that reloads shows them again: they count
	// against the limits until sent or taken back).
	PendingAttachments []store.AttachmentRef
}

// Resume attaches s to v and returns its history. Errors: ErrNotFound
// (also for a session v's principal may not use), ErrViewerCapacity. In a
// cluster (after Claim) a session not live here is first adopted when
// its node let its lease lapse (adopt.go): then also ErrCapacity, a
// *UserCapacityError, ErrShuttingDown and *StoreError; one another node
// holds is ErrNotFound.
func (r *Registry) Resume(v Viewer, sid string) (ResumeResult, error) {
	if err := r.adoptForResume(v, sid); err != nil { // a cluster's: a session another node let go (adopt.go)
		return ResumeResult{}, err
	}
	r.mu.Lock()
	s := r.findLocked(principalOf(v), sid, accessUse)
	if s == nil {
		r.mu.Unlock()
		return ResumeResult{}, ErrNotFound
	}
	if err := r.viewLocked(s, v); err != nil {
		r.mu.Unlock()
		return ResumeResult{}, err
	}
	unloaded := s.unloaded
	r.mu.Unlock()
	if unloaded {
		ctx, cancel := context.WithTimeout(context.Background(), storeReadTimeout)
		defer cancel()
		if err := r.archive.load(ctx, s); err != nil {
			// The conversation goes on from memory; the next resume retries.
			r.log.Warn("history load", "sid", sid, "err", err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !s.live() {
		return ResumeResult{}, ErrNotFound
	}
	return ResumeResult{Info: s.info(), History: s.historyLocked(), PendingApprovals: s.pendingLocked(), Plan: s.plan, Commands: s.commands,
		PendingAttachments: slices.Clone(s.pending.files)}, nil
}

// storeReadTimeout bounds a store read on a path that has no context of
// its own (resume).
const storeReadTimeout = 5 * time.Second

// Close ends a session of p's (any session for an admin) with reason and
// blocks until it is torn down. It returns false when the session had
// already ended (or is ending), and ErrNotFound when the id was never known
// (or was forgotten long ago) or is another user's. An admin closing a
// session not its own is named on the "session closed" record and its
// children's "worker closed" records (by=, see byOf).
func (r *Registry) Close(p Principal, sid string, reason EndReason) (bool, error) {
	r.mu.Lock()
	s := r.findEndingLocked(p, sid, accessManage) // endBy tells an ending one
	wasEnded := r.ended.knownTo(p, sid, accessManage)
	r.mu.Unlock()
	if s == nil {
		if wasEnded {
			return false, nil
		}
		return false, ErrNotFound
	}
	return r.endBy(s, reason, byOf(p, s.owner)), nil
}

// ReapDetached ends every detached session p may end (its own; every one
// for an admin) with end_reason=admin_reap and returns how many it ended;
// the records of another user's name the admin (by=, as Close).
func (r *Registry) ReapDetached(p Principal) int {
	r.mu.Lock()
	var due []*Session
	for _, s := range r.sessions {
		if s.state == StateDetached && authorize(p, s.owner, accessManage) {
			due = append(due, s)
		}
	}
	r.mu.Unlock()
	return r.endAll(due, EndAdminReap, p)
}

// ReapUser ends every live session of user (attached, detached or
// terminal-only, with their chat workers and terminals) with
// end_reason=admin_reap, as the admin p asked, and returns how many it
// ended. It blocks until they are torn down. Only an admin may: for any
// other p it ends nothing and returns 0, as for a user with no session.
// Each "session closed" and "worker closed" record names the admin (by=,
// see byOf).
func (r *Registry) ReapUser(p Principal, user string) int {
	if !p.Admin {
		return 0
	}
	r.mu.Lock()
	own := r.usage.owned(user)
	due := make([]*Session, 0, len(own))
	for s := range own {
		if s.live() && authorize(p, s.owner, accessManage) {
			due = append(due, s)
		}
	}
	r.mu.Unlock()
	return r.endAll(due, EndAdminReap, p)
}

// Shutdown refuses new sessions and ends every session with
// end_reason=shutdown, concurrently, until ctx ends. The viewers get
// session.closed first. When ctx ends first, the teardowns go on; Wait
// joins them.
func (r *Registry) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	r.closing = true
	r.tell.stop() // every socket is about to close: no session.changed after this
	r.spares.shutdownLocked()
	all := make([]*Session, 0, len(r.sessions))
	for _, s := range r.sessions {
		all = append(all, s)
	}
	r.mu.Unlock()
	done := make(chan struct{})
	r.goTracked(func() { r.endAll(all, EndShutdown, Principal{}); close(done) })
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// detachLocked handles the last viewer leaving s and returns the slow part
// to run outside the lock. r.mu must be held.
func (r *Registry) detachLocked(s *Session, reason workers.Reason) func() {
	parked := s.terms.anyParked()
	if s.closeOnDisconnect || (s.terminalOnly && !parked) {
		if !r.claimLocked(s, EndCloseOnDisconnect) {
			return nil
		}
		return func() { r.finish(s) }
	}
	if s.state == StateDetached {
		return nil
	}
	r.setState(s, StateDetached)
	now := time.Now()
	s.detachedAt, s.lastActive = now, now
	s.save()
	s.ttlTimer = time.AfterFunc(r.cfg.DetachedTTL, func() { r.expire(s) })
	if t := s.turn; r.cfg.DetachTurnGrace > 0 && t != nil && !t.done && s.worker != nil {
		// The turn may finish (its reply saved); then, or at the end of
		// the grace, the worker goes (see endGraceLocked). Its pending
		// approvals wait too (each within Config.ApprovalTimeout): a
		// reload, a network blip or a phone lock comes back to them
		// (session.resume gives them again); at the end of the grace
		// they are denied (ByDetach).
		s.grace = &turnGrace{start: now, reason: reason}
		s.grace.timer = time.AfterFunc(r.cfg.DetachTurnGrace, func() {
			r.mu.Lock()
			work := r.endGraceLocked(s)
			r.mu.Unlock()
			if work != nil {
				r.goTracked(work)
			}
		})
		return nil
	}
	r.denyApprovalsLocked(s, ByDetach)
	r.interruptTurnLocked(s)
	w := s.worker
	s.worker = nil
	if w == nil {
		return nil
	}
	return func() { w.Close(reason) }
}

// turnGrace is a detached session's running turn let finish
// (Config.DetachTurnGrace).
type turnGrace struct {
	start  time.Time
	reason workers.Reason
	timer  *time.Timer
}

// endGraceLocked ends the grace of a detached session: its turn, if it
// still runs, is interrupted, and the slow part returned closes its worker
// with the detach reason, the record carrying turn_grace_ms. A viewer
// coming back (or the session ending) ends the grace without closing
// anything. r.mu must be held.
func (r *Registry) endGraceLocked(s *Session) func() {
	g := s.grace
	if g == nil {
		return nil
	}
	s.grace = nil
	g.timer.Stop()
	if s.state != StateDetached {
		return nil
	}
	r.denyApprovalsLocked(s, ByDetach)
	r.interruptTurnLocked(s)
	w := s.worker
	s.worker = nil
	if w == nil {
		return nil
	}
	ms := time.Since(g.start).Milliseconds()
	return func() {
		if n, ok := w.(interface{ AddCloseAttr(string, any) }); ok {
			n.AddCloseAttr("turn_grace_ms", ms)
		}
		w.Close(g.reason)
	}
}

// expire is the detach timer of s.
func (r *Registry) expire(s *Session) {
	r.mu.Lock()
	due := s.state == StateDetached && time.Since(s.detachedAt) >= r.cfg.DetachedTTL
	r.mu.Unlock()
	if due {
		r.goTracked(func() { r.end(s, EndDetachedTTL) })
	}
}

// end is the one close funnel of a session: every end reason comes here.
// It reports whether this call ended s (false: it was ending already).
func (r *Registry) end(s *Session, reason EndReason) bool { return r.endBy(s, reason, "") }

// endBy is end caused by the admin by ("" for none: see byOf), whom the
// records of the close name.
func (r *Registry) endBy(s *Session, reason EndReason, by string) bool {
	r.mu.Lock()
	ok := r.claimLocked(s, reason)
	if ok {
		s.endBy = by
	}
	r.mu.Unlock()
	if ok {
		r.finish(s)
	}
	return ok
}

// claimLocked moves s to closing, takes its worker and terminal, ends its
// turn and tells its viewers. r.mu must be held; finish must follow.
func (r *Registry) claimLocked(s *Session, reason EndReason) bool {
	if !s.live() {
		return false
	}
	s.endReason = reason // before the state: session.changed carries it
	r.setState(s, StateClosing)
	if g := s.grace; g != nil { // finish closes the worker
		g.timer.Stop()
		s.grace = nil
	}
	if s.ttlTimer != nil {
		s.ttlTimer.Stop()
		s.ttlTimer = nil
	}
	r.denyApprovalsLocked(s, ByClose)
	running := s.turn != nil && !s.turn.done
	r.interruptTurnLocked(s)
	if running && r.suspends(s, reason) {
		// Its reply is cut short; it comes back with dashgate, and its
		// history says why (a closed one's end notice says so).
		r.noticeLocked(s, shutdownTurnNotice)
	}
	if r.suspends(s, reason) {
		r.emitLocked(s, "session.closed", map[string]any{"end_reason": reason, "suspended": true})
	} else {
		r.emitLocked(s, "session.closed", map[string]any{"end_reason": reason})
		r.appendLocked(s, Message{Role: store.RoleSystem, Kind: store.KindNotice, Text: endNotices[reason]})
	}
	r.viewers.drop(s)
	return true
}

// suspends reports whether s, ending with reason, is suspended (stored to
// be restored at the next start) rather than closed.
func (r *Registry) suspends(s *Session, reason EndReason) bool {
	return reason == EndShutdown && r.cfg.SuspendOnShutdown && !s.terminalOnly
}

// finish tears down a claimed session outside the lock, worker and terminals
// in parallel, then stores it and logs its one record: "session closed",
// or "session suspended" for a chat session at shutdown when
// Config.SuspendOnShutdown is set.
func (r *Registry) finish(s *Session) {
	defer close(s.finished)
	start := time.Now()
	r.mu.Lock()
	w, terms := s.worker, s.terms.take()
	s.worker = nil
	reason, by := s.endReason, s.endBy
	endedPTYPID := s.endedPTYPID // set under r.mu by a terminal that ended before
	r.mu.Unlock()
	if by != "" {
		if n, ok := w.(interface{ AddCloseAttr(string, any) }); ok {
			n.AddCloseAttr("by", by)
		}
		for _, t := range terms {
			if n, ok := t.pty.(interface{ AddCloseAttr(string, any) }); ok {
				n.AddCloseAttr("by", by)
			}
		}
	}

	wreason := childReason(reason)
	var wg sync.WaitGroup
	workerPID, ptyPID := 0, 0
	if w != nil {
		workerPID = w.PID()
		wg.Add(1)
		go func() { defer wg.Done(); w.Close(wreason) }()
	}
	if ptyPID = endedPTYPID; len(terms) > 0 {
		ptyPID = terms[0].PID() // the first; each one's "worker closed" record names it
	}
	for _, t := range terms {
		wg.Add(1)
		go func() { defer wg.Done(); t.end(wreason, false) }()
	}
	wg.Wait()

	r.mu.Lock()
	r.setState(s, StateClosed)
	delete(r.sessions, s.id)
	r.ended.add(s.id, s.owner)
	turns := s.turns
	now := time.Now()
	suspended := r.suspends(s, reason)
	row := s.row()
	if suspended {
		row.State = store.StateSuspended
	} else {
		row.State, row.EndReason, row.ClosedAt = store.StateClosed, string(reason), now
	}
	s.putRow(row) // a terminal-only session is not stored

	r.mu.Unlock()

	if suspended {
		r.log.Info("session suspended",
			"sid", s.id,
			"user", s.owner,
			"duration_ms", now.Sub(s.liveSince).Milliseconds(),
			"close_ms", now.Sub(start).Milliseconds(),
			"worker_pid", workerPID,
			"turns", turns,
		)
		return
	}
	attrs := []any{
		"sid", s.id,
		"user", s.owner,
		"end_reason", string(reason),
		"duration_ms", now.Sub(s.liveSince).Milliseconds(),
		"close_ms", now.Sub(start).Milliseconds(),
		"worker_pid", workerPID,
		"pty_pid", ptyPID,
		"turns", turns,
	}
	if by != "" {
		attrs = append(attrs, "by", by)
	}
	r.log.Info("session closed", attrs...)
	if r.cfg.OnSessionClose != nil {
		r.cfg.OnSessionClose(reason)
	}
}
