package sessions

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// This file owns what each user has running: the per-owner index of live
// sessions, chat workers and terminals (usageIndex), the per-user caps it
// enforces (Config.MaxSessionsPerUser, MaxWorkersPerUser,
// MaxTerminalsPerUser), their error, and the admin page's per-user summary.
// The index is guarded by the registry's mutex. A session is in it from
// the moment it is in the registry and live until it is claimed by the
// close funnel (setState to closing); a child from the slot taken before
// its spawn until its OnClose ran (or the spawn failed). Each is a member
// of a set, so leaving twice is leaving once: the counts cannot drift.

// The flags of the caps: the per-user ones, as UserCapacityError.Limit
// names them, and the global session cap, as CapacityError.Limit does.
const (
	LimitSessions         = "--max-sessions"
	LimitSessionsPerUser  = "--max-sessions-per-user"
	LimitWorkersPerUser   = "--max-workers-per-user"
	LimitTerminalsPerUser = "--max-terminals-per-user"
)

// DefaultUserCaps returns the per-user caps to use when users are on
// (several principals share the box) and the operator gave none: each
// user may hold at most a quarter of each global cap. Sessions: a quarter
// of maxSessions (--max-sessions). Chat workers and terminals: an eighth
// of maxWorkers (--max-workers) each, since that one global cap counts
// both, so that a user's workers and terminals together are a quarter of
// it. Each is at least 1 (0 would mean no limit).
//
// Why a quarter: on a shared box of a handful to dozens of people, one
// person rarely needs more than a few chats and terminals open at once
// (with the defaults 1000 and 64: 250 sessions, 8 chat workers and 8
// terminals), while a runaway script of one user, or two, cannot fill a
// global cap by itself: at least four users can each be at their caps
// before the global one is met. Beyond that the fair shares (usage.go)
// keep a user at or under their share from losing anything to another.
// Smaller caps would start to refuse ordinary use (tabs left open); larger
// ones let two users fill the box.
func DefaultUserCaps(maxSessions, maxWorkers int) (sessions, workers, terminals int) {
	sessions = max(1, maxSessions/4)
	workers = max(1, maxWorkers/8)
	return sessions, workers, workers
}

// UserCapacityError is returned when a call would give one user (the owner
// of the sessions, Principal.User) more than Max of what Limit caps: live
// sessions, chat workers or terminals. It matches ErrCapacity (4029).
type UserCapacityError struct {
	Limit string // the flag, e.g. "--max-workers-per-user" (the Limit* constants)
	Max   int
}

func (e *UserCapacityError) Error() string {
	return fmt.Sprintf("user capacity reached: %s (%d)", e.Limit, e.Max)
}

// Is makes errors.Is(err, ErrCapacity) hold.
func (e *UserCapacityError) Is(target error) bool { return target == ErrCapacity }

// CapacityError is returned when Max live sessions (Limit, --max-sessions)
// leave no room, and none may be evicted for the one asked for (no
// detached session of a user over their share; see admission.admit). It
// matches ErrCapacity (4029); its message names the flag.
type CapacityError struct {
	Limit string // LimitSessions
	Max   int
}

func (e *CapacityError) Error() string {
	return fmt.Sprintf("%s: %s (%d)", ErrCapacity, e.Limit, e.Max)
}

// Is makes errors.Is(err, ErrCapacity) hold.
func (e *CapacityError) Is(target error) bool { return target == ErrCapacity }

// childKind is what a counted child is.
type childKind int

const (
	kindWorker childKind = iota
	kindTerminal
	kindCount
)

// limits are the flags of each kind's cap.
var childLimits = [kindCount]string{kindWorker: LimitWorkersPerUser, kindTerminal: LimitTerminalsPerUser}

// child is one chat worker's or terminal's place in its owner's count.
// Its fields are guarded by the registry's mutex.
type child struct {
	kind    childKind
	owner   string
	pid     int  // 0 until its spawn returned
	counted bool // in its owner's set
	closed  bool // its spawn failed or its OnClose ran: never counted again
}

// usage is one user's live sessions and children.
type usage struct {
	sessions map[*Session]struct{}
	children [kindCount]map[*child]struct{}
}

func (u *usage) empty() bool {
	return len(u.sessions) == 0 && len(u.children[kindWorker]) == 0 && len(u.children[kindTerminal]) == 0
}

// usageIndex is the one record of what each user has live; only its
// methods change it. r.mu must be held for every call.
type usageIndex struct {
	byUser      map[string]*usage
	live        int            // sessions in every user's set: the registry's live sessions
	max         [kindCount]int // 0: no limit
	maxSessions int
}

