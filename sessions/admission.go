package sessions

import (
	"strconv"

	"github.com/dashgate/dashgate/store"
)

// This file owns admission: whether a session may become live here, for
// every way one does (admitKind), under the session caps
// (Config.MaxSessions with its fair-share eviction, MaxSessionsPerUser),
// and the title a new session takes when it asks for a default one
// ("session N"). It is a view under the registry's lock, as viewerIndex
// is: it changes nothing but what its methods say, and the caller counts
// an admitted session (usageIndex.addSession) and ends what it evicted
// (Registry.finishAll) outside the lock.

// admitKind is the way a session becomes live; it says whether room may
// be made for it by evicting a detached session.
type admitKind int

const (
	admitCreate    admitKind = iota // a new session: session.create, a terminal-only attach
	admitReopen                     // a closed session made live again (Reopen)
	admitAdopt                      // another node's session, adopted for a resume or a reopen
	admitRestore                    // a session kept over a restart, at start: evicts nothing
	admitAdoptList                  // another node's session, adopted for its owner's list: evicts nothing
)

// evicts reports whether room may be made for a session admitted as k.
func (k admitKind) evicts() bool { return k != admitRestore && k != admitAdoptList }

// admission guards the session caps and keeps the default-title counter.
// Every method needs the registry's mutex held.
type admission struct {
	max   int         // Config.MaxSessions
	usage *usageIndex // the registry's: who has what live
	// claim is the close funnel's claim of a session evicted for room
	// (Registry.claimLocked with EndLRUEvict): it frees the session's
	// slots at once.
	claim func(*Session)
	// titles is, per owner whose stored titles were read once
	// (loadTitles), the highest N of a default title "session N" any of
	// its sessions had, live or stored, or was given since: a default
	// title at or under it is not given again.
	titles map[string]int
}

func newAdmission(max int, usage *usageIndex, claim func(*Session)) admission {
	return admission{max: max, usage: usage, claim: claim, titles: map[string]int{}}
}

// full reports whether a session of owner would need room made for it.
func (a *admission) full(owner string) bool {
	return a.usage.sessionsFull(owner) || a.usage.live >= a.max
}

// fullErr is why a session of owner that may not evict finds no room (full
// holds): the owner's cap (a *UserCapacityError naming
// --max-sessions-per-user) or the global one (a *CapacityError naming
// --max-sessions).
func (a *admission) fullErr(owner string) error {
	if a.usage.sessionsFull(owner) {
		return &UserCapacityError{Limit: LimitSessionsPerUser, Max: a.usage.maxSessions}
	}
	return &CapacityError{Limit: LimitSessions, Max: a.max}
}

// admit makes room for one more live session of owner, admitted as k, and
// returns the sessions it claimed for it (the caller finishes them outside
// the lock, see Registry.finishAll, even with an error). A kind that does
// not evict fails when owner is full (admission.fullErr). Otherwise: at
// MaxSessionsPerUser it claims owner's least recently active detached
// session (never another user's), or fails with a *UserCapacityError when
// owner has none; then, when MaxSessions are live, the least recently
// active detached session of the user most over their fair share of
// MaxSessions, owner counted with the session it asks for (never one of a
// user at or under it; owner's own when owner is the one over, as when it
// is alone: usageIndex.fairEvictee), or it fails with a *CapacityError.
func (a *admission) admit(owner string, k admitKind) ([]*Session, error) {
	if !k.evicts() {
		if a.full(owner) {
			return nil, a.fullErr(owner)
		}
		return nil, nil
	}
	var evict []*Session
	if a.usage.sessionsFull(owner) {
		s := a.usage.lruDetached(owner)
		if s == nil {
			return nil, &UserCapacityError{Limit: LimitSessionsPerUser, Max: a.usage.maxSessions}
		}
		a.claim(s) // frees both its slots now
		evict = append(evict, s)
	}
	if a.usage.live < a.max {
		return evict, nil
	}
	lru := a.usage.fairEvictee(owner, a.max)
	if lru == nil {
		return evict, &CapacityError{Limit: LimitSessions, Max: a.max}
	}
	a.claim(lru) // frees its slot now
	return append(evict, lru), nil
}

// title is the title a new session of owner that asks for title takes:
// title, unless it is a default one ("session N") that a live session of
// owner has, or N is at or under the counter (a stored session of owner's
// has or had it, or it was given already); then "session M", M one beyond
// both. known is false when owner's stored titles were not read yet
// (loadTitles): the answer then stands on the live ones only, and the
// counter is not moved.
func (a *admission) title(owner, title string) (out string, known bool) {
	n, ok := defaultNumber(title)
	if !ok {
		return title, true
	}
	highest, known := a.titles[owner]
	used := n <= highest
	for s := range a.usage.owned(owner) {
		used = used || s.title == title
		if m, ok := defaultNumber(s.title); ok && m > highest {
			highest = m
		}
	}
	if used {
		title = "session " + strconv.Itoa(highest+1)
	}
	if known {
		a.noteTitle(owner, title)
	}
	return title, known
}

// loadTitles starts owner's counter from the default titles of stored,
// its latest closed sessions as read from the store (once per owner).
func (a *admission) loadTitles(owner string, stored []store.Session) {
	if _, ok := a.titles[owner]; ok {
		return
	}
	a.titles[owner] = 0
	for _, row := range stored {
		a.noteTitle(owner, row.Title)
	}
}

// noteTitle moves owner's counter past title when it is a default one
// beyond it (a session made live, renamed or given a title); nothing
// before owner's stored titles were read.
func (a *admission) noteTitle(owner, title string) {
	highest, known := a.titles[owner]
	if n, ok := defaultNumber(title); known && ok && n > highest {
		a.titles[owner] = n
	}
}
