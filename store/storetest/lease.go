package storetest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dashgate/dashgate/store"
)

func getOK(t *testing.T, st store.Store, owner, id string) store.Session {
	t.Helper()
	s, err := st.Get(t.Context(), owner, id)
	if err != nil {
		t.Fatalf("Get(%q, %q): %v", owner, id, err)
	}
	return s
}

func historyTexts(t *testing.T, st store.Store, owner, sid string) []string {
	t.Helper()
	es, _, err := st.HistoryFor(t.Context(), owner, sid, 0, 1000)
	if err != nil {
		t.Fatalf("HistoryFor(%q, %q): %v", owner, sid, err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Text)
	}
	return out
}

func sortedIDs(ss []store.Session) []string {
	out := ids(ss)
	slices.Sort(out)
	return out
}

func testOwnerScoped(t *testing.T, st store.Store) {
	apply(t, st, store.Batch{
		Sessions: []store.Session{live("a1", "ann"), live("b1", "bob"), live("n1", ""),
			closedAt("a-old", "ann", t0), closedAt("b-old", "bob", t0)},
		Entries: []store.SessionEntry{entry("a1", 1, "ann's words", t0), entry("b1", 1, "bob's words", t0), entry("n1", 1, "nobody's words", t0)},
	})
	t.Run("HistoryFor", func(t *testing.T) {
		for _, tc := range []struct {
			owner, sid string
			want       int
		}{
			{"ann", "a1", 1}, {"bob", "b1", 1}, {"", "n1", 1},
			{"bob", "a1", 0}, {"", "a1", 0}, {"ann", "n1", 0}, {"ann", "nobody", 0},
		} {
			es, more, err := st.HistoryFor(t.Context(), tc.owner, tc.sid, 0, 10)
			if err != nil || more || len(es) != tc.want {
				t.Errorf("HistoryFor(%q, %q) = %v, more %v, %v; want %d entries", tc.owner, tc.sid, seqs(es), more, err, tc.want)
			}
		}
	})
	t.Run("RestorableFor", func(t *testing.T) {
		for owner, want := range map[string][]string{"ann": {"a1"}, "bob": {"b1"}, "": {"n1"}, "eve": nil} {
			rs, err := st.RestorableFor(t.Context(), owner)
			if err != nil || !slices.Equal(sortedIDs(rs), want) {
				t.Errorf("RestorableFor(%q) = %v, %v; want %v", owner, ids(rs), err, want)
			}
		}
	})
}

func testUpsertKeepsOwner(t *testing.T, st store.Store) {
	apply(t, st, store.Batch{Sessions: []store.Session{live("s", "ann")}, Entries: []store.SessionEntry{entry("s", 1, "ann wrote", t0)}})
	steal := live("s", "bob")
	steal.Title = "bob's now"
	err := st.Apply(t.Context(), store.Batch{
		Sessions: []store.Session{steal, live("other", "bob")},
		Entries:  []store.SessionEntry{entry("s", 1, "bob overwrote", at(time.Second)), entry("s", 2, "bob added", at(time.Second))},
	})
	if !errors.Is(err, store.ErrOtherOwner) {
		t.Fatalf("Apply of ann's session under bob: %v; want ErrOtherOwner", err)
	}
	got := getOK(t, st, "ann", "s")
	if got.Owner != "ann" || got.Title != "title s" || got.LastSeq != 1 {
		t.Errorf("ann's session after bob's write = %+v; want unchanged", got)
	}
	if texts := historyTexts(t, st, "ann", "s"); !slices.Equal(texts, []string{"ann wrote"}) {
		t.Errorf("ann's history after bob's write = %q", texts)
	}
	if _, err := st.Get(t.Context(), "bob", "other"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the rest of the refused batch: Get = %v; want ErrNotFound (nothing written)", err)
	}
	// The owner's own upsert still rewrites the row.
	mine := live("s", "ann")
	mine.Title = "ann renamed"
	apply(t, st, store.Batch{Sessions: []store.Session{mine}})
	if got := getOK(t, st, "ann", "s"); got.Title != "ann renamed" {
		t.Errorf("title after the owner's upsert = %q", got.Title)
	}
}

