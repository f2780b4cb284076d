package web

import (
	"container/list"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/templates"
)

// UserDirectory is the users of --users-file (package users' *File
// implements it). Both methods are called on every request that carries a
// users-file token or login cookie, concurrently: they must be safe for
// concurrent use and cheap on repeat (Verify caches).
type UserDirectory interface {
	// Verify returns the user a token (NAME.SECRET) belongs to, ok false
	// for a wrong token or an unknown user.
	Verify(token string) (user string, ok bool)
	// Stamp is a short digest of the user's current line in the file, ok
	// false when the user is gone. A login cookie is signed over it, so a
	// removed or re-added user's old cookies stop working.
	Stamp(user string) (stamp string, ok bool)
}

// MaxUserHeader is the longest --user-header value accepted, in bytes.
const MaxUserHeader = 256

// maxSeenUsers bounds the header-mode users remembered for the login
// audit: past it the longest known is forgotten (and logs in again).
const maxSeenUsers = 4096

// The audit record's target: how a login proved who it was.
const (
	modeToken     = "token"
	modeUsersFile = "users-file"
	modeHeader    = "header"
)

// tokenSource says where a request's identity came from.
type tokenSource int

const (
	tokenNone tokenSource = iota
	tokenCookie
	tokenBearer
	tokenQuery
	tokenHeader // --user-header from a trusted peer: ambient, as a cookie is
)

type authKey struct{}

// peerKey holds whether the connection's own peer (not the client a proxy
// names in X-Forwarded-For) is a trusted proxy; the proxy middleware sets
// it before it rewrites r.RemoteAddr.
type peerKey struct{}

func peerTrusted(r *http.Request) bool {
	t, _ := r.Context().Value(peerKey{}).(bool)
	return t
}

// isUnixConn says whether r came over a Unix-socket listener.
func isUnixConn(r *http.Request) bool {
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return ok && a.Network() == "unix"
}

// identity is who a request is, as auth resolved it.
type identity struct {
	p   sessions.Principal
	src tokenSource
	ok  bool
}

// grant is what a valid token (bearer or ?token=) proves, and the login
// cookie a browser page opened with it gets.
type grant struct {
	p     sessions.Principal
	kind  string // kindDashboard or kindAdmin
	mode  string // the audit record's target
	stamp string
}

func (s *Server) usersOn() bool { return s.cfg.UserHeader != "" || s.cfg.Users != nil }

func (s *Server) userPrincipal(u string) sessions.Principal {
	_, admin := s.admins[u]
	return sessions.Principal{User: u, Admin: admin}
}

func (s *Server) match(tok string, admin bool) bool {
	if tok == "" {
		return false
	}
	h := sha256.Sum256([]byte(tok))
	want := s.tokenH
	if admin {
		want = s.adminH
	}
	return subtle.ConstantTimeCompare(h[:], want[:]) == 1
}

// fromToken is what tok proves on a dashboard (admin false) or admin route.
func (s *Server) fromToken(tok string, admin bool) (grant, bool) {
	if tok == "" {
		return grant{}, false
	}
	if admin && s.match(tok, true) {
		kind := kindAdmin
		if !s.usersOn() && !s.sepAdm {
			kind = kindDashboard // one token: one cookie on the base path, as before
		}
		return grant{p: sessions.AdminPrincipal, kind: kind, mode: modeToken, stamp: s.adminStamp}, true
	}
	if s.cfg.Users != nil {
		if u, ok := s.cfg.Users.Verify(tok); ok && u != "" {
			if stamp, ok := s.cfg.Users.Stamp(u); ok {
				return grant{p: s.userPrincipal(u), kind: kindDashboard, mode: modeUsersFile, stamp: stamp}, true
			}
		}
	}
	if !s.usersOn() && !admin && s.match(tok, false) {
		return grant{p: sessions.Principal{}, kind: kindDashboard, mode: modeToken, stamp: s.tokenStamp}, true
	}
	return grant{}, false
}

