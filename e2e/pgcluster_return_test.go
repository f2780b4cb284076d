package e2e_test

import (
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
)

// startLeasedNode starts one node of a PostgreSQL cluster like startNode
// (store, node id, the suite's token, state directory, and addr when not
// empty), with extra flags after those (--node-expiry, --node-heartbeat).
func startLeasedNode(t *testing.T, storeURL, id, state, addr string, extra ...string) *dashgate {
	t.Helper()
	args := []string{
		"--worker-grace", workerGrace.String(),
		"--log-level", "debug",
		"--pty-cmd", "/bin/bash --noprofile --norc",
		"--store", storeURL,
		"--node-id", id,
		"--trusted-proxies", "127.0.0.1/32",
		"--state-dir", state,
	}
	if addr != "" {
		args = append(args, "--addr", addr)
	}
	args = append(args, extra...)
	return launch(t, testkit.Options{Sub: "serve", Dir: t.TempDir(), Args: args})
}

// Issue 26: a browser that failed over stays with its sessions. A browser
// pinned to node a makes a session with a history entry; a is killed
// (SIGKILL); once a's lease lapsed the browser resumes the session on b,
// which adopts it and re-pins the browser (its dashgate_node cookie now
// names b). Node a comes back on its address and state directory and nginx
// routes a-cookies to it again; the browser's next page load and chat
// socket still go to b, where session.resume answers the session with its
// whole history. (Routed by the old cookie, the browser would reach a,
// which answers the session b holds as missing.)
func TestPostgresClusterBrowserStaysAfterNodeReturns(t *testing.T) {
	if os.Getenv(testkit.EnvE2E) != "1" {
		t.Skip("waits for a killed node's lease to lapse: set DASHGATE_E2E=1 to run it")
	}
	requireNginx(t)
	storeURL := testkit.Postgres(t)
	flags := []string{"--node-expiry", "3s", "--node-heartbeat", "1s"}
	stateA := filepath.Join(t.TempDir(), "state-a")
	a := startLeasedNode(t, storeURL, "a", stateA, "", flags...)
	b := startLeasedNode(t, storeURL, "b", filepath.Join(t.TempDir(), "state-b"), "", flags...)
	n := startNginx(t, nginxSite{file: "dashgate-cluster.conf", upstreams: []string{a.Addr, b.Addr}})

	// A browser pinned to a (nginx sends browsers without the cookie
	// round-robin).
	c := loginPinned(t, n, "browser", "a", "a", "b")
	if !strings.HasPrefix(c.cookie, "a.") {
		t.Fatalf("the browser node a served has the cookie %q, want a.<random>", c.cookie)
	}

	chat := openChat(t, "chat to a", n.WS("/ws/chat"), c.ws(n))
	sid := chat.createSession("return")
	chat.mustEcho(sid, "hello")
	if _, ok := a.Session(sid); !ok {
		t.Fatalf("session %s is not on node a, the node its browser is pinned to", sid)
	}
	// Wait for the journal, so the kill tests the routing, not the
	// write-behind window.
	testkit.WaitFor(t, 10*time.Second, "node a's session row and its two entries in PostgreSQL", func() bool {
		row, err := storedSession(t, storeURL, sid)
		return err == nil && row.node == "a" && row.entries == 2
	})
	a.kill()
	select {
	case <-chat.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the socket to the killed node a is still open 5 s after the kill")
	}

	// nginx fails the browser over to b; b adopts the session once a's
	// lease lapsed.
	chat = openChat(t, "chat after the kill", n.WS("/ws/chat"), c.ws(n))
	var lastErr error
	if !testkit.Until(leaseDeadline, func() bool {
		lastErr = chat.call("session.resume", map[string]any{"session_id": sid}, nil)
		return lastErr == nil
	}) {
		t.Fatalf("session.resume %s on b: not within %v of a's death: last answer %v; node b:\n%s", sid, leaseDeadline, lastErr, b.logText())
	}
	if _, ok := b.Session(sid); !ok {
		t.Fatalf("session %s resumed through nginx is not on node b", sid)
	}
	chat.mustEcho(sid, "on b")
	chat.Close()
	// The socket that resumed was opened before a counted as gone (b keeps
	// a cookie naming a live node); the dashboard's request after a
	// resume (GET healthz, static/js/app.js) is the first b serves once
	// a's heartbeat is older than --node-expiry minus --node-heartbeat,
	// which is before a's lease lapsed: it re-pins.
	if res, _ := get(t, c.client, n.URL("/healthz"), nil); res.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz after the resume: %s", res.Status)
	}
	if got := nodeCookie(c, n); !strings.HasPrefix(got, "b.") {
		t.Errorf("the browser's dashgate_node cookie after node b served it: %q, want b.<random>", got)
	}
	if rec, ok := b.waitLog(5*time.Second, func(r logRecord) bool { return r.Msg() == "node cookie re-pinned" }); !ok {
		t.Errorf("node b logged no \"node cookie re-pinned\":\n%s", b.logText())
	} else if rec.Str("from_node") != "a" || rec.Str("level") != "DEBUG" {
		t.Errorf("node b's re-pin record: %s, want DEBUG with from_node=a", rec)
	}

	// Node a comes back. A probe browser whose cookie names a shows when
	// nginx routes a's browsers to a again (after fail_timeout).
	a = startLeasedNode(t, storeURL, "a", stateA, a.Addr, flags...)
	probe := probeClient(t, n, "a.0000000000000000")
	testkit.WaitFor(t, 15*time.Second, "nginx routing a browser with an a-cookie to node a again", func() bool {
		return servedBy(t, probe, n, testToken) == "a"
	})

	// The browser's next page load and chat socket go to b, which holds
	// its session.
	if node := servedBy(t, c.client, n, ""); node != "b" {
		t.Errorf("the browser's page load after node a returned was served by %q, want b (cookie %q)", node, nodeCookie(c, n))
	}
	back := openChat(t, "chat after a returned", n.WS("/ws/chat"), c.ws(n))
	var resumed struct {
		SessionID string        `json:"session_id"`
		History   []historyLine `json:"history"`
	}
	if err := back.call("session.resume", map[string]any{"session_id": sid}, &resumed); err != nil {
		t.Fatalf("session.resume %s after node a returned: %v (browser's cookie %q)", sid, err, nodeCookie(c, n))
	}
	want := []historyLine{{"user", "/echo hello"}, {"assistant", "hello"}, {"user", "/echo on b"}, {"assistant", "on b"}}
	if resumed.SessionID != sid || !slices.Equal(resumed.History, want) {
		t.Errorf("session.resume %s after node a returned: session %q, history %+v, want %+v", sid, resumed.SessionID, resumed.History, want)
	}
	back.mustEcho(sid, "still b")
	back.Close()
	if _, ok := b.Session(sid); !ok {
		t.Errorf("session %s left node b when node a returned", sid)
	}
	if _, ok := a.Session(sid); ok {
		t.Errorf("node a, started again, lists session %s that node b holds", sid)
	}
}

