package e2e_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"

	"github.com/dashgate/dashgate/internal/testkit"
)

// The helpers of the many-user tests (issue 24).

// password is the basic-auth password of user in the htpasswd of a test.
func password(user string) string { return "pw-" + user + "-7c1e" }

// basicAuth is the Authorization header a browser sends for user.
func basicAuth(user string) http.Header {
	cred := base64.StdEncoding.EncodeToString([]byte(user + ":" + password(user)))
	return http.Header{"Authorization": {"Basic " + cred}}
}

// writeHtpasswd writes path with one apr1 (openssl passwd -apr1) line per
// user, each with password(user).
func writeHtpasswd(t *testing.T, path string, users ...string) {
	t.Helper()
	var b strings.Builder
	for _, u := range users {
		out, err := exec.Command("openssl", "passwd", "-apr1", password(u)).Output()
		if err != nil {
			t.Fatalf("openssl passwd -apr1: %v", err)
		}
		fmt.Fprintf(&b, "%s:%s\n", u, strings.TrimSpace(string(out)))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// startBehindAuthBasic starts dashgate exactly as
// deploy/nginx/dashgate-auth-basic.conf says to run it (the flags of its
// comment: --user-header X-Forwarded-User --addr unix:<socket>
// --proxy-user www-data, the file's socket moved into a temp dir every
// account may enter, where dashgate makes the socket's directory as it
// would make /run/dashgate), then extra, and nginx on that very file in
// front of it, its workers as www-data, with an htpasswd (in nginx's
// configuration directory, where the file's relative auth_basic_user_file
// points) holding users. nginx reads it at every request, so it is
// written once nginx runs. dashgate is reachable only through nginx and,
// for the test (root), on its socket: d.socketURL, d.getJSON.
func startBehindAuthBasic(t *testing.T, users []string, extra ...string) (*dashgate, *nginx) {
	t.Helper()
	requireNginx(t)
	testkit.RequireRoot(t, "dashgate's socket for nginx's workers (chown to www-data's group, nginx's user www-data)")
	socket := filepath.Join(dirForAll(t, "dashgate-run-"), "dashgate", "dashgate.sock")
	const file = "dashgate-auth-basic.conf"
	d := startDashgate(t, append(deployRunFlags(t, file, socket), extra...)...)
	n := startNginx(t, nginxSite{file: file, socket: socket})
	writeHtpasswd(t, filepath.Join(n.dir, "dashgate.htpasswd"), users...)
	return d, n
}

// deployRunFlags are the dashgate flags deploy/nginx/<file> tells to run
// with (its one comment line that starts with --user-header), the file's
// socket replaced by socket.
func deployRunFlags(t *testing.T, file, socket string) []string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "nginx", file))
	if err != nil {
		t.Fatal(err)
	}
	lines := regexp.MustCompile(`(?m)^#\s+(--user-header\s.*)$`).FindAllStringSubmatch(string(b), -1)
	if len(lines) != 1 {
		t.Fatalf("deploy/nginx/%s: %d comment lines of flags starting with --user-header, want one", file, len(lines))
	}
	flags := strings.Fields(strings.ReplaceAll(lines[0][1], deploySocket, socket))
	if !slices.Contains(flags, "unix:"+socket) {
		t.Fatalf("deploy/nginx/%s: its flags %q do not listen on %s", file, lines[0][1], deploySocket)
	}
	return flags
}

// asUser is how user's browser opens sockets through the auth_basic nginx
// n: with the password and the page's Origin (in header mode the header is
// an ambient credential, like a cookie: an upgrade without Origin is
// refused).
func asUser(n *nginx, user string) testkit.DialOptions {
	return testkit.DialOptions{Header: basicAuth(user), Origin: n.Origin()}
}

// userSession is a row of /admin/api/sessions or of session.list with its
// owner (PROTOCOL.md "Users").
type userSession struct {
	SessionID string `json:"session_id"`
	State     string `json:"state"`
	User      string `json:"user"`
}

// adminSessions lists the live sessions with their owners (admin token).
func (d *dashgate) adminSessions() []userSession {
	d.t.Helper()
	var r struct {
		Sessions []userSession `json:"sessions"`
	}
	if err := d.getJSON("admin/api/sessions", &r); err != nil {
		d.t.Fatalf("list sessions: %v", err)
	}
	return r.Sessions
}

// ownerOf is the user adminSessions names for sid; ok is false when sid
// is not live.
func (d *dashgate) ownerOf(sid string) (user string, ok bool) {
	for _, s := range d.adminSessions() {
		if s.SessionID == sid {
			return s.User, true
		}
	}
	return "", false
}

// listIDs is the session ids of session.list on c.
func (c *chatConn) listIDs() []string {
	c.t.Helper()
	var r struct {
		Sessions []userSession `json:"sessions"`
	}
	c.mustCall("session.list", map[string]any{}, &r)
	var ids []string
	for _, s := range r.Sessions {
		ids = append(ids, s.SessionID)
	}
	return ids
}

