package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/store/storetest"
)

func TestMain(m *testing.M) {
	testkit.VerifyNoLeaks(m, goleak.Cleanup(func(code int) {
		// The server is a child process, not a goroutine: stopped here,
		// and StopPostgres fails when any of its processes is left.
		if err := testkit.StopPostgres(); err != nil {
			fmt.Fprintln(os.Stderr, "stop PostgreSQL:", err)
			code = max(code, 1)
		}
		os.Exit(code)
	}))
}

// openTest opens a store on url and closes it when t ends.
func openTest(t testing.TB, url string, o Options) *Store {
	t.Helper()
	s, err := Open(t.Context(), url, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store {
		return openTest(t, testkit.Postgres(t), Options{})
	})
}

// TestNodesConformance runs the store.Nodes table.
func TestNodesConformance(t *testing.T) {
	t.Parallel()
	storetest.RunNodes(t, func(t *testing.T) store.Nodes {
		return openTest(t, testkit.Postgres(t), Options{})
	})
}

// TestTwoNodesOneDatabase runs the two-node tables with each node on its
// own Store (its own pool) over one database, as two dashgates share it.
func TestTwoNodesOneDatabase(t *testing.T) {
	t.Parallel()
	for name, run := range map[string]func(*testing.T, store.Store, store.Store){
		"lease lapses":                  storetest.TwoNodes,
		"claims at once":                storetest.ClaimRace,
		"claims of one session at once": storetest.ClaimSessionRace,
		"settings written at once":      storetest.SettingsRace,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			url := testkit.Postgres(t)
			run(t, openTest(t, url, Options{}), openTest(t, url, Options{}))
		})
	}
}

