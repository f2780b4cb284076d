package web_test

import (
	"bytes"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/static"
	"github.com/dashgate/dashgate/web"
)

func TestMain(m *testing.M) {
	if os.Getenv(acceptHelperEnv) == "1" {
		acceptHelper()
		return
	}
	if os.Getenv(unixGetEnv) != "" {
		unixGet()
		return
	}
	testkit.VerifyNoLeaks(m)
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// ok answers 200 with the remote address it saw.
var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Write([]byte("ok " + r.RemoteAddr))
})

func newServer(t *testing.T, cfg web.Config) (*httptest.Server, *syncBuf) {
	t.Helper()
	logs := &syncBuf{}
	cfg.Log = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if cfg.Token == "" {
		cfg.Token = "secret-token"
	}
	// The admin handler is never reached here: only auth and origin are tested.
	s, err := web.New(cfg, web.Handlers{Chat: ok, Terminal: ok, Metrics: ok, Admin: &handlers.Admin{}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv, logs
}

func do(t *testing.T, req *http.Request) *http.Response {
	t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func upgradeReq(t *testing.T, url string) *http.Request {
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	return req
}

func TestAuth(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, web.Config{AdminToken: "admin-token"})
	tests := []struct {
		name   string
		path   string
		header map[string]string
		cookie *http.Cookie
		want   int
	}{
		{"healthz needs nothing", "/healthz", nil, nil, 200},
		{"chat without token", "/ws/chat", nil, nil, 401},
		{"pty without token", "/ws/pty", nil, nil, 401},
		{"admin without token", "/admin", nil, nil, 401},
		{"metrics without token", "/metrics", nil, nil, 401},
		{"page without token", "/", nil, nil, 401},
		{"wrong bearer", "/", map[string]string{"Authorization": "Bearer nope"}, nil, 401},
		{"bearer", "/", map[string]string{"Authorization": "Bearer secret-token"}, nil, 200},
		{"legacy cookie (deprecated)", "/", nil, &http.Cookie{Name: "dashgate_token", Value: "secret-token"}, 200},
		{"legacy cookie, wrong token", "/", nil, &http.Cookie{Name: "dashgate_token", Value: "nope"}, 401},
		{"legacy admin cookie on metrics", "/metrics", nil, &http.Cookie{Name: "dashgate_admin_token", Value: "admin-token"}, 200},
		{"query", "/static/css/app.css?token=secret-token", nil, nil, 200},
		{"dashboard token on metrics", "/metrics", map[string]string{"Authorization": "Bearer secret-token"}, nil, 401},
		{"admin token on metrics", "/metrics", map[string]string{"Authorization": "Bearer admin-token"}, nil, 200},
		{"admin token on the dashboard", "/", map[string]string{"Authorization": "Bearer admin-token"}, nil, 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", srv.URL+tt.path, nil)
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			if tt.cookie != nil {
				req.AddCookie(tt.cookie)
			}
			if resp := do(t, req); resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.want)
			}
		})
	}
}

func TestTokenQuerySetsCookieAndRedirects(t *testing.T) {
	t.Parallel()
	srv, logs := newServer(t, web.Config{})
	req, _ := http.NewRequest("GET", srv.URL+"/?token=secret-token&x=1", nil)
	req.Header.Set("Accept", "text/html")
	resp := do(t, req)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/?x=1" {
		t.Fatalf("status %d location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	var c *http.Cookie
	for _, ck := range resp.Cookies() {
		if strings.HasPrefix(ck.Name, web.LoginCookiePrefix) {
			c = ck
		}
	}
	// The signed login cookie, never the token itself.
	if c == nil || strings.Contains(c.Value, "secret-token") || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure {
		t.Fatalf("cookie = %+v", c)
	}
	if code, _ := ask(t, nil, srv.URL, "/ws/chat", map[string]string{"Authorization": ""}, c); code != 200 {
		t.Fatalf("the login cookie does not let in: %d", code)
	}
	if strings.Contains(logs.String(), "secret-token") {
		t.Fatal("the token reached the log")
	}
	if !strings.Contains(logs.String(), "REDACTED") {
		t.Fatal("the request log has no redacted query (is DEBUG logging on?)")
	}
}

func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, web.Config{})
	req, _ := http.NewRequest("GET", srv.URL+"/", nil)
	req.Header.Set("Authorization", "Bearer secret-token")
	resp := do(t, req)
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'self'", "frame-ancestors 'none'", "connect-src 'self'"} {
		if !strings.Contains(csp, want) {
			t.Fatalf("CSP %q lacks %q", csp, want)
		}
	}
	if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Referrer-Policy") != "no-referrer" {
		t.Fatalf("headers %v", resp.Header)
	}
}