// missingID is a session id in dashgate's format (24 hex digits) that no
// session has.
func missingID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// rpcAnswer is the whole answer of a call as JSON: the error object
// ({"code","message","data"}) of an error reply, else {"result": ...}.
func (c *chatConn) rpcAnswer(method string, params any) string {
	c.t.Helper()
	var res json.RawMessage
	err := c.call(method, params, &res)
	var rpc *testkit.RPCError
	switch {
	case err == nil:
		return `{"result":` + string(res) + `}`
	case errors.As(err, &rpc):
		b, _ := json.Marshal(rpc)
		return string(b)
	default:
		c.t.Fatalf("%s: %s: %v", c.name, method, err)
		return ""
	}
}

// upgradeAnswer sends a WebSocket upgrade of path to base (http://host)
// with header and returns the refusal as text: its status, Content-Type
// and body. An upgrade that succeeds fails the test (it is closed).
func upgradeAnswer(t *testing.T, base, path string, header http.Header) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	var key [16]byte
	rand.Read(key[:])
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", base64.StdEncoding.EncodeToString(key[:]))
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("upgrade %s: %v", path, err)
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusSwitchingProtocols {
		t.Fatalf("upgrade %s: 101: the socket opened", path)
	}
	body, _ := io.ReadAll(res.Body)
	return fmt.Sprintf("%d %s\n%s", res.StatusCode, res.Header.Get("Content-Type"), body)
}

// closeStatus waits up to 10 s for conn to end and returns its close code
// and reason (-1 and the error when it ended without a close frame).
func closeStatus(t *testing.T, conn *testkit.Conn, what string) (websocket.StatusCode, string) {
	t.Helper()
	select {
	case <-conn.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: still open 10s later", what)
	}
	var ce websocket.CloseError
	if errors.As(conn.Err(), &ce) {
		return ce.Code, ce.Reason
	}
	return -1, fmt.Sprint(conn.Err())
}

// userAdd runs `dashgate user add name --users-file file --url u` and
// returns the login URL it printed and the token in it.
func userAdd(t *testing.T, file, name, u string) (loginURL, token string) {
	t.Helper()
	out := runUserCmd(t, 0, "add", name, "--users-file", file, "--url", u)
	m := regexp.MustCompile(`https?://\S+`).FindString(out)
	if m == "" {
		t.Fatalf("dashgate user add %s printed no URL:\n%s", name, out)
	}
	pu, err := url.Parse(m)
	if err != nil {
		t.Fatalf("dashgate user add %s printed %q: %v", name, m, err)
	}
	token = pu.Query().Get("token")
	if !regexp.MustCompile(`^` + regexp.QuoteMeta(name) + `\.[0-9a-f]{48}$`).MatchString(token) {
		t.Fatalf("dashgate user add %s: login URL %s carries token %q, want %s.<48 lowercase hex>", name, m, token, name)
	}
	return m, token
}

// runUserCmd runs `dashgate user args...`, wants exit code want and
// returns what it printed (stdout and stderr).
func runUserCmd(t *testing.T, want int, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, dashgateBin, append([]string{"user"}, args...)...)
	cmd.Env = testkit.CleanEnv()
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != want {
		t.Fatalf("dashgate user %s: exit %d (%v), want %d:\n%s", strings.Join(args, " "), code, err, want, out)
	}
	return string(out)
}

// contextTab opens a tab in a browser context of its own (its own cookies
// and cache, as another person's browser), sending header with every
// request when not nil. It closes with the test, like newTab's.
func (b *browser) contextTab(t *testing.T, name string, header http.Header) *tab {
	t.Helper()
	tb := &tab{t: t, name: name}
	tb.ctx, tb.cancel = chromedp.NewContext(b.ctx, chromedp.WithNewBrowserContext(), chromedp.WithListener(tb.listen))
	if err := chromedp.Do(tb.ctx); err != nil {
		t.Fatalf("open tab %s: %v", name, err)
	}
	t.Cleanup(func() {
		if tb.closed {
			return
		}
		if t.Failed() {
			tb.saveArtifacts()
		}
		tb.cancel()
	})
	if header != nil {
		h := network.Headers{}
		for k, v := range header {
			h[k] = strings.Join(v, ", ")
		}
		if _, err := chromedp.Call(tb.ctx, network.Enable, network.EnableParams{}); err != nil {
			t.Fatalf("tab %s: network.enable: %v", name, err)
		}
		if _, err := chromedp.Call(tb.ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: h}); err != nil {
			t.Fatalf("tab %s: network.setExtraHTTPHeaders: %v", name, err)
		}
	}
	return tb
}

// loginCookies are the names of the tab's cookies for u that start with
// dashgate_login_.
func loginCookies(tb *tab, u string) []string {
	tb.t.Helper()
	res, err := chromedp.Call(tb.ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{u}})
	if err != nil {
		tb.t.Fatalf("cookies of tab %s: %v", tb.name, err)
	}
	var names []string
	for _, c := range res.Cookies {
		if strings.HasPrefix(c.Name, "dashgate_login_") {
			names = append(names, c.Name)
		}
	}
	return names
}

// sessionItems is the ids of the dashboard's session list.
const sessionItems = `[...document.querySelectorAll('[data-testid="session-item"]')].map(e => e.dataset.sessionId)`