// fromCookies is who the request's login cookies say, for a dashboard or
// admin route.
func (s *Server) fromCookies(r *http.Request, admin bool) (sessions.Principal, bool) {
	now := time.Now()
	if admin {
		if c, err := r.Cookie(s.adminCookie); err == nil {
			if u, iss, mac, ok := parseCookie(c.Value); ok && u == "" &&
				verifyCookie(s.key, s.instance, kindAdmin, "", iss, mac, s.adminStamp, now) {
				return sessions.AdminPrincipal, true
			}
		}
	}
	if c, err := r.Cookie(s.loginCookie); err == nil {
		if u, iss, mac, ok := parseCookie(c.Value); ok {
			switch {
			case s.cfg.Users != nil && u != "":
				if stamp, ok := s.cfg.Users.Stamp(u); ok && verifyCookie(s.key, s.instance, kindDashboard, u, iss, mac, stamp, now) {
					return s.userPrincipal(u), true
				}
			case !s.usersOn() && u == "" && (!admin || !s.sepAdm):
				if verifyCookie(s.key, s.instance, kindDashboard, "", iss, mac, s.tokenStamp, now) {
					return principal(admin), true
				}
			}
		}
	}
	if !s.usersOn() {
		// Deprecated: the raw token in the cookies dashgate set before
		// users (scripts still send them).
		names := []string{TokenCookie}
		if admin && s.sepAdm {
			names = []string{AdminTokenCookie, TokenCookie}
		}
		for _, name := range names {
			if c, err := r.Cookie(name); err == nil && s.match(c.Value, admin) {
				return principal(admin), true
			}
		}
	}
	return sessions.Principal{}, false
}

// principal is who a token-mode request with a valid token acts for: the
// dashboard token is the one anonymous user (owner "" of every session
// made before users), the admin token, on the admin routes, the admin.
func principal(admin bool) sessions.Principal {
	if admin {
		return sessions.AdminPrincipal
	}
	return sessions.Principal{}
}

// badUserHeader says why the user header's values are refused, "" when
// they name a user.
func badUserHeader(vals []string) string {
	if len(vals) > 1 {
		return "repeated"
	}
	v := vals[0]
	switch {
	case v == "":
		return "empty"
	case len(v) > MaxUserHeader:
		return "longer than 256 bytes"
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c == 0x7f {
			return "control character"
		}
	}
	return ""
}

// identify resolves who r is, in this order: the user header from a
// trusted peer (header mode: never a cookie then), the login cookies, a
// bearer token, ?token=. bad is why the user header was refused (400).
func (s *Server) identify(r *http.Request, admin bool) (id identity, bad string) {
	if s.cfg.UserHeader != "" && peerTrusted(r) {
		if vals := r.Header.Values(s.cfg.UserHeader); len(vals) > 0 {
			if bad := badUserHeader(vals); bad != "" {
				return identity{}, bad
			}
			u := vals[0]
			if s.seen.add(u) {
				s.audit(r, u, modeHeader)
			}
			return identity{p: s.userPrincipal(u), src: tokenHeader, ok: true}, ""
		}
	}
	if p, ok := s.fromCookies(r, admin); ok {
		return identity{p: p, src: tokenCookie, ok: true}, ""
	}
	if a := r.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "Bearer ") {
		if g, ok := s.fromToken(strings.TrimSpace(a[7:]), admin); ok {
			return identity{p: g.p, src: tokenBearer, ok: true}, ""
		}
	}
	if g, ok := s.fromToken(r.URL.Query().Get("token"), admin); ok {
		return identity{p: g.p, src: tokenQuery, ok: true}, ""
	}
	return identity{}, ""
}

// audit logs one login: user (the admin token's principal as
// "admin-token"), the client's address, the mode as target.
func (s *Server) audit(r *http.Request, user, mode string) {
	s.log.Info("login", "user", user, "remote", r.RemoteAddr, "action", "login", "target", mode)
}

func auditUser(p sessions.Principal) string {
	if p == sessions.AdminPrincipal {
		return "admin-token"
	}
	return p.User
}

func isPage(r *http.Request) bool {
	return r.Method == http.MethodGet && !isUpgrade(r) && strings.Contains(r.Header.Get("Accept"), "text/html")
}

