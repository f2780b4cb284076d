package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/dashgate/dashgate/internal/testkit"
)

// The tests of issue 24: many people on one dashgate.

// Two people behind deploy/nginx/dashgate-auth-basic.conf each see only
// their own sessions; every way bob could reach alice's session answers
// exactly as a missing id does, and none of her events reach him; carol,
// an admin, sees both and reaps bob's, and the log says she did.
func TestUsersBehindNginxAuthBasic(t *testing.T) {
	d, n := startBehindAuthBasic(t, []string{"alice", "bob", "carol"}, "--admin-users", "carol")

	// In two browser contexts (two people's browsers), each dashboard
	// makes a session and lists only its own.
	b := newBrowser(t)
	alice := b.contextTab(t, "alice", basicAuth("alice"))
	bob := b.contextTab(t, "bob", basicAuth("bob"))
	alice.Do("open alice's dashboard", chromedp.Navigate(n.URL("/")))
	waitDashboard(t, alice)
	aliceTabSid := currentSession(t, alice)
	bob.Do("open bob's dashboard", chromedp.Navigate(n.URL("/")))
	waitDashboard(t, bob)
	bobTabSid := currentSession(t, bob)
	for _, c := range []struct {
		tb       *tab
		user     string
		sid      string
		notTheir string
	}{{alice, "alice", aliceTabSid, bobTabSid}, {bob, "bob", bobTabSid, aliceTabSid}} {
		if owner, ok := d.ownerOf(c.sid); !ok || owner != c.user {
			t.Errorf("%s's dashboard session %s: owner %q (live %v), want %q", c.user, c.sid, owner, ok, c.user)
		}
		// Reloaded, so the list is what the server says now that both exist.
		c.tb.Do("reload "+c.user+"'s dashboard", chromedp.Reload())
		waitDashboard(t, c.tb)
		c.tb.mustWaitJS(10*time.Second, c.user+"'s list holds exactly their session",
			fmt.Sprintf(`JSON.stringify(%s) === %s`, sessionItems, js(`["`+c.sid+`"]`)), dashboardState)
	}

	// Over raw sockets through nginx, with each one's password.
	aliceChat := openChat(t, "alice's chat", n.WS("/ws/chat"), asUser(n, "alice"))
	bobChat := openChat(t, "bob's chat", n.WS("/ws/chat"), asUser(n, "bob"))
	a := aliceChat.createSession("alice's secret plans")
	word := "zanzibar" + strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
	aliceChat.mustEcho(a, word)
	// The word is searchable for alice (the store writes off the hot path).
	testkit.WaitFor(t, 10*time.Second, "alice finds her word", func() bool {
		return strings.Contains(aliceChat.rpcAnswer("session.search", map[string]any{"query": word}), a)
	})
	if ids := bobChat.listIDs(); slices.Contains(ids, a) || slices.Contains(ids, aliceTabSid) {
		t.Errorf("bob's session.list holds alice's sessions: %v", ids)
	}
	if ids := aliceChat.listIDs(); !slices.Contains(ids, a) {
		t.Errorf("alice's session.list lacks her session %s: %v", a, ids)
	}

	// Every chat method on alice's id answers as on an id nobody has
	// (only the id itself differs), and 4001 at that.
	missing := missingID()
	calls := []struct {
		method string
		params func(sid string) map[string]any
	}{
		{"session.resume", func(s string) map[string]any { return map[string]any{"session_id": s} }},
		{"session.history", func(s string) map[string]any { return map[string]any{"session_id": s} }},
		{"session.rename", func(s string) map[string]any { return map[string]any{"session_id": s, "title": "mine now"} }},
		{"prompt.submit", func(s string) map[string]any { return map[string]any{"session_id": s, "text": "hello"} }},
		{"slash.exec", func(s string) map[string]any { return map[string]any{"session_id": s, "command": "/echo hi"} }},
		{"session.interrupt", func(s string) map[string]any { return map[string]any{"session_id": s} }},
		{"session.detach", func(s string) map[string]any { return map[string]any{"session_id": s} }},
		{"session.reopen", func(s string) map[string]any { return map[string]any{"session_id": s} }},
		{"session.close", func(s string) map[string]any { return map[string]any{"session_id": s} }},
		{"session.delete", func(s string) map[string]any { return map[string]any{"session_id": s} }},
	}
	for _, c := range calls {
		theirs := bobChat.rpcAnswer(c.method, c.params(a))
		none := bobChat.rpcAnswer(c.method, c.params(missing))
		if !strings.Contains(none, `"code":4001`) {
			t.Errorf("%s of a missing id: %s, want error 4001", c.method, none)
		}
		if got := strings.ReplaceAll(theirs, a, missing); got != none {
			t.Errorf("bob's %s of alice's session answers\n  %s\nbut of a missing id\n  %s", c.method, theirs, none)
		}
	}
	// Search: alice's word is nowhere for bob, as a word nobody wrote.
	if theirs, none := bobChat.rpcAnswer("session.search", map[string]any{"query": word}),
		bobChat.rpcAnswer("session.search", map[string]any{"query": "nowhere" + missing}); theirs != none {
		t.Errorf("bob's search for alice's word answers %s, for a word nobody wrote %s", theirs, none)
	}
	// The closed list: alice's sessions are not in bob's.
	if closed := bobChat.rpcAnswer("session.list", map[string]any{"include_closed": true}); strings.Contains(closed, a) {
		t.Errorf("bob's session.list include_closed holds alice's session: %s", closed)
	}
	// Her terminal: refused as a missing id is, before the upgrade.
	bobUpgrade := mergeHeader(basicAuth("bob"), http.Header{"Origin": {n.Origin()}})
	theirs := upgradeAnswer(t, n.URL(""), "/ws/pty?session_id="+a, bobUpgrade)
	none := upgradeAnswer(t, n.URL(""), "/ws/pty?session_id="+missing, bobUpgrade)
	if strings.ReplaceAll(theirs, a, missing) != none {
		t.Errorf("bob's /ws/pty?session_id= of alice's session answers\n%s\nbut of a missing id\n%s", theirs, none)
	}
	if !strings.HasPrefix(none, "404 ") {
		t.Errorf("/ws/pty?session_id= of a missing id: %q, want 404", none)
	}
	// None of bob's attempts changed her session.
	if owner, ok := d.ownerOf(a); !ok || owner != "alice" {
		t.Fatalf("alice's session after bob's attempts: owner %q, live %v", owner, ok)
	}
	aliceChat.mustEcho(a, "still mine")

	// alice works (a terminal, a rename, a prompt); bob's socket hears
	// none of it. The barrier: bob's own rename reaches him after hers.
	alicePTY := openPTY(t, "alice's terminal", n.WS("/ws/pty?session_id="+a), asUser(n, "alice"))
	if err := alicePTY.run("echo typed-by-alice", exactly("typed-by-alice"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	aliceChat.mustCall("session.rename", map[string]any{"session_id": a, "title": "renamed by alice"}, nil)
	aliceChat.mustCall("prompt.submit", map[string]any{"session_id": a, "text": "stream me"}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := aliceChat.WaitEvent(ctx, "message.complete", a); err != nil {
		t.Fatalf("alice's prompt: %v", err)
	}
	bobOwn := bobChat.createSession("bob's own")
	bobChat.mustCall("session.rename", map[string]any{"session_id": bobOwn, "title": "bob's renamed"}, nil)
	testkit.WaitFor(t, 10*time.Second, "bob hears of his own rename", func() bool {
		for _, ev := range bobChat.Events() {
			if p := ev.Payload(); ev.Type() == "session.changed" && p["session_id"] == bobOwn && p["title"] == "bob's renamed" {
				return true
			}
		}
		return false
	})
	for _, ev := range bobChat.Events() {
		if b, _ := json.Marshal(ev); bytes.Contains(b, []byte(a)) || bytes.Contains(b, []byte(aliceTabSid)) {
			t.Errorf("bob's socket got an event of alice's session: %s", b)
		}
	}

	// carol, an admin, sees both on /admin with their users, filters by
	// user, and reaps bob's session.
	c := httpClient(t)
	res, page := get(t, c, n.URL("/admin"), mergeHeader(basicAuth("carol"), http.Header{"Accept": {"text/html"}}))
	if res.StatusCode != http.StatusOK {
		t.Fatalf("carol's /admin: %s", res.Status)
	}
	for sid, user := range map[string]string{a: "alice", bobOwn: "bob"} {
		row := adminRowHTML(page, sid)
		if row == "" {
			t.Errorf("carol's /admin has no row of %s's session %s", user, sid)
		} else if !regexp.MustCompile(`>\s*` + user + `\s*<`).MatchString(row) {
			t.Errorf("carol's /admin row of session %s does not name its user %s: %s", sid, user, row)
		}
	}
	_, filtered := get(t, c, n.URL("/admin?user=bob"), mergeHeader(basicAuth("carol"), http.Header{"Accept": {"text/html"}}))
	if adminRowHTML(filtered, bobOwn) == "" || adminRowHTML(filtered, a) != "" {
		t.Errorf("/admin?user=bob: bob's row present %v, alice's row present %v; want only bob's",
			adminRowHTML(filtered, bobOwn) != "", adminRowHTML(filtered, a) != "")
	}
	// bob is no admin.
	if res, _ := get(t, c, n.URL("/admin"), basicAuth("bob")); res.StatusCode != http.StatusForbidden {
		t.Errorf("bob's /admin: %s, want 403", res.Status)
	}
	mark := d.logMark()
	req, _ := http.NewRequest(http.MethodPost, n.URL("/admin/sessions/"+bobOwn+"/reap"), nil)
	req.Header = mergeHeader(basicAuth("carol"), http.Header{"Accept": {"application/json"}})
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("carol's reap of bob's session: %s", res.Status)
	}
	if rec, ok := d.waitLogSince(mark, 10*time.Second, func(r logRecord) bool { return r.Msg() == "admin reap" }); !ok {
		t.Errorf("no \"admin reap\" record after carol's reap; log:\n%s", d.logText())
	} else if rec.Str("level") != "INFO" || rec.Str("user") != "carol" || rec.Str("remote") == "" || rec.Str("action") == "" || !strings.Contains(rec.Str("target"), bobOwn) {
		t.Errorf("admin reap record %s, want INFO with user=carol, remote, action and target naming %s", rec, bobOwn)
	}
	if rec, ok := d.waitLogSince(mark, 10*time.Second, func(r logRecord) bool {
		return r.Msg() == "session closed" && r.Str("sid") == bobOwn
	}); !ok {
		t.Errorf("no \"session closed\" record of bob's reaped session; log:\n%s", d.logText())
	} else if rec.Str("by") != "carol" || rec.Str("user") != "bob" || rec.Str("end_reason") != "admin_reap" {
		t.Errorf("session closed record %s, want by=carol user=bob end_reason=admin_reap", rec)
	}
	if _, ok := d.ownerOf(a); !ok {
		t.Errorf("alice's session went with bob's reap")
	}
}

// mergeHeader is the union of hs.
func mergeHeader(hs ...http.Header) http.Header {
	out := http.Header{}
	for _, h := range hs {
		for k, v := range h {
			out[k] = append(out[k], v...)
		}
	}
	return out
}

// adminRowHTML is the <tr> of session sid on an /admin page, "" when none.
func adminRowHTML(page, sid string) string {
	re := regexp.MustCompile(`(?s)<tr[^>]*data-testid="session-row"[^>]*data-session-id="` + regexp.QuoteMeta(sid) + `"[^>]*>.*?</tr>`)
	return re.FindString(page)
}

// A forged X-Forwarded-User sent straight to dashgate from a peer outside
// --trusted-proxies is ignored; through the proxy, the header wins over a
// login cookie for someone else.
func TestUsersForgedHeader(t *testing.T) {
	t.Run("direct from an untrusted peer", func(t *testing.T) {
		d := startDashgate(t, "--user-header", "X-Forwarded-User", "--trusted-proxies", "10.0.0.0/8", "--admin-users", "alice")
		forged := http.Header{"X-Forwarded-User": {"alice"}, "X-Forwarded-For": {"10.1.2.3"}}
		c := clientFrom(t, "127.0.0.1")
		for _, path := range []string{"", "admin", "admin/api/sessions", "metrics"} {
			res, body := get(t, c, d.URL(path), forged)
			if res.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET /%s with a forged X-Forwarded-User from 127.0.0.1: %s, want 401 (%.200s)", path, res.Status, body)
			}
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		chat, res, err := testkit.DialChat(ctx, d.WSURL("ws/chat"), testkit.DialOptions{Header: forged})
		if err == nil {
			chat.Close()
			t.Fatalf("/ws/chat with a forged X-Forwarded-User opened")
		}
		if !isRefused(res, err, http.StatusUnauthorized) {
			t.Errorf("/ws/chat with a forged X-Forwarded-User: %v (%s), want 401", err, status(res))
		}
	})

	t.Run("through the proxy the header wins over a cookie", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "users")
		_, aliceToken := userAdd(t, file, "alice", "http://127.0.0.1/")
		d, n := startBehindAuthBasic(t, []string{"bob"}, "--users-file", file)
		d.secrets = append(d.secrets, aliceToken)

		// alice logs in straight to dashgate, on its socket, without a
		// user header (the test runs as root, dashgate's account, the one
		// other than nginx's that may connect): her token gives her the
		// login cookie.
		jar, _ := cookiejar.New(nil)
		direct := socketClient(t, d.socket())
		direct.Jar = jar
		res, _ := get(t, direct, d.socketURL("/?token="+aliceToken), http.Header{"Accept": {"text/html"}})
		if res.StatusCode != http.StatusOK {
			t.Fatalf("alice's login: %s", res.Status)
		}
		var cookie *http.Cookie
		for _, ck := range jar.Cookies(res.Request.URL) {
			if strings.HasPrefix(ck.Name, "dashgate_login_") {
				cookie = ck
			}
		}
		if cookie == nil {
			t.Fatalf("alice's login set no dashgate_login_ cookie: %v", jar.Cookies(res.Request.URL))
		}
		aliceChat := openChat(t, "alice's chat", d.socketWS("ws/chat"), testkit.DialOptions{Socket: d.socket(), Jar: jar, Origin: "http://" + socketHost})
		aliceSid := aliceChat.createSession("alice's")
		if owner, _ := d.ownerOf(aliceSid); owner != "alice" {
			t.Fatalf("alice's session is %q's, want alice's", owner)
		}

		// Through nginx with bob's password and alice's cookie: bob.
		h := mergeHeader(basicAuth("bob"), http.Header{"Cookie": {cookie.Name + "=" + cookie.Value}})
		mixed := openChat(t, "alice's cookie, bob's header", n.WS("/ws/chat"), testkit.DialOptions{Header: h, Origin: n.Origin()})
		if ids := mixed.listIDs(); slices.Contains(ids, aliceSid) {
			t.Errorf("a request with alice's cookie and bob's header lists alice's session: %v", ids)
		}
		sid := mixed.createSession("whose")
		if owner, _ := d.ownerOf(sid); owner != "bob" {
			t.Errorf("a session made with alice's cookie and bob's header is %q's, want bob's", owner)
		}
		if ans := mixed.rpcAnswer("session.resume", map[string]any{"session_id": aliceSid}); !strings.Contains(ans, `"code":4001`) {
			t.Errorf("alice's cookie with bob's header resumes alice's session: %s", ans)
		}
	})
}

