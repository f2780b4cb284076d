package sessions

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/store/postgres"
)

// sharedStores opens two handles on one store per backend, as two nodes
// share it: a SQLite file opened twice, and one PostgreSQL database (its
// subtest is skipped when PostgreSQL is not installed, see
// testkit.Postgres) behind two pools.
var sharedStores = []struct {
	name string
	open func(t *testing.T) (a, b store.Store)
}{
	{"sqlite", func(t *testing.T) (store.Store, store.Store) {
		path := filepath.Join(t.TempDir(), "dashgate.db")
		return openShared(t, path), openShared(t, path)
	}},
	{"postgres", func(t *testing.T) (store.Store, store.Store) {
		url := testkit.Postgres(t)
		open := func() store.Store {
			st, err := postgres.Open(t.Context(), url, postgres.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		}
		return open(), open()
	}},
}

// twoNodes is a cluster of two registries, a and b, on two handles of one
// store, each Claimed as its node with leases of ttl. Neither runs Run: a
// lease lapses unless the test renews it, as when a node died. bmod, when
// not nil, changes b's Config.
func twoNodes(t *testing.T, open func(t *testing.T) (store.Store, store.Store), ttl time.Duration, bmod ...func(*Config)) (a, b *harness, sa, sb store.Store) {
	t.Helper()
	sa, sb = open(t)
	a = newHarness(t, func(c *Config) { c.Store = sa })
	b = newHarness(t, func(c *Config) {
		c.Store = sb
		for _, m := range bmod {
			m(c)
		}
	})
	for node, h := range map[string]*harness{"a": a, "b": b} {
		if _, err := h.r.Claim(t.Context(), node, ttl); err != nil {
			t.Fatal(err)
		}
	}
	return a, b, sa, sb
}

// annOn makes a session of ann's on h with a command and its output in
// its history, written to the store; it returns its id and its history.
func annOn(t *testing.T, h *harness) (string, []Message) {
	t.Helper()
	return userOn(t, h, "ann")
}

// userOn is annOn for user's session ("" the anonymous user's).
func userOn(t *testing.T, h *harness, user string) (string, []Message) {
	t.Helper()
	v := &recViewer{p: Principal{User: user}}
	in, err := h.r.Create(v, NewSession{Title: "ann's"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.r.Exec(t.Context(), v, in.ID, "/one"); err != nil {
		t.Fatal(err)
	}
	if err := h.r.journal.flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	hist, _, err := h.r.History(t.Context(), v.p, in.ID, 0, 100)
	if err != nil || len(hist) < 2 {
		t.Fatalf("ann's history on a = %v, %v; want the command and its output", kinds(hist), err)
	}
	return in.ID, hist
}

// TestAdoptAfterOwnerDied: node a holds a session of ann's and dies (its
// lease lapses unrenewed, no Release). Before and after the lapse,
// another user's resume and reopen of it on b answer as missing and
// adopt nothing. Once it lapsed, ann's resume on b adopts it: live on b,
// detached before the resume, its whole history, one INFO "session
// adopted" record naming a; the next command spawns a worker on b and
// is stored under b's epoch. a's next write of it is fenced and its
// session ends with end_reason lease_lost.
func TestAdoptAfterOwnerDied(t *testing.T) {
	t.Parallel()
	for _, backend := range sharedStores {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			const ttl = 300 * time.Millisecond
			a, b, _, sb := twoNodes(t, backend.open, ttl)
			sid, hist := annOn(t, a)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()

			// a dies: nothing renews its lease. Wait until it lapsed.
			if err := testkit.PollErr(ctx, func() (bool, error) {
				row, err := sb.Get(ctx, "ann", sid)
				return err == nil && row.Node == "a" && time.Now().After(row.LeaseUntil), err
			}); err != nil {
				t.Fatalf("a's lease did not lapse: %v", err)
			}

			bob := &recViewer{p: Principal{User: "bob"}}
			if _, err := b.r.Resume(bob, sid); !errors.Is(err, ErrNotFound) {
				t.Fatalf("bob's resume of ann's session on b: %v; want ErrNotFound", err)
			}
			if _, err := b.r.Reopen(ctx, bob, sid); !errors.Is(err, ErrNotFound) {
				t.Fatalf("bob's reopen of ann's session on b: %v; want ErrNotFound", err)
			}
			if _, ok := b.r.Get(AdminPrincipal, sid); ok {
				t.Fatal("bob's probing made ann's session live on b")
			}
			if row, err := sb.Get(ctx, "ann", sid); err != nil || row.Node != "a" || row.Epoch != 1 {
				t.Fatalf("ann's row after bob's probing: %+v, %v; want a's, epoch 1", row, err)
			}
			if recs := b.logs.Records("session adopted"); len(recs) != 0 {
				t.Fatalf("adopted by bob's probing: %v", recs)
			}

			annB := &recViewer{p: Principal{User: "ann"}}
			res, err := b.r.Resume(annB, sid)
			if err != nil {
				t.Fatalf("ann's resume on b after a's lease lapsed: %v", err)
			}
			if !slices.Equal(kinds(res.History), kinds(hist)) || res.Title != "ann's" || res.Owner != "ann" {
				t.Fatalf("adopted session: title %q owner %q history %q; want ann's, history %q", res.Title, res.Owner, kinds(res.History), kinds(hist))
			}
			recs := b.logs.Records("session adopted")
			if len(recs) != 1 {
				t.Fatalf("%d \"session adopted\" records; want 1: %v", len(recs), recs)
			}
			if r := recs[0]; r.Str("sid") != sid || r.Str("user") != "ann" || r.Str("from_node") != "a" || r["epoch"] != float64(2) || r.Str("level") != "INFO" {
				t.Fatalf("adopted record = %v; want INFO sid %s user ann from_node a epoch 2", r, sid)
			}

			// The next command spawns a worker on b, under b's epoch.
			if _, err := b.r.Exec(ctx, annB, sid, "/two"); err != nil {
				t.Fatalf("a command on b: %v", err)
			}
			if n := len(b.sp.workers()); n != 1 {
				t.Fatalf("b spawned %d workers; want 1", n)
			}
			if err := b.r.journal.flush(ctx); err != nil {
				t.Fatalf("b's writes of the adopted session: %v", err)
			}
			row, err := sb.Get(ctx, "ann", sid)
			if err != nil || row.Node != "b" || row.Epoch != 2 || row.LastSeq <= hist[len(hist)-1].Seq {
				t.Fatalf("stored after b's command: %+v, %v; want b's, epoch 2, b's entries", row, err)
			}
			// b's lease on it is renewed with b's others.
			b.r.lease.renew(ctx)
			if again, err := sb.Get(ctx, "ann", sid); err != nil || !again.LeaseUntil.After(row.LeaseUntil) {
				t.Fatalf("b's lease after a renewal: %v (was %v), %v; want renewed", again.LeaseUntil, row.LeaseUntil, err)
			}

			// a comes back: its next write is fenced, its session ends.
			mark := a.logs.Mark()
			if err := a.r.Configure(&recViewer{p: Principal{User: "ann"}}, sid, "a's model"); err != nil {
				t.Fatal(err)
			}
			if _, err := a.logs.WaitRecord(ctx, mark, func(r testkit.Record) bool {
				return r.Msg() == "session closed" && r.Str("sid") == sid
			}); err != nil {
				t.Fatalf("a's session did not end: %v\n%s", err, a.logs)
			}
			a.wantOneClose(sid, EndLeaseLost)
			if row, err := sb.Get(ctx, "ann", sid); err != nil || row.Node != "b" || row.Model != "" || row.State == store.StateClosed {
				t.Fatalf("stored after a's fenced write: %+v, %v; want b's, untouched", row, err)
			}
		})
	}
}

// TestNoAdoptionWhileOwnerLives: while node a's lease on a session is
// live, its owner's resume and reopen on b answer that a holds it, with
// the lease's time left (a HeldElsewhereError, 4010: the dashboard waits
// and asks again, issue 41), and b neither claims it nor makes it live.
// Another user's resume of it on b still answers as missing.
func TestNoAdoptionWhileOwnerLives(t *testing.T) {
	t.Parallel()
	for _, backend := range sharedStores {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			a, b, _, sb := twoNodes(t, backend.open, time.Hour)
			sid, _ := annOn(t, a)
			ann := &recViewer{p: Principal{User: "ann"}}
			for name, call := range map[string]func() error{
				"resume": func() error { _, err := b.r.Resume(ann, sid); return err },
				"reopen": func() error { _, err := b.r.Reopen(t.Context(), ann, sid); return err },
			} {
				var held *HeldElsewhereError
				if err := call(); !errors.As(err, &held) || held.Node != "a" || held.RetryIn < 59*time.Minute || held.RetryIn > time.Hour {
					t.Fatalf("%s on b while a holds it: %v; want a HeldElsewhereError naming a, about an hour left", name, err)
				}
			}
			if _, err := b.r.Resume(&recViewer{p: Principal{User: "bob"}}, sid); !errors.Is(err, ErrNotFound) {
				t.Fatalf("bob's resume on b of ann's session a holds: %v; want ErrNotFound", err)
			}
			if _, ok := b.r.Get(AdminPrincipal, sid); ok {
				t.Fatal("a's session is live on b")
			}
			if row, err := sb.Get(t.Context(), "ann", sid); err != nil || row.Node != "a" || row.Epoch != 1 {
				t.Fatalf("stored: %+v, %v; want a's, epoch 1", row, err)
			}
			if recs := b.logs.Records("session adopted"); len(recs) != 0 {
				t.Fatalf("adopted: %v", recs)
			}
			if _, err := a.r.Resume(ann, sid); err != nil {
				t.Fatalf("a's resume of its own session: %v", err)
			}
		})
	}
}

