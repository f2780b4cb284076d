package sessions

import (
	"time"

	"github.com/dashgate/dashgate/workers"
)

// This file owns who views what and who may: the viewer index, the
// per-viewer cap (Config.MaxViewed), the fan-out of a session's events to
// its viewers, a socket leaving; the Principal a call acts for and the one
// rule (authorize) that says whether it may touch a session, and the one
// step from a session id to a *Session (find, findEnding, endedFor): every
// exported method that takes a session id reaches its session through
// them, and nothing else reads r.sessions by id for a caller. A session
// they refuse answers exactly as a missing one (ErrNotFound), so a caller
// learns nothing of another user's sessions, not even that they exist.
// TestEveryMethodIsAccounted (authorize_test.go) walks the exported
// methods of *Registry and AdminView and fails for one without an entry
// (user, with its two-principal proof; admin; or system).

// viewerIndex is the one record of who views what, both ways: the
// sessions of each viewer (for the cap and a socket's end) and the viewers
// of each session (Session.viewers, for the fan-out and the counts). Only
// its methods change either side, so they never drift apart. It is
// guarded by the registry's mutex, like everything of a session; a change
// of Session.viewers also takes the session's stream lock, under which a
// turn's deltas read it without r.mu.
type viewerIndex struct {
	max      int // Config.MaxViewed: sessions one viewer may view
	byViewer map[Viewer]map[*Session]struct{}
}

func newViewerIndex(max int) viewerIndex {
	return viewerIndex{max: max, byViewer: map[Viewer]map[*Session]struct{}{}}
}

// full fails with a *ViewerCapacityError when v may view no more sessions.
func (ix *viewerIndex) full(v Viewer) error {
	if v != nil && len(ix.byViewer[v]) >= ix.max {
		return &ViewerCapacityError{Limit: ix.max}
	}
	return nil
}

// register makes v a viewer of s, unless it is one already; it fails as
// full does.
func (ix *viewerIndex) register(v Viewer, s *Session) error {
	if _, ok := s.viewers[v]; ok {
		return nil
	}
	if err := ix.full(v); err != nil {
		return err
	}
	set := ix.byViewer[v]
	if set == nil {
		set = map[*Session]struct{}{}
		ix.byViewer[v] = set
	}
	set[s] = struct{}{}
	s.stream.Lock()
	s.viewers[v] = struct{}{}
	s.stream.Unlock()
	return nil
}

// unregister stops v viewing s and reports whether it did.
func (ix *viewerIndex) unregister(v Viewer, s *Session) bool {
	if _, ok := s.viewers[v]; !ok {
		return false
	}
	s.stream.Lock()
	delete(s.viewers, v)
	s.stream.Unlock()
	if set := ix.byViewer[v]; set != nil {
		delete(set, s)
		if len(set) == 0 {
			delete(ix.byViewer, v)
		}
	}
	return true
}

// leave stops v viewing anything and returns the sessions it viewed.
func (ix *viewerIndex) leave(v Viewer) []*Session {
	set := ix.byViewer[v]
	delete(ix.byViewer, v)
	out := make([]*Session, 0, len(set))
	for s := range set {
		s.stream.Lock()
		delete(s.viewers, v)
		s.stream.Unlock()
		out = append(out, s)
	}
	return out
}

// drop removes every viewer of s (it ends): their counts are freed at once.
func (ix *viewerIndex) drop(s *Session) {
	for v := range s.viewers {
		if set := ix.byViewer[v]; set != nil {
			delete(set, s)
			if len(set) == 0 {
				delete(ix.byViewer, v)
			}
		}
	}
	s.stream.Lock()
	s.viewers = map[Viewer]struct{}{}
	s.stream.Unlock()
}

// emitLocked queues an event for every viewer of s; the viewers' writers
// encode it, once, outside the lock. payload must not change afterwards.
// r.mu must be held, and s.stream not (emitStreamLocked is the same under
// s.stream alone).
func (r *Registry) emitLocked(s *Session, typ string, payload any) {
	s.stream.Lock()
	defer s.stream.Unlock()
	s.emitStreamLocked(typ, payload)
}

// emitStreamLocked is emitLocked for a caller holding s.stream.
func (s *Session) emitStreamLocked(typ string, payload any) {
	s.seq++
	s.deliverStreamLocked(NewEvent(typ, s.id, s.seq, payload))
}

// emitDeltaStreamLocked is emitStreamLocked of a message.delta of text
// for turn (NewDeltaEvent). s.stream must be held.
func (s *Session) emitDeltaStreamLocked(turn, text string) {
	s.seq++
	s.deliverStreamLocked(NewDeltaEvent(s.id, s.seq, turn, text))
}

func (s *Session) deliverStreamLocked(ev *Event) {
	for v := range s.viewers {
		v.Deliver(ev)
	}
}

