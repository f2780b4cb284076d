package handlers

import (
	"context"

	"github.com/dashgate/dashgate/sessions"
)

// principalKey is the request context key of the caller's principal.
type principalKey struct{}

// WithPrincipal returns ctx carrying p, the principal the edge (package
// web's auth) resolved for a request. It is request-scoped plumbing only:
// a handler reads it once (PrincipalFrom) and passes it explicitly, as a
// viewer's or as a parameter of the registry's calls.
func WithPrincipal(ctx context.Context, p sessions.Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom is the principal WithPrincipal put in ctx; without one
// (a handler served without the web middleware, as in tests) it is the
// anonymous user, today's one user of the dashboard token.
func PrincipalFrom(ctx context.Context) sessions.Principal {
	p, _ := ctx.Value(principalKey{}).(sessions.Principal)
	return p
}
