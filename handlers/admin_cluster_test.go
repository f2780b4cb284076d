package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/workers"
)

// busRecorder keeps what a bus delivered.
type busRecorder struct {
	mu  sync.Mutex
	got []sessions.Announcement
}

func (b *busRecorder) add(a sessions.Announcement) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.got = append(b.got, a)
}

// reaps is the RemoteReaps delivered so far.
func (b *busRecorder) reaps() []sessions.RemoteReap {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []sessions.RemoteReap
	for _, a := range b.got {
		if a.Reap != nil {
			out = append(out, *a.Reap)
		}
	}
	return out
}

// clusterAdmin is the admin of node "b", a real registry on a real SQLite
// store shared with (a row of) node "a", on a MemoryBus whose deliveries
// rec records. Node a is live with worker 4242 of its session "s-on-a"
// (alice's), node c is not live; node b runs nothing.
func clusterAdmin(t *testing.T) (*handlers.Admin, *busRecorder, *testkit.LogBuffer) {
	t.Helper()
	st := openStore(t)
	now := time.Now()
	if err := st.Apply(t.Context(), store.Batch{Sessions: []store.Session{{
		ID: "s-on-a", Owner: "alice", Title: "on a", State: "attached", CreatedAt: now, LastActive: now,
		Node: "a", LeaseUntil: now.Add(time.Hour), Epoch: 1,
	}}}); err != nil {
		t.Fatal(err)
	}
	bus := &sessions.MemoryBus{}
	rec := &busRecorder{}
	t.Cleanup(bus.Subscribe(rec.add))
	log, logs := testkit.NewLogger()
	reg := sessions.New(sessions.Config{Store: st, Changes: bus, Log: log, DetachedTTL: time.Minute, MaxSessions: 10})
	t.Cleanup(func() { reg.Shutdown(context.Background()); reg.Wait() })
	if _, err := reg.Claim(t.Context(), "b", time.Hour); err != nil {
		t.Fatal(err)
	}
	// Node c's, lapsed after b's claim: b lists it nowhere.
	if err := st.Apply(t.Context(), store.Batch{Sessions: []store.Session{{
		ID: "s-lapsed", Owner: "alice", Title: "lapsed", State: "detached", CreatedAt: now, LastActive: now,
		Node: "c", LeaseUntil: now.Add(-time.Minute), Epoch: 1,
	}}}); err != nil {
		t.Fatal(err)
	}
	started := now.Add(-time.Minute).UTC()
	h := &handlers.Admin{
		Sessions: reg.Admin(),
		Procs:    fakeAdminProcs{table: func() []workers.ProcInfo { return nil }},
		Log:      log,
		Nodes: func(context.Context) ([]store.Node, error) {
			return []store.Node{
				{ID: "a", Live: true, LastSeen: now, Load: store.NodeLoad{Sessions: 1, Workers: 1, List: []store.NodeWorker{
					{PID: 4242, SessionID: "s-on-a", User: "alice", Kind: "chat", StartedAt: started}}}},
				{ID: "b", Live: true, LastSeen: now},
				{ID: "c", Live: false, LastSeen: now.Add(-time.Hour), Load: store.NodeLoad{Workers: 1, List: []store.NodeWorker{{PID: 77, SessionID: "s-lapsed", Kind: "chat"}}}},
			}, nil
		},
	}
	return h, rec, logs
}

// post POSTs to path on srv, JSON asked for when asJSON: the status and the
// decoded body (nil for a redirect), without following redirects.
func post(t *testing.T, srv interface{ Client() *http.Client }, url string, asJSON bool) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if asJSON {
		req.Header.Set("Accept", "application/json")
	}
	c := *srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if asJSON {
		json.NewDecoder(resp.Body).Decode(&body)
	}
	return resp.StatusCode, body
}