func testUpsertKeepsLease(t *testing.T, st store.Store) {
	s := live("s", "")
	s.Node, s.LeaseUntil, s.Epoch = "n1", at(time.Minute), 3
	apply(t, st, store.Batch{Sessions: []store.Session{s}})
	got := getOK(t, st, "", "s")
	if got.Node != "n1" || !got.LeaseUntil.Equal(at(time.Minute)) || got.Epoch != 3 {
		t.Fatalf("created row's lease = %q %v %d; want n1, t0+1m, 3", got.Node, got.LeaseUntil, got.Epoch)
	}
	later := live("s", "")
	later.Node, later.LeaseUntil, later.Title = "n2", at(time.Hour), "later"
	apply(t, st, store.Batch{Sessions: []store.Session{later}})
	got = getOK(t, st, "", "s")
	if got.Node != "n1" || !got.LeaseUntil.Equal(at(time.Minute)) || got.Epoch != 3 || got.Title != "later" {
		t.Errorf("after an upsert naming another node = %q %v %d %q; want the lease kept, the title written", got.Node, got.LeaseUntil, got.Epoch, got.Title)
	}
}

func testRename(t *testing.T, st store.Store) {
	s := closedAt("s", "ann", at(time.Hour))
	s.Model = "m1"
	apply(t, st, store.Batch{Sessions: []store.Session{s}, Entries: []store.SessionEntry{entry("s", 4, "kept", t0)}})
	for _, tc := range []struct {
		name, owner, id string
		want            bool
	}{
		{"another owner", "bob", "s", false},
		{"unknown", "ann", "nope", false},
		{"the owner", "ann", "s", true},
	} {
		ok, err := st.Rename(t.Context(), tc.owner, tc.id, "by "+tc.name)
		if err != nil || ok != tc.want {
			t.Errorf("Rename(%q, %q) = %v, %v; want %v", tc.owner, tc.id, ok, err, tc.want)
		}
	}
	want := s
	want.Title, want.LastSeq = "by the owner", 4
	sameSession(t, getOK(t, st, "ann", "s"), want)
}

// testRenameRace renames a session while its reply streams in (one
// checkpoint batch after another, entries only, as the journal writes a
// reply): every checkpoint is kept, and so is the new title and every
// other field of the row.
func testRenameRace(t *testing.T, st store.Store) {
	const checkpoints = 50
	row := live("s", "ann")
	row.Model = "m1"
	apply(t, st, store.Batch{Sessions: []store.Session{row}, Entries: []store.SessionEntry{entry("s", 1, "question", t0)}})
	var wg sync.WaitGroup
	wg.Go(func() {
		if ok, err := st.Rename(t.Context(), "ann", "s", "renamed"); !ok || err != nil {
			t.Errorf("Rename = %v, %v", ok, err)
		}
	})
	var text string
	for i := range checkpoints {
		text += fmt.Sprintf("w%d ", i)
		apply(t, st, store.Batch{Entries: []store.SessionEntry{{SessionID: "s", Entry: store.Entry{
			Seq: 2, Role: store.RoleAssistant, Kind: store.KindReply, Text: text, At: at(time.Duration(i) * time.Second)}}}})
	}
	wg.Wait()
	want := row
	want.Title, want.LastSeq = "renamed", 2
	sameSession(t, getOK(t, st, "ann", "s"), want)
	if texts := historyTexts(t, st, "ann", "s"); !slices.Equal(texts, []string{"question", text}) {
		t.Errorf("history = %q; want the question and the last checkpoint", texts)
	}
}

// claimFixture stores, at t0: "free" (never owned), "mine" (node a,
// live), "theirs" (node b, live until t0+1m), "lapsed" (node b, ended
// t0-1s), "released" (node b, lease ended by Release), "done" (closed,
// unowned). Each holds entries up to seq 3.
func claimFixture(t *testing.T, st store.Store) {
	row := func(id, node string, until time.Time, epoch uint64) store.Session {
		s := live(id, "")
		s.Node, s.LeaseUntil, s.Epoch = node, until, epoch
		return s
	}
	b := store.Batch{Sessions: []store.Session{
		row("free", "", time.Time{}, 0), row("mine", "a", at(time.Minute), 4), row("theirs", "b", at(time.Minute), 2),
		row("lapsed", "b", at(-time.Second), 7), row("released", "b", time.Time{}, 1), closedAt("done", "", at(-time.Hour)),
	}}
	for _, s := range b.Sessions {
		b.Entries = append(b.Entries, entry(s.ID, 3, "word of "+s.ID, t0))
	}
	apply(t, st, b)
}

