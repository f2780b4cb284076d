package cluster_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dashgate/dashgate/cluster"
	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/store/postgres"
)

// watcher is a chat socket's stand-in: a sessions.Viewer that records the
// session.changed it is delivered.
type watcher struct {
	p  sessions.Principal
	mu sync.Mutex
	cs []sessions.Change
}

func (w *watcher) Principal() sessions.Principal { return w.p }
func (w *watcher) Done() <-chan struct{}         { return nil }
func (w *watcher) Deliver(ev *sessions.Event) {
	if c, ok := ev.Payload.(sessions.Change); ok && ev.Type == "session.changed" {
		w.mu.Lock()
		w.cs = append(w.cs, c)
		w.mu.Unlock()
	}
}

// of returns the changes of sid w heard.
func (w *watcher) of(sid string) []sessions.Change {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []sessions.Change
	for _, c := range w.cs {
		if c.SessionID == sid {
			out = append(out, c)
		}
	}
	return out
}

// node is one dashgate node's registry on the shared database, with its
// own store and PGBus, running until the test ends.
func node(t *testing.T, url string) (*sessions.Registry, *cluster.PGBus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bus := newBus(t, url, nil) // its cleanup runs after the registry's
	reg := sessions.New(sessions.Config{Store: st, Changes: bus})
	runCtx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); reg.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		reg.Shutdown(ctx)
		reg.Wait()
		reg.FlushStore(ctx)
		st.Close()
	})
	return reg, bus
}

// Two registries on one PostgreSQL store, each with its own PGBus: a
// session alice creates on a is a session.changed for alice's watcher on
// b, not for bob's there.
func TestSessionChangedBetweenNodes(t *testing.T) {
	t.Parallel()
	url := testkit.Postgres(t)
	a, busA := node(t, url)
	b, _ := node(t, url)
	alice, bob := sessions.Principal{User: "alice"}, sessions.Principal{User: "bob"}
	alicesOnB, bobsOnB := &watcher{p: alice}, &watcher{p: bob}
	defer b.Watch(alicesOnB)()
	defer b.Watch(bobsOnB)()

	// b's Run subscribes on its own goroutine: once alice's watcher hears
	// a sentinel published on a's bus, b listens.
	testkit.WaitFor(t, 10*time.Second, "b's registry subscribed", func() bool {
		busA.Publish(sessions.Announcement{Origin: "test", Owner: "alice", Change: sessions.Change{SessionID: "sentinel"}})
		return len(alicesOnB.of("sentinel")) > 0
	})

	in, err := a.Create(&watcher{p: alice}, sessions.NewSession{Title: "made on a"})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "alice's watcher on b hears the create on a", func() bool { return len(alicesOnB.of(in.ID)) > 0 })
	if c := alicesOnB.of(in.ID)[0]; c.Title != "made on a" || c.State != sessions.StateAttached {
		t.Errorf("alice's watcher on b heard %+v", c)
	}
	// Bob's watcher is told in the same pass as alice's, if at all.
	if got := bobsOnB.of(in.ID); len(got) != 0 {
		t.Errorf("bob's watcher on b heard alice's session: %+v", got)
	}
}