// TestAdoptOnceForResumesAtOnce: ten resumes of one lapsed session on b
// at once: every one is served, and b adopts it once (one record, the
// epoch bumped once), so no resume's claim fences another's session.
func TestAdoptOnceForResumesAtOnce(t *testing.T) {
	t.Parallel()
	for _, backend := range sharedStores {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			const ttl = 300 * time.Millisecond
			a, b, _, sb := twoNodes(t, backend.open, ttl)
			sid, _ := annOn(t, a)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			if err := testkit.PollErr(ctx, func() (bool, error) {
				row, err := sb.Get(ctx, "ann", sid)
				return err == nil && time.Now().After(row.LeaseUntil), err
			}); err != nil {
				t.Fatalf("a's lease did not lapse: %v", err)
			}
			var wg sync.WaitGroup
			for range 10 {
				wg.Go(func() {
					if _, err := b.r.Resume(&recViewer{p: Principal{User: "ann"}}, sid); err != nil {
						t.Errorf("resume: %v", err)
					}
				})
			}
			wg.Wait()
			if recs := b.logs.Records("session adopted"); len(recs) != 1 {
				t.Fatalf("%d \"session adopted\" records; want 1: %v", len(recs), recs)
			}
			if row, err := sb.Get(ctx, "ann", sid); err != nil || row.Node != "b" || row.Epoch != 2 {
				t.Fatalf("stored: %+v, %v; want b's, epoch 2", row, err)
			}
		})
	}
}

