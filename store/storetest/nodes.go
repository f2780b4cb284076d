package storetest

import (
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, open(t))
		})
	}
}

func beat(t *testing.T, n store.Nodes, node, addr string, when time.Time) {
	t.Helper()
	if err := n.Heartbeat(t.Context(), node, addr, when); err != nil {
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
	if err := n.Heartbeat(t.Context(), "", "x:1", t0); err == nil {
		t.Errorf("Heartbeat of an empty node: no error")
	}
	if _, err := n.Nodes(t.Context(), t0, 0); err == nil {
		t.Errorf("Nodes with expiry 0: no error")
	}
}