// TestClaimOneSession has 20 claimers, on 4 stores of one database, race
// for one session whose lease lapsed: exactly one gets it, at the next
// epoch, and the store names it as the holder.
func TestClaimOneSession(t *testing.T) {
	t.Parallel()
	url := testkit.Postgres(t)
	var stores []*Store
	for range 4 {
		stores = append(stores, openTest(t, url, Options{MaxConns: 5}))
	}
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	row := store.Session{ID: "s", Title: "t", CreatedAt: t0, LastActive: t0, State: "detached",
		Node: "dead", LeaseUntil: t0.Add(-time.Second), Epoch: 7}
	if err := stores[0].Apply(t.Context(), store.Batch{Sessions: []store.Session{row}}); err != nil {
		t.Fatal(err)
	}
	const claimers = 20
	got := make([][]store.Session, claimers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range claimers {
		wg.Go(func() {
			<-start
			var err error
			if got[i], err = stores[i%len(stores)].Claim(t.Context(), fmt.Sprintf("n%02d", i), time.Minute, t0); err != nil {
				t.Errorf("Claim n%02d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	var winners []string
	for i, ss := range got {
		for _, s := range ss {
			winners = append(winners, fmt.Sprintf("n%02d", i))
			if s.ID != "s" || s.Epoch != 8 {
				t.Errorf("n%02d claimed %s at epoch %d; want s at 8", i, s.ID, s.Epoch)
			}
		}
	}
	if len(winners) != 1 {
		t.Fatalf("winners %v; want exactly one", winners)
	}
	if s, err := stores[1].Get(t.Context(), "", "s"); err != nil || s.Node != winners[0] || s.Epoch != 8 {
		t.Errorf("stored s = node %q epoch %d, %v; want %s at 8", s.Node, s.Epoch, err, winners[0])
	}
}

// TestMigrateOnce starts several Opens of one fresh database at once: all
// succeed and goose's table records each step once.
func TestMigrateOnce(t *testing.T) {
	t.Parallel()
	url := testkit.Postgres(t)
	const nodes = 8
	errs := make([]error, nodes)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() {
			<-start
			s, err := Open(t.Context(), url, Options{})
			if err == nil {
				err = s.Close()
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open %d: %v", i, err)
		}
	}
	conn := connect(t, url)
	rows, err := conn.Query(t.Context(), `SELECT version_id, count(*) FROM `+gooseTable+` WHERE version_id > 0 GROUP BY version_id ORDER BY version_id`)
	if err != nil {
		t.Fatal(err)
	}
	type applied struct{ Version, N int64 }
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[applied])
	if err != nil {
		t.Fatal(err)
	}
	var want []applied
	for v := int64(1); v <= schemaVersion; v++ {
		want = append(want, applied{v, 1})
	}
	if !slices.Equal(got, want) {
		t.Errorf("goose steps (version, times) = %v; want %v", got, want)
	}
}

// TestNewerSchema: a database migrated by a newer dashgate is refused, and
// left as it was.
func TestNewerSchema(t *testing.T) {
	t.Parallel()
	url := testkit.Postgres(t)
	openTest(t, url, Options{}).Close()
	conn := connect(t, url)
	if _, err := conn.Exec(t.Context(), `INSERT INTO `+gooseTable+` (version_id, is_applied) VALUES ($1, true)`, schemaVersion+1); err != nil {
		t.Fatal(err)
	}
	_, err := Open(t.Context(), url, Options{})
	if !errors.Is(err, ErrNewerSchema) || !strings.Contains(err.Error(), fmt.Sprintf("schema version %d", schemaVersion+1)) {
		t.Fatalf("Open of a newer schema: %v; want ErrNewerSchema naming version %d", err, schemaVersion+1)
	}
}

// connect is a plain connection to url, closed when t ends.
func connect(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// TestCallTimeout: a write that waits for a row lock another connection
// holds returns a deadline error once CallTimeout passes (the caller's
// context has none), and the server cancels the statement: once the lock
// is gone the write has not happened, and the store serves the next call.
func TestCallTimeout(t *testing.T) {
	t.Parallel()
	url := testkit.Postgres(t)
	s := openTest(t, url, Options{CallTimeout: time.Second})
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	row := store.Session{ID: "s", Title: "before", CreatedAt: t0, LastActive: t0, State: "attached"}
	if err := s.Apply(t.Context(), store.Batch{Sessions: []store.Session{row}}); err != nil {
		t.Fatal(err)
	}
	locker := connect(t, url)
	tx, err := locker.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), `SELECT 1 FROM sessions WHERE id = 's' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"Rename": func() error { _, err := s.Rename(t.Context(), "", "s", "during"); return err },
		"Apply":  func() error { return s.Apply(t.Context(), store.Batch{Sessions: []store.Session{row}}) },
	} {
		if err := call(); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s under a held row lock: %v; want context.DeadlineExceeded", name, err)
		}
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Nothing runs on behind the error: the server canceled the UPDATE.
	var waiting int
	testkit.WaitFor(t, 10*time.Second, "no statement of the store left on the server", func() bool {
		err := locker.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active'`).Scan(&waiting)
		return err == nil && waiting == 0
	})
	if got, err := s.Get(t.Context(), "", "s"); err != nil || got.Title != "before" {
		t.Errorf("after the timed-out calls: title %q, %v; want before (no write)", got.Title, err)
	}
	if ok, err := s.Rename(t.Context(), "", "s", "after"); !ok || err != nil {
		t.Errorf("Rename after the lock went = %v, %v; want done", ok, err)
	}
}

// TestPassword: the password of the URL is in neither Path nor the error
// of a refused login nor of a URL that does not parse.
func TestPassword(t *testing.T) {
	t.Parallel()
	good := testkit.Postgres(t)
	u, err := url.Parse(good)
	if err != nil {
		t.Fatal(err)
	}
	password, _ := u.User.Password()
	s := openTest(t, good, Options{})
	if p := s.Path(); strings.Contains(p, password) || !strings.HasPrefix(p, "postgres://postgres@127.0.0.1:") || !strings.HasSuffix(p, u.Path) {
		t.Errorf("Path = %q; want postgres://postgres@127.0.0.1:<port>%s, without the password", p, u.Path)
	}
	const wrong = "Wr0ngSecret-xyzzy"
	bad := *u
	bad.User = url.UserPassword("postgres", wrong)
	inQuery := *u
	inQuery.User = url.User("postgres")
	inQuery.RawQuery += "&password=" + wrong
	for name, tc := range map[string]struct{ url, secret string }{
		"wrong password":          {bad.String(), wrong},
		"wrong password in query": {inQuery.String(), wrong},
		"unparsable":              {"postgres://postgres:" + wrong + "@127.0.0.1:notaport/db", wrong},
	} {
		_, err := Open(t.Context(), tc.url, Options{})
		if err == nil {
			t.Errorf("%s: Open succeeded", name)
			continue
		}
		if strings.Contains(err.Error(), tc.secret) {
			t.Errorf("%s: error holds the password: %v", name, err)
		}
		if !strings.HasPrefix(err.Error(), "store postgres") {
			t.Errorf("%s: error %q; want it to start with store postgres", name, err)
		}
	}
}

// FuzzSearch searches with storetest.HostileQueries as seeds: any string is a query that
// does not fail.
func FuzzSearch(f *testing.F) {
	for _, q := range storetest.HostileQueries() {
		f.Add(q)
	}
	s := openTest(f, testkit.Postgres(f), Options{})
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	b := store.Batch{Sessions: []store.Session{{ID: "s", Title: "t", CreatedAt: t0, LastActive: t0, State: "attached"}}}
	for i, text := range []string{"quick brown fox", "it's a 'quoted' \\ back\\slash & | ! <-> :* (x)", "Ünïcödé ΣΊΣΥΦΟΣ"} {
		b.Entries = append(b.Entries, store.SessionEntry{SessionID: "s", Entry: store.Entry{Seq: uint64(i + 1), Role: "user", Kind: "prompt", Text: text, At: t0}})
	}
	if err := s.Apply(f.Context(), b); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, q string) {
		if _, err := s.Search(t.Context(), "", q, 10); err != nil {
			t.Errorf("Search(%q): %v", q, err)
		}
	})
}