// auth resolves each request's principal (identify) into the context
// handlers read (handlers.PrincipalFrom): 400 for a refused user header,
// 401 (a login page for a browser) without an identity, 403 for a
// non-admin on the admin routes. A browser page opened with ?token= gets
// the login cookie (when that token is valid) and is redirected to the
// URL without it, whatever let it in.
func (s *Server) auth(admin bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			throttled := s.cfg.Users != nil && carriesToken(r)
			if throttled && s.throttle.blocked(clientAddr(r)) {
				s.throttle.refused.Add(1)
				s.throttle.warn.Do(func() {
					s.log.Warn("wrong tokens: client throttled", "remote", r.RemoteAddr, "refused", s.throttle.refused.Swap(0))
				})
				w.Header().Set("Retry-After", "1")
				http.Error(w, "too many wrong tokens from this address: try again later", http.StatusTooManyRequests)
				return
			}
			id, bad := s.identify(r, admin)
			if throttled && !id.ok && bad == "" {
				s.throttle.failed(clientAddr(r))
			}
			if bad != "" {
				s.badHeaders.Add(1)
				s.headerWarn.Do(func() {
					s.log.Warn("user header refused", "header", s.cfg.UserHeader, "reason", bad,
						"remote", r.RemoteAddr, "refused", s.badHeaders.Swap(0))
				})
				http.Error(w, "bad "+s.cfg.UserHeader+" header: "+bad, http.StatusBadRequest)
				return
			}
			if !id.ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="dashgate"`)
				if isPage(r) {
					// A person in a browser: a form that sends ?token= (no script).
					w.Header().Set("Content-Type", "text/html; charset=utf-8")
					w.WriteHeader(http.StatusUnauthorized)
					templates.Login(templates.LoginView{BasePath: s.base(r), Admin: admin, Wrong: r.URL.Query().Has("token"), Users: s.cfg.Users != nil,
						LoggedOut: r.URL.Query().Get("logged_out") == "1"}).Render(r.Context(), w)
					return
				}
				http.Error(w, "unauthorized: a valid token is required", http.StatusUnauthorized)
				return
			}
			// A page opened with ?token= never keeps it in the address bar
			// (or the history), also when something else let it in.
			if r.URL.Query().Has("token") && isPage(r) {
				if g, ok := s.fromToken(r.URL.Query().Get("token"), admin); ok {
					s.setLogin(w, r, g)
				}
				u := *r.URL
				q := u.Query()
				q.Del("token")
				u.RawQuery = q.Encode()
				u.Path = s.externalPath(r)
				http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
				return
			}
			if admin && !id.p.Admin {
				s.forbidden(w, r)
				return
			}
			ctx := context.WithValue(r.Context(), authKey{}, id.src)
			next.ServeHTTP(w, r.WithContext(handlers.WithPrincipal(ctx, id.p)))
		})
	}
}

// setLogin sets the login cookie g earns and logs the login. The admin
// token's login also sets the admin link's cookie on the base path (the
// dashboard's requests never carry the admin cookie): see hasAdminLink.
func (s *Server) setLogin(w http.ResponseWriter, r *http.Request, g grant) {
	name, cpath := s.loginCookie, s.base(r)
	if g.kind == kindAdmin {
		name, cpath = s.adminCookie, s.base(r)+"admin"
	}
	now := time.Now()
	set := func(name, kind, path string) {
		http.SetCookie(w, &http.Cookie{
			Name: name, Value: signCookie(s.key, s.instance, kind, g.p.User, now, g.stamp),
			Path: path, MaxAge: int(CookieMaxAge / time.Second), HttpOnly: true,
			SameSite: http.SameSiteStrictMode, Secure: s.scheme(r) == "https",
		})
	}
	set(name, g.kind, cpath)
	if g.kind == kindAdmin {
		set(s.linkCookie, kindAdminLink, s.base(r))
	}
	s.audit(r, auditUser(g.p), g.mode)
}

// hasAdminLink reports whether r carries a valid admin link cookie: this
// browser made the admin token's login, which has not expired and whose
// token was not rotated since. It grants nothing; the dashboard shows its
// admin link.
func (s *Server) hasAdminLink(r *http.Request) bool {
	c, err := r.Cookie(s.linkCookie)
	if err != nil {
		return false
	}
	u, iss, mac, ok := parseCookie(c.Value)
	return ok && u == "" && verifyCookie(s.key, s.instance, kindAdminLink, "", iss, mac, s.adminStamp, time.Now())
}

// logout ends this browser's login cookies (POST {base}logout): the
// dashboard's and the admin's, each expired on the path it was set for,
// and the raw-token cookies of before users; closes the WebSockets that
// came with that login (the browser's other tabs: they find themselves
// logged out and show the login page); then it sends the browser to the
// dashboard (?logged_out=1), which asks for a token and says it logged out. The cookies are signed, not
// stored: a copy taken elsewhere before stays valid until it expires or
// its user's token is rotated (docs/users.md).
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	base := s.base(r)
	// The admin cookie is on the admin path, and /logout is not under it:
	// the request never carries it, so it is ended whether it was set or
	// not.
	for _, c := range []struct{ name, path string }{
		{s.loginCookie, base}, {s.adminCookie, base + "admin"}, {s.linkCookie, base}, {TokenCookie, base}, {AdminTokenCookie, base + "admin"},
	} {
		if _, err := r.Cookie(c.name); err == nil || c.name == s.adminCookie {
			http.SetCookie(w, &http.Cookie{Name: c.name, Value: "", Path: c.path, MaxAge: -1, HttpOnly: true,
				SameSite: http.SameSiteStrictMode, Secure: s.scheme(r) == "https"})
		}
	}
	p, _ := s.fromCookies(r, false)
	closed := 0
	if c, err := r.Cookie(s.loginCookie); err == nil && c.Value != "" {
		closed = s.revokeLogin(c.Value)
	}
	s.log.Info("logout", "user", auditUser(p), "remote", r.RemoteAddr, "sockets", closed)
	http.Redirect(w, r, base+"?logged_out=1", http.StatusSeeOther) // the login page says so
}

// revokeLogin closes the open WebSockets that came with the login cookie
// value (this browser's other tabs, after its Log out) as Revoke does
// (close code 4403), and returns how many.
func (s *Server) revokeLogin(value string) int {
	var cancels []context.CancelCauseFunc
	s.smu.Lock()
	for _, m := range s.socks {
		for ls := range m {
			if ls.login == value {
				cancels = append(cancels, ls.cancel)
			}
		}
	}
	s.smu.Unlock()
	for _, c := range cancels {
		c(sessions.ErrViewerRevoked)
	}
	return len(cancels)
}

// forbidden answers 403 to an authenticated non-admin on an admin route:
// plain text, or a short page for a browser.
func (s *Server) forbidden(w http.ResponseWriter, r *http.Request) {
	if !isPage(r) {
		http.Error(w, "forbidden: an admin is required", http.StatusForbidden)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusForbidden)
	base := s.base(r)
	w.Write([]byte(`<!doctype html><html lang="en"><head><meta charset="utf-8"><title>dashgate: admins only</title>` +
		`<link rel="stylesheet" href="` + base + `static/css/page.css"></head><body><main class="page">` +
		`<h1>Admins only</h1><p data-testid="forbidden">This page is for dashgate's admins.</p>` +
		`<p><a href="` + base + `">Back to the dashboard</a></p></main></body></html>`))
}

