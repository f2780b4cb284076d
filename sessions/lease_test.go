package sessions

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/store/sqlite"
)

// openShared opens the SQLite file at path for one of two registries.
func openShared(t *testing.T, path string) store.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestLeaseLostToAnotherNode: two registries on one SQLite file. Node a
// made a session under a lease that ended (it did not renew it); node b
// claims it. a's next write of it is refused (fenced): a drops it, ends
// the session with end_reason lease_lost (one INFO record, its viewer
// told) and writes nothing more of it; the stored session is b's, as b
// left it.
func TestLeaseLostToAnotherNode(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dashgate.db")
	a := newHarness(t, func(c *Config) { c.Store = openShared(t, path) })
	if _, err := a.r.Claim(t.Context(), "a", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	v := &recViewer{}
	in, err := a.r.Create(v, NewSession{Title: "made on a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.r.journal.flush(t.Context()); err != nil {
		t.Fatal(err)
	}

	bst := openShared(t, path)
	b := newHarness(t, func(c *Config) { c.Store = bst })
	// a's lease of a millisecond ends by itself: b's claim takes the
	// session once it has.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := testkit.PollErr(ctx, func() (bool, error) {
		n, err := b.r.Claim(ctx, "b", time.Hour)
		return n == 1, err
	}); err != nil {
		t.Fatalf("b claims a's session: %v", err)
	}

	mark := a.logs.Mark()
	if err := a.r.Configure(v, in.ID, "a's model"); err != nil { // a row written under epoch 1
		t.Fatal(err)
	}
	if _, err := a.logs.WaitRecord(ctx, mark, func(r testkit.Record) bool {
		return r.Msg() == "session closed" && r.Str("sid") == in.ID
	}); err != nil {
		t.Fatalf("a's session did not end: %v\n%s", err, a.logs)
	}
	a.wantOneClose(in.ID, EndLeaseLost)
	if ev := v.ofType("session.closed"); len(ev) != 1 || ev[0].Payload.(map[string]any)["end_reason"] != EndLeaseLost {
		t.Fatalf("a's viewer got %+v; want one session.closed, end_reason lease_lost", ev)
	}
	if err := a.r.FlushStore(t.Context()); err != nil {
		t.Fatalf("a's flush after the fence: %v", err)
	}
	row, err := bst.Get(t.Context(), "", in.ID)
	if err != nil {
		t.Fatal(err)
	}
	if row.Node != "b" || row.Epoch != 2 || row.Model != "" || row.State == store.StateClosed {
		t.Fatalf("the stored session after a's fenced writes: %+v; want b's (epoch 2), not closed, no model", row)
	}
	if es, _, err := bst.HistoryFor(t.Context(), "", in.ID, 0, 10); err != nil || len(es) != 0 {
		t.Fatalf("a's end notice reached the store: %+v, %v", es, err)
	}
	if _, err := b.r.Resume(&recViewer{}, in.ID); err != nil {
		t.Fatalf("b resumes the session it claimed: %v", err)
	}
}

// TestReleaseHandsSessionsOver: a clean stop releases the node's leases,
// so that another node claims its sessions at once (not after the ttl);
// without the release the lease of an hour holds them.
func TestReleaseHandsSessionsOver(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dashgate.db")
	a := newHarness(t, func(c *Config) { c.Store = openShared(t, path); c.SuspendOnShutdown = true })
	if _, err := a.r.Claim(t.Context(), "a", time.Hour); err != nil {
		t.Fatal(err)
	}
	in, _ := a.r.Create(&recViewer{}, NewSession{Title: "made on a"})
	if err := a.r.journal.flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	b := newHarness(t, func(c *Config) { c.Store = openShared(t, path) })
	if n, err := b.r.Claim(t.Context(), "b", time.Hour); n != 0 || err != nil {
		t.Fatalf("b claims %d while a holds the lease (%v); want 0", n, err)
	}
	a.r.Shutdown(context.Background())
	a.r.Wait()
	if err := a.r.FlushStore(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n, err := b.r.Claim(t.Context(), "b", time.Hour); n != 1 || err != nil {
		t.Fatalf("b claims %d after a's clean stop (%v); want a's session", n, err)
	}
	if _, ok := b.r.Get(anon, in.ID); !ok {
		t.Fatal("a's session is not live on b")
	}
}

// TestRenewEndsWhatAnotherNodeClaimed: a renewal finds that another node
// claimed a session (a's lease ended unrenewed): the session ends with
// end_reason lease_lost before a writes anything more of it; a session a
// still holds is renewed and stays.
func TestRenewEndsWhatAnotherNodeClaimed(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dashgate.db")
	a := newHarness(t, func(c *Config) { c.Store = openShared(t, path) })
	if _, err := a.r.Claim(t.Context(), "a", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	lost, _ := a.r.Create(&recViewer{}, NewSession{Title: "taken by b"})
	if err := a.r.journal.flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	b := newHarness(t, func(c *Config) { c.Store = openShared(t, path) })
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := testkit.PollErr(ctx, func() (bool, error) {
		n, err := b.r.Claim(ctx, "b", time.Hour)
		return n == 1, err
	}); err != nil {
		t.Fatalf("b claims a's session: %v", err)
	}
	kept, _ := a.r.Create(&recViewer{}, NewSession{Title: "a's still"}) // made after b's claim: a's

	a.r.lease.renew(t.Context())
	a.wantOneClose(lost.ID, EndLeaseLost)
	if _, ok := a.r.Get(anon, kept.ID); !ok {
		t.Fatal("a's own session ended at the renewal")
	}
}
