package e2e_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dashgate/dashgate/static"
)

// assetRef finds the page's stylesheets and scripts.
var assetRef = regexp.MustCompile(`(?:href|src)="([^"]*static/[^"]+)"`)

// TestClusterAssetsFromAnyNode (issue 41): through the shipped cluster
// config, a browser pinned to node a gets the page and every asset it
// names while a is dead and after a came back on its address: /static/
// goes to whichever node answers (an upstream that never marks a node
// down), so a page is never served without its CSS and JS.
func TestClusterAssetsFromAnyNode(t *testing.T) {
	requireNginx(t)
	a := startDashgate(t, "--node-id", "a", "--trusted-proxies", "127.0.0.1/32")
	b := startDashgate(t, "--node-id", "b", "--trusted-proxies", "127.0.0.1/32")
	n := startNginx(t, nginxSite{file: "dashgate-cluster.conf", upstreams: []string{a.Addr, b.Addr}})
	c := loginPinned(t, n, "browser", "a", "a", "b")
	fetchAll := func(when string) {
		t.Helper()
		html := http.Header{"Accept": {"text/html"}}
		for range 10 {
			res, body := get(t, c.client, n.URL("/"), html)
			refs := assetRef.FindAllStringSubmatch(body, -1)
			if res.StatusCode != http.StatusOK || len(refs) < 2 {
				t.Fatalf("%s: the page: %s with %d assets named", when, res.Status, len(refs))
			}
			for _, r := range refs {
				if res, _ := get(t, c.client, n.URL("/"+regexp.MustCompile(`^(\./|/)`).ReplaceAllString(r[1], "")), nil); res.StatusCode != http.StatusOK {
					t.Fatalf("%s: %s: %s", when, r[1], res.Status)
				}
			}
		}
	}
	fetchAll("both nodes up")
	addr := a.Addr
	a.kill()
	fetchAll("node a dead")
	startDashgate(t, "--node-id", "a", "--trusted-proxies", "127.0.0.1/32", "--addr", addr)
	fetchAll("node a back")
}

// TestClusterAssetsAcrossReleases (issue 41): during a rolling upgrade a
// node of another release answers 404 to this release's versioned asset
// URLs, and the shipped cluster config then asks the next node, so the
// page still gets every asset. The other release's node is node a behind
// a proxy that answers 404 to every static/v/ URL, as a node of another
// version does (web.thisVersion).
func TestClusterAssetsAcrossReleases(t *testing.T) {
	requireNginx(t)
	a := startDashgate(t, "--node-id", "a", "--trusted-proxies", "127.0.0.1/32")
	au, err := url.Parse("http://" + a.Addr)
	if err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int64
	toA := httputil.NewSingleHostReverseProxy(au)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/static/v/") {
			refused.Add(1)
			http.NotFound(w, r)
			return
		}
		toA.ServeHTTP(w, r)
	}))
	t.Cleanup(other.Close)
	n := startNginx(t, nginxSite{file: "dashgate-cluster.conf", upstreams: []string{a.Addr, other.Listener.Addr().String()}})
	c := loginCluster(t, n, "browser")
	html := http.Header{"Accept": {"text/html"}}
	for range 10 {
		res, body := get(t, c.client, n.URL("/"), html)
		refs := assetRef.FindAllStringSubmatch(body, -1)
		if res.StatusCode != http.StatusOK || len(refs) < 2 {
			t.Fatalf("the page: %s with %d assets named", res.Status, len(refs))
		}
		for _, r := range refs {
			if !strings.HasPrefix(r[1], static.URL("/", "")) {
				t.Fatalf("the page names %s, not a versioned URL", r[1])
			}
			if res, _ := get(t, c.client, n.URL(r[1]), nil); res.StatusCode != http.StatusOK {
				t.Fatalf("%s: %s", r[1], res.Status)
			}
		}
	}
	if refused.Load() == 0 {
		t.Fatal("no asset request reached the other release's node: the test proved nothing")
	}
	t.Logf("%d asset requests refused by the other release's node, each answered by the next", refused.Load())
}