// TestAdminClusterForwardsReaps: on node b, a reap of node a's worker or
// session (?node=a) publishes a RemoteReap on the bus for a, naming the
// admin, and answers 202 {"forwarded":true,"node":"a"} (a form: back to
// the page); its audit record says forwarded, node=a. A node not live is
// 404, and nothing is published; a non-admin forwards nothing.
func TestAdminClusterForwardsReaps(t *testing.T) {
	t.Parallel()
	h, rec, logs := clusterAdmin(t)
	srv := adminAs(t, h, sessions.AdminPrincipal)

	code, body := post(t, srv, srv.URL+"/admin/workers/4242/reap?node=a", true)
	if code != http.StatusAccepted || body["forwarded"] != true || body["node"] != "a" {
		t.Fatalf("forwarded worker reap: %d %v; want 202 forwarded to a", code, body)
	}
	testkit.WaitFor(t, 5*time.Second, "the worker reap on the bus", func() bool { return len(rec.reaps()) == 1 })
	if got, want := rec.reaps()[0], (sessions.RemoteReap{Node: "a", From: "b", PID: 4242, By: "admin-token"}); got != want {
		t.Fatalf("published %+v; want %+v", got, want)
	}
	audits := logs.Records("admin reap")
	if len(audits) != 1 || audits[0]["result"] != "forwarded" || audits[0]["node"] != "a" || audits[0]["target"] != "worker 4242" || audits[0]["action"] != "reap_worker" {
		t.Fatalf("audit records %v; want one: reap_worker worker 4242 forwarded node=a", audits)
	}

	if code, _ := post(t, srv, srv.URL+"/admin/sessions/s-on-a/reap?node=a&user=alice", false); code != http.StatusSeeOther {
		t.Fatalf("forwarded session reap by a form: %d; want 303", code)
	}
	testkit.WaitFor(t, 5*time.Second, "the session reap on the bus", func() bool { return len(rec.reaps()) == 2 })
	if got, want := rec.reaps()[1], (sessions.RemoteReap{Node: "a", From: "b", SessionID: "s-on-a", By: "admin-token"}); got != want {
		t.Fatalf("published %+v; want %+v", got, want)
	}

	if code, _ := post(t, srv, srv.URL+"/admin/workers/77/reap?node=c", true); code != http.StatusNotFound {
		t.Fatalf("reap on a node not live: %d; want 404", code)
	}
	alice := adminAs(t, h, sessions.Principal{User: "alice"})
	if code, _ := post(t, alice, alice.URL+"/admin/workers/4242/reap?node=a", true); code != http.StatusNotFound {
		t.Fatalf("a non-admin's forward: %d; want 404", code)
	}
	// The bus is in order: once a later forward is heard, nothing else was.
	if code, _ := post(t, srv, srv.URL+"/admin/workers/4343/reap?node=a", true); code != http.StatusAccepted {
		t.Fatalf("last forward: %d", code)
	}
	testkit.WaitFor(t, 5*time.Second, "the last reap on the bus", func() bool { return len(rec.reaps()) >= 3 })
	if got := rec.reaps(); len(got) != 3 || got[2].PID != 4343 {
		t.Fatalf("published %+v; want nothing for node c or for a non-admin", got)
	}
}