// seenUsers is the header-mode users this process has logged in (the
// audit's "first request"), at most max, the longest known forgotten
// first. Safe for concurrent use.
type seenUsers struct {
	mu    sync.Mutex
	max   int
	m     map[string]*list.Element
	order *list.List // of string, the oldest first
}

func newSeenUsers(max int) *seenUsers {
	return &seenUsers{max: max, m: map[string]*list.Element{}, order: list.New()}
}

// add remembers u and says whether it was new.
func (s *seenUsers) add(u string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[u]; ok {
		return false
	}
	if s.order.Len() >= s.max {
		delete(s.m, s.order.Remove(s.order.Front()).(string))
	}
	s.m[u] = s.order.PushBack(u)
	return true
}

func (s *seenUsers) forget(u string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.m[u]; ok {
		s.order.Remove(e)
		delete(s.m, u)
	}
}

// liveSocket is one /ws/* request being served: Revoke cancels it.
// liveSocket is one open WebSocket: how to close it, and the login cookie
// it came with ("" for another kind of identity), which Log out closes.
type liveSocket struct {
	cancel context.CancelCauseFunc
	login  string
}

// track serves a /ws/* request under a context Revoke can cancel, indexed
// by its principal's user while the handler runs.
func (s *Server) track(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user := handlers.PrincipalFrom(r.Context()).User
		ctx, cancel := context.WithCancelCause(r.Context())
		ls := &liveSocket{cancel: cancel}
		if src, _ := r.Context().Value(authKey{}).(tokenSource); src == tokenCookie {
			if c, err := r.Cookie(s.loginCookie); err == nil {
				ls.login = c.Value
			}
		}
		s.smu.Lock()
		if s.socks[user] == nil {
			s.socks[user] = map[*liveSocket]struct{}{}
		}
		s.socks[user][ls] = struct{}{}
		s.smu.Unlock()
		defer func() {
			s.smu.Lock()
			if m := s.socks[user]; m != nil {
				delete(m, ls)
				if len(m) == 0 {
					delete(s.socks, user)
				}
			}
			s.smu.Unlock()
			cancel(nil)
		}()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// Revoke closes every open WebSocket of the users given: each one's
// request context is cancelled with sessions.ErrViewerRevoked, which the
// handlers answer with close code 4403 (handlers.CloseRevoked); their
// sessions detach. It returns how many sockets it closed, without waiting
// for them to go. A header-mode user revoked logs in again (an audit
// record) on their next request. Their login cookies stop working by
// themselves once the UserDirectory's Stamp changes or fails.
func (s *Server) Revoke(users ...string) int {
	var cancels []context.CancelCauseFunc
	s.smu.Lock()
	for _, u := range users {
		for ls := range s.socks[u] {
			cancels = append(cancels, ls.cancel)
		}
		delete(s.socks, u)
	}
	s.smu.Unlock()
	for _, u := range users {
		s.seen.forget(u)
	}
	for _, c := range cancels {
		c(sessions.ErrViewerRevoked)
	}
	return len(cancels)
}

// identityState is the part of Server that auth and Revoke use.
type identityState struct {
	key         []byte
	instance    string
	loginCookie string
	adminCookie string
	linkCookie  string // the admin link's (AdminLinkCookiePrefix)
	tokenStamp  string // the dashboard token's digest: a token-mode cookie is signed over it
	adminStamp  string
	admins      map[string]struct{}
	seen        *seenUsers
	badHeaders  atomic.Int64 // refused user headers since the last WARN
	headerWarn  rate.Sometimes
	throttle    *throttle    // wrong users-file tokens per client (throttle.go)
	badSecrets  atomic.Int64 // wrong proxy secrets since the last WARN (peer.go)
	secretWarn  rate.Sometimes

	smu   sync.Mutex
	socks map[string]map[*liveSocket]struct{} // open /ws/* requests by user
}

func tokenDigest(tok string) string {
	h := sha256.Sum256([]byte("dashgate token stamp\x00" + tok))
	return hex.EncodeToString(h[:16])
}

// initIdentity checks and completes the identity part of the config.
func (s *Server) initIdentity() error {
	cfg := &s.cfg
	switch {
	case len(cfg.CookieKey) == 0:
		cfg.CookieKey = make([]byte, 32)
		rand.Read(cfg.CookieKey)
	case len(cfg.CookieKey) < 32:
		return fmt.Errorf("cookie key: %d bytes, at least 32 are required", len(cfg.CookieKey))
	}
	if cfg.Instance == "" {
		h := sha256.Sum256(append([]byte("dashgate cookie instance\x00"), cfg.CookieKey...))
		cfg.Instance = hex.EncodeToString(h[:5])
	}
	if !validInstance(cfg.Instance) {
		return fmt.Errorf("instance %q: letters, digits, '-' and '_' only, at most 32", cfg.Instance)
	}
	s.key, s.instance = cfg.CookieKey, cfg.Instance
	s.loginCookie, s.adminCookie = LoginCookiePrefix+cfg.Instance, AdminCookiePrefix+cfg.Instance
	s.linkCookie = AdminLinkCookiePrefix + cfg.Instance
	s.tokenStamp, s.adminStamp = tokenDigest(cfg.Token), tokenDigest(cfg.AdminToken)
	s.admins = map[string]struct{}{}
	for _, u := range cfg.AdminUsers {
		s.admins[u] = struct{}{}
	}
	s.seen = newSeenUsers(maxSeenUsers)
	s.headerWarn = rate.Sometimes{Interval: headerWarnEvery}
	s.secretWarn = rate.Sometimes{Interval: headerWarnEvery}
	s.throttle = newThrottle()
	s.socks = map[string]map[*liveSocket]struct{}{}
	return nil
}

// headerWarnEvery bounds the WARN records of refused user headers.
const headerWarnEvery = 10 * time.Second

func validInstance(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// LoginCookieName is the name of this server's login cookie.
func (s *Server) LoginCookieName() string { return s.loginCookie }

// AdminCookieName is the name of this server's admin-token cookie (path
// <base>admin).
func (s *Server) AdminCookieName() string { return s.adminCookie }
