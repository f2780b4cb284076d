// Package web is dashgate's HTTP server: the chi router, the middleware
// (trusted proxies, base path, security headers, auth, origin checks,
// request logs), the static mount, and Run, which serves until its context
// ends and then shuts down.
//
// Ownership. Web owns no session state: the handlers translate between the
// wire and the registry. http.Server.Shutdown does not close hijacked
// connections, so Run cancels the base context of every request with
// handlers.ErrShutdown, which closes each WebSocket with 1001; the registry
// closes the sessions themselves. Server.Revoke cancels a user's WebSocket
// requests with sessions.ErrViewerRevoked (close code 4403).
//
// Identity (identity.go, cookie.go). auth resolves who a request is once,
// into the sessions.Principal handlers read with handlers.PrincipalFrom:
// the user header from a trusted peer, a signed login cookie (cookie.go),
// a users-file token, or the dashboard/admin token.
package web

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/static"
	"github.com/dashgate/dashgate/templates"
)

// Config configures the server.
type Config struct {
	BasePath       string // "/" or "/prefix/"; see NormalizeBasePath
	Token          string
	AdminToken     string // "" means Token
	TrustedProxies []netip.Prefix
	AllowedOrigins []string // path.Match patterns on the origin's host, or on scheme://host when they hold "://"
	NodeID         string   // this node in the dashgate_node cookie (see pinNode); "": no cookie
	// NodeLive reports whether the node of that id is live (its heartbeat
	// is younger than the expiry); nil: every other node counts as gone.
	// pinNode keeps a cookie naming a live node.
	NodeLive      func(id string) bool
	Version       string
	Log           *slog.Logger
	MaxConnsPerIP int // open WebSockets per client address; 0 means no limit

	// Users (issue 24). With neither UserHeader nor Users set, the
	// dashboard token is the one anonymous user (sessions.Principal{}), as
	// before users. With either set, the dashboard token no longer opens
	// the dashboard (401); the admin token still opens /admin and /metrics
	// as sessions.AdminPrincipal.
	//
	// UserHeader (--user-header) names the request header an
	// authenticating proxy puts the user in; it is honoured only when the
	// connection's own peer is trusted (TrustedProxies, or a Unix socket
	// with TrustUnix), on every request and WebSocket upgrade, and then
	// wins over any cookie. A value that is empty, repeated, longer than
	// MaxUserHeader bytes or holds a control character is answered 400.
	// Without the header (or from another peer) a request needs a
	// credential as below. "" turns header mode off.
	UserHeader string
	// Users (--users-file) verifies NAME.SECRET tokens, sent as ?token= or
	// "Authorization: Bearer"; a browser page opened with ?token= gets a
	// login cookie for the user. nil turns users-file mode off.
	Users UserDirectory
	// AdminUsers (--admin-users) are the users who are admins
	// (Principal.Admin): they reach /admin and /metrics; other users get 403.
	AdminUsers []string
	// CookieKey signs the login cookies (HMAC-SHA256): at least 32 random
	// bytes, kept across restarts so logins survive them. Empty: New makes
	// a random one (logins last as long as the process).
	CookieKey []byte
	// Instance names this instance's cookies (LoginCookiePrefix+Instance,
	// AdminCookiePrefix+Instance): letters, digits, '-' and '_', at most
	// 32. "": derived from CookieKey.
	Instance string
	// TrustUnix: requests that came over a Unix-socket listener are from a
	// trusted proxy (X-Forwarded-* and UserHeader honoured): with ProxyPeer,
	// only those whose peer credentials it matches; without it, and without
	// ProxySecret, every process that can open the socket.
	TrustUnix bool
	// ProxyPeer (--proxy-user) is who may speak as the proxy over a Unix
	// socket; nil: see TrustUnix.
	ProxyPeer *ProxyPeer
	// ProxySecret (--proxy-secret-file), when not empty, is what a proxy
	// must send in ProxySecretHeader for its request to be trusted: over
	// TCP besides being in TrustedProxies, over a Unix socket without
	// ProxyPeer besides TrustUnix. Never logged; the header is removed
	// from every request.
	ProxySecret []byte

	// Connections (Run). MaxHTTPConns caps open HTTP connections, WebSockets
	// not counted (0: no cap); IdleTimeout closes a keep-alive connection
	// idle that long (0: 90 s); CloseTimeout is how long shutdown waits for
	// a WebSocket's peer to answer the close handshake before closing its
	// connection (0: 1 s).
	MaxHTTPConns int
	IdleTimeout  time.Duration
	CloseTimeout time.Duration
	// MaxPendingPerPeer is how many connections one peer (an IP address;
	// all of 127.0.0.0/8 as one; an IPv6 /64; a Unix socket's uid) may
	// hold that have not finished their request headers: one more closes
	// its oldest such connection (0: DefaultMaxPendingPerPeer; negative:
	// no budget). See connSet.
	MaxPendingPerPeer int
	// HeaderTimeout closes a connection whose request headers are not in
	// that long after its accept, or after the first byte of a keep-alive
	// connection's next request (0: DefaultHeaderTimeout).
	HeaderTimeout time.Duration
	// RecordTerminals: terminals are recorded (--record-terminals); the
	// dashboard says so.
	RecordTerminals bool
}