func TestWebSocketOrigin(t *testing.T) {
	t.Parallel()
	srv, logs := newServer(t, web.Config{AllowedOrigins: []string{"*.allowed.example", "https://exact.example"}})
	host := strings.TrimPrefix(srv.URL, "http://")
	cookie := &http.Cookie{Name: "dashgate_token", Value: "secret-token"}
	tests := []struct {
		name   string
		origin string
		cookie bool
		query  bool
		bearer bool
		want   int
	}{
		{"own origin with cookie", "http://" + host, true, false, false, 200},
		{"foreign origin with cookie", "http://evil.example", true, false, false, 403},
		{"null origin with cookie", "null", true, false, false, 403},
		{"foreign origin with a query token", "http://evil.example", false, true, false, 403},
		{"no origin, cookie only", "", true, false, false, 403},
		{"no origin, bearer", "", false, false, true, 200},
		{"no origin, query token", "", false, true, false, 200},
		{"allowed pattern", "https://a.allowed.example", true, false, false, 200},
		{"allowed scheme://host", "https://exact.example", true, false, false, 200},
		{"allowed host, other scheme", "http://exact.example", true, false, false, 403},
		// Issue 16 item 8: the own host with another scheme is another origin.
		{"own host, https origin on an http page", "https://" + host, true, false, false, 403},
	}
	for _, tt := range tests {
		for _, path := range []string{"/ws/chat", "/ws/pty"} {
			url := srv.URL + path
			if tt.query {
				url += "?token=secret-token"
			}
			req := upgradeReq(t, url)
			if tt.origin != "" {
				req.Header.Set("Origin", tt.origin)
			}
			if tt.cookie {
				req.AddCookie(cookie)
			}
			if tt.bearer {
				req.Header.Set("Authorization", "Bearer secret-token")
			}
			if resp := do(t, req); resp.StatusCode != tt.want {
				t.Fatalf("%s %s: status %d, want %d", tt.name, path, resp.StatusCode, tt.want)
			}
		}
	}
	if !strings.Contains(logs.String(), `"origin":"http://evil.example"`) || !strings.Contains(logs.String(), `"level":"WARN"`) {
		t.Fatal("no WARN record with the refused origin")
	}
}

// TestWebSocketOriginSchemeBehindProxy: behind a trusted proxy the page's
// scheme is the forwarded one: an https origin matches an https page, an
// http origin does not.
func TestWebSocketOriginSchemeBehindProxy(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, web.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	host := strings.TrimPrefix(srv.URL, "http://")
	for _, tt := range []struct {
		origin string
		want   int
	}{{"https://" + host, 200}, {"http://" + host, 403}} {
		req := upgradeReq(t, srv.URL+"/ws/chat")
		req.Header.Set("Origin", tt.origin)
		req.Header.Set("X-Forwarded-Proto", "https")
		req.AddCookie(&http.Cookie{Name: "dashgate_token", Value: "secret-token"})
		if resp := do(t, req); resp.StatusCode != tt.want {
			t.Fatalf("origin %s behind an https proxy: status %d, want %d", tt.origin, resp.StatusCode, tt.want)
		}
	}
}