func testClaim(t *testing.T, st store.Store) {
	claimFixture(t, st)
	if _, err := st.Claim(t.Context(), "", time.Minute, t0); err == nil {
		t.Errorf("Claim by an empty node: no error")
	}
	if _, err := st.Claim(t.Context(), "a", 0, t0); err == nil {
		t.Errorf("Claim with ttl 0: no error")
	}
	got, err := st.Claim(t.Context(), "a", 30*time.Second, t0)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	wantEpoch := map[string]uint64{"free": 1, "mine": 5, "lapsed": 8, "released": 2}
	if !slices.Equal(sortedIDs(got), slices.Sorted(maps.Keys(wantEpoch))) {
		t.Fatalf("Claim = %v; want %v", sortedIDs(got), slices.Sorted(maps.Keys(wantEpoch)))
	}
	for _, s := range got {
		if s.Node != "a" || !s.LeaseUntil.Equal(at(30*time.Second)) || s.Epoch != wantEpoch[s.ID] || s.LastSeq != 3 {
			t.Errorf("claimed %s: node %q lease %v epoch %d LastSeq %d; want a, t0+30s, %d, 3", s.ID, s.Node, s.LeaseUntil, s.Epoch, s.LastSeq, wantEpoch[s.ID])
		}
		if stored := getOK(t, st, "", s.ID); stored.Node != "a" || stored.Epoch != s.Epoch || !stored.LeaseUntil.Equal(s.LeaseUntil) {
			t.Errorf("stored %s after Claim: %q %d %v; want what Claim returned", s.ID, stored.Node, stored.Epoch, stored.LeaseUntil)
		}
	}
	if s := getOK(t, st, "", "theirs"); s.Node != "b" || s.Epoch != 2 {
		t.Errorf("b's live session after a's Claim: node %q epoch %d; want b, 2", s.Node, s.Epoch)
	}
	if s := getOK(t, st, "", "done"); s.Node != "" || s.Epoch != 0 {
		t.Errorf("closed session after Claim: node %q epoch %d; want untouched", s.Node, s.Epoch)
	}
	// The instant b's lease ends, it is a's to take.
	got, err = st.Claim(t.Context(), "a", 30*time.Second, at(time.Minute))
	if err != nil || !slices.Contains(ids(got), "theirs") {
		t.Errorf("Claim at the end of b's lease = %v, %v; want theirs among them", ids(got), err)
	}
}

func testRenew(t *testing.T, st store.Store) {
	claimFixture(t, st)
	got, err := st.Claim(t.Context(), "a", 30*time.Second, t0)
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]uint64{"gone": 1}
	for _, s := range got {
		held[s.ID] = s.Epoch
	}
	held["theirs"] = 2 // b's, at b's epoch: not a's to renew
	held["mine"]--     // a's earlier epoch: lost to a's own Claim
	lost, err := st.Renew(t.Context(), "a", held, time.Minute, at(10*time.Second))
	if want := []string{"gone", "mine", "theirs"}; err != nil || !slices.Equal(lost, want) {
		t.Fatalf("Renew = %v, %v; want lost %v", lost, err, want)
	}
	for id, until := range map[string]time.Time{"free": at(70 * time.Second), "lapsed": at(70 * time.Second), "mine": at(30 * time.Second), "theirs": at(time.Minute)} {
		if s := getOK(t, st, "", id); !s.LeaseUntil.Equal(until) {
			t.Errorf("%s lease after Renew = %v; want %v", id, s.LeaseUntil, until)
		}
	}
	// A lease that ended but was not claimed again is renewed.
	lost, err = st.Renew(t.Context(), "a", map[string]uint64{"free": 1}, time.Minute, at(time.Hour))
	if err != nil || len(lost) != 0 || !getOK(t, st, "", "free").LeaseUntil.Equal(at(time.Hour+time.Minute)) {
		t.Errorf("Renew after the lease ended = lost %v, %v; want renewed", lost, err)
	}
}

func testRelease(t *testing.T, st store.Store) {
	claimFixture(t, st)
	n, err := st.Release(t.Context(), "b")
	if err != nil || n != 2 {
		t.Fatalf("Release(b) = %d, %v; want 2 (theirs, lapsed)", n, err)
	}
	s := getOK(t, st, "", "theirs")
	if !s.LeaseUntil.IsZero() || s.Node != "b" || s.Epoch != 2 {
		t.Errorf("after Release: lease %v node %q epoch %d; want zero, b, 2", s.LeaseUntil, s.Node, s.Epoch)
	}
	if mine := getOK(t, st, "", "mine"); !mine.LeaseUntil.Equal(at(time.Minute)) {
		t.Errorf("a's lease after Release(b) = %v; want kept", mine.LeaseUntil)
	}
	got, err := st.Claim(t.Context(), "c", time.Minute, t0)
	if err != nil || !slices.Contains(ids(got), "theirs") || slices.Contains(ids(got), "mine") {
		t.Errorf("Claim(c) after Release(b) = %v, %v; want theirs, not mine", ids(got), err)
	}
}