func newUsageIndex(c *Config) usageIndex {
	ix := usageIndex{byUser: map[string]*usage{}, maxSessions: c.MaxSessionsPerUser}
	ix.max[kindWorker], ix.max[kindTerminal] = c.MaxWorkersPerUser, c.MaxTerminalsPerUser
	return ix
}

func (ix *usageIndex) of(user string) *usage {
	u := ix.byUser[user]
	if u == nil {
		u = &usage{sessions: map[*Session]struct{}{}}
		for k := range u.children {
			u.children[k] = map[*child]struct{}{}
		}
		ix.byUser[user] = u
	}
	return u
}

// prune forgets a user with nothing live, so the index holds only users
// who have something.
func (ix *usageIndex) prune(user string) {
	if u := ix.byUser[user]; u != nil && u.empty() {
		delete(ix.byUser, user)
	}
}

// sessions is how many live sessions user has.
func (ix *usageIndex) sessions(user string) int {
	if u := ix.byUser[user]; u != nil {
		return len(u.sessions)
	}
	return 0
}

// sessionsFull reports whether user is at --max-sessions-per-user.
func (ix *usageIndex) sessionsFull(user string) bool {
	return ix.maxSessions > 0 && ix.sessions(user) >= ix.maxSessions
}

// lruDetached is user's least recently active detached session, nil when
// it has none.
func (ix *usageIndex) lruDetached(user string) *Session {
	if u := ix.byUser[user]; u != nil {
		return u.lruDetached()
	}
	return nil
}

// lruDetached is u's least recently active detached session, nil when it
// has none.
func (u *usage) lruDetached() *Session {
	var out *Session
	for s := range u.sessions {
		if s.state == StateDetached && (out == nil || s.lastActive.Before(out.lastActive)) {
			out = s
		}
	}
	return out
}

// idleWorker is the session of u's, least recently active, whose chat
// worker nothing uses (Session.idleWorkerLocked); nil when none.
func (u *usage) idleWorker() *Session {
	var out *Session
	for s := range u.sessions {
		if s.idleWorkerLocked() && (out == nil || s.lastActive.Before(out.lastActive)) {
			out = s
		}
	}
	return out
}

// childCount is how many chat workers and terminals u holds: its part of
// the global child cap (--max-workers counts both).
func (u *usage) childCount() int { return len(u.children[kindWorker]) + len(u.children[kindTerminal]) }

// Fair shares. A global cap (--max-sessions, --max-workers) is shared by
// the users who hold something of it: each one's fair share is the cap
// divided by their number, the user asking counted. When a cap is met,
// what makes room is taken from the user most over their share, never
// from one at or under it: one user's script cannot push the others out.
// The asker's own is taken when it is the one most over (ties go to it:
// that harms no one else), so a lone user keeps today's behaviour where a
// cap evicts (sessions); a lone user holds exactly its share of the
// children, so nothing of its own is reclaimed for it (workers).

// fairEvictee is the detached session to end so that requester may have
// one more live session at MaxSessions (max): the least recently active
// detached one of the user most over their share, max divided by the users
// with live sessions (requester counted, with the session it asks for).
// nil when no user over their share has a detached session.
func (ix *usageIndex) fairEvictee(requester string, max int) *Session {
	held := func(user string, u *usage) int {
		if user == requester {
			return len(u.sessions) + 1
		}
		return len(u.sessions)
	}
	return ix.fairVictim(requester, max, held, (*usage).lruDetached)
}

// fairReclaim is the session whose idle chat worker to close so that
// requester, whose spawn met the global child cap, may start one: its
// least recently active one of the user most over their share of the
// children dashgate's users hold (workers and terminals, the one the
// requester reserved included), divided by the users holding any. The
// cap's own figure is not needed: it is met, so what is held is it (plus
// the spawns asked for). nil when no user over their share has an idle
// worker.
func (ix *usageIndex) fairReclaim(requester string) *Session {
	total := 0
	for _, u := range ix.byUser {
		total += u.childCount()
	}
	return ix.fairVictim(requester, total, func(_ string, u *usage) int { return u.childCount() }, (*usage).idleWorker)
}

// fairVictim picks, among the users whose held count is over their fair
// share of total (held*n > total, n the users holding any, requester
// counted), the one most over that has a candidate (pick), and returns
// that candidate. Ties go to requester's own, then to the least recently
// active candidate. nil when there is none.
func (ix *usageIndex) fairVictim(requester string, total int, held func(string, *usage) int, pick func(*usage) *Session) *Session {
	n, asked := 0, false
	for user, u := range ix.byUser {
		if held(user, u) > 0 {
			n++
			asked = asked || user == requester
		}
	}
	if !asked {
		n++ // requester, with nothing yet
	}
	var best *Session
	bestHeld, bestOwn := 0, false
	for user, u := range ix.byUser {
		h := held(user, u)
		if h*n <= total { // at or under the share: never taken from
			continue
		}
		c := pick(u)
		if c == nil {
			continue
		}
		own := user == requester
		switch {
		case best == nil, h > bestHeld,
			h == bestHeld && own && !bestOwn,
			h == bestHeld && own == bestOwn && c.lastActive.Before(best.lastActive):
			best, bestHeld, bestOwn = c, h, own
		}
	}
	return best
}