// shareLocked adds m to the history of s, as appendLocked does, and sends
// it as event history.entry {"entry"} to every viewer of s but from, the
// viewer whose call made it (nil: none), which shows it from its call: the
// entries no other event tells (a prompt, a slash command and its output,
// error or notice), so that every viewer shows what a reload would. The
// viewers get different sets of them, so the event carries seq 0 and the
// session's seq is left alone (each viewer's count has no gaps). r.mu must
// be held.
func (r *Registry) shareLocked(s *Session, from Viewer, m Message) {
	m = s.add(m, r.cfg.HistoryMessages, r.cfg.HistoryBytes)
	s.save()
	ev := NewEvent("history.entry", s.id, 0, map[string]any{"entry": m})
	s.stream.Lock()
	defer s.stream.Unlock()
	for v := range s.viewers {
		if v != from {
			v.Deliver(ev)
		}
	}
}

// viewLocked makes v a viewer of s and s attached. It fails with
// ErrNotFound for a viewer whose socket is gone, and with a
// *ViewerCapacityError when v views MaxViewed other sessions. r.mu must be
// held.
func (r *Registry) viewLocked(s *Session, v Viewer) error {
	if v == nil {
		return nil
	}
	if viewerGone(v) {
		return ErrNotFound
	}
	if err := r.viewers.register(v, s); err != nil {
		return err
	}
	if s.state != StateAttached {
		r.setState(s, StateAttached)
		if s.ttlTimer != nil {
			s.ttlTimer.Stop()
			s.ttlTimer = nil
		}
		if g := s.grace; g != nil { // back in time: the turn and its worker go on
			g.timer.Stop()
			s.grace = nil
		}
		s.lastActive = time.Now()
		s.save()
	}
	s.lastActive = time.Now()
	return nil
}

// DetachViewer removes v from every session it views: each session left
// without a viewer detaches (its worker closed at once with reason, even
// mid-turn; reason is detach, write_timeout or ping_timeout) or,
// when created with close_on_disconnect, closes. It returns at once; the
// teardowns run in the background (see Wait).
func (r *Registry) DetachViewer(v Viewer, reason workers.Reason) {
	r.mu.Lock()
	var work []func()
	for _, s := range r.viewers.leave(v) {
		if len(s.viewers) == 0 && s.live() {
			if f := r.detachLocked(s, reason); f != nil {
				work = append(work, f)
			}
		}
	}
	r.mu.Unlock()
	for _, f := range work {
		r.goTracked(f)
	}
}

// Leave stops v viewing sid (session.detach): when v was its last viewer
// the session detaches as if the socket had gone (worker closed with
// reason detach). It reports whether v was viewing sid; ErrNotFound for an
// unknown or ended session, or one v's principal may not use.
func (r *Registry) Leave(v Viewer, sid string) (bool, error) {
	r.mu.Lock()
	s := r.findLocked(principalOf(v), sid, accessUse)
	if s == nil {
		r.mu.Unlock()
		return false, ErrNotFound
	}
	if !r.viewers.unregister(v, s) {
		r.mu.Unlock()
		return false, nil
	}
	var work func()
	if len(s.viewers) == 0 {
		work = r.detachLocked(s, workers.ReasonDetach)
	}
	r.mu.Unlock()
	if work != nil {
		r.goTracked(work)
	}
	return true, nil
}

// use finds a live session for a call from v and makes v a viewer of it (a
// socket using a session views it, so its liveness is tracked). Errors:
// ErrNotFound (also for a session v's principal may not use),
// ErrViewerCapacity.
func (r *Registry) use(v Viewer, sid string) (*Session, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.findLocked(principalOf(v), sid, accessUse)
	if s == nil {
		return nil, ErrNotFound
	}
	if err := r.viewLocked(s, v); err != nil {
		return nil, err
	}
	return s, nil
}

// findLocked is the one step from a session id to a live *Session for a
// call acting for p: sid looked up and p authorized for a on it. nil (a
// missing id, an ended session, another user's) is answered exactly as a
// missing one, ErrNotFound. r.mu must be held.
func (r *Registry) findLocked(p Principal, sid string, a access) *Session {
	if s := r.findEndingLocked(p, sid, a); s != nil && s.live() {
		return s
	}
	return nil
}

// findEndingLocked is findLocked for the callers that tell a session
// still ending (or, for one that checks later under its own lock,
// possibly ending) apart themselves: it may return a session no longer
// live. r.mu must be held.
func (r *Registry) findEndingLocked(p Principal, sid string, a access) *Session {
	s := r.sessions[sid]
	if s == nil || !authorize(p, s.owner, a) {
		return nil
	}
	return s
}

// recentEnds remembers the sessions that ended in this registry lately
// (the last recentEndsMax) and their owners: a close of one answers
// "closed": false, not ErrNotFound, and an adopt knows its closed row may
// still be on its way to the store. The registry's mutex guards it.
type recentEnds struct {
	owners map[string]string // session id -> owner
	order  []string          // the ids, oldest first
}