func testFenced(t *testing.T, st store.Store) {
	claimFixture(t, st)
	ctx := t.Context()
	stale := func(id string, epoch uint64) store.Session {
		s := getOK(t, st, "", id)
		s.Title, s.Epoch = "stale write", epoch
		return s
	}
	for _, tc := range []struct {
		name   string
		b      store.Batch
		fenced []string
	}{
		{"a row under an old epoch", store.Batch{Sessions: []store.Session{stale("mine", 3)}}, []string{"mine"}},
		{"an entry under an old epoch", store.Batch{Entries: []store.SessionEntry{{SessionID: "theirs", Epoch: 1, Entry: entry("", 4, "stale", t0).Entry}}}, []string{"theirs"}},
		{"a newer epoch than stored", store.Batch{Entries: []store.SessionEntry{{SessionID: "theirs", Epoch: 3, Entry: entry("", 4, "stale", t0).Entry}}}, []string{"theirs"}},
		{"fenced beside good writes", store.Batch{
			Sessions: []store.Session{stale("mine", 4), live("new", "")},
			Entries: []store.SessionEntry{
				{SessionID: "mine", Epoch: 4, Entry: entry("", 4, "stale", t0).Entry},
				{SessionID: "lapsed", Epoch: 6, Entry: entry("", 4, "stale", t0).Entry},
				{SessionID: "free", Epoch: 9, Entry: entry("", 4, "stale", t0).Entry},
				{SessionID: "lapsed", Epoch: 6, Entry: entry("", 5, "stale", t0).Entry},
			},
			Deletes: []string{"released"},
		}, []string{"free", "lapsed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := st.Apply(ctx, tc.b)
			fe, ok := errors.AsType[*store.FencedError](err)
			if !errors.Is(err, store.ErrFenced) || !ok || !slices.Equal(fe.SessionIDs, tc.fenced) {
				t.Fatalf("Apply = %v; want a *FencedError naming %v", err, tc.fenced)
			}
			if !strings.Contains(err.Error(), strings.Join(tc.fenced, ", ")) {
				t.Errorf("error %q does not name %v", err, tc.fenced)
			}
		})
	}
	// Nothing of the fenced batches was written.
	for _, id := range []string{"free", "mine", "theirs", "lapsed", "released"} {
		s := getOK(t, st, "", id)
		if s.Title == "stale write" || s.LastSeq != 3 {
			t.Errorf("%s after fenced batches: title %q LastSeq %d; want unchanged", id, s.Title, s.LastSeq)
		}
	}
	if _, err := st.Get(ctx, "", "new"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("new session of a fenced batch: %v; want not written", err)
	}
	// The stored epoch writes; epoch 0 writes unfenced, as before leases.
	apply(t, st, store.Batch{
		Sessions: []store.Session{stale("mine", 4)},
		Entries: []store.SessionEntry{
			{SessionID: "mine", Epoch: 4, Entry: entry("", 4, "current", t0).Entry},
			{SessionID: "theirs", Entry: entry("", 4, "unfenced", t0).Entry},
		},
	})
	// A session created with an epoch takes entries of that epoch in the same batch.
	born := live("born", "")
	born.Node, born.Epoch = "a", 1
	apply(t, st, store.Batch{Sessions: []store.Session{born}, Entries: []store.SessionEntry{{SessionID: "born", Epoch: 1, Entry: entry("", 1, "first", t0).Entry}}})
	if err := st.Apply(ctx, store.Batch{Entries: []store.SessionEntry{{SessionID: "born", Epoch: 2, Entry: entry("", 2, "x", t0).Entry}}}); !errors.Is(err, store.ErrFenced) {
		t.Errorf("entry of born under epoch 2: %v; want ErrFenced", err)
	}
	for id, want := range map[string]uint64{"mine": 4, "theirs": 4, "born": 1} {
		if s := getOK(t, st, "", id); s.LastSeq != want {
			t.Errorf("%s LastSeq %d; want %d", id, s.LastSeq, want)
		}
	}
}

