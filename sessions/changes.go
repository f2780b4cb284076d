package sessions

// Session changes for every chat socket (event session.changed,
// docs/PROTOCOL.md §7): a socket that watches gets one event whenever a
// session is created, attached, detached, closing, closed, renamed,
// reopened or deleted, whichever socket or path caused it (an admin reap,
// the TTL), so every dashboard's list stays current without polling.
//
// The event is not one of a session's numbered events: like gateway.ready
// it has no params.session_id and seq 0 (the session is in its payload), so
// the per-session seq its viewers count keeps no gaps.

// StateDeleted is the state session.changed reports for a deleted session.
const StateDeleted State = "deleted"

// Change is the payload of event session.changed.
type Change struct {
	SessionID string    `json:"session_id"`
	State     State     `json:"state"`
	Title     string    `json:"title"`
	EndReason EndReason `json:"end_reason,omitempty"`
}

// Watch makes v receive session.changed for every session its principal
// may list (its own; every one for an admin) until stop is called (the socket's end calls it). Delivery follows the Viewer rules:
// Deliver runs under the registry's lock and must not block.
func (r *Registry) Watch(v Viewer) (stop func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.watchers == nil {
		r.watchers = map[Viewer]struct{}{}
	}
	r.watchers[v] = struct{}{}
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.watchers, v)
	}
}

// changedLocked tells the watchers how s is now. r.mu must be held.
func (r *Registry) changedLocked(s *Session) {
	r.announceLocked(s.owner, Change{SessionID: s.id, State: s.state, Title: s.title, EndReason: s.endReason})
}

// announceLocked delivers c, a change of a session of owner, to every
// watcher that may list it. r.mu must be held. Once
// Shutdown started nothing is announced: every socket is about to close
// (1001), and its last frames are the session.closed of its sessions.
func (r *Registry) announceLocked(owner string, c Change) {
	if len(r.watchers) == 0 || r.closing {
		return
	}
	ev := NewEvent("session.changed", "", 0, c)
	for v := range r.watchers {
		if authorize(v.Principal(), owner, accessManage) {
			v.Deliver(ev)
		}
	}
}

// announce is announceLocked for a caller without the lock.
func (r *Registry) announce(owner string, c Change) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.announceLocked(owner, c)
}
