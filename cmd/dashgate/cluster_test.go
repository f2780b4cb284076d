package main

import (
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/store/postgres"
	"github.com/dashgate/dashgate/store/sqlite"
	"github.com/dashgate/dashgate/workers"
)

// TestPostgresStoreNode: with a postgres:// --store, dashgate is a node:
// its id defaults to the one kept in its state dir, it claims under leases, writes its
// heartbeat (with its load: its live session counted), and a conversation made on it is there for the next node.
func TestPostgresStoreNode(t *testing.T) {
	t.Parallel()
	dbURL := testkit.Postgres(t)
	dir := t.TempDir()
	a := startInstance(t, "node-a", filepath.Join(dir, "a"), "--store", dbURL, "--node-heartbeat", "100ms", "--node-expiry", "1s")
	c := dialChat(t, a)
	sid := session(t, c)
	c.Close()

	st, err := postgres.Open(t.Context(), dbURL, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var nodes []store.Node
	testkit.WaitFor(t, 10*time.Second, "node a's heartbeat, with its session", func() bool {
		nodes, err = st.Nodes(t.Context(), time.Now(), time.Second)
		return err == nil && len(nodes) == 1 && nodes[0].Live && nodes[0].Load.Sessions == 1
	})
	kept, _ := os.ReadFile(filepath.Join(dir, "a", "node-id"))
	if id := strings.TrimSpace(string(kept)); id == "" || nodes[0].ID != id || nodes[0].Addr != a.Addr {
		t.Fatalf("node %+v: want the id kept in its state dir (%q) and the address %s", nodes[0], id, a.Addr)
	}
	var api struct {
		Nodes []struct {
			ID   string `json:"id"`
			Live bool   `json:"live"`
		} `json:"nodes"`
	}
	if err := a.GetJSON(t.Context(), "admin/api/nodes", &api); err != nil || len(api.Nodes) != 1 || api.Nodes[0].ID != nodes[0].ID || !api.Nodes[0].Live {
		t.Fatalf("/admin/api/nodes = %+v, %v; want node a, live", api, err)
	}
	opened := a.Log.Records("store opened")
	if len(opened) != 1 || opened[0]["backend"] != "postgres" {
		t.Fatalf("store opened records %v; want one, backend postgres", opened)
	}
	if pw := password(dbURL); pw != "" && strings.Contains(a.Log.Tail(1000), pw) {
		t.Fatal("the log carries the database password")
	}
	if code := stop(t, a); code != 0 {
		t.Fatalf("node a exit %d", code)
	}
	// Node a released its leases at its clean stop: node b takes the
	// suspended conversation.
	b := startInstance(t, "node-b", filepath.Join(dir, "b"), "--store", dbURL)
	ss, err := b.Sessions(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range ss {
		found = found || s.SessionID == sid
	}
	if !found {
		t.Fatalf("node b lists %+v; want node a's session %s", ss, sid)
	}
}

// TestPostgresStoreUnreachable: a postgres:// store that cannot be reached
// refuses the start at once, naming the URL without its password; with
// --store-wait it is tried again until the wait is over.
func TestPostgresStoreUnreachable(t *testing.T) {
	t.Parallel()
	ln := "postgres://dashgate:s3cret-pw@127.0.0.1:1/dashgate?connect_timeout=1"
	log, logs := testkit.NewLogger()
	_, err := openStore(t.Context(), config{Store: ln}, log)
	var refused *startupError
	if !errors.As(err, &refused) || strings.Contains(err.Error(), "s3cret-pw") {
		t.Fatalf("unreachable store: %v; want a refusal without the password", err)
	}
	_, err = openStore(t.Context(), config{Store: ln, StoreWait: 2500 * time.Millisecond}, log)
	if !errors.As(err, &refused) {
		t.Fatalf("unreachable store after --store-wait: %v", err)
	}
	if n := len(logs.Records("store not reachable yet: trying again")); n < 1 {
		t.Fatalf("%d retry records, want at least one", n)
	}
	if strings.Contains(logs.String(), "s3cret-pw") {
		t.Fatal("the log carries the password")
	}
}

func password(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "\x00"
	}
	p, _ := u.User.Password()
	return p
}

// fakeLister is the registry's admin view as nodeLoad reads it.
type fakeLister []sessions.Info

func (f fakeLister) List() []sessions.Info { return f }

// TestNodeLoad: a heartbeat's load counts the live sessions and the
// manager's children (real processes) and lists each child with its
// session and that session's owner, by pid.
func TestNodeLoad(t *testing.T) {
	t.Parallel()
	mgr := workers.NewManager(workers.Config{Grace: time.Second, Instance: "test"})
	t.Cleanup(func() { mgr.CloseAll(workers.ReasonShutdown); mgr.Wait() })
	var procs []*workers.Proc
	for _, sid := range []string{"s1", "s2"} {
		p, err := mgr.Start(workers.Spec{Kind: workers.KindPTY, SessionID: sid, Path: "/bin/sh", Env: []string{"PATH=" + os.Getenv("PATH")}})
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	slices.SortFunc(procs, func(a, b *workers.Proc) int { return a.PID() - b.PID() })
	reg := fakeLister{{ID: "s1", Owner: "alice"}, {ID: "s2", Owner: ""}, {ID: "s3", Owner: "bob"}}
	got := nodeLoad(reg, mgr)
	if got.Sessions != 3 || got.Workers != 2 || len(got.List) != 2 {
		t.Fatalf("load = %+v; want 3 sessions, 2 workers listed", got)
	}
	owners := map[string]string{"s1": "alice", "s2": ""}
	for i, w := range got.List {
		p := procs[i]
		if w.PID != p.PID() || w.SessionID != p.SessionID() || w.User != owners[w.SessionID] || w.Kind != "pty" || !w.StartedAt.Equal(p.StartedAt()) {
			t.Errorf("listed %+v; want pid %d of %s, user %q, pty, started %v", w, p.PID(), p.SessionID(), owners[p.SessionID()], p.StartedAt())
		}
	}
}

// liveNodes (web's NodeLive): a node whose newest heartbeat is younger
// than within is live, an older one or one never seen is not; until a
// read of the nodes succeeds every node counts as live.
func TestLiveNodes(t *testing.T) {
	t.Parallel()
	st, err := postgres.Open(t.Context(), testkit.Postgres(t), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	for node, at := range map[string]time.Time{"a": now, "b": now.Add(-20 * time.Second)} {
		if err := st.Heartbeat(t.Context(), node, "", store.NodeLoad{}, at); err != nil {
			t.Fatal(err)
		}
	}
	live := &liveNodes{nodes: st, within: 10 * time.Second}
	for id, want := range map[string]bool{"a": true, "b": false, "never": false} {
		if got := live.Live(id); got != want {
			t.Errorf("Live(%q) = %v; want %v", id, got, want)
		}
	}
	closed, err := postgres.Open(t.Context(), testkit.Postgres(t), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	if unread := (&liveNodes{nodes: closed, within: time.Second}); !unread.Live("b") {
		t.Error("Live before any read succeeded = false; want true (no browser is moved on a guess)")
	}
}

// TestNodeIDKept: a node alone claims its sessions too, under the id kept
// in its state dir: its writes carry that node and an epoch (fenced), and
// after a crash (no Release: its leases live on for --node-expiry) the
// next start on the same state dir takes its sessions back at once.
func TestNodeIDKept(t *testing.T) {
	t.Parallel()
	stateDir := t.TempDir()
	a := startInstance(t, "A", stateDir, "--node-expiry", "1h")
	c := dialChat(t, a)
	sid := session(t, c)
	c.Close()
	b, err := os.ReadFile(filepath.Join(stateDir, "node-id"))
	if err != nil {
		t.Fatalf("the node id is not kept: %v", err)
	}
	node := strings.TrimSpace(string(b))
	dbPath := filepath.Join(stateDir, "dashgate.db")
	row := func() (store.Session, error) {
		st, err := sqlite.Open(t.Context(), dbPath, sqlite.Options{})
		if err != nil {
			return store.Session{}, err
		}
		defer st.Close()
		return st.Get(t.Context(), "", sid)
	}
	var first store.Session
	testkit.WaitFor(t, 10*time.Second, "the session's row, stored", func() bool {
		first, err = row()
		return err == nil
	})
	if first.Node != node || first.Epoch == 0 || !first.LeaseUntil.After(time.Now().Add(30*time.Minute)) {
		t.Fatalf("a node alone stored %+v; want node %q, an epoch and its lease", first, node)
	}
	a.Kill()

	a2 := startInstance(t, "A again", stateDir, "--node-expiry", "1h")
	ss, err := a2.Sessions(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 1 || ss[0].SessionID != sid {
		t.Fatalf("after a crash the restart lists %+v; want its session %s back at once", ss, sid)
	}
	again, err := row()
	if err != nil || again.Node != node || again.Epoch <= first.Epoch {
		t.Fatalf("after the restart the row is %+v, %v; want node %q under a newer epoch than %d", again, err, node, first.Epoch)
	}
}

func TestKeptNodeID(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	id, f, err := keptNodeID(dir)
	if err != nil || id == "" {
		t.Fatalf("keptNodeID = %q, %v", id, err)
	}
	// A second dashgate running on the same state dir gets another id.
	id2, f2, err := keptNodeID(dir)
	if err != nil || id2 == "" || id2 == id {
		t.Fatalf("second keptNodeID = %q, %v; want an id other than %q", id2, err, id)
	}
	f.Close()
	f2.Close()
	if again, f, err := keptNodeID(dir); err != nil || again != id {
		t.Fatalf("keptNodeID after a restart = %q, %v; want %q", again, err, id)
	} else {
		f.Close()
	}
	cfg := config{StateDir: dir, NodeID: "given"}
	if node, cluster, held, err := nodeIDs(cfg); node != "given" || cluster != "given" || held != nil || err != nil {
		t.Fatalf("nodeIDs with --node-id = %q, %q, %v, %v", node, cluster, held, err)
	}
	cfg = config{StateDir: dir}
	node, cluster, held, err := nodeIDs(cfg)
	if node != id || cluster != "" || err != nil {
		t.Fatalf("nodeIDs alone = %q, %q, %v; want %q, no cluster id", node, cluster, err, id)
	}
	held.Close()
}
