package e2e_test

import (
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
)

// TestClusterLoginOnEveryNode (issue 41): with --users-file, a login made
// on node a is valid on node b of the same cluster (one PostgreSQL): its
// cookie's name and key are the cluster's, so b serves the dashboard and
// the chat socket to it, no token asked. A dashgate of another store on
// the same host does not take it. Once alice is removed from the users
// file (and b rereads it, SIGHUP), her cookie fails on b as well.
func TestClusterLoginOnEveryNode(t *testing.T) {
	storeURL := testkit.Postgres(t)
	file := filepath.Join(t.TempDir(), "users")
	loginURL, _ := userAdd(t, file, "alice", "http://127.0.0.1/")
	node := func(id string, store string) *dashgate {
		return launch(t, testkit.Options{Sub: "serve", Dir: t.TempDir(), Args: []string{
			"--worker-grace", workerGrace.String(), "--log-level", "debug",
			"--store", store, "--node-id", id, "--users-file", file,
			"--state-dir", filepath.Join(t.TempDir(), "state-"+id),
		}})
	}
	a, b := node("a", storeURL), node("b", storeURL)
	other := launch(t, testkit.Options{Sub: "serve", Dir: t.TempDir(), Args: []string{
		"--worker-grace", workerGrace.String(), "--users-file", file, "--state-dir", filepath.Join(t.TempDir(), "state-other"),
	}})

	// Log in on a: the login URL's token for a cookie.
	lu, err := url.Parse(loginURL)
	if err != nil {
		t.Fatal(err)
	}
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Jar: jar, Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
	t.Cleanup(client.CloseIdleConnections)
	html := http.Header{"Accept": {"text/html"}}
	if res, _ := get(t, client, a.URL("/?"+lu.RawQuery), html); res.StatusCode != http.StatusOK {
		t.Fatalf("login on a: %s", res.Status)
	}
	cookies := jar.Cookies(mustURL(t, a.URL("/")))
	if len(cookies) == 0 {
		t.Fatal("no login cookie from a")
	}
	// One browser, one host: what a set is what it sends to b and other
	// (cookies are per host, not per port).
	for _, d := range []*dashgate{b, other} {
		jar.SetCookies(mustURL(t, d.URL("/")), cookies)
	}
	if res, _ := get(t, client, b.URL("/"), nil); res.StatusCode != http.StatusOK {
		t.Fatalf("a's login on b: %s, want the dashboard", res.Status)
	}
	c := openChat(t, "alice's chat on b", b.WSURL("ws/chat"), testkit.DialOptions{Jar: jar, Origin: strings.TrimSuffix(b.URL("/"), "/")})
	c.mustEcho(c.createSession("on b"), "one login")
	if res, _ := get(t, client, other.URL("/"), nil); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a's login on a dashgate of another store: %s, want 401", res.Status)
	}

	runUserCmd(t, 0, "remove", "alice", "--users-file", file)
	mark := b.logMark()
	if err := syscall.Kill(b.PID(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.waitLogSince(mark, 10*time.Second, func(r logRecord) bool { return r.Msg() == "users file reloaded" }); !ok {
		t.Fatal("b did not reload the users file")
	}
	if res, _ := get(t, client, b.URL("/"), nil); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a removed user's cookie on b: %s, want 401", res.Status)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
