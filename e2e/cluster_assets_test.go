package e2e_test

import (
	"net/http"
	"regexp"
	"testing"
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
