package web_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/web"
)

// fakeUsers is a UserDirectory: token -> user, user -> stamp.
type fakeUsers struct {
	mu     sync.Mutex
	tokens map[string]string
	stamps map[string]string
}

func newFakeUsers() *fakeUsers {
	return &fakeUsers{tokens: map[string]string{}, stamps: map[string]string{}}
}

func (f *fakeUsers) add(user, token, stamp string) *fakeUsers {
	f.mu.Lock()
	defer f.mu.Unlock()
	for t, u := range f.tokens {
		if u == user {
			delete(f.tokens, t)
		}
	}
	f.tokens[token], f.stamps[user] = user, stamp
	return f
}

func (f *fakeUsers) remove(user string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for t, u := range f.tokens {
		if u == user {
			delete(f.tokens, t)
		}
	}
	delete(f.stamps, user)
}

func (f *fakeUsers) Verify(token string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	u, ok := f.tokens[token]
	return u, ok
}

func (f *fakeUsers) Stamp(user string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.stamps[user]
	return s, ok
}

const (
	aliceTok = "alice.000000000000000000000000000000000000000000000001"
	bobTok   = "bob.000000000000000000000000000000000000000000000002"
	carolTok = "carol.000000000000000000000000000000000000000000000003"
)

func someUsers() *fakeUsers {
	return newFakeUsers().add("alice", aliceTok, "s1").add("bob", bobTok, "s2").add("carol", carolTok, "s3")
}

// who answers 200 with the principal it was handed.
var who = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	p := handlers.PrincipalFrom(r.Context())
	fmt.Fprintf(w, "user=%q admin=%v", p.User, p.Admin)
})

// identServer is a web.Server with who behind every route, on a real
// loopback listener.
func identServer(t *testing.T, cfg web.Config) (*httptest.Server, *testkit.LogBuffer) {
	t.Helper()
	srv, logs, _ := identServerS(t, cfg, httptest.NewServer)
	return srv, logs
}

func identServerS(t *testing.T, cfg web.Config, start func(http.Handler) *httptest.Server) (*httptest.Server, *testkit.LogBuffer, *web.Server) {
	t.Helper()
	log, logs := testkit.NewLogger()
	cfg.Log = log
	if cfg.Token == "" {
		cfg.Token = "secret-token"
	}
	if cfg.AdminToken == "" {
		cfg.AdminToken = "admin-token"
	}
	s, err := web.New(cfg, web.Handlers{Chat: who, Terminal: who, Metrics: who, Admin: &handlers.Admin{}})
	if err != nil {
		t.Fatal(err)
	}
	srv := start(s)
	t.Cleanup(srv.Close)
	return srv, logs, s
}

// ask sends GET path with the headers and cookies given and returns the
// status and body. A /ws/ path carries the server's own Origin (the
// identity under test, not the origin check, decides).
func ask(t *testing.T, c *http.Client, base, path string, hdr map[string]string, cookies ...*http.Cookie) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+path, nil)
	if strings.HasPrefix(path, "/ws/") {
		req.Header.Set("Origin", base)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	for _, ck := range cookies {
		req.AddCookie(ck)
	}
	if c == nil {
		c = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// login opens path?token=tok as a browser does and returns the cookies set.
func login(t *testing.T, c *http.Client, base, path, tok string) []*http.Cookie {
	t.Helper()
	req, _ := http.NewRequest("GET", base+path+"?token="+tok, nil)
	req.Header.Set("Accept", "text/html")
	if c == nil {
		c = &http.Client{}
	}
	cc := *c
	cc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := cc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login at %s: status %d, want 303", path, resp.StatusCode)
	}
	return resp.Cookies()
}

func cookieNamed(cs []*http.Cookie, prefix string) *http.Cookie {
	for _, c := range cs {
		if strings.HasPrefix(c.Name, prefix) {
			return c
		}
	}
	return nil
}

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

func TestUserHeaderOnlyFromTrustedPeer(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		trusted []netip.Prefix
		xff     string
		want    int
		body    string
	}{
		{"untrusted peer: header ignored", nil, "", 401, ""},
		{"trusted peer: header honoured", loopback, "", 200, `user="alice" admin=false`},
		// The peer is what counts, not the client a proxy names.
		{"untrusted peer naming a trusted client", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, "10.0.0.1", 401, ""},
		{"trusted peer naming an untrusted client", loopback, "203.0.113.9", 200, `user="alice" admin=false`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, _ := identServer(t, web.Config{UserHeader: "X-Forwarded-User", TrustedProxies: tt.trusted})
			hdr := map[string]string{"X-Forwarded-User": "alice"}
			if tt.xff != "" {
				hdr["X-Forwarded-For"] = tt.xff
			}
			for _, path := range []string{"/ws/chat", "/ws/pty"} {
				code, body := ask(t, nil, srv.URL, path, hdr)
				if code != tt.want || (tt.body != "" && body != tt.body) {
					t.Fatalf("%s: %d %q, want %d %q", path, code, body, tt.want, tt.body)
				}
			}
		})
	}
}

