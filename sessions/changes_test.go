package sessions

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
)

// changesOf returns the session.changed payloads v got for sid.
func changesOf(v *recViewer, sid string) []Change {
	var out []Change
	for _, ev := range v.ofType("session.changed") {
		if c := ev.Payload.(Change); c.SessionID == sid {
			out = append(out, c)
		}
	}
	return out
}

// TestChangesReachOtherRegistries: two registries on one SQLite file share
// a MemoryBus. A session made and renamed on a is announced to b's
// watchers (each change once), to its owner's watchers only; a's own
// watcher hears each change once, not again from the bus.
func TestChangesReachOtherRegistries(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dashgate.db")
	bus := &MemoryBus{}
	a := newHarness(t, func(c *Config) { c.Store = openShared(t, path); c.Changes = bus })
	b := newHarness(t, func(c *Config) { c.Store = openShared(t, path); c.Changes = bus })
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for _, h := range []*harness{a, b} {
		wg.Add(1)
		go func() { defer wg.Done(); h.r.Run(ctx) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	testkit.WaitFor(t, 5*time.Second, "both registries subscribed", func() bool {
		bus.mu.Lock()
		defer bus.mu.Unlock()
		return len(bus.subs) == 2
	})

	alice := Principal{User: "alice"}
	mineOnA, mineOnB, bobsOnB := &recViewer{p: alice}, &recViewer{p: alice}, &recViewer{p: Principal{User: "bob"}}
	defer a.r.Watch(mineOnA)()
	defer b.r.Watch(mineOnB)()
	defer b.r.Watch(bobsOnB)()

	in, err := a.r.Create(&recViewer{p: alice}, "made on a", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.r.Rename(t.Context(), alice, in.ID, "renamed on a"); err != nil {
		t.Fatal(err)
	}
	want := len(changesOf(mineOnA, in.ID)) // attached, renamed: told under a's lock, at once
	if want < 2 {
		t.Fatalf("a's watcher heard %+v", changesOf(mineOnA, in.ID))
	}
	testkit.WaitFor(t, 5*time.Second, "b's watcher hears a's changes", func() bool { return len(changesOf(mineOnB, in.ID)) >= want })
	got := changesOf(mineOnB, in.ID)
	if last := got[len(got)-1]; len(got) != want || last.Title != "renamed on a" {
		t.Fatalf("b's watcher heard %+v; want a's %+v", got, changesOf(mineOnA, in.ID))
	}
	// Bob's watcher on b is told in the same pass as alice's.
	if n := len(changesOf(bobsOnB, in.ID)); n != 0 {
		t.Fatalf("bob's watcher heard %d changes of alice's session", n)
	}
	// The bus delivers in order: once a's watcher heard a later
	// announcement from the bus, a's own echoes were handled before it.
	bus.Publish(Announcement{Origin: "test", Owner: "alice", Change: Change{SessionID: "sentinel"}})
	testkit.WaitFor(t, 5*time.Second, "a hears the sentinel", func() bool { return len(changesOf(mineOnA, "sentinel")) == 1 })
	if n := len(changesOf(mineOnA, in.ID)); n != want {
		t.Fatalf("a's watcher heard %d changes; want %d (none again from the bus)", n, want)
	}
}
