package sessions

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/dashgate/dashgate/store"
)

// closedCounter counts the store reads of closed sessions.
type closedCounter struct {
	store.Store
	reads atomic.Int32
}

func (c *closedCounter) Closed(ctx context.Context, q store.ListQuery) ([]store.Session, bool, error) {
	c.reads.Add(1)
	return c.Store.Closed(ctx, q)
}

// TestDefaultTitleCounter: the default-title counter (admission.title)
// reads a user's stored titles once, not on every create; a default title
// a closed session had, or one given already, is not given again (the one
// asked for when free, the next beyond the highest otherwise), also after
// a restart (a new registry over the same store), also when the closed
// one was renamed to a default title; each user counts apart; a title
// that is no default one is kept as it is.
func TestDefaultTitleCounter(t *testing.T) {
	t.Parallel()
	st := &closedCounter{Store: store.NewMemory()}
	h := newHarness(t, func(c *Config) { c.Store = st })
	alice, bob := Principal{User: "alice"}, Principal{User: "bob"}
	create := func(r *Registry, p Principal, title, want string) Info {
		t.Helper()
		in, err := r.Create(&recViewer{p: p}, NewSession{Title: title})
		if err != nil {
			t.Fatal(err)
		}
		if in.Title != want {
			t.Fatalf("%s asked for %q and got %q, want %q", p.User, title, in.Title, want)
		}
		return in
	}
	for i, n := range []string{"1", "2", "3"} {
		in := create(h.r, alice, "session "+n, "session "+n)
		if i < 2 {
			h.r.Close(alice, in.ID, EndClientClose)
		}
	}
	create(h.r, alice, "session 1", "session 4") // closed: not again
	create(h.r, alice, "session 3", "session 5") // live
	create(h.r, alice, "session 9", "session 9") // free
	create(h.r, alice, "mine", "mine")
	create(h.r, bob, "session 1", "session 1") // bob counts apart
	if n := st.reads.Load(); n != 2 {
		t.Errorf("the store's closed sessions were read %d times for 9 creates of 2 users, want once per user", n)
	}

	// A closed session renamed to a default title holds it too.
	old := create(h.r, bob, "x", "x")
	h.r.Close(bob, old.ID, EndClientClose)
	if err := h.r.Rename(t.Context(), bob, old.ID, "session 20"); err != nil {
		t.Fatal(err)
	}
	create(h.r, bob, "session 2", "session 21")

	// After a restart: read from the store, once.
	h.r.Shutdown(t.Context())
	h.r.Wait()
	if err := h.r.FlushStore(t.Context()); err != nil {
		t.Fatal(err)
	}
	h2 := newHarness(t, func(c *Config) { c.Store = st })
	create(h2.r, alice, "session 1", "session 10")
	create(h2.r, alice, "session 1", "session 11")
}