// TestUserHeaderWinsOverCookie: in header mode a cookie made for alice
// with the header saying bob is bob; a trusted peer without the header
// falls back to the cookie.
func TestUserHeaderWinsOverCookie(t *testing.T) {
	t.Parallel()
	srv, _ := identServer(t, web.Config{UserHeader: "X-Forwarded-User", Users: someUsers(), TrustedProxies: loopback})
	ck := cookieNamed(login(t, nil, srv.URL, "/", aliceTok), web.LoginCookiePrefix)
	if ck == nil {
		t.Fatal("no login cookie for alice")
	}
	if code, body := ask(t, nil, srv.URL, "/ws/chat", map[string]string{"X-Forwarded-User": "bob"}, ck); code != 200 || body != `user="bob" admin=false` {
		t.Fatalf("alice's cookie with bob's header: %d %q, want bob", code, body)
	}
	if code, body := ask(t, nil, srv.URL, "/ws/chat", nil, ck); code != 200 || body != `user="alice" admin=false` {
		t.Fatalf("alice's cookie without the header: %d %q, want alice", code, body)
	}
}

func TestBadUserHeader(t *testing.T) {
	t.Parallel()
	srv, logs := identServer(t, web.Config{UserHeader: "X-Forwarded-User", TrustedProxies: loopback})
	for _, tt := range []struct {
		name, value string
		want        int
	}{
		{"empty", "", 400},
		{"control character", "al\tice", 400},
		{"257 bytes", strings.Repeat("a", 257), 400},
		{"256 bytes", strings.Repeat("a", 256), 200},
	} {
		req, _ := http.NewRequest("GET", srv.URL+"/ws/chat", nil)
		req.Header.Set("Origin", srv.URL)
		req.Header["X-Forwarded-User"] = []string{tt.value}
		if resp := do(t, req); resp.StatusCode != tt.want {
			t.Errorf("%s: status %d, want %d", tt.name, resp.StatusCode, tt.want)
		}
	}
	req, _ := http.NewRequest("GET", srv.URL+"/ws/chat", nil)
	req.Header.Set("Origin", srv.URL)
	req.Header["X-Forwarded-User"] = []string{"alice", "bob"}
	if resp := do(t, req); resp.StatusCode != 400 {
		t.Errorf("repeated header: status %d, want 400", resp.StatusCode)
	}
	warns := logs.Records("user header refused")
	if len(warns) != 1 {
		t.Fatalf("%d WARN records for 4 refused headers, want 1 (rate limited): %v", len(warns), warns)
	}
	if w := warns[0]; w.Str("level") != "WARN" || w.Str("reason") != "empty" || !strings.HasPrefix(w.Str("remote"), "127.0.0.1:") {
		t.Fatalf("WARN record %v", w)
	}
	if strings.Contains(logs.String(), strings.Repeat("a", 257)) || strings.Contains(logs.String(), "al\\tice") {
		t.Fatal("the refused header's value reached the log")
	}
}

