package sessions

import (
	"time"

	"github.com/dashgate/dashgate/workers"
)

// This file owns who views what and who may: the viewer index, the
// per-viewer cap (Config.MaxViewed), the fan-out of a session's events to
// its viewers, a socket leaving; the Principal a call acts for and the one
// rule (authorize) that says whether it may touch a session. Every
// registry method that reads or changes a session goes through authorize;
// a session it refuses answers exactly as a missing one (ErrNotFound), so
// a caller learns nothing of another user's sessions, not even that they
// exist. A test of package handlers lists every method the handlers call
// and fails when one is added without an entry.

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
	ev := NewEvent(typ, s.id, s.seq, payload)
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
	r.saveLocked(s)
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
		r.saveLocked(s)
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
	s := r.sessions[sid]
	if s == nil || !s.live() || !authorize(principalOf(v), s.owner, accessUse) {
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
	s := r.sessions[sid]
	if s == nil || !s.live() || !authorize(principalOf(v), s.owner, accessUse) {
		return nil, ErrNotFound
	}
	if err := r.viewLocked(s, v); err != nil {
		return nil, err
	}
	return s, nil
}

// Principal is who a call acts for, resolved once at the edge (package
// web) and passed down explicitly: a [Viewer] carries it, calls without a
// viewer take it as a parameter.
//
// Today there is one user: the dashboard token is the anonymous user
// (User "", the owner of every session stored so far) and the admin token
// the admin principal ([AdminPrincipal]).
type Principal struct {
	User  string // the owner of the sessions it makes; "" is the anonymous user
	Admin bool   // may list and end any session, never read or type into another user's
}

// AdminPrincipal is what the admin token resolves to.
var AdminPrincipal = Principal{Admin: true}

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
	if p.User == owner {
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

// Close is Registry.Close acting for by (it blocks until the session is
// torn down).
func (a AdminView) Close(by Principal, sid string, reason EndReason) (bool, error) {
	return a.r.Close(by, sid, reason)
}

// ReapDetached is Registry.ReapDetached acting for by.
func (a AdminView) ReapDetached(by Principal) int { return a.r.ReapDetached(by) }

// ReapWorker is Registry.ReapWorker acting for by (it blocks until the
// child is reaped).
func (a AdminView) ReapWorker(by Principal, pid int) error { return a.r.ReapWorker(by, pid) }

// ReapUser is Registry.ReapUser acting for by: every live session of user
// ends (it blocks until they are torn down); it returns how many.
func (a AdminView) ReapUser(by Principal, user string) int { return a.r.ReapUser(by, user) }
