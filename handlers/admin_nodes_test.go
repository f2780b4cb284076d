package handlers_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/workers"
)

// nodesAdmin is an admin whose Nodes is nodes (nil: a node alone).
func nodesAdmin(nodes func(context.Context) ([]store.Node, error)) *handlers.Admin {
	return &handlers.Admin{
		Sessions: fakeAdminSessions{list: func() []sessions.Info { return nil }},
		Procs:    fakeAdminProcs{table: func() []workers.ProcInfo { return nil }},
		Nodes:    nodes,
	}
}

// get GETs path from srv: its status and body.
func get(t *testing.T, srv interface{ Client() *http.Client }, url string) (int, string) {
	t.Helper()
	resp, err := srv.Client().Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// With a Nodes source, /admin shows the cluster's nodes (id, address,
// last heartbeat as a relative time with the exact one as its title,
// live or not) and /admin/api/nodes answers them as JSON, in the
// source's order; without one there is no table and the API is 404.
func TestAdminNodes(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC().Truncate(time.Second)
	seenA, seenB := now.Add(-10*time.Minute), now.Add(-2*time.Hour)
	var calls atomic.Int32
	h := nodesAdmin(func(ctx context.Context) ([]store.Node, error) {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("Nodes called without a deadline")
		}
		calls.Add(1)
		return []store.Node{
			{ID: "node-a", Addr: "10.0.0.1:8080", LastSeen: seenA, Live: true, Load: store.NodeLoad{Sessions: 3, Workers: 2}},
			{ID: "node-b", LastSeen: seenB.In(time.FixedZone("x", 3600)), Live: false},
		}, nil
	})
	srv := adminAs(t, h, sessions.AdminPrincipal)

	want := fmt.Sprintf(`{"nodes":[{"id":"node-a","addr":"10.0.0.1:8080","last_seen":%q,"live":true,"sessions":3,"workers":2},{"id":"node-b","addr":"","last_seen":%q,"live":false,"sessions":0,"workers":0}]}`,
		seenA.Format(time.RFC3339), seenB.Format(time.RFC3339))
	if got := strings.TrimSpace(fetch(t, srv, "/admin/api/nodes")); got != want {
		t.Errorf("/admin/api/nodes:\n got %s\nwant %s", got, want)
	}

	page := fetch(t, srv, "/admin")
	for _, w := range []string{
		`<section data-testid="nodes"><h2>Nodes (2)</h2>`,
		`<tr data-testid="node-row" data-node-id="node-a" data-live="true" class=""><td class="mono">node-a</td><td class="mono" data-testid="node-addr">10.0.0.1:8080</td><td data-testid="node-last-seen" title="` +
			seenA.Format(time.RFC3339Nano) + `">10 minutes ago</td><td data-testid="node-live">yes</td><td data-testid="node-sessions">3</td><td data-testid="node-workers">2</td></tr>`,
		`<tr data-testid="node-row" data-node-id="node-b" data-live="false" class="stale"><td class="mono">node-b</td><td class="mono" data-testid="node-addr">–</td><td data-testid="node-last-seen" title="` +
			seenB.Format(time.RFC3339Nano) + `">2 hours ago</td><td data-testid="node-live">no</td><td data-testid="node-sessions">0</td><td data-testid="node-workers">0</td></tr>`,
	} {
		if !strings.Contains(page, w) {
			t.Errorf("the admin page lacks %s", w)
		}
	}
	if strings.Index(page, `data-node-id="node-a"`) > strings.Index(page, `data-node-id="node-b"`) {
		t.Error("the nodes are not in the source's order")
	}
	if t.Failed() {
		t.Log(page)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("Nodes called %d times for two requests", n)
	}

	alone := adminAs(t, nodesAdmin(nil), sessions.AdminPrincipal)
	if page := fetch(t, alone, "/admin"); strings.Contains(page, `data-testid="nodes"`) {
		t.Error("the admin page of a node alone has a nodes table")
	}
	if code, body := get(t, alone, alone.URL+"/admin/api/nodes"); code != http.StatusNotFound || !strings.Contains(body, `"error"`) {
		t.Errorf("/admin/api/nodes of a node alone: %d %s, want 404 with an error", code, body)
	}
}

// A Nodes source that fails: the page still renders, its nodes table
// saying so (one WARN), and the API answers 500 (one ERROR); neither shows
// the error's text to the client.
func TestAdminNodesError(t *testing.T) {
	t.Parallel()
	log, logs := testkit.NewLogger()
	h := nodesAdmin(func(context.Context) ([]store.Node, error) { return nil, errors.New("secret detail") })
	h.Log = log
	srv := adminAs(t, h, sessions.AdminPrincipal)

	page := fetch(t, srv, "/admin")
	if !strings.Contains(page, `<td colspan="6" data-testid="nodes-error">The nodes could not be read from the store.</td>`) ||
		!strings.Contains(page, `data-testid="sessions-table"`) || strings.Contains(page, "secret detail") {
		t.Errorf("the admin page with the nodes unreadable:\n%s", page)
	}
	if rs := logs.Records("admin page without nodes"); len(rs) != 1 || rs[0].Str("level") != "WARN" || !strings.Contains(rs[0].Str("err"), "secret detail") {
		t.Errorf("page records: %v", rs)
	}
	code, body := get(t, srv, srv.URL+"/admin/api/nodes")
	if code != http.StatusInternalServerError || strings.Contains(body, "secret detail") {
		t.Errorf("/admin/api/nodes: %d %s, want 500 without the error's text", code, body)
	}
	if rs := logs.Records("internal error"); len(rs) != 1 || rs[0].Str("level") != "ERROR" || !strings.Contains(rs[0].Str("err"), "list nodes: secret detail") {
		t.Errorf("api records: %v", rs)
	}
}
