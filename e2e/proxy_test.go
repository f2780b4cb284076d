package e2e_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/static"
)

// The tests of issue 8: dashgate behind a real nginx running the deploy
// files as they are (docs/failure-classes.md #15, #16, #17).

// subPath is where deploy/nginx/dashgate.conf serves dashgate.
const subPath = "/dashgate/"

// startBehindNginx starts dashgate as deploy/nginx/dashgate.conf says to run
// it (--base-path /dashgate --trusted-proxies 127.0.0.1/32, then extra
// flags) and nginx on that file in front of it.
func startBehindNginx(t *testing.T, readTimeout string, extra ...string) (*dashgate, *nginx) {
	t.Helper()
	requireNginx(t)
	d := startDashgate(t, append([]string{"--base-path", "/dashgate", "--trusted-proxies", "127.0.0.1/32"}, extra...)...)
	n := startNginx(t, nginxSite{file: "dashgate.conf", upstreams: []string{d.Addr}, readTimeout: readTimeout})
	return d, n
}

// httpClient is a client for one test that does not follow redirects.
func httpClient(t *testing.T) *http.Client {
	c := &http.Client{
		Timeout:       10 * time.Second,
		Transport:     &http.Transport{Proxy: nil},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// get fetches u with header and returns the response (body read and closed).
func get(t *testing.T, c *http.Client, u string, header http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	return res, string(b)
}

var (
	attrURL      = regexp.MustCompile(`\s(src|href|action)="([^"]*)"`)
	dataBasePath = regexp.MustCompile(`\sdata-base-path="([^"]*)"`)
	// A block comment, dropped before imports are looked for.
	blockComment = regexp.MustCompile(`(?s)/\*.*?\*/`)
	// A module specifier holds no white space: a comment's quoted "from"
	// (uPlot has `// is a "from" band edge`) is no import.
	jsImport = regexp.MustCompile(`(?m)(?:^\s*import\s*|\bfrom\s*|\bimport\s*\(\s*)['"]([^'"\s]+)['"]`)
	// A route written as a root-absolute literal in a script ignores the
	// base path (docs/failure-classes.md #16): every URL must be built from it.
	rootRoute = regexp.MustCompile("[\"'`](/(?:ws|static|admin|healthz|metrics)\\b[^\"'`]*)")
)

// Case 1, at HTTP level: every URL of the dashboard and admin pages served
// through nginx under /dashgate/, the login redirect and cookie, the
// scripts' imports and the WebSocket URLs the scripts build all carry the
// prefix, and each one answers through nginx.
func TestSubPathURLsBehindNginx(t *testing.T) {
	_, n := startBehindNginx(t, "")
	c := httpClient(t)

	// The login: 303 to /dashgate/ without the token, cookie on /dashgate/.
	res, _ := get(t, c, n.URL(subPath+"?token="+testToken), http.Header{"Accept": {"text/html"}})
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("GET %s?token=: %s, want 303", subPath, res.Status)
	}
	if loc := res.Header.Get("Location"); loc != subPath {
		t.Errorf("login redirects to %q, want %q", loc, subPath)
	}
	var cookie *http.Cookie
	for _, ck := range res.Cookies() {
		if strings.HasPrefix(ck.Name, "dashgate_login_") {
			cookie = ck
		}
	}
	switch {
	case cookie == nil:
		t.Fatalf("login set no dashgate_login_* cookie: %q", res.Header.Values("Set-Cookie"))
	case cookie.Path != subPath || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || strings.Contains(cookie.Value, testToken):
		t.Errorf("login cookie %q, want a signed id (not the token), Path=%s, HttpOnly, SameSite=Strict", res.Header.Get("Set-Cookie"), subPath)
	}
	loginCookie := cookie.Name + "=" + cookie.Value
	withCookie := http.Header{"Cookie": {loginCookie}, "Accept": {"text/html"}}

	checked := map[string]bool{}
	// checkURL checks that ref, found in what, resolves under /dashgate/ on
	// nginx and answers 200 there; it returns the body.
	checkURL := func(what, base, ref string, post bool) (string, string) {
		t.Helper()
		u, err := url.Parse(ref)
		if err != nil {
			t.Errorf("%s: bad URL %q: %v", what, ref, err)
			return "", ""
		}
		b, _ := url.Parse(base)
		abs := b.ResolveReference(u)
		if abs.Host != n.addr || !strings.HasPrefix(abs.Path, subPath) {
			t.Errorf("%s: URL %q resolves to %s, outside %s", what, ref, abs, n.URL(subPath))
			return "", ""
		}
		if strings.HasPrefix(ref, "/") && !strings.HasPrefix(ref, subPath) {
			t.Errorf("%s: URL %q does not start with %s", what, ref, subPath)
		}
		if checked[abs.String()] {
			return abs.String(), ""
		}
		checked[abs.String()] = true
		if post {
			// A form of the page, posted as the browser would from it: 303
			// back to the admin page under the prefix (Log out: to the
			// dashboard).
			req, _ := http.NewRequest(http.MethodPost, abs.String(), strings.NewReader(""))
			req.Header = withCookie.Clone()
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", n.Origin())
			req.Header.Set("Sec-Fetch-Site", "same-origin")
			res, err := c.Do(req)
			if err != nil {
				t.Fatalf("POST %s: %v", abs, err)
			}
			res.Body.Close()
			want := subPath + "admin"
			if abs.Path == subPath+"logout" {
				want = subPath + "?logged_out=1" // Log out: back to the dashboard, which asks for a token and says so
			}
			if loc := res.Header.Get("Location"); res.StatusCode != http.StatusSeeOther || loc != want {
				t.Errorf("%s: POST %s answers %s to %q through nginx, want 303 to %s", what, abs, res.Status, loc, want)
			}
			return abs.String(), ""
		}
		res, body := get(t, c, abs.String(), withCookie)
		if res.StatusCode != http.StatusOK {
			t.Errorf("%s: %s answers %s through nginx, want 200", what, abs, res.Status)
		}
		return abs.String(), body
	}
	// checkScript follows a script's imports and looks for root-absolute
	// routes in it.
	var checkScript func(from, u, body string)
	checkScript = func(from, u, body string) {
		t.Helper()
		for _, m := range rootRoute.FindAllStringSubmatch(body, -1) {
			t.Errorf("%s (loaded by %s) holds the root-absolute route %q: not built from the base path", u, from, m[1])
		}
		// Imports in comments are not loaded (highlight.js's JSDoc has
		// `import("./html_renderer")`).
		code := blockComment.ReplaceAllString(body, "")
		for _, m := range jsImport.FindAllStringSubmatch(code, -1) {
			if !strings.HasPrefix(m[1], ".") && !strings.HasPrefix(m[1], "/") {
				// A bare specifier is no URL a browser loads (there is no
				// import map): in a vendored, minified file the pattern
				// also matches words in its strings.
				continue
			}
			if abs, b := checkURL("import in "+u, u, m[1], false); b != "" {
				checkScript(u, abs, b)
			}
		}
	}
	// checkPage checks every URL of the page at path.
	checkPage := func(path string, want ...string) {
		t.Helper()
		page := n.URL(path)
		res, body := get(t, c, page, withCookie)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s through nginx: %s", path, res.Status)
		}
		if m := dataBasePath.FindStringSubmatch(body); m == nil || m[1] != subPath {
			t.Errorf("%s: data-base-path is %q, want %q (the scripts build every URL from it)", path, m, subPath)
		}
		var refs []string
		for _, m := range attrURL.FindAllStringSubmatch(body, -1) {
			refs = append(refs, m[2])
			abs, b := checkURL(path+" "+m[1], page, m[2], m[1] == "action")
			if strings.HasSuffix(abs, ".js") && b != "" {
				checkScript(path, abs, b)
			}
		}
		for _, w := range want {
			if !slices.Contains(refs, w) {
				t.Errorf("%s has no URL %q; URLs: %q", path, w, refs)
			}
		}
	}
	checkPage(subPath, subPath+"admin", static.URL(subPath, "js/app.js"))
	checkPage(subPath+"admin", subPath, static.URL(subPath, "js/admin.js"))
	t.Logf("%d URLs checked through nginx", len(checked))
	if len(checked) < 8 {
		t.Errorf("only %d URLs checked: %q", len(checked), slices.Sorted(maps.Keys(checked)))
	}

	// The scripts build ws(s)://<location.host><data-base-path>ws/chat and
	// ws/pty (static/js/net.js); those URLs open through nginx with what a
	// browser sends: the cookie and the page's origin.
	browserLike := testkit.DialOptions{Header: http.Header{"Cookie": {loginCookie}}, Origin: n.Origin()}
	openChat(t, "chat", n.WS(subPath+"ws/chat"), browserLike).Close()
	openPTY(t, "pty", n.WS(subPath+"ws/pty"), browserLike).Close()
}