// --users-file: `dashgate user add` makes a login URL that works in
// Chromium, a wrong token does not, a malformed file stops the start, a
// removed user's sockets close with 4403 at SIGHUP, and a malformed file
// on SIGHUP keeps the users as they were.
func TestUsersFile(t *testing.T) {
	dir := t.TempDir()

	t.Run("malformed at start", func(t *testing.T) {
		bad := filepath.Join(dir, "bad-users")
		good := "alice:$2a$10$" + strings.Repeat("a", 53) + "\n"
		if err := os.WriteFile(bad, []byte("# the team\n"+good+"this is not a user line\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, dashgateBin, "serve", "--addr", "127.0.0.1:0", "--state-dir", filepath.Join(t.TempDir(), "state"),
			"--token", testToken, "--users-file", bad)
		cmd.Env = testkit.CleanEnv()
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 2 {
			t.Errorf("dashgate with a malformed users file: exit %d, want 2:\n%s", code, out)
		}
		if !strings.Contains(string(out), "line 3") {
			t.Errorf("dashgate with a malformed users file does not name line 3:\n%s", out)
		}
	})

	file := filepath.Join(dir, "users")
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	aliceURL, aliceToken := userAdd(t, file, "alice", "http://"+addr+"/")
	_, bobToken := userAdd(t, file, "bob", "http://"+addr+"/")
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("users file after user add: %v %v, want mode 0600", st.Mode(), err)
	}
	if list := runUserCmd(t, 0, "list", "--users-file", file); !strings.Contains(list, "alice") || !strings.Contains(list, "bob") || strings.Contains(list, aliceToken) {
		t.Errorf("dashgate user list: %q, want alice and bob and no token", list)
	}
	d := startDashgate(t, "--users-file", file, "--addr", addr)
	d.secrets = append(d.secrets, aliceToken, bobToken)

	// The printed URL logs alice in in a browser.
	b := newBrowser(t)
	tb := b.newTab(t, "alice")
	tb.Do("open alice's login URL", chromedp.Navigate(aliceURL))
	waitDashboard(t, tb)
	sid := currentSession(t, tb)
	if owner, _ := d.ownerOf(sid); owner != "alice" {
		t.Errorf("the session of alice's login URL is %q's", owner)
	}
	if names := loginCookies(tb, d.URL("/")); len(names) != 1 {
		t.Errorf("alice's browser has login cookies %v, want one dashgate_login_<instance>", names)
	}
	if rec, ok := d.waitLog(5*time.Second, func(r logRecord) bool { return r.Msg() == "login" && r.Str("user") == "alice" }); !ok {
		t.Errorf("no INFO login record of alice")
	} else if rec.Str("level") != "INFO" || rec.Str("remote") == "" {
		t.Errorf("login record %s, want INFO with remote", rec)
	}

	// A wrong token (alice's name, another secret), and the dashboard
	// token with users on.
	c := httpClient(t)
	for what, tok := range map[string]string{
		"a wrong secret":      "alice." + strings.Repeat("0", 48),
		"an unknown user":     "mallory." + aliceToken[len("alice."):],
		"the dashboard token": testToken,
	} {
		if res, _ := get(t, c, d.URL("/?token="+tok), http.Header{"Accept": {"text/html"}}); res.StatusCode != http.StatusUnauthorized {
			t.Errorf("login with %s: %s, want 401", what, res.Status)
		}
		if _, res, err := testkit.DialChat(t.Context(), d.WSURL("ws/chat"), testkit.DialOptions{Token: tok}); !isRefused(res, err, http.StatusUnauthorized) {
			t.Errorf("/ws/chat with %s: %v (%s), want 401", what, err, status(res))
		}
	}

	// alice's and bob's sockets (tokens in the Authorization header), and
	// alice's cookie in a jar.
	jar, _ := cookiejar.New(nil)
	aliceHTTP := &http.Client{Jar: jar, Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
	t.Cleanup(aliceHTTP.CloseIdleConnections)
	if res, _ := get(t, aliceHTTP, d.URL("/?token="+aliceToken), http.Header{"Accept": {"text/html"}}); res.StatusCode != http.StatusOK {
		t.Fatalf("alice's login with a jar: %s", res.Status)
	}
	aliceChat := openChat(t, "alice's chat", d.WSURL("ws/chat"), testkit.DialOptions{Token: aliceToken})
	as := aliceChat.createSession("alice's")
	aliceChat.mustEcho(as, "hello")
	alicePTY := openPTY(t, "alice's terminal", d.WSURL("ws/pty?session_id="+as), testkit.DialOptions{Token: aliceToken})
	bobChat := openChat(t, "bob's chat", d.WSURL("ws/chat"), testkit.DialOptions{Token: bobToken})
	bs := bobChat.createSession("bob's")
	bobPTY := openPTY(t, "bob's terminal", d.WSURL("ws/pty?session_id="+bs), testkit.DialOptions{Token: bobToken})

	// alice is removed; SIGHUP reloads the file.
	runUserCmd(t, 0, "remove", "alice", "--users-file", file)
	if err := syscall.Kill(d.PID(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for what, conn := range map[string]*testkit.Conn{"alice's chat": aliceChat.Conn, "alice's terminal": alicePTY.Conn} {
		code, reason := closeStatus(t, conn, what+" after alice was removed")
		if code != 4403 || reason != "access revoked: user removed" {
			t.Errorf("%s after alice was removed: closed %d %q, want 4403 \"access revoked: user removed\"", what, code, reason)
		}
	}
	if res, _ := get(t, aliceHTTP, d.URL("/"), http.Header{"Accept": {"text/html"}}); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("alice's cookie after she was removed: %s, want 401", res.Status)
	}
	if _, res, err := testkit.DialChat(t.Context(), d.WSURL("ws/chat"), testkit.DialOptions{Token: aliceToken}); !isRefused(res, err, http.StatusUnauthorized) {
		t.Errorf("alice's token after she was removed: %v (%s), want 401", err, status(res))
	}
	testkit.WaitFor(t, 10*time.Second, "alice's session detached", func() bool {
		for _, s := range d.adminSessions() {
			if s.SessionID == as {
				return s.State == "detached"
			}
		}
		return false
	})
	bobChat.mustEcho(bs, "bob goes on")
	if err := bobPTY.run("echo bob-types", exactly("bob-types"), 10*time.Second); err != nil {
		t.Errorf("bob's terminal after alice was removed: %v", err)
	}

	// A malformed file on SIGHUP: one ERROR, bob stays.
	f, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("not:a:user line\n")
	f.Close()
	mark := d.logMark()
	if err := syscall.Kill(d.PID(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	rec, ok := d.waitLogSince(mark, 10*time.Second, func(r logRecord) bool { return r.Str("level") == "ERROR" })
	if !ok {
		t.Fatalf("no ERROR after SIGHUP with a malformed users file; log:\n%s", d.logText())
	}
	d.allowErrors = append(d.allowErrors, rec.Msg())
	bobChat.mustEcho(bs, "bob still here")
	again := openChat(t, "bob's second chat", d.WSURL("ws/chat"), testkit.DialOptions{Token: bobToken})
	again.mustEcho(again.createSession("again"), "yes")
	var errs []string
	for _, r := range d.Log.Records("")[mark:] {
		if r.Str("level") == "ERROR" {
			errs = append(errs, r.String())
		}
	}
	if len(errs) != 1 {
		t.Errorf("a malformed users file on SIGHUP logged %d ERROR records, want 1: %v", len(errs), errs)
	}
}

// --max-sessions-per-user caps one user, not another; every session and
// worker record carries user; /metrics has no user label.
func TestUsersCapsAndRecords(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "users")
	_, aliceToken := userAdd(t, file, "alice", "http://127.0.0.1/")
	_, bobToken := userAdd(t, file, "bob", "http://127.0.0.1/")
	d := startDashgate(t, "--users-file", file, "--max-sessions-per-user", "2")
	d.secrets = append(d.secrets, aliceToken, bobToken)

	alice := openChat(t, "alice's chat", d.WSURL("ws/chat"), testkit.DialOptions{Token: aliceToken})
	bob := openChat(t, "bob's chat", d.WSURL("ws/chat"), testkit.DialOptions{Token: bobToken})
	a1, a2 := alice.createSession("a1"), alice.createSession("a2")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := alice.CreateSession(ctx, "a3")
	var rpc *testkit.RPCError
	if !errors.As(err, &rpc) || rpc.Code != 4029 || !strings.Contains(rpc.Message, "--max-sessions-per-user") {
		t.Errorf("alice's third session: %v, want error 4029 naming --max-sessions-per-user", err)
	}
	b1 := bob.createSession("b1")

	// Workers and terminals of both, then everything closed.
	for _, s := range []struct {
		c   *chatConn
		tok string
		sid string
	}{{alice, aliceToken, a1}, {alice, aliceToken, a2}, {bob, bobToken, b1}} {
		s.c.mustEcho(s.sid, "work")
		p := openPTY(t, "terminal of "+s.sid, d.WSURL("ws/pty?session_id="+s.sid), testkit.DialOptions{Token: s.tok})
		if err := p.run("echo pty-"+s.sid[:6], exactly("pty-"+s.sid[:6]), 10*time.Second); err != nil {
			t.Fatal(err)
		}
		p.Close()
		s.c.mustCall("session.close", map[string]any{"session_id": s.sid}, nil)
	}
	owners := map[string]string{a1: "alice", a2: "alice", b1: "bob"}
	testkit.WaitFor(t, 10*time.Second, "three session closed records", func() bool {
		return len(d.Log.Records("session closed")) >= 3
	})
	testkit.WaitFor(t, 10*time.Second, "six worker closed records of the three sessions", func() bool {
		n := 0
		for _, r := range d.Log.Records("worker closed") {
			if _, ok := owners[r.Str("sid")]; ok {
				n++
			}
		}
		return n >= 6
	})

	// /metrics (the admin token) has no label named user.
	req, _ := http.NewRequest(http.MethodGet, d.URL("metrics"), nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	res, err := httpClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", res.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	if len(families) == 0 {
		t.Fatal("/metrics has no metric")
	}
	for name, fam := range families {
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "user" {
					t.Errorf("/metrics: %s has a label user=%q", name, l.GetValue())
				}
			}
		}
	}

	// Stopped, so that every record (spares, shutdown) is in.
	d.stop()
	for _, msg := range []string{"session closed", "worker closed"} {
		for _, r := range d.Log.Records(msg) {
			u, ok := r["user"].(string)
			if !ok {
				t.Errorf("%s record without user: %s", msg, r)
				continue
			}
			if want, known := owners[r.Str("sid")]; known && u != want {
				t.Errorf("%s record of %s's session with user=%q: %s", msg, want, u, r)
			}
		}
	}
}

// Two dashgates on one host (one host name, two ports), logged in in one
// browser: each keeps its login when the other is logged in to.
func TestUsersTwoInstancesKeepLogins(t *testing.T) {
	dir := t.TempDir()
	type instance struct {
		d     *dashgate
		login string
	}
	var in [2]instance
	for i := range in {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		file := filepath.Join(dir, fmt.Sprintf("users-%d", i))
		login, tok := userAdd(t, file, "alice", "http://"+addr+"/")
		in[i].d = startDashgate(t, "--users-file", file, "--addr", addr)
		in[i].d.secrets = append(in[i].d.secrets, tok)
		in[i].login = login
	}
	b := newBrowser(t)
	tb := b.newTab(t, "both")
	for i := range in {
		tb.Do(fmt.Sprintf("log in to instance %d", i), chromedp.Navigate(in[i].login))
		waitDashboard(t, tb)
	}
	names := loginCookies(tb, in[0].d.URL("/"))
	if len(names) != 2 || names[0] == names[1] {
		t.Errorf("after logging in to both: login cookies %v, want two of different names", names)
	}
	for i := range in {
		tb.Do(fmt.Sprintf("open instance %d again", i), chromedp.Navigate(in[i].d.URL("/")))
		if err := tb.waitJS(15*time.Second, fmt.Sprintf("instance %d's dashboard still logged in", i), dashboardReady, dashboardState); err != nil {
			t.Error(err)
		}
	}
}