// Handlers are the endpoints the server routes to.
type Handlers struct {
	Chat     http.Handler
	Terminal http.Handler
	Admin    *handlers.Admin
	Metrics  http.Handler
	// Attachments serves /sessions/{id}/attachments (issue 42) to the
	// dashboard's users; nil: no such routes.
	Attachments *handlers.Attachments
	// Export serves GET /sessions/{id}/export (handlers.Export) to the
	// dashboard's users; nil: no such route.
	Export http.Handler
	// TerminalRefusal serves GET /terminal/refusal (handlers.TerminalRefusal)
	// to the dashboard's users; nil: no such route.
	TerminalRefusal http.Handler
	// TerminalFiles serves /sessions/{id}/terminal/files (uploads into and
	// downloads out of a session's terminal) to the dashboard's users; nil:
	// no such routes.
	TerminalFiles *handlers.TerminalFiles
	// Recordings serves /recordings (their terminal recordings) to the
	// dashboard's users, with --record-terminals; nil: no such routes.
	Recordings *handlers.Recordings
}

// Server is dashgate's HTTP handler.
type Server struct {
	cfg     Config
	log     *slog.Logger
	router  chi.Router
	tokenH  [32]byte
	adminH  [32]byte
	sepAdm  bool
	cop     *http.CrossOriginProtection
	trusted []netip.Prefix
	secretH *[32]byte // sha256 of Config.ProxySecret; nil without one

	mu       sync.Mutex
	inflight int            // requests being served, WebSockets included
	idle     chan struct{}  // closed when inflight drops to 0; nil while 0
	perIP    map[string]int // open WebSockets per client address

	identityState
}