// Case 1, in Chromium: the dashboard through nginx under /dashgate/.
func TestDashboardBehindNginxSubPath(t *testing.T) {
	requireNginx(t)
	requireChromium(t)
	d, n := startBehindNginx(t, "")
	b := newBrowser(t)

	var mu sync.Mutex
	var requests, sockets, failures []string
	record := func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			requests = append(requests, ev.Request.URL)
		case *network.EventWebSocketCreated:
			sockets = append(sockets, ev.URL)
		case *network.EventResponseReceived:
			if ev.Response.Status >= 400 {
				failures = append(failures, fmt.Sprintf("%s: %d", ev.Response.URL, ev.Response.Status))
			}
		case *network.EventLoadingFailed:
			failures = append(failures, fmt.Sprintf("request %s: %s", ev.RequestID, ev.ErrorText))
		}
	}
	tb := b.newTab(t, "dashboard", record)

	tb.Do("open the login URL through nginx", chromedp.Navigate(n.URL(subPath+"?token="+testToken)))
	loc, err := chromedp.Run(tb.ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if want := n.URL(subPath); loc != want {
		t.Errorf("after login the URL is %q, want %q", loc, want)
	}
	cookies, err := chromedp.Call(tb.ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{n.URL(subPath)}})
	if err != nil {
		t.Fatalf("network.getCookies: %v", err)
	}
	var cookie *network.Cookie
	for _, ck := range cookies.Cookies {
		if strings.HasPrefix(ck.Name, "dashgate_login_") {
			cookie = ck
		}
	}
	if cookie == nil {
		t.Fatalf("no dashgate_login_* cookie for %s: %+v", n.URL(subPath), cookies.Cookies)
	}
	if cookie.Path != subPath || !cookie.HTTPOnly {
		t.Errorf("%s cookie Path=%q HttpOnly=%v, want Path=%s HttpOnly", cookie.Name, cookie.Path, cookie.HTTPOnly, subPath)
	}

	waitDashboard(t, tb)
	sid := currentSession(t, tb)
	sendChat(t, tb, "/echo hi")
	waitAssistant(t, tb, "hi", 1)
	typeInTerminal(t, tb, "echo $((6*7))")
	if _, err := waitTerminalOutput(t, tb, "echo $((6*7))", exactly("42"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if s, ok := d.Session(sid); !ok || s.WorkerPID == 0 || s.PTYPID == 0 {
		t.Errorf("dashgate lists session %s as %+v (listed: %v), want a worker and a terminal", sid, s, ok)
	}
	// The stylesheets and scripts applied: xterm rendered, the page styled.
	if !mustEval[bool](tb, `!!document.querySelector('[data-testid="terminal"] .xterm') && getComputedStyle(document.querySelector('main.layout')).display !== 'block'`) {
		t.Errorf("the page's assets did not apply (no .xterm, or main.layout unstyled)")
	}

	mu.Lock()
	defer mu.Unlock()
	for _, u := range requests {
		if !strings.HasPrefix(u, n.URL(subPath)) && !strings.HasPrefix(u, "data:") {
			t.Errorf("the page requested %s, outside %s", u, n.URL(subPath))
		}
	}
	var chat, pty bool
	for _, u := range sockets {
		switch {
		case strings.HasPrefix(u, n.WS(subPath+"ws/chat")):
			chat = true
		case strings.HasPrefix(u, n.WS(subPath+"ws/pty?")):
			pty = true
		default:
			t.Errorf("the page opened the WebSocket %s, outside %s", u, n.WS(subPath))
		}
	}
	if !chat || !pty {
		t.Errorf("WebSockets opened: %q, want %sws/chat and %sws/pty", sockets, n.WS(subPath), n.WS(subPath))
	}
	if len(failures) > 0 {
		t.Errorf("failed requests: %q", failures)
	}
}

// idleSockets opens, through nginx, a chat socket with a session that has a
// worker and a terminal on that session, and lets the shell settle.
func idleSockets(t *testing.T, n *nginx) (*chatConn, string, *ptyConn) {
	t.Helper()
	chat := openChat(t, "chat", n.WS(subPath+"ws/chat"), bearer())
	sid := chat.createSession("idle")
	chat.mustEcho(sid, "warm")
	pty := openPTY(t, "pty", n.WS(subPath+"ws/pty?session_id="+sid), bearer())
	if err := pty.run("echo $((6*7))", exactly("42"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	return chat, sid, pty
}

// Case 2 (docs/failure-classes.md #15): with nginx's proxy_read_timeout at 3 s, dashgate's
// pings (--ws-ping-interval 1s) keep an idle chat socket and an idle
// terminal open for 10 s, and both still answer; without pings nginx cuts
// the same sockets within those 10 s, so the first half would catch
// missing pings.
func TestIdleSocketsOutliveProxyReadTimeout(t *testing.T) {
	const idle = 10 * time.Second
	t.Run("pings", func(t *testing.T) {
		_, n := startBehindNginx(t, "3s", "--ws-ping-interval", "1s")
		chat, sid, pty := idleSockets(t, n)
		start := time.Now()
		timer := time.NewTimer(idle)
		defer timer.Stop()
		select {
		case <-chat.Done():
			t.Fatalf("the idle chat socket was cut after %v: %v\n%s", time.Since(start).Round(time.Millisecond), chat.Err(), n.logs())
		case <-pty.Done():
			t.Fatalf("the idle terminal socket was cut after %v: %v\n%s", time.Since(start).Round(time.Millisecond), pty.Err(), n.logs())
		case <-timer.C:
		}
		chat.mustEcho(sid, "still-here")
		if err := pty.run("echo $((7*6))", exactly("42"), 5*time.Second); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("no pings", func(t *testing.T) {
		_, n := startBehindNginx(t, "3s", "--ws-ping-interval", "0")
		chat, _, pty := idleSockets(t, n)
		start := time.Now()
		deadline := time.NewTimer(idle)
		defer deadline.Stop()
		for name, c := range map[string]*testkit.Conn{"chat": chat.Conn, "pty": pty.Conn} {
			select {
			case <-c.Done():
				t.Logf("%s cut after %v idle: %v", name, c.EndedAt().Sub(start).Round(time.Millisecond), c.Err())
			case <-deadline.C:
				t.Fatalf("without pings the idle %s socket is still open after %v: proxy_read_timeout 3s did not apply, so this test cannot tell pings from none", name, idle)
			}
			if code := websocket.CloseStatus(c.Err()); code != -1 {
				t.Errorf("%s ended with close code %d: the proxy's timeout cuts the connection without a close frame", name, code)
			}
		}
		if !testkit.Until(5*time.Second, func() bool { return strings.Contains(n.logs(), "upstream timed out") }) {
			t.Errorf("nginx logged no \"upstream timed out\": not its read timeout that cut the sockets\n%s", n.logs())
		}
	})
}

// Case 3: when the client's connection to nginx is dropped (no close
// frame), the chat worker and the terminal of its session are ended within
// 1 s plus the grace.
func TestDroppedProxyConnectionEndsWorkerAndTerminal(t *testing.T) {
	d, n := startBehindNginx(t, "")
	for _, tc := range []struct {
		name string
		rst  bool
	}{{"fin", false}, {"rst", true}} {
		t.Run(tc.name, func(t *testing.T) {
			chat := openChat(t, "chat", n.WS(subPath+"ws/chat"), bearer())
			sid := chat.createSession("drop-" + tc.name)
			chat.mustEcho(sid, "hi")
			pty := openPTY(t, "pty", n.WS(subPath+"ws/pty?session_id="+sid), bearer())
			// A program running in the terminal, as a user would leave it.
			if err := pty.write(websocket.MessageBinary, []byte("sleep 300\r")); err != nil {
				t.Fatal(err)
			}
			var cw, tw apiWorker
			if !testkit.Until(10*time.Second, func() bool {
				var ok1, ok2 bool
				cw, ok1 = d.Worker(sid, "chat")
				tw, ok2 = d.Worker(sid, "pty")
				return ok1 && ok2 && len(tw.Children) > 0
			}) {
				t.Fatalf("session %s has no chat worker, or no terminal with sleep running: %+v", sid, d.Workers())
			}
			type proc struct {
				what  string
				pid   int
				start uint64
			}
			procs := []proc{{"chat worker", cw.PID, d.startTime(cw.PID)}, {"terminal", tw.PID, d.startTime(tw.PID)}}
			for _, c := range tw.Children {
				procs = append(procs, proc{fmt.Sprintf("terminal's child %s", testkit.Describe(c)), c, d.startTime(c)})
			}
			for _, p := range procs {
				if !alive(p.pid, p.start) {
					t.Fatalf("%s %d is not running before the drop", p.what, p.pid)
				}
			}

			promise := time.Second + workerGrace
			dropped := time.Now()
			chat.drop(tc.rst)
			pty.drop(tc.rst)
			deadline := dropped.Add(promise)
			for _, p := range procs {
				if !testkit.Until(time.Until(deadline), func() bool { return !alive(p.pid, p.start) }) {
					t.Errorf("%s %d still running %v after the client's connection to nginx was dropped (promise: within %v)",
						p.what, p.pid, time.Since(dropped).Round(time.Millisecond), promise)
				}
			}
			if !t.Failed() {
				t.Logf("all gone %v after the drop", time.Since(dropped).Round(time.Millisecond))
			}
			rec, ok := d.waitLog(5*time.Second, func(r logRecord) bool {
				pid, _ := r.Int("worker_pid")
				return r.Msg() == "worker closed" && pid == cw.PID
			})
			if !ok {
				t.Fatalf("no \"worker closed\" record with worker_pid %d; log:\n%s", cw.PID, d.logText())
			}
			if rec.Str("reason") != "detach" {
				t.Errorf("chat worker closed with reason %q, want detach: %s", rec.Str("reason"), rec)
			}
		})
	}
}

// remoteAddrOf returns the remote_addr that dashgate logged for the request
// whose query is probe=<probe>.
func remoteAddrOf(t *testing.T, d *dashgate, probe string) string {
	t.Helper()
	rec, ok := d.waitLog(5*time.Second, func(r logRecord) bool {
		return r.Msg() == "request" && r.Str("query") == "probe="+probe
	})
	if !ok {
		t.Fatalf("no \"request\" record with query probe=%s; log:\n%s", probe, d.logText())
	}
	host, _, err := net.SplitHostPort(rec.Str("remote_addr"))
	if err != nil {
		t.Fatalf("request record with remote_addr %q: %v", rec.Str("remote_addr"), err)
	}
	return host
}

// clientFrom is an HTTP client dialling from the local address ip.
func clientFrom(t *testing.T, ip string) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, DialContext: d.DialContext}}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// Case 4 (docs/failure-classes.md #17): X-Forwarded-For is believed only from a trusted
// proxy. Sent by anyone else it is not what the log shows as remote_addr;
// through nginx the client address nginx appended is logged, not a first
// hop the client made up.
func TestForwardedForOnlyFromTrustedProxy(t *testing.T) {
	const spoofed = "6.6.6.6"
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{"no trusted proxies", nil},
		{"trusted range excludes the peer", []string{"--trusted-proxies", "10.0.0.0/8,192.168.0.0/16,::1/128"}},
	} {
		t.Run("direct, "+tc.name, func(t *testing.T) {
			d := startDashgate(t, tc.flags...)
			c := clientFrom(t, "127.0.0.1")
			probe := strings.ReplaceAll(tc.name, " ", "-")
			res, _ := get(t, c, d.URL("healthz?probe="+probe), http.Header{"X-Forwarded-For": {spoofed}})
			if res.StatusCode != http.StatusOK {
				t.Fatalf("healthz: %s", res.Status)
			}
			if got := remoteAddrOf(t, d, probe); got != "127.0.0.1" {
				t.Errorf("X-Forwarded-For %s from an untrusted peer: logged remote_addr %s, want the peer 127.0.0.1", spoofed, got)
			}

			// The audit record of an admin action too.
			req, _ := http.NewRequest(http.MethodPost, d.URL("admin/sessions/no-such-session/reap"), nil)
			req.Header.Set("Authorization", "Bearer "+testToken)
			req.Header.Set("Accept", "application/json")
			req.Header.Set("X-Forwarded-For", spoofed)
			res, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			rec, ok := d.waitLog(5*time.Second, func(r logRecord) bool { return r.Msg() == "admin reap" })
			if !ok {
				t.Fatalf("no \"admin reap\" record after POST %s (%s); log:\n%s", req.URL.Path, res.Status, d.logText())
			}
			if host, _, _ := net.SplitHostPort(rec.Str("remote_addr")); host != "127.0.0.1" {
				t.Errorf("admin reap record with X-Forwarded-For %s from an untrusted peer: %s, want remote_addr 127.0.0.1", spoofed, rec)
			}
		})
	}

	t.Run("through nginx", func(t *testing.T) {
		d, n := startBehindNginx(t, "")
		for _, tc := range []struct {
			name, from string
			xff        []string // what the client sends
		}{
			// 127.0.0.2 is a loopback address outside the trusted 127.0.0.1/32:
			// nginx appends it, dashgate believes nginx.
			{name: "client 127.0.0.2", from: "127.0.0.2"},
			{name: "client 127.0.0.2 spoofing", from: "127.0.0.2", xff: []string{spoofed}},
			// The deploy case: nginx and its clients on the same host (an
			// SSH tunnel, a local browser). nginx sends "6.6.6.6, 127.0.0.1".
			{name: "client 127.0.0.1 spoofing", from: "127.0.0.1", xff: []string{spoofed}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				probe := strings.ReplaceAll(tc.name, " ", "-")
				h := http.Header{}
				if tc.xff != nil {
					h["X-Forwarded-For"] = tc.xff
				}
				res, _ := get(t, clientFrom(t, tc.from), n.URL(subPath+"healthz?probe="+probe), h)
				if res.StatusCode != http.StatusOK {
					t.Fatalf("healthz through nginx: %s", res.Status)
				}
				if got := remoteAddrOf(t, d, probe); got != tc.from {
					t.Errorf("client %s sending X-Forwarded-For %q through nginx: logged remote_addr %s, want the client's address %s (the hop nginx's $proxy_add_x_forwarded_for appended)",
						tc.from, tc.xff, got, tc.from)
				}
			})
		}
	})
}

// Case 5 (docs/failure-classes.md #17): through nginx, a WebSocket from another origin
// is refused even with a valid cookie, and one from the proxy's own origin
// (host:port as the browser used it, which nginx forwards in
// X-Forwarded-Host) is accepted.
func TestCrossOriginWebSocketThroughNginx(t *testing.T) {
	d, n := startBehindNginx(t, "")
	const evil = "http://evil.example"
	for _, path := range []string{"ws/chat", "ws/pty"} {
		t.Run(path, func(t *testing.T) {
			mark := d.logMark()
			hdr := http.Header{"Cookie": {"dashgate_token=" + testToken}, "Origin": {evil}}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			c, res, err := testkit.Dial(ctx, n.WS(subPath+path), testkit.DialOptions{Header: hdr})
			if err == nil {
				c.Close()
				t.Fatalf("%s from Origin %s opened through nginx", path, evil)
			}
			if !isRefused(res, err, http.StatusForbidden) {
				t.Fatalf("%s from Origin %s: %v (response %v), want 403", path, evil, err, res)
			}
			if _, ok := d.waitLogSince(mark, 5*time.Second, func(r logRecord) bool {
				return r.Msg() == "cross-origin websocket refused" && r.Str("origin") == evil && r.Str("level") == "WARN"
			}); !ok {
				t.Errorf("no WARN \"cross-origin websocket refused\" with origin %s; log:\n%s", evil, d.logText())
			}

			hdr = http.Header{"Cookie": {"dashgate_token=" + testToken}, "Origin": {n.Origin()}}
			if path == "ws/chat" {
				openChat(t, "same-origin chat", n.WS(subPath+path), testkit.DialOptions{Header: hdr}).Close()
			} else {
				openPTY(t, "same-origin pty", n.WS(subPath+path), testkit.DialOptions{Header: hdr}).Close()
			}
		})
	}
}

// Issue 16 item 7: behind nginx with proxy_read_timeout 3s and pings every
// second, a chat client that stops reading for 8 s (so its pongs come
// late) is not cut: dashgate goes on pinging while a ping is unanswered,
// and nginx sees traffic. One that never answers is ended once its oldest
// unanswered ping is older than --ws-ping-timeout.
func TestLatePongsKeepSocketBehindProxy(t *testing.T) {
	t.Run("late", func(t *testing.T) {
		_, n := startBehindNginx(t, "3s", "--ws-ping-interval", "1s", "--ws-ping-timeout", "20s")
		chat := openChat(t, "chat", n.WS(subPath+"ws/chat"), bearer())
		sid := chat.createSession("late pongs")
		chat.mustEcho(sid, "warm")
		stall(t, chat)
		start := time.Now()
		pause := time.NewTimer(8 * time.Second)
		defer pause.Stop()
		select {
		case <-chat.Done():
			t.Fatalf("the socket was cut after %v of not reading: %v\n%s", time.Since(start).Round(time.Millisecond), chat.Err(), n.logs())
		case <-pause.C:
		}
		chat.Resume()
		chat.mustEcho(sid, "still-here")
	})
	t.Run("never", func(t *testing.T) {
		d, n := startBehindNginx(t, "30s", "--ws-ping-interval", "1s", "--ws-ping-timeout", "3s")
		chat := openChat(t, "chat", n.WS(subPath+"ws/chat"), bearer())
		sid := chat.createSession("no pongs")
		chat.mustEcho(sid, "warm")
		stall(t, chat)
		defer chat.Resume()
		if _, ok := d.waitLog(15*time.Second, func(r logRecord) bool {
			return r.Msg() == "socket closed" && r.Str("reason") == "ping_timeout"
		}); !ok {
			t.Fatalf("no socket closed record with reason ping_timeout:\n%s", d.logText())
		}
	})
}

// stall stops the client reading, as a stalled browser does: it pauses the
// reader, then sends a request whose reply is the last frame read, so the
// reader is out of its Read and no ping after it is answered.
func stall(t *testing.T, chat *chatConn) {
	t.Helper()
	chat.Pause()
	req := `{"jsonrpc":"2.0","id":"stall","method":"session.list"}`
	if err := chat.Write(t.Context(), websocket.MessageText, []byte(req)); err != nil {
		t.Fatal(err)
	}
}