func TestCrossSitePostRefused(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, web.Config{})
	for _, tt := range []struct {
		name   string
		header map[string]string
		want   int
	}{
		{"same origin", map[string]string{"Sec-Fetch-Site": "same-origin"}, 404}, // no admin handler mounted: past the check
		{"foreign origin", map[string]string{"Origin": "http://evil.example"}, 403},
		{"cross-site fetch", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
	} {
		req, _ := http.NewRequest("POST", srv.URL+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer secret-token")
		for k, v := range tt.header {
			req.Header.Set(k, v)
		}
		if resp := do(t, req); resp.StatusCode != tt.want && !(tt.want == 404 && resp.StatusCode < 400) {
			t.Fatalf("%s: status %d, want %d", tt.name, resp.StatusCode, tt.want)
		}
	}
}

func TestTrustedProxies(t *testing.T) {
	t.Parallel()
	loop := netip.MustParsePrefix("127.0.0.0/8")
	for _, tt := range []struct {
		name    string
		trusted []netip.Prefix
		want    string
	}{
		{"untrusted peer: X-Forwarded-For ignored", nil, "ok 127.0.0.1:"},
		{"trusted peer: client taken from X-Forwarded-For", []netip.Prefix{loop}, "ok 203.0.113.9:0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv, _ := newServer(t, web.Config{TrustedProxies: tt.trusted})
			req := upgradeReq(t, srv.URL+"/ws/chat")
			req.Header.Set("Authorization", "Bearer secret-token")
			req.Header.Set("X-Forwarded-For", "198.51.100.1, 203.0.113.9")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var b bytes.Buffer
			b.ReadFrom(resp.Body)
			if !strings.HasPrefix(b.String(), tt.want) {
				t.Fatalf("handler saw %q, want prefix %q", b.String(), tt.want)
			}
		})
	}
}

func TestBasePath(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, web.Config{BasePath: "/dashgate"})
	get := func(path string) *http.Response {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer secret-token")
		return do(t, req)
	}
	if r := get("/dashgate/"); r.StatusCode != 200 {
		t.Fatalf("/dashgate/: %d", r.StatusCode)
	}
	if r := get("/dashgate/static/js/app.js"); r.StatusCode != 200 {
		t.Fatalf("asset under the base path: %d", r.StatusCode)
	}
	if r := get("/"); r.StatusCode != 404 {
		t.Fatalf("/ outside the base path: %d", r.StatusCode)
	}
	if r := get("/dashgate"); r.StatusCode != http.StatusMovedPermanently || r.Header.Get("Location") != "/dashgate/" {
		t.Fatalf("/dashgate: %d %q", r.StatusCode, r.Header.Get("Location"))
	}
	req, _ := http.NewRequest("GET", srv.URL+"/dashgate/?token=secret-token", nil)
	req.Header.Set("Accept", "text/html")
	resp := do(t, req)
	if resp.Header.Get("Location") != "/dashgate/" || !strings.Contains(resp.Header.Get("Set-Cookie"), "Path=/dashgate/") {
		t.Fatalf("redirect %q cookie %q", resp.Header.Get("Location"), resp.Header.Get("Set-Cookie"))
	}
}

func TestNormalizePrefix(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in, want string
		err      bool
	}{
		{"/dashgate", "/dashgate", false},
		{"/dashgate/", "/dashgate", false},
		{"/a/b", "/a/b", false},
		{"/", "", false},
		{"dashgate", "", true},
		{"/a/../b", "", true},
		{"//evil.example", "", true},
		{`/a"b`, "", true},
		{"/a b", "", true},
		{"/" + strings.Repeat("a", 256), "", true},
		{"/a?b", "", true},
	} {
		got, err := web.NormalizePrefix(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Fatalf("NormalizePrefix(%q) = %q, %v", tt.in, got, err)
		}
	}
}

func TestRedactQuery(t *testing.T) {
	t.Parallel()
	if got := web.RedactQuery("token=abc&x=1&resume_token=zz"); strings.Contains(got, "abc") || strings.Contains(got, "zz") || !strings.Contains(got, "x=1") {
		t.Fatalf("RedactQuery = %q", got)
	}
}

