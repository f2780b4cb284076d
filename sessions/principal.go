package sessions

// This file owns who is asking: the Principal a call acts for and the one
// rule (authorize) that says whether it may touch a session. Every
// registry method that reads or changes a session goes through authorize;
// a session it refuses answers exactly as a missing one (ErrNotFound), so
// a caller learns nothing of another user's sessions, not even that they
// exist. authorize_test.go lists every method the handlers call and fails
// when one is added without an entry.

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
// every session, acting for [AdminPrincipal]. Only routes behind the admin
// token may be given it.
type AdminView struct{ r *Registry }

// Admin returns the admin page's view of r.
func (r *Registry) Admin() AdminView { return AdminView{r} }

// List is Registry.List for the admin.
func (a AdminView) List() []Info { return a.r.List(AdminPrincipal) }

// Close is Registry.Close for the admin (it blocks until the session is
// torn down).
func (a AdminView) Close(sid string, reason EndReason) (bool, error) {
	return a.r.Close(AdminPrincipal, sid, reason)
}

// ReapDetached is Registry.ReapDetached for the admin.
func (a AdminView) ReapDetached() int { return a.r.ReapDetached(AdminPrincipal) }

// ReapWorker is Registry.ReapWorker for the admin (it blocks until the
// child is reaped).
func (a AdminView) ReapWorker(pid int) error { return a.r.ReapWorker(AdminPrincipal, pid) }