func (ix *usageIndex) addSession(s *Session) {
	u := ix.of(s.owner)
	if _, ok := u.sessions[s]; !ok {
		u.sessions[s] = struct{}{}
		ix.live++
	}
}

func (ix *usageIndex) dropSession(s *Session) {
	if u := ix.byUser[s.owner]; u != nil {
		if _, ok := u.sessions[s]; ok {
			delete(u.sessions, s)
			ix.live--
		}
		ix.prune(s.owner)
	}
}

// owned is user's live sessions, nil when none.
func (ix *usageIndex) owned(user string) map[*Session]struct{} {
	if u := ix.byUser[user]; u != nil {
		return u.sessions
	}
	return nil
}

// room fails with a *UserCapacityError when user has as many children of
// kind as its cap allows.
func (ix *usageIndex) room(user string, kind childKind) error {
	max := ix.max[kind]
	if max <= 0 {
		return nil
	}
	if u := ix.byUser[user]; u != nil && len(u.children[kind]) >= max {
		return &UserCapacityError{Limit: childLimits[kind], Max: max}
	}
	return nil
}

// reserve returns a counted slot of kind for user, or fails as room does.
// The caller spawns after it and calls release when the spawn fails or the
// child closed.
func (ix *usageIndex) reserve(user string, kind childKind) (*child, error) {
	c := &child{kind: kind, owner: user}
	if err := ix.room(user, kind); err != nil {
		return nil, err
	}
	ix.count(c, user)
	return c, nil
}

// count counts c, not yet counted (a spare's), for user. The caller
// checked room and that c is not closed.
func (ix *usageIndex) count(c *child, user string) {
	c.owner, c.counted = user, true
	ix.of(user).children[c.kind][c] = struct{}{}
}

// release ends c's place for good: its spawn failed or it closed. Safe to
// call twice.
func (ix *usageIndex) release(c *child) {
	c.closed = true
	if !c.counted {
		return
	}
	c.counted = false
	if u := ix.byUser[c.owner]; u != nil {
		delete(u.children[c.kind], c)
		ix.prune(c.owner)
	}
}

// UserSummary is what one user has live (the admin page's per-user row).
type UserSummary struct {
	User      string // Principal.User of the owner; "" is the anonymous user
	Sessions  int    // live sessions: created, attached or detached, terminal-only ones included
	Workers   int    // live chat workers of its sessions
	Terminals int    // live terminal programs of its sessions (a spare once attached)
	// WorkerPIDs and PTYPIDs are the pids of those children, ascending
	// (a child whose spawn has not returned yet is counted, not listed).
	WorkerPIDs, PTYPIDs []int
}

// UsersSummary returns, for every user with something live, what it has,
// sorted by user; the counts are the ones the per-user caps check. It
// takes the registry's lock once and scans only the users' own sets (no
// store read); the caller owns the slices. It acts for no principal and
// shows every user's counts, so it is the admin view's (the admin page's
// per-user rows), not the registry's.
func (a AdminView) UsersSummary() []UserSummary {
	r := a.r
	r.mu.Lock()
	out := make([]UserSummary, 0, len(r.usage.byUser))
	for user, u := range r.usage.byUser {
		sum := UserSummary{User: user, Sessions: len(u.sessions), Workers: len(u.children[kindWorker]), Terminals: len(u.children[kindTerminal])}
		sum.WorkerPIDs = pidsOf(u.children[kindWorker])
		sum.PTYPIDs = pidsOf(u.children[kindTerminal])
		out = append(out, sum)
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b UserSummary) int { return strings.Compare(a.User, b.User) })
	return out
}

func pidsOf(set map[*child]struct{}) []int {
	pids := make([]int, 0, len(set))
	for c := range maps.Keys(set) {
		if c.pid > 0 {
			pids = append(pids, c.pid)
		}
	}
	slices.Sort(pids)
	return pids
}

// byOf is the by= of a close p caused on a session of owner: "" when p
// acts on its own session; the admin's user, or "admin-token" for
// AdminPrincipal (the admin token, which owns no session), otherwise.
func byOf(p Principal, owner string) string {
	switch {
	case !p.Admin:
		return ""
	case p.User == "":
		return "admin-token"
	case p.User != owner:
		return p.User
	}
	return ""
}