func TestMaxConnsPerIP(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	entered := make(chan struct{}, 4)
	blocking := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-hold
	})
	s, err := web.New(web.Config{Token: "secret-token", MaxConnsPerIP: 2}, web.Handlers{Chat: blocking, Terminal: blocking, Admin: &handlers.Admin{}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	defer close(hold)
	for range 2 {
		go func() {
			req := upgradeReq(t, srv.URL+"/ws/chat")
			req.Header.Set("Authorization", "Bearer secret-token")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		<-entered
	}
	req := upgradeReq(t, srv.URL+"/ws/pty")
	req.Header.Set("Authorization", "Bearer secret-token")
	if resp := do(t, req); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third connection: %d, want 429", resp.StatusCode)
	}
}

func TestLoginPageForBrowsers(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, web.Config{})
	req, _ := http.NewRequest("GET", srv.URL+"/?token=wrong", nil)
	req.Header.Set("Accept", "text/html")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	if resp.StatusCode != 401 || !strings.Contains(b.String(), `name="token"`) || !strings.Contains(b.String(), `data-testid="login-wrong"`) {
		t.Fatalf("%d %s", resp.StatusCode, b.String())
	}
	if strings.Contains(b.String(), "wrong") && strings.Contains(b.String(), `value="wrong"`) {
		t.Fatal("the refused token is echoed")
	}
}

// A page opened with ?token= while a cookie already lets it in is still
// redirected without the token: it never stays in the address bar.
func TestTokenQueryLeavesTheAddressBarWithACookie(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, web.Config{})
	for _, q := range []string{"secret-token", "not-the-token"} {
		req, _ := http.NewRequest("GET", srv.URL+"/?token="+q+"&x=1", nil)
		req.Header.Set("Accept", "text/html")
		req.AddCookie(&http.Cookie{Name: "dashgate_token", Value: "secret-token"})
		resp := do(t, req)
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/?x=1" {
			t.Errorf("?token=%s with a valid cookie: status %d location %q, want 303 to /?x=1", q, resp.StatusCode, resp.Header.Get("Location"))
		}
		var set []string
		for _, c := range resp.Cookies() {
			set = append(set, strings.TrimRight(c.Name, "0123456789abcdef"))
		}
		if want := map[string]string{"secret-token": "[dashgate_login_]", "not-the-token": "[]"}[q]; fmt.Sprint(set) != want {
			t.Errorf("?token=%s: cookies set %v, want %s (only a valid token becomes the cookie)", q, set, want)
		}
	}
}

// TestLoginPageSaysWhereTheTokenIs: after Log out in single-user mode the
// login page said "the token dashgate was started with (--token)" of a
// token dashgate had made and kept in <state-dir>/token. It says where the
// token is, without showing it, and its flags and paths do not break at
// their hyphens (page.css: white-space: nowrap on the card's <code>).
func TestLoginPageSaysWhereTheTokenIs(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, web.Config{})
	resp, body := fetch(t, srv.URL, "/", false, "text/html")
	page := string(body)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(page, `data-testid="login"`) {
		t.Fatalf("GET / without a token: %d, want 401 and the login page:\n%s", resp.StatusCode, page)
	}
	for _, want := range []string{
		"printed when it started",
		"<code>&lt;state-dir&gt;/token</code>",
		"<code>--token</code>",
		"<code>--token-file</code>",
		"<code>--state-dir</code>",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the login page does not say %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, "started with") {
		t.Errorf("the login page still says the token is the one dashgate was started with:\n%s", page)
	}
	if strings.Contains(page, "secret-token") {
		t.Error("the login page shows the token")
	}
	css, err := fs.ReadFile(static.FS, "css/page.css")
	if err != nil {
		t.Fatal(err)
	}
	rule := regexp.MustCompile(`(?s)\.card-page code \{[^}]*\}`).Find(css)
	if !regexp.MustCompile(`(?m)^\s*white-space: nowrap;`).Match(rule) {
		t.Errorf("page.css's rule %q lets a flag wrap at its hyphens, want white-space: nowrap", rule)
	}
}

// TestLoginPageSaysLoggedOut: after Log out (POST logout sends the browser
// to ?logged_out=1) the login page says the browser is logged out, so a
// person can tell it from a login that expired; without it, it says
// nothing of the kind.
func TestLoginPageSaysLoggedOut(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, web.Config{})
	_, body := fetch(t, srv.URL, "/?logged_out=1", false, "text/html")
	if !strings.Contains(string(body), `data-testid="login-logged-out"`) || !strings.Contains(string(body), "You are logged out.") {
		t.Errorf("the login page after Log out does not say so:\n%s", body)
	}
	_, body = fetch(t, srv.URL, "/", false, "text/html")
	if strings.Contains(string(body), "logged out") {
		t.Errorf("the plain login page says logged out:\n%s", body)
	}
}
