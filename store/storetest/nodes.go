package storetest

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/dashgate/dashgate/store"
)

// RunNodes runs the store.Nodes table against the backend open returns.
// open is called once a subtest with that subtest's t and returns an empty
// store; open closes it in t.Cleanup. The subtests run in parallel.
func RunNodes(t *testing.T, open func(t *testing.T) store.Nodes) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, n store.Nodes)
	}{
		{"heartbeats and liveness", testHeartbeat},
		{"a late heartbeat does not go back", testHeartbeatOrder},
		{"bad arguments", testNodesArgs},
		{"the load round trips", testNodeLoad},
		{"the worker list is capped", testNodeLoadCap},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, open(t))
		})
	}
}

func beat(t *testing.T, n store.Nodes, node, addr string, when time.Time) {
	t.Helper()
	if err := n.Heartbeat(t.Context(), node, addr, store.NodeLoad{}, when); err != nil {
		t.Fatalf("Heartbeat(%q): %v", node, err)
	}
}

func nodesAt(t *testing.T, n store.Nodes, now time.Time, expiry time.Duration) []store.Node {
	t.Helper()
	got, err := n.Nodes(t.Context(), now, expiry)
	if err != nil {
		t.Fatalf("Nodes: %v", err)
	}
	return got
}

func sameNodes(t *testing.T, got, want []store.Node) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		g, w := got[i], want[i]
		ok = g.ID == w.ID && g.Addr == w.Addr && g.LastSeen.Equal(w.LastSeen) && g.Live == w.Live
	}
	if !ok {
		t.Errorf("Nodes:\n got  %+v\n want %+v", got, want)
	}
}

func testHeartbeat(t *testing.T, n store.Nodes) {
	const expiry = 15 * time.Second
	if got := nodesAt(t, n, t0, expiry); len(got) != 0 {
		t.Fatalf("Nodes of an empty store = %+v", got)
	}
	beat(t, n, "b", "10.0.0.2:8080", t0)
	beat(t, n, "a", "10.0.0.1:8080", at(-20*time.Second))
	beat(t, n, "c", "", at(5*time.Second))
	sameNodes(t, nodesAt(t, n, at(10*time.Second), expiry), []store.Node{
		{ID: "a", Addr: "10.0.0.1:8080", LastSeen: at(-20 * time.Second), Live: false},
		{ID: "b", Addr: "10.0.0.2:8080", LastSeen: t0, Live: true},
		{ID: "c", LastSeen: at(5 * time.Second), Live: true},
	})
	// The instant LastSeen+expiry is reached the node is no longer live.
	if got := nodesAt(t, n, at(expiry), expiry); got[1].Live {
		t.Errorf("b at LastSeen+expiry: live; want not")
	}
	// A new heartbeat brings a node back, at its new address.
	beat(t, n, "a", "10.0.0.9:8080", at(30*time.Second))
	if got := nodesAt(t, n, at(31*time.Second), expiry); !got[0].Live || got[0].Addr != "10.0.0.9:8080" || !got[0].LastSeen.Equal(at(30*time.Second)) {
		t.Errorf("a after a new heartbeat = %+v; want live at 10.0.0.9:8080, seen t0+30s", got[0])
	}
}

func testHeartbeatOrder(t *testing.T, n store.Nodes) {
	beat(t, n, "a", "new:1", at(time.Minute))
	beat(t, n, "a", "old:1", t0)
	sameNodes(t, nodesAt(t, n, at(time.Minute), time.Second), []store.Node{{ID: "a", Addr: "new:1", LastSeen: at(time.Minute), Live: true}})
}

func testNodesArgs(t *testing.T, n store.Nodes) {
	if err := n.Heartbeat(t.Context(), "", "x:1", store.NodeLoad{}, t0); err == nil {
		t.Errorf("Heartbeat of an empty node: no error")
	}
	if _, err := n.Nodes(t.Context(), t0, 0); err == nil {
		t.Errorf("Nodes with expiry 0: no error")
	}
}

// testNodeLoad: a heartbeat's load (counts and workers) is what Nodes
// reads back, a newer heartbeat replaces it whole, and a late one does
// not bring an old one back.
func testNodeLoad(t *testing.T, n store.Nodes) {
	load := store.NodeLoad{Sessions: 3, Workers: 2, List: []store.NodeWorker{
		{PID: 4242, SessionID: "s1", User: "alice", Kind: "chat", StartedAt: at(-time.Minute).Add(123)},
		{PID: 4343, SessionID: "s2", User: "", Kind: "pty", StartedAt: at(-2 * time.Second).In(time.FixedZone("x", 3600))},
	}}
	if err := n.Heartbeat(t.Context(), "a", "a:1", load, t0); err != nil {
		t.Fatal(err)
	}
	got := nodesAt(t, n, t0, time.Minute)
	if len(got) != 1 || !sameLoad(got[0].Load, load) {
		t.Fatalf("Nodes = %+v; want one node with load %+v", got, load)
	}
	idle := store.NodeLoad{Sessions: 1}
	if err := n.Heartbeat(t.Context(), "a", "a:1", idle, at(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := n.Heartbeat(t.Context(), "a", "a:1", load, t0); err != nil { // late
		t.Fatal(err)
	}
	if got := nodesAt(t, n, at(time.Second), time.Minute); !sameLoad(got[0].Load, idle) {
		t.Errorf("load after a newer and a late heartbeat = %+v; want %+v", got[0].Load, idle)
	}
}

// testNodeLoadCap: of a list longer than store.MaxNodeWorkers the first
// MaxNodeWorkers are kept, and the counts as given.
func testNodeLoadCap(t *testing.T, n store.Nodes) {
	load := store.NodeLoad{Sessions: store.MaxNodeWorkers + 5, Workers: store.MaxNodeWorkers + 5}
	for i := range store.MaxNodeWorkers + 5 {
		load.List = append(load.List, store.NodeWorker{PID: 1000 + i, SessionID: fmt.Sprint("s", i), Kind: "chat", StartedAt: t0})
	}
	if err := n.Heartbeat(t.Context(), "a", "", load, t0); err != nil {
		t.Fatal(err)
	}
	want := load
	want.List = load.List[:store.MaxNodeWorkers]
	if got := nodesAt(t, n, t0, time.Minute); !sameLoad(got[0].Load, want) {
		t.Errorf("load: %d sessions, %d workers, %d listed; want %d, %d, %d (the first ones)",
			got[0].Load.Sessions, got[0].Load.Workers, len(got[0].Load.List), want.Sessions, want.Workers, len(want.List))
	}
}

// sameLoad compares loads with times by Equal.
func sameLoad(got, want store.NodeLoad) bool {
	if got.Sessions != want.Sessions || got.Workers != want.Workers || len(got.List) != len(want.List) {
		return false
	}
	for i := range got.List {
		g, w := got.List[i], want.List[i]
		if !g.StartedAt.Equal(w.StartedAt) {
			return false
		}
		g.StartedAt, w.StartedAt = time.Time{}, time.Time{}
		if !reflect.DeepEqual(g, w) {
			return false
		}
	}
	return true
}