// New builds the server's handler. It refuses a config without a token, a
// CookieKey shorter than 32 bytes, and an Instance that cannot name a
// cookie.
func New(cfg Config, h Handlers) (*Server, error) {
	if cfg.Token == "" {
		return nil, errors.New("a token is required")
	}
	if cfg.AdminToken == "" {
		cfg.AdminToken = cfg.Token
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	base, err := NormalizeBasePath(cfg.BasePath)
	if err != nil {
		return nil, err
	}
	cfg.BasePath = base
	s := &Server{
		cfg: cfg, log: cfg.Log,
		tokenH: sha256.Sum256([]byte(cfg.Token)), adminH: sha256.Sum256([]byte(cfg.AdminToken)),
		sepAdm: cfg.AdminToken != cfg.Token, trusted: cfg.TrustedProxies,
		cop: http.NewCrossOriginProtection(), perIP: map[string]int{},
	}
	if err := s.initIdentity(); err != nil {
		return nil, err
	}
	if len(cfg.ProxySecret) > 0 {
		h := sha256.Sum256(cfg.ProxySecret)
		s.secretH = &h
	}
	for _, o := range cfg.AllowedOrigins {
		if strings.Contains(o, "://") && !strings.ContainsAny(o, "*?[") {
			if err := s.cop.AddTrustedOrigin(o); err != nil {
				return nil, err
			}
		}
	}
	s.cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.log.Warn("cross-origin request refused", "origin", r.Header.Get("Origin"),
			"sec_fetch_site", r.Header.Get("Sec-Fetch-Site"), "path", r.URL.Path, "remote_addr", r.RemoteAddr)
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
	}))

	app := chi.NewRouter()
	app.Get("/healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	// The stylesheet and the icon of the login and "not found" pages,
	// which a browser without a token loads: nothing secret in them.
	for _, asset := range []string{"css/page.css", "css/icon.svg"} {
		serve := func(w http.ResponseWriter, r *http.Request) {
			http.ServeFileFS(w, r, static.FS, asset)
		}
		app.Get("/static/"+asset, serve)
		app.Method(http.MethodGet, "/static/v/{version}/"+asset, thisVersion(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", cacheForGood)
			serve(w, r)
		})))
	}
	app.NotFound(s.notFound)
	// Log out: this browser's login cookies end (the dashboard's and the
	// admin's), then the login page. Same-origin only (a page elsewhere
	// cannot log a user out); no identity needed.
	app.With(s.cop.Handler).Post("/logout", s.logout)
	app.Group(func(r chi.Router) {
		r.Use(s.auth(false))
		r.Get("/", s.dashboard)
		if h.Recordings != nil {
			r.Route("/recordings", h.Recordings.Routes)
		}
		// The assets under static.URL's versioned prefix, cached for
		// good; the unversioned ones (links of an older page) as before,
		// revalidated on each use.
		r.Handle("/static/v/{version}/*", thisVersion(http.StripPrefix(static.URL(cfg.BasePath, ""), staticHandler(cacheForGood))))
		r.Handle("/static/*", http.StripPrefix(cfg.BasePath+"static/", staticHandler("no-cache")))
		r.With(s.checkOrigin, s.limitConns, s.track).Handle("/ws/chat", h.Chat)
		r.With(s.checkOrigin, s.limitConns, s.track).Handle("/ws/pty", h.Terminal)
		if h.Export != nil {
			r.Method(http.MethodGet, "/sessions/{id}/export", h.Export)
		}
		if h.TerminalRefusal != nil {
			r.Method(http.MethodGet, "/terminal/refusal", h.TerminalRefusal)
		}
		if f := h.TerminalFiles; f != nil {
			r.With(s.cop.Handler).Post("/sessions/{id}/terminal/files", f.Upload) // same-origin only
			r.Get("/sessions/{id}/terminal/files", f.Download)
		}
	})
	app.Group(func(r chi.Router) {
		r.Use(s.auth(true), s.cop.Handler)
		if h.Admin != nil {
			r.Route("/admin", h.Admin.Routes)
		}
		if h.Metrics != nil {
			r.Handle("/metrics", h.Metrics)
		}
	})

	if a := h.Attachments; a != nil {
		app.Group(func(r chi.Router) {
			r.Use(s.auth(false))
			// Uploads and removals change state: same-origin only.
			r.With(s.cop.Handler).Post("/sessions/{id}/attachments", a.Upload)
			r.With(s.cop.Handler).Delete("/sessions/{id}/attachments/{aid}", a.Remove)
			r.Get("/sessions/{id}/attachments/{aid}", a.Download)
		})
	}

	root := chi.NewRouter()
	root.Use(s.proxy, middleware.Recoverer, s.headers, s.requestLog)
	root.NotFound(s.notFound)
	if cfg.BasePath == "/" {
		root.Mount("/", app)
	} else {
		root.Mount(strings.TrimSuffix(cfg.BasePath, "/"), app)
		root.Get(strings.TrimSuffix(cfg.BasePath, "/"), func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, s.base(r), http.StatusMovedPermanently)
		})
	}
	s.router = root
	return s, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// cacheForGood is the Cache-Control of a versioned asset (static.URL): its
// URL names its bytes, so a browser keeps it without asking again.
const cacheForGood = "private, max-age=31536000, immutable"

