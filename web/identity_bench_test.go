package web_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/users"
	"github.com/dashgate/dashgate/web"
)

// BenchmarkIdentity is the per-request cost of resolving who is asking,
// through the whole middleware chain (proxy, headers, auth, origin) to a
// handler that reads the principal, in each mode, in one run:
//
//	go test -run '^$' -bench Identity ./web/
//
// The users-file cases use a real users.File with one user: the cookie
// costs web's HMAC and one Stamp lookup; the bearer token one sha256 and a
// cache hit after the first request's bcrypt comparison.
func BenchmarkIdentity(b *testing.B) {
	nothing := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = handlers.PrincipalFrom(r.Context())
	})
	newS := func(b *testing.B, cfg web.Config) *web.Server {
		cfg.Token, cfg.AdminToken = "secret-token", "admin-token"
		s, err := web.New(cfg, web.Handlers{Chat: nothing, Terminal: nothing, Admin: &handlers.Admin{}})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	// loginCookie logs in with tok and returns the cookie set.
	loginCookie := func(b *testing.B, s *web.Server, tok string) *http.Cookie {
		req := httptest.NewRequest("GET", "/?token="+tok, nil)
		req.Header.Set("Accept", "text/html")
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		for _, c := range rec.Result().Cookies() {
			if c.Name == s.LoginCookieName() {
				return c
			}
		}
		b.Fatalf("no login cookie: %d", rec.Code)
		return nil
	}
	peer := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")} // httptest.NewRequest's RemoteAddr
	tokenS := newS(b, web.Config{})
	path := filepath.Join(b.TempDir(), "users")
	aliceTok, err := users.Add(path, "alice")
	if err != nil {
		b.Fatal(err)
	}
	uf, err := users.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	usersS := newS(b, web.Config{Users: uf})
	headerS := newS(b, web.Config{UserHeader: "X-Forwarded-User", TrustedProxies: peer})
	secretS := newS(b, web.Config{UserHeader: "X-Forwarded-User", TrustedProxies: peer, ProxySecret: []byte(benchSecret)})
	for _, bc := range []struct {
		name string
		s    *web.Server
		set  func(*http.Request)
	}{
		{"token/legacy-cookie", tokenS, func(r *http.Request) { r.AddCookie(&http.Cookie{Name: web.TokenCookie, Value: "secret-token"}) }},
		{"token/cookie", tokenS, func(r *http.Request) { r.AddCookie(loginCookie(b, tokenS, "secret-token")) }},
		{"token/bearer", tokenS, func(r *http.Request) { r.Header.Set("Authorization", "Bearer secret-token") }},
		{"header/trusted-peer", headerS, func(r *http.Request) { r.Header.Set("X-Forwarded-User", "alice") }},
		{"header/trusted-peer+secret", secretS, func(r *http.Request) {
			r.Header.Set("X-Forwarded-User", "alice")
			r.Header.Set(web.ProxySecretHeader, benchSecret)
		}},
		{"users-file/cookie", usersS, func(r *http.Request) { r.AddCookie(loginCookie(b, usersS, aliceTok)) }},
		{"users-file/bearer-cached", usersS, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+aliceTok) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			req := httptest.NewRequest("GET", "/ws/chat", nil)
			req.Header.Set("Origin", "http://example.com")
			bc.set(req)
			rec := httptest.NewRecorder()
			bc.s.ServeHTTP(rec, req)
			if rec.Code != 200 {
				b.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			b.ReportAllocs()
			for b.Loop() {
				r := req.Clone(req.Context()) // the secret's header is removed from each request
				bc.s.ServeHTTP(httptest.NewRecorder(), r)
			}
		})
	}
}

const benchSecret = "0123456789abcdef0123456789abcdef"

// BenchmarkUnixPeer is a whole request over a real Unix socket (web.Run,
// a keep-alive client) whose user header is trusted by the word "unix"
// alone (as before --proxy-user) or by the peer's credentials (one
// getsockopt(SO_PEERCRED) per request):
//
//	go test -run '^$' -bench UnixPeer -count 10 ./web/
func BenchmarkUnixPeer(b *testing.B) {
	self, err := web.LookupProxyPeer(strconv.Itoa(os.Geteuid()), os.Geteuid())
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		cfg  web.Config
	}{
		{"trust-unix", web.Config{TrustUnix: true}},
		{"peer-credentials", web.Config{ProxyPeer: &self}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			sock := filepath.Join(b.TempDir(), "s")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				b.Fatal(err)
			}
			s := newProxyServer(b, bc.cfg, slog.New(slog.DiscardHandler))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- web.Run(ctx, ln, s, 5*time.Second, slog.New(slog.DiscardHandler)) }()
			defer func() { cancel(); <-done }()
			tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", sock)
			}}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr}
			get := func() {
				req, _ := http.NewRequest("GET", "http://dashgate/sessions/x/export", nil)
				req.Header.Set("X-Forwarded-User", "alice")
				res, err := c.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != 200 {
					b.Fatalf("status %d: %s", res.StatusCode, body)
				}
			}
			get()
			for b.Loop() {
				get()
			}
		})
	}
}