func TestUsersFileTokens(t *testing.T) {
	t.Parallel()
	srv, logs := identServer(t, web.Config{Users: someUsers(), AdminUsers: []string{"carol"}})
	bearer := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	for _, tt := range []struct {
		name, path string
		hdr        map[string]string
		cookie     *http.Cookie
		want       int
		body       string
	}{
		{"good bearer", "/ws/chat", bearer(aliceTok), nil, 200, `user="alice" admin=false`},
		{"good query", "/ws/pty?token=" + bobTok, nil, nil, 200, `user="bob" admin=false`},
		{"wrong token", "/ws/chat", bearer("alice.ffffffffffffffffffffffffffffffffffffffffffffffff"), nil, 401, ""},
		{"dashboard token refused", "/ws/chat", bearer("secret-token"), nil, 401, ""},
		{"dashboard token in ?token= refused", "/ws/chat?token=secret-token", nil, nil, 401, ""},
		{"legacy cookie refused", "/ws/chat", nil, &http.Cookie{Name: "dashgate_token", Value: "secret-token"}, 401, ""},
		{"dashboard page with the dashboard token", "/", bearer("secret-token"), nil, 401, ""},
		{"non-admin user on /metrics", "/metrics", bearer(aliceTok), nil, 403, ""},
		{"admin user on /metrics", "/metrics", bearer(carolTok), nil, 200, `user="carol" admin=true`},
		{"admin token on /metrics", "/metrics", bearer("admin-token"), nil, 200, `user="" admin=true`},
		{"admin user on the dashboard", "/ws/chat", bearer(carolTok), nil, 200, `user="carol" admin=true`},
		{"admin token on the dashboard", "/ws/chat", bearer("admin-token"), nil, 401, ""},
		{"nobody on /metrics", "/metrics", nil, nil, 401, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var cs []*http.Cookie
			if tt.cookie != nil {
				cs = append(cs, tt.cookie)
			}
			code, body := ask(t, nil, srv.URL, tt.path, tt.hdr, cs...)
			if code != tt.want || (tt.body != "" && body != tt.body) {
				t.Fatalf("%d %q, want %d %q", code, body, tt.want, tt.body)
			}
		})
	}
	if strings.Contains(logs.String(), aliceTok) {
		t.Fatal("a token reached the log")
	}
}

// TestAdminForbiddenPage: a browser of an authenticated non-admin gets a
// 403 page, not the login form.
func TestAdminForbiddenPage(t *testing.T) {
	t.Parallel()
	srv, _ := identServer(t, web.Config{Users: someUsers()})
	ck := cookieNamed(login(t, nil, srv.URL, "/", aliceTok), web.LoginCookiePrefix)
	code, body := ask(t, nil, srv.URL, "/admin", map[string]string{"Accept": "text/html"}, ck)
	if code != 403 || !strings.Contains(body, `data-testid="forbidden"`) || strings.Contains(body, `name="token"`) {
		t.Fatalf("%d %s", code, body)
	}
}

func TestLoginCookieFlags(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		start  func(http.Handler) *httptest.Server
		secure bool
	}{{"http", httptest.NewServer, false}, {"tls", httptest.NewTLSServer, true}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, _, s := identServerS(t, web.Config{Users: someUsers(), Instance: "one"}, tt.start)
			ck := cookieNamed(login(t, srv.Client(), srv.URL, "/", aliceTok), web.LoginCookiePrefix)
			if ck == nil || ck.Name != "dashgate_login_one" || ck.Name != s.LoginCookieName() || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode ||
				ck.Secure != tt.secure || ck.Path != "/" || ck.MaxAge != 30*24*3600 {
				t.Fatalf("cookie %+v, want dashgate_login_one HttpOnly Strict Secure=%v Path=/ Max-Age 30 days", ck, tt.secure)
			}
			if strings.Contains(ck.Value, aliceTok) || strings.Contains(ck.Value, "000000000") {
				t.Fatalf("the cookie %q holds the token", ck.Value)
			}
			if code, body := ask(t, srv.Client(), srv.URL, "/ws/chat", nil, ck); code != 200 || body != `user="alice" admin=false` {
				t.Fatalf("with the cookie: %d %q", code, body)
			}
		})
	}
}

// TestAdminTokenCookie: with users on, the admin token's login sets the
// admin cookie on the admin path, which opens /admin as the admin.
func TestAdminTokenCookie(t *testing.T) {
	t.Parallel()
	srv, logs := identServer(t, web.Config{Users: someUsers(), Instance: "x"})
	cs := login(t, nil, srv.URL, "/admin/", "admin-token")
	ck := cookieNamed(cs, web.AdminCookiePrefix)
	if ck == nil || ck.Name != "dashgate_admin_x" || ck.Path != "/admin" || cookieNamed(cs, web.LoginCookiePrefix) != nil {
		t.Fatalf("cookies %+v, want dashgate_admin_x on /admin alone", cs)
	}
	if code, body := ask(t, nil, srv.URL, "/metrics", nil, &http.Cookie{Name: ck.Name, Value: ck.Value}); code != 200 || body != `user="" admin=true` {
		t.Fatalf("admin cookie on an admin route: %d %q", code, body)
	}
	if code, _ := ask(t, nil, srv.URL, "/ws/chat", nil, &http.Cookie{Name: ck.Name, Value: ck.Value}); code != 401 {
		t.Fatalf("admin cookie on the dashboard: %d, want 401", code)
	}
	recs := logs.Records("login")
	if len(recs) != 1 || recs[0].Str("user") != "admin-token" || recs[0].Str("target") != "token" {
		t.Fatalf("login records %v", recs)
	}
}