// staticHandler serves static.FS with that Cache-Control, directory
// listings refused.
func staticHandler(cacheControl string) http.Handler {
	fs := http.FileServerFS(static.FS)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") || r.URL.Path == "" {
			http.NotFound(w, r) // no directory listings
			return
		}
		w.Header().Set("Cache-Control", cacheControl)
		fs.ServeHTTP(w, r)
	})
}

// thisVersion answers 404 to a versioned asset URL whose {version} is not
// static.Version: that URL names another release's bytes, which this node
// does not have. The 404 sends nginx to the next node
// (deploy/nginx/dashgate-cluster.conf), where, during a rolling upgrade, a
// node of that release answers; serving this node's files under it would
// put them in the browser's cache for good under the wrong name.
func thisVersion(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if chi.URLParam(r, "version") != static.Version() {
			http.NotFound(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.inflight++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inflight--
		if s.inflight == 0 && s.idle != nil {
			close(s.idle)
			s.idle = nil
		}
		s.mu.Unlock()
	}()
	s.router.ServeHTTP(w, r)
}

// Drain waits until no request is being served, WebSockets included
// (http.Server.Shutdown does not wait for hijacked connections), or ctx
// ends.
func (s *Server) Drain(ctx context.Context) error {
	s.mu.Lock()
	if s.inflight == 0 {
		s.mu.Unlock()
		return nil
	}
	if s.idle == nil {
		s.idle = make(chan struct{})
	}
	idle := s.idle
	s.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// BasePath is the base path a request's URLs are built from: the trusted
// proxy's X-Forwarded-Prefix, if any, followed by --base-path. It starts and
// ends with "/".
func (s *Server) BasePath(r *http.Request) string { return s.base(r) }

func (s *Server) base(r *http.Request) string {
	if fi := forwardedFrom(r.Context()); fi != nil && fi.prefix != "" {
		return strings.TrimSuffix(fi.prefix, "/") + s.cfg.BasePath
	}
	return s.cfg.BasePath
}

// notFound answers 404: for a browser, a page in the app's look with a
// link to the dashboard; for anything else, plain text.
func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	if !strings.Contains(r.Header.Get("Accept"), "text/html") {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusNotFound)
	templates.NotFound(templates.NotFoundView{BasePath: s.base(r)}).Render(r.Context(), w)
}

func (s *Server) dashboard(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	p := handlers.PrincipalFrom(r.Context())
	src, _ := r.Context().Value(authKey{}).(tokenSource)
	v := templates.DashboardView{BasePath: s.base(r), Version: s.cfg.Version, NodeID: s.cfg.NodeID,
		// The admin link for those the admin page lets in: an admin user, the
		// one token that is also the admin's, or a browser holding the admin
		// login already.
		AdminLink: p.Admin || (!s.usersOn() && !s.sepAdm),
		// A user the proxy names (--user-header) logs out at the proxy.
		Logout: src != tokenHeader,
	}
	if s.usersOn() {
		v.User = p.User
	}
	v.Recorded = s.cfg.RecordTerminals
	if !v.AdminLink {
		ap, ok := s.fromCookies(r, true)
		v.AdminLink = ok && ap.Admin || s.hasAdminLink(r)
	}
	templates.Dashboard(v).Render(r.Context(), w)
}

// headers sets the security headers and the sticky-routing cookie.
func (s *Server) headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		host := r.Host
		h.Set("Content-Security-Policy", "default-src 'self'; connect-src 'self' ws://"+host+" wss://"+host+
			"; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		if s.cfg.NodeID != "" {
			s.pinNode(w, r)
		}
		next.ServeHTTP(w, r)
	})
}