// TestSearchWords: words are found whatever surrounds them in the text
// (PostgreSQL's own parser would take a host name, a path or an e-mail
// address as one token), case-folded beyond ASCII whatever the server's
// locale, and quotes and backslashes in the text are just separators.
func TestSearchWords(t *testing.T) {
	t.Parallel()
	s := openTest(t, testkit.Postgres(t), Options{})
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	b := store.Batch{Sessions: []store.Session{{ID: "s", Title: "t", CreatedAt: t0, LastActive: t0, State: "attached"}}}
	texts := []string{
		"see dashgate.example.com/docs/setup.html for it",
		"mail ann@example.org now",
		"ÜBER Straße ΣΊΣΥΦΟΣ",
		`it's a 'quoted' back\slash`,
		"nul\x00byte and \xff invalid",
	}
	for i, text := range texts {
		b.Entries = append(b.Entries, store.SessionEntry{SessionID: "s", Entry: store.Entry{Seq: uint64(i + 1), Role: "user", Kind: "prompt", Text: text, At: t0}})
	}
	if err := s.Apply(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		query string
		want  []uint64
	}{
		{"example", []uint64{2, 1}},
		{"setup html", []uint64{1}},
		{"docs", []uint64{1}},
		{"ann", []uint64{2}},
		{"über", []uint64{3}},
		{"σίσυφοσ", []uint64{3}},
		{"straße", []uint64{3}},
		{"quoted s", []uint64{4}},
		{`back\slash`, []uint64{4}},
		{"nul byte invalid", []uint64{5}},
	} {
		hits, err := s.Search(t.Context(), "", tc.query, 10)
		var got []uint64
		for _, h := range hits {
			got = append(got, h.Seq)
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Search(%q) = %v, %v; want %v", tc.query, got, err, tc.want)
		}
	}
	// NUL and invalid UTF-8, which PostgreSQL text cannot hold, are stored as U+FFFD.
	es, _, err := s.HistoryFor(t.Context(), "", "s", 0, 10)
	if err != nil || len(es) != len(texts) || es[4].Text != "nul\uFFFDbyte and \uFFFD invalid" {
		t.Errorf("History = %d entries, %v; want entry 5 with U+FFFD for NUL and \\xff", len(es), err)
	}
}

// TestApplyWaitsForClaim: a Claim in flight (another transaction bumped
// the epoch and holds the row) makes Apply wait and then see the new
// epoch: a write under the old one is fenced, never slipped in between
// the check and the commit.
func TestApplyWaitsForClaim(t *testing.T) {
	t.Parallel()
	url := testkit.Postgres(t)
	s := openTest(t, url, Options{CallTimeout: time.Minute})
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	row := store.Session{ID: "s", Title: "t", CreatedAt: t0, LastActive: t0, State: "attached", Node: "a", Epoch: 1}
	if err := s.Apply(t.Context(), store.Batch{Sessions: []store.Session{row}}); err != nil {
		t.Fatal(err)
	}
	claimer := connect(t, url)
	tx, err := claimer.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(t.Context(), `UPDATE sessions SET node = 'b', epoch = epoch + 1 WHERE id = 's'`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- s.Apply(t.Context(), store.Batch{Entries: []store.SessionEntry{{SessionID: "s", Epoch: 1,
			Entry: store.Entry{Seq: 1, Role: "user", Kind: "prompt", Text: "stale", At: t0}}}})
	}()
	var applied error
	var finished bool
	watcher := connect(t, url)
	testkit.WaitFor(t, 10*time.Second, "Apply waiting on the claimed row", func() bool {
		select {
		case applied = <-done:
			finished = true
			return true
		default:
		}
		var n int
		err := watcher.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		return err == nil && n > 0
	})
	if finished {
		t.Fatalf("Apply returned (%v) while the claim was in flight; want it to wait for the row", applied)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, store.ErrFenced) {
		t.Fatalf("Apply under the epoch the claim replaced: %v; want ErrFenced", err)
	}
	if es, _, err := s.HistoryFor(t.Context(), "", "s", 0, 10); err != nil || len(es) != 0 {
		t.Errorf("History = %d entries, %v; want none written", len(es), err)
	}
}