// TestAdoptOnList: once a's lease on ann's sessions lapsed, ann's list on
// b adopts them (detached, one record each) as far as ann's room goes,
// evicting nothing for it; bob's list and an admin's list on b adopt
// nothing, not even the anonymous user's sessions (the admin principal's
// User is ""). While a's lease is live, ann's list on b shows none of
// them.
func TestAdoptOnList(t *testing.T) {
	t.Parallel()
	for _, backend := range sharedStores {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			// a never renews (its harness runs no renewals): its leases lapse
			// a ttl after it made them.
			const ttl = 2 * time.Second
			a, b, _, sb := twoNodes(t, backend.open, ttl, func(c *Config) { c.MaxSessionsPerUser = 2 })
			annP := Principal{User: "ann"}
			own, err := b.r.Create(&recViewer{p: annP}, NewSession{Title: "made on b"})
			if err != nil {
				t.Fatal(err)
			}
			s1, _ := annOn(t, a)
			s2, _ := annOn(t, a)
			anonymous, _ := userOn(t, a, "")
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			// While a's leases are live, ann's list on b adopts nothing. On a
			// loaded machine making the sessions can take longer than the
			// ttl: the check is made only when the leases provably outlive
			// the call, and a list that ran past them may adopt.
			firstLapse := time.Time{}
			for _, sid := range []string{s1, s2} {
				row, err := sb.Get(ctx, "ann", sid)
				if err != nil {
					t.Fatal(err)
				}
				if firstLapse.IsZero() || row.LeaseUntil.Before(firstLapse) {
					firstLapse = row.LeaseUntil
				}
			}
			if time.Until(firstLapse) > 200*time.Millisecond {
				got := b.r.List(annP)
				onlyOwn := len(got) == 1 && got[0].ID == own.ID
				switch {
				case !onlyOwn && time.Now().Before(firstLapse):
					t.Fatalf("ann's list on b while a lives = %v; want only %s", got, own.ID)
				case !onlyOwn:
					t.Skipf("a's leases lapsed during ann's first list on a loaded machine (%v)", got)
				}
			}
			for sid, owner := range map[string]string{s1: "ann", s2: "ann", anonymous: ""} {
				if err := testkit.PollErr(ctx, func() (bool, error) {
					row, err := sb.Get(ctx, owner, sid)
					return err == nil && time.Now().After(row.LeaseUntil), err
				}); err != nil {
					t.Fatalf("a's lease did not lapse: %v", err)
				}
			}
			if got := b.r.List(Principal{User: "bob"}); len(got) != 0 {
				t.Fatalf("bob's list on b = %v; want none", got)
			}
			if got := b.r.List(AdminPrincipal); len(got) != 1 {
				t.Fatalf("the admin's list on b = %v; want b's one session", got)
			}
			if recs := b.logs.Records("session adopted"); len(recs) != 0 {
				t.Fatalf("adopted by bob's or the admin's list: %v", recs)
			}

			got := b.r.List(annP)
			recs := b.logs.Records("session adopted")
			if len(got) != 2 || len(recs) != 1 {
				t.Fatalf("ann's list on b = %v, adopted %v; want b's own and one of a's (room for two)", got, recs)
			}
			adopted := recs[0].Str("sid")
			for _, in := range got {
				switch in.ID {
				case own.ID:
				case adopted:
					if in.State != StateDetached || (adopted != s1 && adopted != s2) {
						t.Fatalf("adopted %+v; want one of a's, detached", in)
					}
				default:
					t.Fatalf("ann's list holds %s, neither b's own nor the adopted one", in.ID)
				}
			}
			if row, err := sb.Get(ctx, "ann", adopted); err != nil || row.Node != "b" || row.Epoch != 2 {
				t.Fatalf("stored adopted session: %+v, %v; want b's, epoch 2", row, err)
			}
			left := s1
			if adopted == s1 {
				left = s2
			}
			if row, err := sb.Get(ctx, "ann", left); err != nil || row.Node != "a" || row.Epoch != 1 {
				t.Fatalf("the session beyond ann's room: %+v, %v; want still a's, epoch 1 (not claimed)", row, err)
			}
		})
	}
}