// TestAdminClusterLists: node b's /admin/api/sessions and
// /admin/api/workers and its page list node a's live session (from the
// store) and worker (from a's heartbeat) with node a, never a lapsed
// node's; the nodes table counts each node's load; the rows' reap forms
// name the node; the page says it is node b's.
func TestAdminClusterLists(t *testing.T) {
	t.Parallel()
	h, _, _ := clusterAdmin(t)
	srv := adminAs(t, h, sessions.AdminPrincipal)

	var ss struct {
		Sessions []struct {
			ID   string `json:"session_id"`
			User string `json:"user"`
			Node string `json:"node"`
		} `json:"sessions"`
	}
	if err := json.Unmarshal([]byte(fetch(t, srv, "/admin/api/sessions")), &ss); err != nil {
		t.Fatal(err)
	}
	if len(ss.Sessions) != 1 || ss.Sessions[0].ID != "s-on-a" || ss.Sessions[0].Node != "a" || ss.Sessions[0].User != "alice" {
		t.Fatalf("/admin/api/sessions = %+v; want a's s-on-a only", ss)
	}
	var ws struct {
		Workers []struct {
			PID       int    `json:"pid"`
			SessionID string `json:"session_id"`
			Node      string `json:"node"`
			User      string `json:"user"`
			Remote    bool   `json:"remote"`
		} `json:"workers"`
	}
	if err := json.Unmarshal([]byte(fetch(t, srv, "/admin/api/workers")), &ws); err != nil {
		t.Fatal(err)
	}
	if len(ws.Workers) != 1 || ws.Workers[0].PID != 4242 || ws.Workers[0].Node != "a" || ws.Workers[0].User != "alice" || !ws.Workers[0].Remote {
		t.Fatalf("/admin/api/workers = %+v; want a's 4242 only", ws)
	}
	page := fetch(t, srv, "/admin")
	for _, w := range []string{
		`data-session-id="s-on-a" data-state="attached" data-user="alice" data-node="a"><td class="mono">s-on-a</td><td class="mono" data-testid="session-node">a</td>`,
		`action="/admin/sessions/s-on-a/reap?node=a"`,
		`<tr data-testid="worker-row" data-pid="4242" data-session-id="s-on-a" data-kind="chat" data-node="a"><td class="mono">4242</td><td class="mono" data-testid="worker-node">a</td>`,
		`action="/admin/workers/4242/reap?node=a"`,
		// the worker's user, from a's heartbeat
		`<td class="mono">s-on-a</td><td data-testid="worker-user">alice</td>`,
		`<td class="mono">4242</td><td class="mono">–</td><td>`, // s-on-a's worker column, from a's heartbeat
		`<td data-testid="node-live">yes</td><td data-testid="node-sessions">1</td><td data-testid="node-workers">1</td>`,
		// which node the page is from (a trial could not tell)
		`<span data-testid="this-node" title="the node of the cluster this page comes from">node <b>b</b></span>`,
	} {
		if !strings.Contains(page, w) {
			t.Errorf("the page lacks %s", w)
		}
	}
	if strings.Contains(page, "s-lapsed") || strings.Contains(page, `data-pid="77"`) {
		t.Error("the page lists a session or worker of a node not live")
	}
	if f := fetch(t, srv, "/admin?user=bob"); strings.Contains(f, "s-on-a") || strings.Contains(f, `data-pid="4242"`) {
		t.Error("the page filtered to bob lists alice's rows on node a")
	}
}

// fakeCluster is an AdminCluster whose Elsewhere fails.
type fakeCluster struct{ handlers.AdminCluster }

func (fakeCluster) Node() string { return "b" }
func (fakeCluster) Elsewhere(context.Context, time.Time) ([]sessions.RemoteSession, error) {
	return nil, errors.New("store gone")
}

// TestAdminClusterStoreError: when the other nodes' sessions cannot be
// read, the page and the API list this node's and say so (one WARN each).
func TestAdminClusterStoreError(t *testing.T) {
	t.Parallel()
	log, logs := testkit.NewLogger()
	h := &handlers.Admin{
		Sessions: fakeAdminSessions{list: func() []sessions.Info { return []sessions.Info{{ID: "mine", State: sessions.StateAttached}} }},
		Procs:    fakeAdminProcs{table: func() []workers.ProcInfo { return nil }},
		Nodes:    func(context.Context) ([]store.Node, error) { return nil, nil },
		Cluster:  fakeCluster{},
		Log:      log,
	}
	srv := adminAs(t, h, sessions.AdminPrincipal)
	page := fetch(t, srv, "/admin")
	if !strings.Contains(page, `data-testid="sessions-elsewhere-error">The other nodes&#39; sessions could not be read`) || !strings.Contains(page, `data-session-id="mine"`) || strings.Contains(page, "store gone") {
		t.Errorf("the page with the store failing:\n%s", page)
	}
	api := fetch(t, srv, "/admin/api/sessions")
	if !strings.Contains(api, `"elsewhere_error"`) || !strings.Contains(api, `"session_id":"mine"`) || !strings.Contains(api, `"node":"b"`) {
		t.Errorf("/admin/api/sessions with the store failing: %s", api)
	}
	if rs := logs.Records("admin page without the other nodes' sessions"); len(rs) != 1 || rs[0].Str("level") != "WARN" {
		t.Errorf("page records %v", rs)
	}
}