// TestAdminLinkAfterAdminLogin: with a separate admin token, a browser
// that logged in to /admin finds the admin link on its dashboard. The
// admin cookie is on the admin path, so the dashboard's requests never
// carry it: the admin link's cookie, on the base path, tells the page,
// and grants nothing. Log out ends both (a new user's trial found no link
// at all).
func TestAdminLinkAfterAdminLogin(t *testing.T) {
	t.Parallel()
	key := []byte(strings.Repeat("k", 32))
	srv, _ := identServer(t, web.Config{Instance: "l", CookieKey: key})
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	adminLink := func(c *http.Client, base string, cookies ...*http.Cookie) bool {
		t.Helper()
		code, body := ask(t, c, base, "/", map[string]string{"Accept": "text/html"}, cookies...)
		if code != http.StatusOK || !strings.Contains(body, `data-testid="chat-input"`) {
			t.Fatalf("GET / with the dashboard's login: %d, not the dashboard", code)
		}
		return strings.Contains(body, `data-testid="admin-link"`)
	}
	login(t, c, srv.URL, "/", "secret-token")
	if adminLink(c, srv.URL) {
		t.Fatal("an admin link before the admin login")
	}
	cs := login(t, c, srv.URL, "/admin/", "admin-token")
	link := cookieNamed(cs, web.AdminLinkCookiePrefix)
	if link == nil || link.Name != "dashgate_adminlink_l" || link.Path != "/" || !link.HttpOnly || link.SameSite != http.SameSiteStrictMode {
		t.Fatalf("cookies of the admin login %+v: want dashgate_adminlink_l on / (HttpOnly, Strict)", cs)
	}
	if !adminLink(c, srv.URL) {
		t.Fatal("no admin link on the dashboard after the admin login")
	}
	// It grants nothing: not the admin routes, not the dashboard's.
	if code, _ := ask(t, nil, srv.URL, "/metrics", nil, link); code != http.StatusUnauthorized {
		t.Fatalf("the admin link's cookie alone on an admin route: %d, want 401", code)
	}
	if code, _ := ask(t, nil, srv.URL, "/ws/chat", nil, link); code != http.StatusUnauthorized {
		t.Fatalf("the admin link's cookie alone on the dashboard: %d, want 401", code)
	}
	// Once the admin token is another (rotated), it no longer says so.
	rotated, _ := identServer(t, web.Config{Instance: "l", CookieKey: key, AdminToken: "rotated-admin"})
	dash := cookieNamed(login(t, nil, rotated.URL, "/", "secret-token"), web.LoginCookiePrefix)
	if adminLink(nil, rotated.URL, dash, link) {
		t.Fatal("an admin link from the cookie of a rotated admin token")
	}

	req, _ := http.NewRequest("POST", srv.URL+"/logout", nil)
	req.Header.Set("Origin", srv.URL)
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	u, _ := url.Parse(srv.URL)
	for _, path := range []string{"/", "/admin/"} {
		u.Path = path
		for _, ck := range jar.Cookies(u) {
			if strings.HasPrefix(ck.Name, web.AdminCookiePrefix) || strings.HasPrefix(ck.Name, web.AdminLinkCookiePrefix) {
				t.Errorf("after Log out the browser still holds %s for %s", ck.Name, path)
			}
		}
	}
}

// TestTwoInstancesKeepBothLogins: two servers on one host (one cookie
// jar: cookies ignore ports) each keep their own login.
func TestTwoInstancesKeepBothLogins(t *testing.T) {
	t.Parallel()
	a, _ := identServer(t, web.Config{Users: someUsers(), Instance: "a"})
	b, _ := identServer(t, web.Config{Users: someUsers(), Instance: "b"})
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	login(t, c, a.URL, "/", aliceTok)
	login(t, c, b.URL, "/", bobTok)
	if code, body := ask(t, c, a.URL, "/ws/chat", nil); code != 200 || body != `user="alice" admin=false` {
		t.Fatalf("instance a after logging in to b: %d %q", code, body)
	}
	if code, body := ask(t, c, b.URL, "/ws/chat", nil); code != 200 || body != `user="bob" admin=false` {
		t.Fatalf("instance b: %d %q", code, body)
	}
}

