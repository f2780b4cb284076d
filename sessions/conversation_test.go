package sessions

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/store/sqlite"
)

// TestStoredRowsCarryTheOwner: every row the conversation queues (made,
// configured, renamed, suspended, closed) is its owner's in a real SQLite
// file, not the anonymous user's, and a second registry restoring the file
// gives the session back to its owner only.
func TestStoredRowsCarryTheOwner(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dashgate.db")
	st, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	alice := Principal{User: "alice"}
	h := newHarness(t, func(c *Config) { c.Store = st; c.SuspendOnShutdown = true })
	av := &recViewer{p: alice}
	kept, err := h.r.Create(av, NewSession{Title: "kept"})
	if err != nil {
		t.Fatal(err)
	}
	gone, _ := h.r.Create(av, NewSession{Title: "gone"})
	if err := h.r.Configure(av, kept.ID, "m1"); err != nil {
		t.Fatal(err)
	}
	if err := h.r.Rename(t.Context(), alice, gone.ID, "gone for good"); err != nil {
		t.Fatal(err)
	}
	if ok, err := h.r.Close(alice, gone.ID, EndClientClose); !ok || err != nil {
		t.Fatalf("Close = %v, %v", ok, err)
	}
	h.r.Shutdown(context.Background()) // suspends kept
	h.r.Wait()
	if err := h.r.FlushStore(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, sid := range []string{kept.ID, gone.ID} {
		if row, err := st.Get(t.Context(), "alice", sid); err != nil || row.Owner != "alice" {
			t.Fatalf("alice's row %s: %+v, %v", sid, row, err)
		}
		if _, err := st.Get(t.Context(), "", sid); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("row %s is the anonymous user's too: %v", sid, err)
		}
	}
	if closed, _, err := st.Closed(t.Context(), store.ListQuery{Owner: "alice"}); err != nil || len(closed) != 1 || closed[0].Title != "gone for good" {
		t.Fatalf("alice's closed rows: %+v, %v", closed, err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st2, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st2.Close() })
	h2 := newHarness(t, func(c *Config) { c.Store = st2; c.DetachedTTL = time.Minute })
	if n, err := h2.r.Claim(t.Context(), "n", time.Hour); n != 1 || err != nil {
		t.Fatalf("Claim = %d, %v", n, err)
	}
	if _, err := h2.r.Resume(&recViewer{}, kept.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the anonymous user resumes alice's restored session: %v", err)
	}
	res, err := h2.r.Resume(&recViewer{p: alice}, kept.ID)
	if err != nil || res.Model != "m1" {
		t.Fatalf("alice resumes her restored session: %+v, %v", res.Info, err)
	}
}