// pinNode keeps the browser's dashgate_node cookie naming this node. The
// cookie is "<node id>.<random hex>"; nginx routes on the node id before the
// first '.' (deploy/nginx/dashgate-cluster.conf: that node first, the
// others as backups). A request without the cookie gets one. A request
// whose cookie names another node reached this one because that node was
// down (nginx's failover), and this node is the one that adopts the
// browser's sessions on resume: the cookie is set anew to this node, so the
// browser stays here when the other node comes back (else it would go back
// to a node that no longer holds its sessions and answers them as missing).
// A cookie naming a node that is live by its heartbeats (Config.NodeLive)
// is kept: that node still holds the browser's sessions.
// A Set-Cookie on the 101 of a WebSocket upgrade counts too (Chromium and
// Go's cookie jar honour it).
func (s *Server) pinNode(w http.ResponseWriter, r *http.Request) {
	from := ""
	if c, err := r.Cookie(NodeCookie); err == nil {
		from, _, _ = strings.Cut(c.Value, ".")
		if from == s.cfg.NodeID {
			return
		}
		if s.cfg.NodeLive != nil && s.cfg.NodeLive(from) {
			// Its node lives: nginx sent the browser here for a moment
			// (a failed connection, a restart within the lease), and its
			// sessions are still that node's. Re-pinned, the browser would
			// stay here, where they answer as missing.
			return
		}
		// The cookie routes only; its value is no secret, but log the
		// node it named, not the value.
		s.log.Debug("node cookie re-pinned", "from_node", from, "path", r.URL.Path, "remote_addr", r.RemoteAddr)
	}
	http.SetCookie(w, &http.Cookie{Name: NodeCookie, Value: s.cfg.NodeID + "." + randomHex(8),
		Path: "/", MaxAge: 30 * 24 * 3600, HttpOnly: true, SameSite: http.SameSiteLaxMode})
}

// requestLog logs each request at DEBUG with its query string redacted
// (tokens travel there).
func (s *Server) requestLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		if s.log.Enabled(r.Context(), slog.LevelDebug) {
			s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "query", RedactQuery(r.URL.RawQuery),
				"status", ww.Status(), "remote_addr", r.RemoteAddr, "duration_ms", time.Since(start).Milliseconds())
		}
	})
}

// RedactQuery replaces the value of every token-like parameter by "REDACTED".
func RedactQuery(raw string) string {
	if raw == "" {
		return ""
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return "REDACTED"
	}
	for k := range q {
		if strings.Contains(strings.ToLower(k), "token") {
			q[k] = []string{"REDACTED"}
		}
	}
	return q.Encode()
}

func isUpgrade(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// externalPath is the request's path as the browser sees it.
func (s *Server) externalPath(r *http.Request) string {
	if fi := forwardedFrom(r.Context()); fi != nil && fi.prefix != "" {
		return strings.TrimSuffix(fi.prefix, "/") + r.URL.Path
	}
	return r.URL.Path
}

// checkOrigin guards WebSocket upgrades (docs/failure-classes.md #17): the Origin must
// be the request's own host (as forwarded by a trusted proxy) or match
// --allowed-origins; a request without Origin is accepted only with a bearer
// or query token, never on the cookie alone.
func (s *Server) checkOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		src, _ := r.Context().Value(authKey{}).(tokenSource)
		ok := false
		switch {
		case origin == "":
			ok = src == tokenBearer || src == tokenQuery
		default:
			ok = s.originAllowed(r, origin)
		}
		if !ok {
			s.log.Warn("cross-origin websocket refused", "origin", origin, "path", r.URL.Path, "remote_addr", r.RemoteAddr)
			http.Error(w, "cross-origin request refused", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// limitConns caps the open WebSockets of one client address
// (--max-conns-per-ip); beyond it the upgrade gets 429.
func (s *Server) limitConns(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit := s.cfg.MaxConnsPerIP
		if limit <= 0 {
			next.ServeHTTP(w, r)
			return
		}
		key := r.RemoteAddr // a Unix-socket peer ("unix"): all of them one local address
		if ip, ok := peerAddr(r.RemoteAddr); ok {
			key = ip.String()
		}
		s.mu.Lock()
		if s.perIP[key] >= limit {
			s.mu.Unlock()
			s.log.Warn("too many connections from one address", "remote_addr", r.RemoteAddr, "limit", limit)
			http.Error(w, "too many connections from this address", http.StatusTooManyRequests)
			return
		}
		s.perIP[key]++
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			if s.perIP[key]--; s.perIP[key] <= 0 {
				delete(s.perIP, key)
			}
			s.mu.Unlock()
		}()
		next.ServeHTTP(w, r)
	})
}

