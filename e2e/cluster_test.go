package e2e_test

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
)

// kill ends dashgate with SIGKILL, as a crash or the OOM killer would; its
// cleanup then checks only that every child it had died with it
// (Pdeathsig, the worker's parent watchdog).
func (d *dashgate) kill() {
	d.t.Helper()
	d.Workers()
	d.rememberTree()
	d.killed = true
	d.Kill()
}

// checkKilled is the cleanup of a killed dashgate: nothing it started may
// still run. Their zombies (reparented to the test process, a subreaper)
// are reaped by the next reapOrphans.
func (d *dashgate) checkKilled() {
	t := d.t
	d.mu.Lock()
	seen := maps.Clone(d.seen)
	d.mu.Unlock()
	var left []string
	var marked []testkit.Proc
	testkit.Until(5*time.Second, func() bool {
		left = left[:0]
		for pid, start := range seen {
			if alive(pid, start) {
				left = append(left, testkit.Describe(pid))
			}
		}
		marked, _ = d.Procs()
		for _, p := range marked {
			if _, known := seen[p.PID]; !known {
				left = append(left, testkit.Describe(p.PID))
			}
		}
		return len(left) == 0
	})
	removeInstanceCgroups(t, d.ID) // a restart on its state dir would sweep them; none comes
	if len(left) > 0 {
		slices.Sort(left)
		t.Errorf("processes of the killed dashgate still running 5s after it died: %s", strings.Join(left, ", "))
		for pid, start := range seen {
			if alive(pid, start) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		for _, p := range marked {
			syscall.Kill(p.PID, syscall.SIGKILL)
		}
	}
}

// clusterClient is one browser of the cluster test: an HTTP client with a
// cookie jar, routed by nginx to the instance its dashgate_node cookie
// names (deploy/nginx/dashgate-cluster.conf).
type clusterClient struct {
	name   string
	client *http.Client
	node   string // the instance that served its dashboard
	cookie string // its dashgate_node cookie
}

var nodeMeta = regexp.MustCompile(`<span class="meta" title="node">([^<]*)</span>`)

// loginCluster logs a new browser in through nginx (?token=, following the
// redirect with its cookies) and reports which instance served the
// dashboard.
func loginCluster(t *testing.T, n *nginx, name string) *clusterClient {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &clusterClient{name: name, client: &http.Client{Jar: jar, Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}}
	t.Cleanup(c.client.CloseIdleConnections)
	res, body := get(t, c.client, n.URL("/?token="+testToken), http.Header{"Accept": {"text/html"}})
	if res.StatusCode != http.StatusOK || res.Request.URL.RawQuery != "" {
		t.Fatalf("%s: login through nginx ended at %s with %s, want 200 at / without the token", name, res.Request.URL, res.Status)
	}
	m := nodeMeta.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("%s: the dashboard names no node", name)
	}
	c.node = m[1]
	for _, ck := range jar.Cookies(res.Request.URL) {
		if ck.Name == "dashgate_node" {
			c.cookie = ck.Value
		}
	}
	if c.cookie == "" {
		t.Fatalf("%s: no dashgate_node cookie after login; cookies: %v", name, jar.Cookies(res.Request.URL))
	}
	return c
}

// loginPinned logs browsers in through nginx until one is served, and
// so pinned, by node (nginx sends a browser without the dashgate_node
// cookie round-robin); a browser served by a node not in nodes fails the
// test, and so do 30 logins none pinned to node.
func loginPinned(t *testing.T, n *nginx, name, node string, nodes ...string) *clusterClient {
	t.Helper()
	for range 30 {
		l := loginCluster(t, n, name)
		if l.node == node {
			return l
		}
		if len(nodes) > 0 && !slices.Contains(nodes, l.node) {
			t.Fatalf("%s served by unknown node %q", name, l.node)
		}
	}
	t.Fatalf("30 logins through nginx, none served by node %s", node)
	return nil
}

// ws is how this browser opens a WebSocket: its cookies, its page's origin.
func (c *clusterClient) ws(n *nginx) testkit.DialOptions {
	return testkit.DialOptions{Origin: n.Origin(), Jar: c.client.Jar}
}

