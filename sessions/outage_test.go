package sessions

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/store"
)

// errStoreDown is what a downStore answers while it is down.
var errStoreDown = errors.New("test: the store is down")

// downStore is a real store whose writes (Apply) and renewals (Renew) fail
// while their switch is on, as PostgreSQL's do while it is stopped.
type downStore struct {
	store.Store
	applyDown, renewDown atomic.Bool
}

func (d *downStore) Apply(ctx context.Context, b store.Batch) error {
	if d.applyDown.Load() {
		return errStoreDown
	}
	return d.Store.Apply(ctx, b)
}

func (d *downStore) Renew(ctx context.Context, node string, held map[string]uint64, ttl time.Duration, now time.Time) ([]string, error) {
	if d.renewDown.Load() {
		return nil, errStoreDown
	}
	return d.Store.Renew(ctx, node, held, ttl, now)
}

// down turns both switches.
func (d *downStore) down(on bool) {
	d.applyDown.Store(on)
	d.renewDown.Store(on)
}

// runRegistry runs h's Run until the test ends.
func runRegistry(t *testing.T, h *harness) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { h.r.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// notices is the texts of the notice events v got.
func notices(v *recViewer) []string {
	var out []string
	for _, ev := range v.ofType("notice") {
		out = append(out, ev.Payload.(map[string]any)["text"].(string))
	}
	return out
}

func countOf(texts []string, want string) int {
	n := 0
	for _, s := range texts {
		if s == want {
			n++
		}
	}
	return n
}

// TestLeaseLapseRefusesNewWork: the store is unreachable for longer than
// the lease: once the proven time passed, the viewer is told once, a
// prompt, a slash command and a terminal answer ErrLeaseUnproven and
// record nothing, while resume, list and history go on; when the store
// is back the next renewal proves the hold, the viewer is told once, and
// the same command works. One WARN "store unreachable", one WARN "leases
// unproven", one INFO "leases proven".
func TestLeaseLapseRefusesNewWork(t *testing.T) {
	t.Parallel()
	st := &downStore{Store: openShared(t, filepath.Join(t.TempDir(), "dashgate.db"))}
	h := newHarness(t, func(c *Config) { c.Store = st })
	const ttl = 600 * time.Millisecond
	if _, err := h.r.Claim(t.Context(), "a", ttl); err != nil {
		t.Fatal(err)
	}
	v := &recViewer{}
	in, err := h.r.Create(v, NewSession{Title: "chat"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.r.Exec(t.Context(), v, in.ID, "/one"); err != nil {
		t.Fatal(err)
	}
	if err := h.r.journal.flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	runRegistry(t, h)

	st.down(true)
	testkit.WaitFor(t, 10*time.Second, "the lapse notice", func() bool { return countOf(notices(v), leaseLapsedNotice) > 0 })
	if _, err := h.r.Exec(t.Context(), v, in.ID, "/two"); !errors.Is(err, ErrLeaseUnproven) || err.Error() != ErrLeaseUnproven.Error() {
		t.Fatalf("Exec after the lapse: %v; want ErrLeaseUnproven", err)
	}
	if _, _, err := h.r.Prompt(v, in.ID, "hello"); !errors.Is(err, ErrLeaseUnproven) {
		t.Fatalf("Prompt after the lapse: %v; want ErrLeaseUnproven", err)
	}
	if _, err := h.r.AttachTerminal(t.Context(), anon, in.ID, TerminalOptions{}); !errors.Is(err, ErrLeaseUnproven) {
		t.Fatalf("AttachTerminal after the lapse: %v; want ErrLeaseUnproven", err)
	}
	if n := len(h.sp.terminals()); n != 0 {
		t.Fatalf("%d terminals started after the lapse", n)
	}
	if got := countOf(notices(v), leaseLapsedNotice); got != 1 {
		t.Fatalf("lapse notices %d; want 1: %q", got, notices(v))
	}
	// What needs no new work goes on.
	res, err := h.r.Resume(&recViewer{}, in.ID)
	if err != nil {
		t.Fatalf("Resume after the lapse: %v", err)
	}
	for _, m := range res.History {
		if m.Text == "/two" || m.Text == "hello" {
			t.Fatalf("a refused call was recorded: %+v", res.History)
		}
	}
	if len(h.r.List(anon)) != 1 {
		t.Fatal("List after the lapse lost the session")
	}

	st.down(false)
	testkit.WaitFor(t, 10*time.Second, "the proven notice", func() bool { return countOf(notices(v), leaseProvenNotice) > 0 })
	if _, err := h.r.Exec(t.Context(), v, in.ID, "/three"); err != nil {
		t.Fatalf("Exec once the hold is proven again: %v", err)
	}
	testkit.WaitFor(t, 10*time.Second, "the leases proven record", func() bool { return len(h.logs.Records("leases proven")) > 0 })
	if got := notices(v); countOf(got, leaseLapsedNotice) != 1 || countOf(got, leaseProvenNotice) != 1 {
		t.Fatalf("notices %q; want one lapse and one proven", got)
	}
	for _, c := range []struct{ msg, level string }{
		{"store unreachable", "WARN"}, {"leases unproven", "WARN"}, {"leases proven", "INFO"},
	} {
		recs := h.logs.Records(c.msg)
		if len(recs) != 1 || recs[0].Str("level") != c.level || recs[0].Str("node") != "a" {
			t.Fatalf("%q records: %v; want one at %s with node a\n%s", c.msg, recs, c.level, h.logs)
		}
	}
	if recs := h.logs.Records("store reachable"); len(recs) != 0 {
		t.Fatalf("store reachable records %v beside leases proven; want none (one record per state change)", recs)
	}
	if n, _ := h.logs.Records("leases unproven")[0].Int("sessions"); n != 1 {
		t.Fatalf("leases unproven: sessions %d; want 1", n)
	}
	if rec := h.logs.Records("leases proven")[0]; rec["sessions"] != float64(1) || rec["lost"] != float64(0) {
		t.Fatalf("leases proven: %v; want sessions 1, lost 0\n%s", rec, h.logs)
	}
	if recs := h.logs.Records("store unreachable"); recs[0].Str("err") == "" {
		t.Fatalf("store unreachable without err: %v", recs[0])
	}
}

// TestLeaseLostDuringOutage: while node a could not reach the store its
// lease lapsed and node b claimed the session; when the store is back,
// a's renewal, or the fenced write of its queued row (the lapse notice),
// ends it lease_lost (no "proven" notice) and counts it lost.
func TestLeaseLostDuringOutage(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dashgate.db")
	st := &downStore{Store: openShared(t, path)}
	a := newHarness(t, func(c *Config) { c.Store = st })
	const ttl = 300 * time.Millisecond
	if _, err := a.r.Claim(t.Context(), "a", ttl); err != nil {
		t.Fatal(err)
	}
	v := &recViewer{}
	in, _ := a.r.Create(v, NewSession{Title: "taken by b"})
	if err := a.r.journal.flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	st.down(true)
	a.r.lease.renew(t.Context()) // fails: store unreachable
	testkit.WaitFor(t, 10*time.Second, "a's refusal", func() bool {
		_, err := a.r.Exec(t.Context(), v, in.ID, "/x")
		return errors.Is(err, ErrLeaseUnproven)
	})
	b := newHarness(t, func(c *Config) { c.Store = openShared(t, path) })
	if n, err := b.r.Claim(t.Context(), "b", time.Hour); n != 1 || err != nil {
		t.Fatalf("b claims %d (%v); want a's lapsed session", n, err)
	}
	st.down(false)
	a.r.lease.renew(t.Context())
	testkit.WaitFor(t, 10*time.Second, "a's session's end", func() bool { return len(a.closedRecords(in.ID)) > 0 })
	a.wantOneClose(in.ID, EndLeaseLost)
	testkit.WaitFor(t, 10*time.Second, "the leases proven record", func() bool { return len(a.logs.Records("leases proven")) > 0 })
	if got := notices(v); countOf(got, leaseLapsedNotice) != 1 || countOf(got, leaseProvenNotice) != 0 {
		t.Fatalf("notices %q; want the lapse only", got)
	}
	recs := a.logs.Records("leases proven")
	if len(recs) != 1 || recs[0]["lost"] != float64(1) || recs[0]["sessions"] != float64(0) {
		t.Fatalf("leases proven records %v; want one, lost 1, sessions 0", recs)
	}
}

// TestRenewWhileRowsQueued: the store takes renewals but not writes (the
// journal's backlog cannot drain): a renewal still renews the sessions
// whose rows are stored, and a session whose first row is still queued is
// not taken for lost; once its row is stored it is renewed too.
func TestRenewWhileRowsQueued(t *testing.T) {
	t.Parallel()
	st := &downStore{Store: openShared(t, filepath.Join(t.TempDir(), "dashgate.db"))}
	h := newHarness(t, func(c *Config) { c.Store = st })
	if _, err := h.r.Claim(t.Context(), "a", time.Hour); err != nil {
		t.Fatal(err)
	}
	stored, _ := h.r.Create(&recViewer{}, NewSession{Title: "stored"})
	if err := h.r.journal.flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	before, err := st.Get(t.Context(), "", stored.ID)
	if err != nil {
		t.Fatal(err)
	}
	st.applyDown.Store(true)
	queued, _ := h.r.Create(&recViewer{}, NewSession{Title: "queued"})
	testkit.WaitFor(t, 10*time.Second, "the failed write", func() bool { return len(h.logs.Records("store write failed")) > 0 })

	h.r.lease.renew(t.Context())
	after, err := st.Get(t.Context(), "", stored.ID)
	if err != nil || !after.LeaseUntil.After(before.LeaseUntil) {
		t.Fatalf("stored session's lease %v -> %v (%v); want renewed while the backlog waits", before.LeaseUntil, after.LeaseUntil, err)
	}
	if _, ok := h.r.Get(anon, queued.ID); !ok || len(h.closedRecords(queued.ID)) != 0 {
		t.Fatalf("the session whose row is queued ended at the renewal:\n%s", h.logs)
	}

	st.applyDown.Store(false)
	testkit.WaitFor(t, 10*time.Second, "the backlog stored", func() bool { return h.r.journal.flush(t.Context()) == nil })
	row, err := st.Get(t.Context(), "", queued.ID)
	if err != nil {
		t.Fatal(err)
	}
	h.r.lease.renew(t.Context())
	again, err := st.Get(t.Context(), "", queued.ID)
	if err != nil || !again.LeaseUntil.After(row.LeaseUntil) {
		t.Fatalf("queued session's lease %v -> %v (%v); want renewed once stored", row.LeaseUntil, again.LeaseUntil, err)
	}
}

// TestBacklogLossCountedOnce: with a backlog of 3 entries and a store
// that refuses writes, a chat's later entries are dropped: one WARN at
// the first drop, and once the store is back exactly one ERROR record
// that counts them (what the memory has and the store lacks) and names
// the session.
func TestBacklogLossCountedOnce(t *testing.T) {
	t.Parallel()
	st := &downStore{Store: openShared(t, filepath.Join(t.TempDir(), "dashgate.db"))}
	h := newHarness(t, func(c *Config) { c.Store = st; c.StoreBacklog = 3 })
	v := &recViewer{}
	in, _ := h.r.Create(v, NewSession{Title: "chat"})
	if err := h.r.journal.flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	st.applyDown.Store(true)
	for range 10 {
		if _, err := h.r.Exec(t.Context(), v, in.ID, "/echo"); err != nil {
			t.Fatalf("chat while the store is down: %v", err)
		}
	}
	if len(h.logs.Records("store entries dropped")) != 0 {
		t.Fatal("the loss was counted before the burst ended")
	}
	st.applyDown.Store(false)
	testkit.WaitFor(t, 10*time.Second, "the backlog stored", func() bool { return h.r.journal.flush(t.Context()) == nil })
	es, _, err := st.HistoryFor(t.Context(), "", in.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	mem := len(h.historyOf(in.ID))
	lost := mem - len(es)
	if lost <= 0 || mem != 20 {
		t.Fatalf("the store has %d of the %d entries in memory (want 20): nothing was dropped", len(es), mem)
	}
	warns := h.logs.Records("store backlog full")
	if len(warns) != 1 || warns[0].Str("level") != "WARN" {
		t.Fatalf("store backlog full records: %v; want one WARN", warns)
	}
	recs := h.logs.Records("store entries dropped")
	if len(recs) != 1 || recs[0].Str("level") != "ERROR" {
		t.Fatalf("store entries dropped records: %v; want one ERROR\n%s", recs, h.logs)
	}
	if n, _ := recs[0].Int("dropped_entries"); n != lost {
		t.Fatalf("dropped_entries %d; the store lacks %d", n, lost)
	}
	byS, _ := recs[0]["lost"].([]any)
	if n, _ := recs[0].Int("sessions"); n != 1 || len(byS) != 1 || byS[0].(map[string]any)["sid"] != in.ID ||
		byS[0].(map[string]any)["entries"] != float64(lost) {
		t.Fatalf("the ERROR record's sessions: %v; want one, %s with %d entries", recs[0], in.ID, lost)
	}
	var carrying int
	for _, rec := range h.logs.Records("") {
		if _, ok := rec["dropped_entries"]; ok && rec.Str("level") == "ERROR" {
			carrying++
		}
	}
	if carrying != 1 {
		t.Fatalf("%d ERROR records count the loss; want 1\n%s", carrying, h.logs)
	}
}

// TestFlushRightAfterOutage: the store is back while the journal waits out
// its backoff, and the registry flushes at once (a shutdown right after an
// outage): what was queued is written, nothing is reported lost.
func TestFlushRightAfterOutage(t *testing.T) {
	t.Parallel()
	st := &downStore{Store: openShared(t, filepath.Join(t.TempDir(), "dashgate.db"))}
	h := newHarness(t, func(c *Config) { c.Store = st })
	v := &recViewer{}
	in, _ := h.r.Create(v, NewSession{Title: "chat"})
	st.applyDown.Store(true)
	if _, err := h.r.Exec(t.Context(), v, in.ID, "/echo"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the failed write", func() bool { return len(h.logs.Records("store write failed")) > 0 })
	st.applyDown.Store(false)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := h.r.FlushStore(ctx); err != nil {
		t.Fatalf("FlushStore once the store is back: %v\n%s", err, h.logs)
	}
	if recs := h.logs.Records("store: changes lost at shutdown"); len(recs) != 0 {
		t.Fatalf("loss reported: %v", recs)
	}
	if es, _, err := st.HistoryFor(context.Background(), "", in.ID, 0, 10); err != nil || len(es) != 2 {
		t.Fatalf("stored entries %d (%v); want the command and its output", len(es), err)
	}
}

// TestStoreOutageSaidInTheChat: while the store takes no writes, a
// session whose changes wait is told once that they are not saved yet
// (however many more wait), and once that they are when a write
// succeeds; its whole history is stored afterwards (the notices are
// events, not history).
func TestStoreOutageSaidInTheChat(t *testing.T) {
	t.Parallel()
	st := &downStore{Store: openShared(t, filepath.Join(t.TempDir(), "dashgate.db"))}
	h := newHarness(t, func(c *Config) { c.Store = st })
	if _, err := h.r.Claim(t.Context(), "a", time.Minute); err != nil {
		t.Fatal(err)
	}
	v := &recViewer{}
	in, err := h.r.Create(v, NewSession{Title: "chat"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.r.journal.flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	st.applyDown.Store(true)
	for _, cmd := range []string{"/one", "/two"} {
		if _, err := h.r.Exec(t.Context(), v, in.ID, cmd); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, 10*time.Second, "the unsaved notice", func() bool { return countOf(notices(v), unsavedNotice) > 0 })
	}
	if _, err := h.r.Exec(t.Context(), v, in.ID, "/three"); err != nil {
		t.Fatal(err)
	}
	if failing, since, waiting := h.r.Admin().StoreOutage(); !failing || since.IsZero() || waiting < 6 {
		t.Fatalf("StoreOutage during the outage: %v since %v, %d waiting; want failing, 6 entries or more", failing, since, waiting)
	}
	st.applyDown.Store(false)
	testkit.WaitFor(t, 10*time.Second, "the saved notice", func() bool { return countOf(notices(v), savedNotice) > 0 })
	if got := notices(v); countOf(got, unsavedNotice) != 1 || countOf(got, savedNotice) != 1 {
		t.Fatalf("notices %q; want one unsaved and one saved", got)
	}
	if failing, _, _ := h.r.Admin().StoreOutage(); failing {
		t.Fatal("StoreOutage after the outage: still failing")
	}
	if err := h.r.journal.flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	hist, _, err := st.HistoryFor(t.Context(), "", in.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, e := range hist {
		texts = append(texts, e.Text)
	}
	for _, want := range []string{"/one", "/two", "/three"} { // the command and its output
		if countOf(texts, want) != 2 {
			t.Fatalf("stored history %q: want %q twice", texts, want)
		}
	}
	if countOf(texts, unsavedNotice) != 0 || countOf(texts, savedNotice) != 0 {
		t.Fatalf("stored history %q: the outage's notices are events only", texts)
	}
}