func (s *Server) originAllowed(r *http.Request, origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false // includes "null"
	}
	// The page's own origin: its host and its scheme (as a trusted proxy
	// forwards them): an https origin is not an http page's.
	if strings.EqualFold(u.Host, r.Host) && u.Scheme == s.scheme(r) {
		return true
	}
	for _, p := range s.cfg.AllowedOrigins {
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if m, _ := path.Match(strings.ToLower(p), strings.ToLower(target)); m {
			return true
		}
	}
	return false
}

// Run serves s on ln until ctx ends, then shuts the server down: listeners
// close, every request's context is cancelled with handlers.ErrShutdown
// (WebSockets send their 1001 close frame), WebSocket connections whose
// peer has not answered within Config.CloseTimeout are closed, and Run
// waits up to shutdownTimeout for every handler, WebSockets included, to
// return. Run owns ln and closes it.
func Run(ctx context.Context, ln net.Listener, h *Server, shutdownTimeout time.Duration, log *slog.Logger) error {
	base, cancelBase := context.WithCancelCause(context.Background())
	defer cancelBase(nil)
	maxPending := h.cfg.MaxPendingPerPeer
	switch {
	case maxPending == 0:
		maxPending = DefaultMaxPendingPerPeer
	case maxPending < 0:
		maxPending = 0
	}
	conns := newConnSet(h.cfg.MaxHTTPConns, maxPending, log)
	headerTimeout := h.cfg.HeaderTimeout
	if headerTimeout <= 0 {
		headerTimeout = DefaultHeaderTimeout
	}
	idle := h.cfg.IdleTimeout
	if idle <= 0 {
		idle = DefaultIdleTimeout
	}
	closeTimeout := h.cfg.CloseTimeout
	if closeTimeout <= 0 {
		closeTimeout = DefaultCloseTimeout
	}
	srv := &http.Server{
		Handler:           conns.serving(conns.refuseOverCap(h)),
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       idle,
		BaseContext:       func(net.Listener) context.Context { return base },
		ConnContext:       connContext,
		ConnState:         conns.connState,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(listener{ln, conns}) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	cancelBase(handlers.ErrShutdown)
	// A peer that never answers the close handshake would hold its handler
	// (and the exit) for the WebSocket library's own 5 s.
	stuck := time.AfterFunc(closeTimeout, func() {
		if n := conns.closeHijacked(); n > 0 {
			log.Debug("websockets closed without a close handshake", "sockets", n, "close_timeout_ms", closeTimeout.Milliseconds())
		}
	})
	defer stuck.Stop()
	err := srv.Shutdown(sctx)
	<-errc
	if err == nil {
		err = h.Drain(sctx)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		log.Warn("requests still running at the shutdown timeout")
		srv.Close()
	}
	return nil
}

// Defaults of Config's connection settings.
const (
	DefaultIdleTimeout  = 90 * time.Second
	DefaultCloseTimeout = time.Second
	// DefaultHeaderTimeout: a client on a slow link sends its request
	// headers (a few KiB at most) well within it; a silent connection
	// holds its descriptor half as long as under the former 10 s.
	DefaultHeaderTimeout = 5 * time.Second
	// DefaultMaxPendingPerPeer: a browser opens at most 6 connections to a
	// host at once, and a client that sends its request at once is pending
	// for microseconds, so a few dozen browsers behind one NAT or one proxy
	// seldom have more than a handful pending together; 32 leaves them a
	// wide margin while one silent client holds at most 32 descriptors and
	// goroutines, an eighth of the default --max-http-conns (256). A larger
	// budget would not protect more (a pending connection gives way first
	// at the cap anyway); a smaller one would let a reconnecting silent
	// client close a well-behaved neighbour's fresh connection after fewer
	// of its own.
	DefaultMaxPendingPerPeer = 32
)