// TwoNodes runs two nodes, a and b, against one store: a and b are two
// handles on the same data (two opens of one file, or one store twice).
// b claims none of a's live sessions; once a's lease lapses (a did not
// Release) b claims them with their whole history and a new epoch; a's
// next write is fenced and writes nothing, and a's Renew says it lost
// them; b's Release lets a claim them back at once.
func TwoNodes(t *testing.T, a, b store.Store) {
	ctx := t.Context()
	const ttl = 30 * time.Second
	var batch store.Batch
	for _, id := range []string{"s1", "s2"} {
		batch.Sessions = append(batch.Sessions, live(id, "ann"))
		for seq := uint64(1); seq <= 3; seq++ {
			batch.Entries = append(batch.Entries, entry(id, seq, fmt.Sprintf("%s line %d", id, seq), at(time.Duration(seq)*time.Second)))
		}
	}
	apply(t, a, batch)

	claimedA, err := a.Claim(ctx, "a", ttl, t0)
	if err != nil || !slices.Equal(sortedIDs(claimedA), []string{"s1", "s2"}) {
		t.Fatalf("a.Claim = %v, %v; want s1, s2", ids(claimedA), err)
	}
	epochA := map[string]uint64{}
	for _, s := range claimedA {
		epochA[s.ID] = s.Epoch
	}
	// a writes under its epoch.
	apply(t, a, store.Batch{Entries: []store.SessionEntry{{SessionID: "s1", Epoch: epochA["s1"], Entry: entry("", 4, "s1 line 4", at(4*time.Second)).Entry}}})

	if got, err := b.Claim(ctx, "b", ttl, at(ttl-time.Nanosecond)); err != nil || len(got) != 0 {
		t.Fatalf("b.Claim during a's lease = %v, %v; want none", ids(got), err)
	}
	// a's lease lapses without a Release (a died, or hung).
	claimedB, err := b.Claim(ctx, "b", ttl, at(ttl))
	if err != nil || !slices.Equal(sortedIDs(claimedB), []string{"s1", "s2"}) {
		t.Fatalf("b.Claim after a's lease = %v, %v; want s1, s2", ids(claimedB), err)
	}
	for _, s := range claimedB {
		if s.Epoch != epochA[s.ID]+1 || s.Node != "b" {
			t.Errorf("b's %s: epoch %d node %q; want %d, b", s.ID, s.Epoch, s.Node, epochA[s.ID]+1)
		}
		want := []string{s.ID + " line 1", s.ID + " line 2", s.ID + " line 3"}
		if s.ID == "s1" {
			want = append(want, "s1 line 4")
		}
		if s.LastSeq != uint64(len(want)) {
			t.Errorf("b's %s LastSeq %d; want %d", s.ID, s.LastSeq, len(want))
		}
		if texts := historyTexts(t, b, "ann", s.ID); !slices.Equal(texts, want) {
			t.Errorf("b's %s history = %q; want %q", s.ID, texts, want)
		}
	}

	// a does not know yet: its write is fenced and writes nothing.
	row := live("s1", "ann")
	row.Title, row.Epoch = "a's late title", epochA["s1"]
	err = a.Apply(ctx, store.Batch{Sessions: []store.Session{row}, Entries: []store.SessionEntry{
		{SessionID: "s1", Epoch: epochA["s1"], Entry: entry("", 5, "a's late line", at(5*time.Second)).Entry},
	}})
	if fe, ok := errors.AsType[*store.FencedError](err); !errors.Is(err, store.ErrFenced) || !ok || !slices.Equal(fe.SessionIDs, []string{"s1"}) {
		t.Fatalf("a's write after b claimed: %v; want ErrFenced naming s1", err)
	}
	if s := getOK(t, b, "ann", "s1"); s.Title != "title s1" || s.LastSeq != 4 {
		t.Errorf("s1 after a's fenced write: title %q LastSeq %d; want unchanged", s.Title, s.LastSeq)
	}
	if lost, err := a.Renew(ctx, "a", epochA, ttl, at(ttl)); err != nil || !slices.Equal(lost, []string{"s1", "s2"}) {
		t.Errorf("a.Renew after b claimed = %v, %v; want both lost", lost, err)
	}

	// b stops cleanly: a may claim at once, long before b's lease would end.
	if n, err := b.Release(ctx, "b"); err != nil || n != 2 {
		t.Fatalf("b.Release = %d, %v; want 2", n, err)
	}
	back, err := a.Claim(ctx, "a", ttl, at(ttl+time.Second))
	if err != nil || !slices.Equal(sortedIDs(back), []string{"s1", "s2"}) {
		t.Fatalf("a.Claim after b.Release = %v, %v; want s1, s2", ids(back), err)
	}
	for _, s := range back {
		if s.Epoch != epochA[s.ID]+2 {
			t.Errorf("a's %s epoch %d after taking it back; want %d", s.ID, s.Epoch, epochA[s.ID]+2)
		}
	}
}

