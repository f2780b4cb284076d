package main

import (
	"errors"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/store/postgres"
)

// TestPostgresStoreNode: with a postgres:// --store, dashgate is a node:
// its id defaults to host and instance, it claims under leases, writes its
// heartbeat, and a conversation made on it is there for the next node.
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
	testkit.WaitFor(t, 10*time.Second, "node a's heartbeat", func() bool {
		nodes, err = st.Nodes(t.Context(), time.Now(), time.Second)
		return err == nil && len(nodes) == 1 && nodes[0].Live
	})
	if !strings.HasSuffix(nodes[0].ID, "-"+a.ID[:8]) || nodes[0].Addr != a.Addr {
		t.Fatalf("node %+v: want the id to end in the instance's and the address %s", nodes[0], a.Addr)
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