// TestCookieStampChange: a user removed, or re-added (a new line, a new
// stamp), loses the old cookie.
func TestCookieStampChange(t *testing.T) {
	t.Parallel()
	users := someUsers()
	srv, _ := identServer(t, web.Config{Users: users})
	ck := cookieNamed(login(t, nil, srv.URL, "/", aliceTok), web.LoginCookiePrefix)
	if code, _ := ask(t, nil, srv.URL, "/ws/chat", nil, ck); code != 200 {
		t.Fatalf("fresh cookie: %d", code)
	}
	users.add("alice", "alice.new", "s1-again")
	if code, _ := ask(t, nil, srv.URL, "/ws/chat", nil, ck); code != 401 {
		t.Fatalf("cookie after alice was re-added: %d, want 401", code)
	}
	users.add("alice", aliceTok, "s1")
	if code, _ := ask(t, nil, srv.URL, "/ws/chat", nil, ck); code != 200 {
		t.Fatalf("cookie with the stamp back: %d, want 200", code)
	}
	users.remove("alice")
	if code, _ := ask(t, nil, srv.URL, "/ws/chat", nil, ck); code != 401 {
		t.Fatalf("cookie after alice was removed: %d, want 401", code)
	}
}

// TestTokenModeCookie: without users the cookie is the signed one for the
// anonymous user, and a rotated token invalidates it.
func TestTokenModeCookie(t *testing.T) {
	t.Parallel()
	key := []byte(strings.Repeat("k", 32))
	srv, _, _ := identServerS(t, web.Config{CookieKey: key, Instance: "t"}, httptest.NewServer)
	ck := cookieNamed(login(t, nil, srv.URL, "/", "secret-token"), web.LoginCookiePrefix)
	if ck == nil || ck.Value == "secret-token" {
		t.Fatalf("cookie %+v", ck)
	}
	if code, body := ask(t, nil, srv.URL, "/ws/chat", nil, ck); code != 200 || body != `user="" admin=false` {
		t.Fatalf("token-mode cookie: %d %q", code, body)
	}
	// The same key and instance, another token: the old cookie is refused.
	rotated, _, _ := identServerS(t, web.Config{CookieKey: key, Instance: "t", Token: "rotated-token"}, httptest.NewServer)
	if code, _ := ask(t, nil, rotated.URL, "/ws/chat", nil, ck); code != 401 {
		t.Fatalf("cookie after the token rotated: %d, want 401", code)
	}
	same, _, _ := identServerS(t, web.Config{CookieKey: key, Instance: "t"}, httptest.NewServer)
	if code, _ := ask(t, nil, same.URL, "/ws/chat", nil, ck); code != 200 {
		t.Fatalf("cookie on a restart with the same key and token: %d, want 200", code)
	}
}

func TestNewRefusesShortCookieKey(t *testing.T) {
	t.Parallel()
	if _, err := web.New(web.Config{Token: "t", CookieKey: make([]byte, 31)}, web.Handlers{}); err == nil {
		t.Fatal("a 31-byte cookie key was accepted")
	}
	if _, err := web.New(web.Config{Token: "t", Instance: "a;b"}, web.Handlers{}); err == nil {
		t.Fatal("an instance that cannot name a cookie was accepted")
	}
}