// probeClient is a client whose jar holds only a dashgate_node cookie of
// that value, for good (servedBy logs it in with a bearer token).
func probeClient(t *testing.T, n *nginx, value string) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(n.URL("/"))
	if err != nil {
		t.Fatal(err)
	}
	jar.SetCookies(u, []*http.Cookie{{Name: "dashgate_node", Value: value, Path: "/"}})
	c := &http.Client{Jar: noSetCookies{jar}, Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// noSetCookies is a jar that keeps its cookies: a probe's cookie must not
// be re-pinned by the node that answers it.
type noSetCookies struct{ http.CookieJar }

func (noSetCookies) SetCookies(*url.URL, []*http.Cookie) {}

// servedBy loads the dashboard through nginx with client's cookies (and,
// when bearer is not empty, that token: the suite's or a user's, for a
// client without a login cookie) and returns the node that served it, ""
// if none did.
func servedBy(t *testing.T, client *http.Client, n *nginx, bearer string) string {
	t.Helper()
	h := http.Header{"Accept": {"text/html"}}
	if bearer != "" {
		h.Set("Authorization", "Bearer "+bearer)
	}
	res, body := get(t, client, n.URL("/"), h)
	m := nodeMeta.FindStringSubmatch(body)
	if res.StatusCode != http.StatusOK || m == nil {
		return ""
	}
	return m[1]
}