// TestSearchBeyondWindow: an entry older than the newest searchWindow is
// found (from the index), in its place among newer hits.
func TestSearchBeyondWindow(t *testing.T) {
	t.Parallel()
	s := openTest(t, testkit.Postgres(t), Options{})
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	b := store.Batch{Sessions: []store.Session{{ID: "s", Title: "t", CreatedAt: t0, LastActive: t0, State: "attached"}}}
	for seq := uint64(1); seq <= searchWindow+2; seq++ {
		text := "hay"
		if seq == 1 || seq == searchWindow+2 {
			text = "hay needle"
		}
		b.Entries = append(b.Entries, store.SessionEntry{SessionID: "s", Entry: store.Entry{Seq: seq, Role: "user", Kind: "prompt", Text: text, At: t0}})
	}
	if err := s.Apply(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	hits, err := s.Search(t.Context(), "", "needle", 10)
	var got []uint64
	for _, h := range hits {
		got = append(got, h.Seq)
	}
	if want := []uint64{searchWindow + 2, 1}; err != nil || !slices.Equal(got, want) {
		t.Errorf("Search(needle) = %v, %v; want %v", got, err, want)
	}
}

// TestClaimSkipsLocked: a Claim does not wait for a row another
// transaction holds (a claim in flight elsewhere): it takes the other
// claimable sessions at once and leaves that one.
func TestClaimSkipsLocked(t *testing.T) {
	t.Parallel()
	url := testkit.Postgres(t)
	s := openTest(t, url, Options{CallTimeout: 2 * time.Second})
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	var b store.Batch
	for _, id := range []string{"held", "free"} {
		b.Sessions = append(b.Sessions, store.Session{ID: id, Title: "t", CreatedAt: t0, LastActive: t0, State: "detached",
			Node: "dead", LeaseUntil: t0.Add(-time.Second), Epoch: 1})
	}
	if err := s.Apply(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	locker := connect(t, url)
	tx, err := locker.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(t.Context(), `SELECT 1 FROM sessions WHERE id = 'held' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	got, err := s.Claim(t.Context(), "a", time.Minute, t0)
	var ids []string
	for _, ss := range got {
		ids = append(ids, ss.ID)
	}
	if err != nil || !slices.Equal(ids, []string{"free"}) {
		t.Fatalf("Claim beside a held row = %v, %v; want [free] at once", ids, err)
	}
}

// TestApplyOwnerRace: a session another transaction creates under another
// owner while Apply creates it too is refused (ErrOtherOwner) once that
// transaction commits, not overwritten: the check before the write saw no
// row, the upsert's own condition sees the owner.
func TestApplyOwnerRace(t *testing.T) {
	t.Parallel()
	url := testkit.Postgres(t)
	s := openTest(t, url, Options{CallTimeout: time.Minute})
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	other := connect(t, url)
	tx, err := other.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(t.Context(), `INSERT INTO sessions (id, owner, title, created_at, last_active, state, end_reason, closed_at, model)
VALUES ('s', 'bob', 'bob''s', 0, 0, 'attached', '', 0, '')`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- s.Apply(t.Context(), store.Batch{Sessions: []store.Session{{ID: "s", Owner: "ann", Title: "ann's", CreatedAt: t0, LastActive: t0, State: "attached"}}})
	}()
	watcher := connect(t, url)
	testkit.WaitFor(t, 10*time.Second, "Apply waiting on the other insert", func() bool {
		var n int
		err := watcher.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		return err == nil && n > 0
	})
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, store.ErrOtherOwner) {
		t.Errorf("Apply of ann's session beside bob's insert: %v; want ErrOtherOwner", err)
	}
	if got, err := s.Get(t.Context(), "bob", "s"); err != nil || got.Title != "bob's" {
		t.Errorf("bob's session = %q, %v; want untouched", got.Title, err)
	}
}

// TestSearchWordCap: only the first store.MaxSearchWords words of a query
// count, as in store/sqlite.
func TestSearchWordCap(t *testing.T) {
	t.Parallel()
	s := openTest(t, testkit.Postgres(t), Options{})
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	if err := s.Apply(t.Context(), store.Batch{Sessions: []store.Session{{ID: "s", Title: "t", CreatedAt: t0, LastActive: t0, State: "attached"}},
		Entries: []store.SessionEntry{{SessionID: "s", Entry: store.Entry{Seq: 1, Role: "user", Kind: "prompt", Text: "word", At: t0}}}}); err != nil {
		t.Fatal(err)
	}
	q := strings.Repeat("word ", store.MaxSearchWords) + "absent"
	if hits, err := s.Search(t.Context(), "", q, 10); err != nil || len(hits) != 1 {
		t.Errorf("Search(%d × word, then absent) = %d hits, %v; want 1 (the word past the cap ignored)", store.MaxSearchWords, len(hits), err)
	}
}

// TestLeasesOnTheDatabaseClock: with the zero now (the registry's calls)
// Claim, ClaimSession and Renew extend leases from the database's now()
// (microseconds), not from this process's clock (nanoseconds): each lease
// minus its ttl is a whole microsecond, no later than the database's
// now() read after.
func TestLeasesOnTheDatabaseClock(t *testing.T) {
	t.Parallel()
	s := openTest(t, testkit.Postgres(t), Options{})
	ctx := t.Context()
	if err := s.Apply(ctx, store.Batch{Sessions: []store.Session{{ID: "a", State: "detached"}, {ID: "b", State: "detached"}}}); err != nil {
		t.Fatal(err)
	}
	const ttl = time.Minute
	claimed, err := s.Claim(ctx, "n", ttl, time.Time{})
	if err != nil || len(claimed) != 2 {
		t.Fatalf("Claim = %v, %v", claimed, err)
	}
	one, err := s.ClaimSession(ctx, "m", "b", ttl, time.Time{})
	if !errors.Is(err, store.ErrLeaseHeld) {
		t.Fatalf("ClaimSession of n's live lease = %+v, %v; want ErrLeaseHeld", one, err)
	}
	if _, err := s.Renew(ctx, "n", map[string]uint64{"a": claimed[0].Epoch, "b": claimed[1].Epoch}, ttl, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Release(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if one, err = s.ClaimSession(ctx, "m", "b", ttl, time.Time{}); err != nil {
		t.Fatal(err)
	}
	var dbNow time.Time
	if err := s.pool.QueryRow(ctx, `SELECT now()`).Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	for _, l := range append(claimed, one) {
		from := l.LeaseUntil.Add(-ttl)
		if from.Nanosecond()%1000 != 0 || from.After(dbNow) {
			t.Errorf("%s: lease from %v (ttl before %v): want a whole microsecond of the database's clock, no later than its now() %v", l.ID, from, l.LeaseUntil, dbNow)
		}
	}
}

// TestClusterSecret: two nodes (two pools on one database) asking for a
// secret at once get the same one, the winner's candidate; a later ask,
// with another candidate, gets it again; another name is another secret.
func TestClusterSecret(t *testing.T) {
	t.Parallel()
	url := testkit.Postgres(t)
	a, b := openTest(t, url, Options{}), openTest(t, url, Options{})
	var wg sync.WaitGroup
	got := make([][]byte, 16)
	for i := range got {
		st := a
		if i%2 == 1 {
			st = b
		}
		wg.Go(func() {
			s, err := st.ClusterSecret(t.Context(), "cookie", []byte(fmt.Sprintf("candidate-%02d", i)))
			if err != nil {
				t.Errorf("ask %d: %v", i, err)
			}
			got[i] = s
		})
	}
	wg.Wait()
	for i, s := range got {
		if !bytes.Equal(s, got[0]) || !bytes.HasPrefix(s, []byte("candidate-")) {
			t.Fatalf("ask %d got %q, ask 0 %q: want one winner's candidate for all", i, s, got[0])
		}
	}
	if s, err := b.ClusterSecret(t.Context(), "cookie", []byte("late")); err != nil || !bytes.Equal(s, got[0]) {
		t.Fatalf("a later ask: %q, %v; want %q", s, err, got[0])
	}
	if s, err := a.ClusterSecret(t.Context(), "other", []byte("other's")); err != nil || string(s) != "other's" {
		t.Fatalf("another name: %q, %v", s, err)
	}
}