// ClaimRace has nodes a and b claim at once, on two handles of one store,
// sessions whose leases all lapsed: each session goes to exactly one.
func ClaimRace(t *testing.T, a, b store.Store) {
	const n = 40
	var batch store.Batch
	for i := range n {
		s := live(fmt.Sprintf("s%02d", i), "")
		s.Node, s.LeaseUntil, s.Epoch = "dead", at(-time.Second), 1
		batch.Sessions = append(batch.Sessions, s)
	}
	apply(t, a, batch)
	var got [2][]store.Session
	var wg sync.WaitGroup
	for i, st := range []store.Store{a, b} {
		wg.Go(func() {
			var err error
			if got[i], err = st.Claim(t.Context(), []string{"a", "b"}[i], time.Minute, t0); err != nil {
				t.Errorf("Claim: %v", err)
			}
		})
	}
	wg.Wait()
	all := append(ids(got[0]), ids(got[1])...)
	slices.Sort(all)
	if len(all) != n || len(slices.Compact(slices.Clone(all))) != n {
		t.Fatalf("claimed %d and %d, %d distinct; want %d sessions each claimed once", len(got[0]), len(got[1]), len(slices.Compact(all)), n)
	}
	for i, node := range []string{"a", "b"} {
		for _, s := range got[i] {
			if s.Epoch != 2 {
				t.Errorf("%s claimed %s at epoch %d; want 2", node, s.ID, s.Epoch)
			}
			if stored := getOK(t, a, "", s.ID); stored.Node != node {
				t.Errorf("%s: stored node %q; want %q, who claimed it", s.ID, stored.Node, node)
			}
		}
	}
}

// testStoreClock: the zero now is the store's clock (the registry's
// calls): a lease runs ttl from the store's now, a lease live by it is
// not taken, one that ended by it is. The store's clock is this
// machine's here (the test's PostgreSQL runs on it), within the calls.
func testStoreClock(t *testing.T, st store.Store) {
	ctx := t.Context()
	far, past := live("far", ""), live("past", "")
	far.Node, far.LeaseUntil, far.Epoch = "b", time.Now().Add(time.Hour), 1
	past.Node, past.LeaseUntil, past.Epoch = "b", time.Now().Add(-time.Second), 1
	apply(t, st, store.Batch{Sessions: []store.Session{far, past, live("free", "")}})
	const ttl = time.Minute
	within := func(what string, got, from, to time.Time) {
		t.Helper()
		// PostgreSQL's now() counts microseconds: from is rounded down.
		if got.Before(from.Add(ttl).Truncate(time.Microsecond)) || got.After(to.Add(ttl)) {
			t.Errorf("%s: lease until %v; want ttl after the store's now, within [%v, %v]", what, got, from.Add(ttl), to.Add(ttl))
		}
	}
	from := time.Now()
	got, err := st.Claim(ctx, "a", ttl, time.Time{})
	to := time.Now()
	if err != nil || !slices.Equal(sortedIDs(got), []string{"free", "past"}) {
		t.Fatalf("Claim on the store's clock = %v, %v; want free and past (far's lease lives)", ids(got), err)
	}
	for _, s := range got {
		within("Claim of "+s.ID, s.LeaseUntil, from, to)
	}
	if _, err := st.ClaimSession(ctx, "a", "far", ttl, time.Time{}); !errors.Is(err, store.ErrLeaseHeld) {
		t.Errorf("ClaimSession of a live lease on the store's clock: %v; want ErrLeaseHeld", err)
	}
	held := map[string]uint64{}
	for _, s := range got {
		held[s.ID] = s.Epoch
	}
	from = time.Now()
	lost, err := st.Renew(ctx, "a", held, ttl, time.Time{})
	to = time.Now()
	if err != nil || len(lost) != 0 {
		t.Fatalf("Renew on the store's clock = %v, %v", lost, err)
	}
	within("Renew of free", getOK(t, st, "", "free").LeaseUntil, from, to)
}
