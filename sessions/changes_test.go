package sessions

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
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

	in, err := a.r.Create(&recViewer{p: alice}, NewSession{Title: "made on a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.r.Rename(t.Context(), alice, in.ID, "renamed on a"); err != nil {
		t.Fatal(err)
	}
	// attached, renamed: told by a's teller, in that order
	testkit.WaitFor(t, 5*time.Second, "a's watcher hears the rename", func() bool {
		got := changesOf(mineOnA, in.ID)
		return len(got) >= 2 && got[len(got)-1].Title == "renamed on a"
	})
	want := len(changesOf(mineOnA, in.ID))
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

// blockingViewer is a watcher whose Deliver waits until release is
// closed: it shows whether the registry's lock is held while it is told.
type blockingViewer struct {
	recViewer
	telling chan struct{} // closed at the first Deliver
	release chan struct{}
	once    sync.Once
}

func (v *blockingViewer) Deliver(ev *Event) {
	v.once.Do(func() { close(v.telling) })
	<-v.release
	v.recViewer.Deliver(ev)
}

// TestChangesToldOutsideLock: session.changed reaches the watchers on
// the teller's goroutine, the registry's lock free meanwhile (a change is
// an event for every chat socket: 300 of them woken under r.mu at every
// create and close held every other call up; BENCHMARKS.md, issue 28),
// and in the order of the changes.
func TestChangesToldOutsideLock(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	v := &blockingViewer{telling: make(chan struct{}), release: make(chan struct{})}
	stop := h.r.Watch(v)
	defer stop()
	released := false
	release := func() {
		if !released {
			released = true
			close(v.release)
		}
	}
	defer release()
	made := make(chan Info, 1)
	go func() {
		in, _ := h.r.Create(&recViewer{}, NewSession{Title: "first"})
		made <- in
	}()
	select {
	case <-v.telling:
	case <-time.After(5 * time.Second):
		t.Fatal("no session.changed told within 5s")
	}
	testkit.WaitFor(t, 5*time.Second, "the registry's lock free while a watcher is told", func() bool {
		if !h.r.mu.TryLock() {
			return false
		}
		h.r.mu.Unlock()
		return true
	})
	in := <-made
	if err := h.r.Rename(t.Context(), anon, in.ID, "second"); err != nil {
		t.Fatal(err)
	}
	release()
	testkit.WaitFor(t, 5*time.Second, "the rename told", func() bool {
		got := changesOf(&v.recViewer, in.ID)
		return len(got) > 0 && got[len(got)-1].Title == "second"
	})
	got := changesOf(&v.recViewer, in.ID)
	if got[0].Title != "first" {
		t.Fatalf("changes told %+v; want the creation's first", got)
	}
}

// TestMemoryBusCloseAndDrops: a full subscription's loss is counted
// (OnDrop: cluster.PGBus delivers through a MemoryBus and counts them),
// Close returns only once no f runs, and after it nothing is delivered.
func TestMemoryBusCloseAndDrops(t *testing.T) {
	t.Parallel()
	var dropped atomic.Int64
	b := &MemoryBus{OnDrop: func() { dropped.Add(1) }}
	block, got := make(chan struct{}), make(chan Announcement, 1)
	stop := b.Subscribe(func(a Announcement) {
		select {
		case got <- a:
		default:
		}
		<-block
	})
	b.Publish(Announcement{Origin: "first"})
	<-got // f holds it: the queue is empty
	for range memoryBusQueue + 1 {
		b.Publish(Announcement{Origin: "more"})
	}
	if n := dropped.Load(); n != 1 {
		t.Fatalf("OnDrop called %d times; want 1 (the one beyond the queue)", n)
	}
	closed := make(chan struct{})
	go func() { b.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while f runs")
	default:
	}
	close(block)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return once f did")
	}
	after := b.Subscribe(func(Announcement) { t.Error("f called after Close") })
	b.Publish(Announcement{Origin: "late"})
	after()
	stop()
}

// TestChangesToldInPasses: changes that come faster than one a window
// (tellEvery) are told together, in their order, at most one pass a
// window, so a burst wakes each socket's writer once, not once a change.
func TestChangesToldInPasses(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	alice := Principal{User: "alice"}
	v := &recViewer{p: alice}
	defer h.r.Watch(v)()

	// Changes back to back for a quarter of a window at most (busy, not a wait:
	// a teller without a window tells them in many passes meanwhile).
	n := 0
	start := time.Now()
	for n < 5000 && time.Since(start) < tellEvery/4 {
		h.r.tell.announce("alice", Change{SessionID: fmt.Sprint("s", n), State: StateAttached})
		n++
	}
	testkit.WaitFor(t, 10*time.Second, "every change told", func() bool { return len(v.ofType("session.changed")) == n })
	elapsed := time.Since(start)
	for i, ev := range v.ofType("session.changed") {
		if id := ev.Payload.(Change).SessionID; id != fmt.Sprint("s", i) {
			t.Fatalf("change %d told is %s: out of order", i, id)
		}
	}
	passes := h.r.tell.passes.Load()
	if most := 1 + int64(elapsed/tellEvery); passes > most {
		t.Fatalf("%d changes in %v were told in %d passes; want at most %d (one a window of %v)", n, elapsed, passes, most, tellEvery)
	}
}