func TestLoginAudit(t *testing.T) {
	t.Parallel()
	users := someUsers()
	log, logs := testkit.NewLogger()
	s, err := web.New(web.Config{Token: "secret-token", Users: users, UserHeader: "Remote-User", TrustedProxies: loopback, Log: log},
		web.Handlers{Chat: who, Terminal: who, Metrics: who, Admin: &handlers.Admin{}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)

	login(t, nil, srv.URL, "/", aliceTok)
	for range 3 {
		if code, _ := ask(t, nil, srv.URL, "/ws/chat", map[string]string{"Remote-User": "dave"}); code != 200 {
			t.Fatalf("header request: %d", code)
		}
	}
	s.Revoke("dave")
	ask(t, nil, srv.URL, "/ws/chat", map[string]string{"Remote-User": "dave"})
	var got []string
	for _, r := range logs.Records("login") {
		if r.Str("level") != "INFO" || r.Str("action") != "login" || !strings.HasPrefix(r.Str("remote"), "127.0.0.1:") {
			t.Errorf("record %v", r)
		}
		got = append(got, r.Str("user")+"/"+r.Str("target"))
	}
	if want := "[alice/users-file dave/header dave/header]"; fmt.Sprint(got) != want {
		t.Fatalf("login records %v, want %s (a header user once, and again after a revoke)", got, want)
	}
	if strings.Contains(logs.String(), aliceTok) || strings.Contains(logs.String(), "v1.") {
		t.Fatal("a token or a cookie reached the log")
	}
}

// chatBehind is a server with the real socket lifecycle behind /ws/chat:
// handlers.Chat with a registry.
func chatBehind(t *testing.T, cfg web.Config) (*httptest.Server, *web.Server) {
	t.Helper()
	log, _ := testkit.NewLogger()
	reg := sessions.New(sessions.Config{Log: log})
	chat := &handlers.Chat{Registry: reg, Log: log, Version: "test"}
	cfg.Log, cfg.Token = log, "secret-token"
	s, err := web.New(cfg, web.Handlers{Chat: chat, Terminal: who, Admin: &handlers.Admin{}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		reg.Shutdown(context.Background())
		srv.Close()
		reg.Wait()
	})
	return srv, s
}

func TestRevokeClosesSockets(t *testing.T) {
	t.Parallel()
	srv, s := chatBehind(t, web.Config{Users: someUsers()})
	dial := func(tok string) *testkit.Chat {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		c, _, err := testkit.DialChat(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/ws/chat",
			testkit.DialOptions{Header: http.Header{"Authorization": {"Bearer " + tok}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Drop(false) })
		if _, err := c.CreateSession(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		return c
	}
	a1, a2, b := dial(aliceTok), dial(aliceTok), dial(bobTok)
	if n := s.Revoke("alice"); n != 2 {
		t.Fatalf("Revoke(alice) = %d, want 2", n)
	}
	// At once again, while the sockets are still closing: already counted.
	if n := s.Revoke("alice"); n != 0 {
		t.Fatalf("a second Revoke(alice) = %d, want 0", n)
	}
	for i, c := range []*testkit.Chat{a1, a2} {
		testkit.WaitFor(t, 10*time.Second, "alice's socket closed", func() bool { return c.Err() != nil })
		var ce websocket.CloseError
		if err := c.Err(); !errors.As(err, &ce) || ce.Code != 4403 || ce.Reason != "access revoked: user removed" {
			t.Errorf("alice's socket %d closed with %v, want 4403 %q", i, err, "access revoked: user removed")
		}
	}
	if b.Err() != nil {
		t.Fatalf("bob's socket closed: %v", b.Err())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := b.CreateSession(ctx, "still here"); err != nil {
		t.Fatalf("bob's socket after alice's revoke: %v", err)
	}
}

// TestTrustUnix: over a Unix socket (web.Run on a unix listener) the user
// header is honoured with TrustUnix and ignored without; the per-address
// cap and the logs take the peer as one local address.
func TestTrustUnix(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		trust bool
		want  string
	}{{"trusted", true, `200 user="alice" admin=false`}, {"not trusted", false, "401 "}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			log, logs := testkit.NewLogger()
			s, err := web.New(web.Config{Token: "secret-token", UserHeader: "X-Forwarded-User", TrustUnix: tt.trust, Log: log, MaxConnsPerIP: 5},
				web.Handlers{Chat: who, Terminal: who, Admin: &handlers.Admin{}})
			if err != nil {
				t.Fatal(err)
			}
			sock := filepath.Join(t.TempDir(), "d.sock")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- web.Run(ctx, ln, s, 5*time.Second, log) }()
			t.Cleanup(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			})
			tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", sock)
			}}
			t.Cleanup(tr.CloseIdleConnections)
			c := &http.Client{Transport: tr}
			code, body := ask(t, c, "http://dashgate", "/ws/chat", map[string]string{"X-Forwarded-User": "alice"})
			if got := fmt.Sprintf("%d %s", code, body); !strings.HasPrefix(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
			if tt.trust {
				if recs := logs.Records("login"); len(recs) != 1 || recs[0].Str("remote") != "unix" {
					t.Fatalf("login records %v, want one with remote=unix", recs)
				}
			}
		})
	}
}