// Case 6: two instances behind deploy/nginx/dashgate-cluster.conf. A
// browser gets a dashgate_node cookie and its sessions stay on one instance
// across reconnects; killing the other instance leaves them working; a
// browser pinned to the killed instance is moved to the live one, which
// re-pins it (its cookie then names the live instance).
func TestClusterKeepsBrowserOnItsInstance(t *testing.T) {
	requireNginx(t)
	// --trusted-proxies: the browser's Origin carries nginx's port, which
	// only X-Forwarded-Host tells dashgate (Host is nginx's $host).
	inst := map[string]*dashgate{
		"a": startDashgate(t, "--node-id", "a", "--trusted-proxies", "127.0.0.1/32"),
		"b": startDashgate(t, "--node-id", "b", "--trusted-proxies", "127.0.0.1/32"),
	}
	n := startNginx(t, nginxSite{file: "dashgate-cluster.conf", upstreams: []string{inst["a"].Addr, inst["b"].Addr}})
	other := map[string]string{"a": "b", "b": "a"}

	// Browsers log in until one is pinned to each instance (nginx sends a
	// browser without the cookie round-robin).
	pinned := map[string]*clusterClient{}
	for i := 0; len(pinned) < 2; i++ {
		if i == 30 {
			t.Fatalf("30 browsers all pinned to %v: the dashgate_node cookie does not spread them", pinned)
		}
		c := loginCluster(t, n, fmt.Sprintf("browser-%d", i))
		if inst[c.node] == nil {
			t.Fatalf("%s served by unknown node %q", c.name, c.node)
		}
		if prev := pinned[c.node]; prev == nil {
			pinned[c.node] = c
		}
	}
	p, q := pinned["a"], pinned["b"] // p keeps its instance, q's is killed
	home, dead := inst[p.node], inst[q.node]
	t.Logf("%s (cookie %s) on %s, %s (cookie %s) on %s", p.name, p.cookie, p.node, q.name, q.cookie, q.node)

	// onlyOn checks that sids are listed by the instance of node and not by
	// the other one.
	onlyOn := func(when, node string, sids ...string) {
		t.Helper()
		for _, sid := range sids {
			if _, ok := inst[node].Session(sid); !ok {
				t.Errorf("%s: session %s not listed by instance %s", when, sid, node)
			}
			if o := inst[other[node]]; !o.killed {
				if _, ok := o.Session(sid); ok {
					t.Errorf("%s: session %s listed by instance %s too", when, sid, other[node])
				}
			}
		}
	}
	resume := func(chat *chatConn, sids ...string) {
		t.Helper()
		for _, sid := range sids {
			var r struct {
				SessionID string `json:"session_id"`
				State     string `json:"state"`
			}
			chat.mustCall("session.resume", map[string]any{"session_id": sid}, &r)
			if r.SessionID != sid {
				t.Fatalf("%s: session.resume %s answered %+v", chat.name, sid, r)
			}
		}
	}

	chat := openChat(t, p.name+" chat", n.WS("/ws/chat"), p.ws(n))
	s1, s2 := chat.createSession("one"), chat.createSession("two")
	chat.mustEcho(s1, "one")
	chat.mustEcho(s2, "two")
	onlyOn("after create", p.node, s1, s2)
	for i := 1; i <= 5; i++ {
		chat.Close()
		chat = openChat(t, fmt.Sprintf("%s chat %d", p.name, i), n.WS("/ws/chat"), p.ws(n))
		resume(chat, s1, s2)
		chat.mustEcho(s1, fmt.Sprintf("again-%d", i))
		onlyOn(fmt.Sprintf("reconnect %d", i), p.node, s1, s2)
	}

	qchat := openChat(t, q.name+" chat", n.WS("/ws/chat"), q.ws(n))
	qs := qchat.createSession("q")
	qchat.mustEcho(qs, "q")
	onlyOn("q's session", q.node, qs)

	dead.kill()
	select {
	case <-qchat.Done():
	case <-time.After(5 * time.Second):
		t.Errorf("%s's socket to the killed instance is still open 5s after the kill", q.name)
	}

	// p's open socket and p's next connection keep working on home.
	chat.mustEcho(s1, "after-kill")
	chat.Close()
	chat = openChat(t, p.name+" chat after the kill", n.WS("/ws/chat"), p.ws(n))
	resume(chat, s1, s2)
	chat.mustEcho(s2, "after-kill")
	onlyOn("after the kill", p.node, s1, s2)

	// q is moved to the live instance on its next connection.
	qchat = openChat(t, q.name+" chat after the kill", n.WS("/ws/chat"), q.ws(n))
	moved := qchat.createSession("moved")
	qchat.mustEcho(moved, "moved")
	if _, ok := home.Session(moved); !ok {
		t.Errorf("%s's new session %s is not on the live instance %s", q.name, moved, p.node)
	}
	if got := nodeCookie(q, n); !strings.HasPrefix(got, p.node+".") {
		t.Errorf("%s's dashgate_node cookie after the live instance served it: %q, want %s.<random>", q.name, got, p.node)
	}
}

// nodeCookie is the browser's dashgate_node cookie for nginx's URLs.
func nodeCookie(c *clusterClient, n *nginx) string {
	u, err := url.Parse(n.URL("/"))
	if err != nil {
		panic(err)
	}
	for _, ck := range c.client.Jar.Cookies(u) {
		if ck.Name == "dashgate_node" {
			return ck.Value
		}
	}
	return ""
}