// recentEndsMax bounds what recentEnds remembers.
const recentEndsMax = 4096

// add remembers that sid, of owner, ended; the oldest beyond
// recentEndsMax is forgotten.
func (e *recentEnds) add(sid, owner string) {
	e.owners[sid] = owner
	e.order = append(e.order, sid)
	if len(e.order) > recentEndsMax {
		delete(e.owners, e.order[0])
		e.order = e.order[1:]
	}
}

// forget drops sid (it lives again: reopened or adopted). Its place in
// the order stays until it is the oldest.
func (e *recentEnds) forget(sid string) { delete(e.owners, sid) }

// has reports whether sid ended here lately.
func (e *recentEnds) has(sid string) bool {
	_, ok := e.owners[sid]
	return ok
}

// knownTo reports whether sid ended here lately and p may know it, as a
// says.
func (e *recentEnds) knownTo(p Principal, sid string, a access) bool {
	owner, ok := e.owners[sid]
	return ok && authorize(p, owner, a)
}

// Principal is who a call acts for, resolved once at the edge (package
// web) and passed down explicitly: a [Viewer] carries it, calls without a
// viewer take it as a parameter.
//
// Without users, the dashboard token is the anonymous user (User "", the
// owner of every session made without users) and the admin token the
// admin principal ([AdminPrincipal]), which is no user: it owns nothing.
type Principal struct {
	User  string // the owner of the sessions it makes; "" is the anonymous user (unless Admin)
	Admin bool   // may list and end any session, never read or type into another user's
}

// AdminPrincipal is what the admin token resolves to: an admin that is no
// user. Its User is "" like the anonymous user's, yet it owns no session,
// not even the anonymous user's (see Principal.Owns): it lists and reaps,
// and cannot make a session of its own.
var AdminPrincipal = Principal{Admin: true}

// owner is the owner of the sessions p makes and owns, the key of its
// store rows; false for the admin token's principal, which owns none.
func (p Principal) owner() (string, bool) {
	if p == AdminPrincipal {
		return "", false
	}
	return p.User, true
}

// Owns reports whether p owns the sessions of owner (an Info.Owner): its
// User is owner and it is a user, not the admin token (whose User "" is
// not the anonymous user's). authorize decides by it; so does the admin
// page, for which titles an admin sees.
func (p Principal) Owns(owner string) bool {
	u, ok := p.owner()
	return ok && u == owner
}

// access is what a call does to a session.
type access int

const (
	// accessUse reads or changes a conversation or its terminal (resume,
	// history, prompt, approvals, rename, delete, ...): its owner only.
	accessUse access = iota
	// accessManage lists or ends a session (the admin page's list and
	// reaps, session.close): its owner or an admin.
	accessManage
)

// authorize reports whether p may act on a session owned by owner as a
// says. It is the one place that decides; a false answers ErrNotFound.
func authorize(p Principal, owner string, a access) bool {
	if p.Owns(owner) {
		return true
	}
	return a == accessManage && p.Admin
}

// AdminView is the registry as the admin page sees it (handlers.AdminSessions):
// every session listed, and every action taken for the principal given,
// who must be an admin (an admin user, or the admin token's
// [AdminPrincipal]); a non-admin acts only on its own sessions, as
// everywhere. Only routes behind the admin check may be given it.
type AdminView struct{ r *Registry }

// Admin returns the admin page's view of r.
func (r *Registry) Admin() AdminView { return AdminView{r} }

// List is Registry.List for the admin: every session.
func (a AdminView) List() []Info { return a.r.List(AdminPrincipal) }

// StoreOutage reports whether the conversation store refuses this node's
// writes now (chat goes on from memory, issue 41), since when, and how
// many history entries wait for it. It reads no session.
func (a AdminView) StoreOutage() (failing bool, since time.Time, waiting int) {
	return a.r.journal.outage()
}

// Close is Registry.Close acting for by (it blocks until the session is
// torn down).
func (a AdminView) Close(by Principal, sid string, reason EndReason) (bool, error) {
	return a.r.Close(by, sid, reason)
}

// Spares returns the session ids of the spare terminals (Config.PTYSpare):
// programs started ahead for the next new terminal, whose sessions List
// does not have until an attach takes them. The admin page marks their
// rows by these ids.
func (a AdminView) Spares() []string { return a.r.spares.sessionIDs() }

// ReapDetached is Registry.ReapDetached acting for by.
func (a AdminView) ReapDetached(by Principal) int { return a.r.ReapDetached(by) }

// ReapWorker is Registry.ReapWorker acting for by (it blocks until the
// child is reaped).
func (a AdminView) ReapWorker(by Principal, pid int) error { return a.r.ReapWorker(by, pid) }

// ReapUser is Registry.ReapUser acting for by: every live session of user
// ends (it blocks until they are torn down); it returns how many.
func (a AdminView) ReapUser(by Principal, user string) int { return a.r.ReapUser(by, user) }
