// Package storetest is the conformance table every store.Store backend
// runs: the same behaviour, checked the same way, on each.
package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dashgate/dashgate/store"
)

// t0 is the tests' base time: not UTC-only, not whole seconds.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.FixedZone("UTC+2", 2*3600))

func at(d time.Duration) time.Time { return t0.Add(d) }

// Run runs the conformance table against the backend open returns. open
// is called once a subtest with that subtest's t and returns an empty
// store; open closes it in t.Cleanup. The subtests run in parallel.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, st store.Store)
	}{
		{"round trip", testRoundTrip},
		{"upsert replaces a checkpoint", testUpsert},
		{"restorable excludes closed", testRestorable},
		{"get not found and owners", testGet},
		{"closed paging", testClosed},
		{"history paging", testHistory},
		{"search", testSearch},
		{"search hostile queries", testSearchHostile},
		{"search word prefixes", testSearchPrefix},
		{"delete", testDelete},
		{"batch deletes", testBatchDeletes},
		{"prune", testPrune},
		{"entry for an unknown session", testUnknownSession},
		{"closed store", testClose},
		{"owner in every query", testOwnerScoped},
		{"upsert keeps the owner", testUpsertKeepsOwner},
		{"upsert keeps the lease", testUpsertKeepsLease},
		{"rename is targeted", testRename},
		{"rename beside a streaming reply", testRenameRace},
		{"claim", testClaim},
		{"renew", testRenew},
		{"release", testRelease},
		{"fenced writes", testFenced},
		{"leases on the store's clock", testStoreClock},
		{"two nodes on one store", func(t *testing.T, st store.Store) { TwoNodes(t, st, st) }},
		{"claims at once", func(t *testing.T, st store.Store) { ClaimRace(t, st, st) }},
		{"claim one session", testClaimSession},
		{"claims of one session at once", func(t *testing.T, st store.Store) { ClaimSessionRace(t, st, st) }},
		{"attachments", testAttachments},
		{"search by attachment name", testAttachmentSearch},
		{"attachments go with their session", testAttachmentsGoWithSession},
		{"settings", testSettings},
		{"settings written at once", func(t *testing.T, st store.Store) { SettingsRace(t, st, st) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, open(t))
		})
	}
}

func apply(t *testing.T, st store.Store, b store.Batch) {
	t.Helper()
	if err := st.Apply(t.Context(), b); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

func live(id, owner string) store.Session {
	return store.Session{ID: id, Owner: owner, Title: "title " + id, CreatedAt: t0, LastActive: at(time.Minute), State: "attached"}
}

func closedAt(id, owner string, when time.Time) store.Session {
	s := live(id, owner)
	s.State, s.EndReason, s.ClosedAt = store.StateClosed, "user_close", when
	return s
}

func entry(sid string, seq uint64, text string, when time.Time) store.SessionEntry {
	return store.SessionEntry{SessionID: sid, Entry: store.Entry{Seq: seq, Role: store.RoleUser, Kind: store.KindPrompt, Text: text, At: when}}
}

func ids(ss []store.Session) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.ID)
	}
	return out
}

func seqs(es []store.Entry) []uint64 {
	var out []uint64
	for _, e := range es {
		out = append(out, e.Seq)
	}
	return out
}

func hitKeys(hs []store.Hit) []string {
	var out []string
	for _, h := range hs {
		out = append(out, fmt.Sprintf("%s/%d", h.SessionID, h.Seq))
	}
	return out
}

func sameSession(t *testing.T, got, want store.Session) {
	t.Helper()
	if got.ID != want.ID || got.Owner != want.Owner || got.Title != want.Title || got.State != want.State ||
		got.EndReason != want.EndReason || got.Model != want.Model || got.LastSeq != want.LastSeq ||
		got.Agent != want.Agent || got.AgentSession != want.AgentSession ||
		!got.CreatedAt.Equal(want.CreatedAt) || !got.LastActive.Equal(want.LastActive) || !got.ClosedAt.Equal(want.ClosedAt) ||
		got.ClosedAt.IsZero() != want.ClosedAt.IsZero() {
		t.Errorf("session:\n got  %+v\n want %+v", got, want)
	}
}

func sameEntry(t *testing.T, got, want store.Entry) {
	t.Helper()
	usageOK := (got.Usage == nil) == (want.Usage == nil) && (got.Usage == nil || *got.Usage == *want.Usage)
	if got.Seq != want.Seq || got.Role != want.Role || got.Kind != want.Kind || got.Text != want.Text ||
		!got.At.Equal(want.At) || got.TurnID != want.TurnID || got.Interrupted != want.Interrupted ||
		got.Code != want.Code || got.Status != want.Status || string(got.Data) != string(want.Data) || !usageOK {
		t.Errorf("entry:\n got  %+v (usage %v)\n want %+v (usage %v)", got, got.Usage, want, want.Usage)
	}
}

func testRoundTrip(t *testing.T, st store.Store) {
	s := store.Session{ID: "s1", Owner: "ann", Title: "Ünïcode title", CreatedAt: t0,
		LastActive: at(90 * time.Second).UTC(), State: store.StateClosed, EndReason: "idle_reap",
		ClosedAt: at(time.Hour).In(time.FixedZone("X", -5*3600)), Model: "qwen3:8b",
		Agent: "claude", AgentSession: "sess_01JX-ünï"}
	entries := []store.Entry{
		{Seq: 1, Role: store.RoleUser, Kind: store.KindPrompt, Text: "hello\nworld", At: at(time.Second), TurnID: "t1"},
		{Seq: 2, Role: store.RoleAssistant, Kind: store.KindReply, Text: "partial…", At: at(2 * time.Second), TurnID: "t1",
			Interrupted: true, Status: "interrupted", Usage: &store.Usage{InputTokens: 12, OutputTokens: 34}},
		{Seq: 3, Role: store.RoleSystem, Kind: store.KindError, Text: "model gone", At: at(3 * time.Second), Code: -32001},
		{Seq: 4, Role: store.RoleTool, Kind: "future_kind", Text: "", At: at(4 * time.Second), Usage: &store.Usage{},
			Data: []byte(`{"exit_code":3,"truncated":true}`)},
	}
	b := store.Batch{Sessions: []store.Session{s}}
	for _, e := range entries {
		b.Entries = append(b.Entries, store.SessionEntry{SessionID: s.ID, Entry: e})
	}
	apply(t, st, b)

	got, err := st.Get(t.Context(), "ann", "s1")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	want := s
	want.LastSeq = 4
	sameSession(t, got, want)

	hist, more, err := st.HistoryFor(t.Context(), "ann", "s1", 0, 10)
	if err != nil || more || len(hist) != len(entries) {
		t.Fatalf("HistoryFor = %v entries, more %v, %v; want %d, false, nil", seqs(hist), more, err, len(entries))
	}
	for i := range entries {
		sameEntry(t, hist[i], entries[i])
	}

	// A live session: the zero ClosedAt comes back zero.
	l := live("s2", "ann")
	apply(t, st, store.Batch{Sessions: []store.Session{l}})
	got, err = st.Get(t.Context(), "ann", "s2")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	sameSession(t, got, l)
}

func testUpsert(t *testing.T, st store.Store) {
	s := live("s1", "")
	apply(t, st, store.Batch{Sessions: []store.Session{s}, Entries: []store.SessionEntry{
		entry("s1", 1, "question", at(time.Second)),
		{SessionID: "s1", Entry: store.Entry{Seq: 2, Role: store.RoleAssistant, Kind: store.KindReply, Text: "draftword so far", At: at(2 * time.Second), Interrupted: true}},
	}})
	final := store.Entry{Seq: 2, Role: store.RoleAssistant, Kind: store.KindReply, Text: "finalword answer", At: at(3 * time.Second),
		Usage: &store.Usage{InputTokens: 1, OutputTokens: 2}}
	s.Title = "renamed"
	apply(t, st, store.Batch{Sessions: []store.Session{s}, Entries: []store.SessionEntry{{SessionID: "s1", Entry: final}}})
	// A session upsert alone keeps LastSeq.
	apply(t, st, store.Batch{Sessions: []store.Session{s}})

	hist, _, err := st.HistoryFor(t.Context(), "", "s1", 0, 10)
	if err != nil || len(hist) != 2 {
		t.Fatalf("History = %v, %v; want 2 entries", seqs(hist), err)
	}
	sameEntry(t, hist[1], final)
	got, err := st.Get(t.Context(), "", "s1")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	want := s
	want.LastSeq = 2
	sameSession(t, got, want)

	for _, tc := range []struct {
		query string
		want  int
	}{{"draftword", 0}, {"finalword", 1}} {
		hits, err := st.Search(t.Context(), "", tc.query, 10)
		if err != nil || len(hits) != tc.want {
			t.Errorf("Search(%q) = %v, %v; want %d hits", tc.query, hitKeys(hits), err, tc.want)
		}
	}
}

func testRestorable(t *testing.T, st store.Store) {
	suspended := live("sus", "")
	suspended.State = store.StateSuspended
	apply(t, st, store.Batch{
		Sessions: []store.Session{live("att", ""), suspended, closedAt("gone", "", at(time.Hour)), live("empty", "bob")},
		Entries: []store.SessionEntry{
			entry("att", 1, "a", t0), entry("att", 2, "b", t0), entry("att", 7, "c", t0),
			entry("sus", 3, "d", t0), entry("gone", 9, "e", t0),
		},
	})
	got, err := st.Restorable(t.Context())
	if err != nil {
		t.Fatalf("Restorable: %v", err)
	}
	slices.SortFunc(got, func(a, b store.Session) int { return strings.Compare(a.ID, b.ID) })
	want := map[string]uint64{"att": 7, "empty": 0, "sus": 3}
	if len(got) != len(want) {
		t.Fatalf("Restorable = %v; want %v", ids(got), want)
	}
	for _, s := range got {
		if last, ok := want[s.ID]; !ok || s.LastSeq != last {
			t.Errorf("Restorable: %s LastSeq %d; want present with %d", s.ID, s.LastSeq, last)
		}
	}
}

func testGet(t *testing.T, st store.Store) {
	apply(t, st, store.Batch{Sessions: []store.Session{live("a", "ann"), live("b", "")}})
	for _, tc := range []struct {
		name, owner, id string
		wantErr         error
	}{
		{"own session", "ann", "a", nil},
		{"no owner", "", "b", nil},
		{"unknown id", "ann", "zzz", store.ErrNotFound},
		{"other owner", "bob", "a", store.ErrNotFound},
		{"empty owner asks for ann's", "", "a", store.ErrNotFound},
		{"ann asks for unowned", "ann", "b", store.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := st.Get(t.Context(), tc.owner, tc.id)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Get(%q, %q) error %v; want %v", tc.owner, tc.id, err, tc.wantErr)
			}
			if err == nil && s.ID != tc.id {
				t.Errorf("Get(%q, %q) = %q", tc.owner, tc.id, s.ID)
			}
		})
	}
}

func testClosed(t *testing.T, st store.Store) {
	var b store.Batch
	for i := range 5 {
		b.Sessions = append(b.Sessions, closedAt(fmt.Sprintf("c%d", i), "", at(time.Duration(i)*time.Minute)))
	}
	b.Sessions = append(b.Sessions, closedAt("bob1", "bob", at(10*time.Minute)), live("live", ""))
	b.Entries = []store.SessionEntry{entry("c3", 5, "x", t0)}
	apply(t, st, b)

	for _, tc := range []struct {
		name     string
		q        store.ListQuery
		want     []string
		wantMore bool
	}{
		{"first page", store.ListQuery{Limit: 2}, []string{"c4", "c3"}, true},
		{"second page", store.ListQuery{Limit: 2, Before: at(3 * time.Minute)}, []string{"c2", "c1"}, true},
		{"last page", store.ListQuery{Limit: 2, Before: at(time.Minute)}, []string{"c0"}, false},
		{"exact fit", store.ListQuery{Limit: 5}, []string{"c4", "c3", "c2", "c1", "c0"}, false},
		{"default limit", store.ListQuery{}, []string{"c4", "c3", "c2", "c1", "c0"}, false},
		{"before all", store.ListQuery{Before: at(-time.Hour)}, nil, false},
		{"other owner", store.ListQuery{Owner: "bob"}, []string{"bob1"}, false},
		{"nobody's", store.ListQuery{Owner: "eve"}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, more, err := st.Closed(t.Context(), tc.q)
			if err != nil || !slices.Equal(ids(got), tc.want) || more != tc.wantMore {
				t.Fatalf("Closed(%+v) = %v, more %v, %v; want %v, more %v", tc.q, ids(got), more, err, tc.want, tc.wantMore)
			}
			for _, s := range got {
				if s.ID == "c3" && s.LastSeq != 5 {
					t.Errorf("c3 LastSeq %d; want 5", s.LastSeq)
				}
			}
		})
	}
}

func testHistory(t *testing.T, st store.Store) {
	b := store.Batch{Sessions: []store.Session{live("s", ""), live("other", "")}}
	for i := uint64(1); i <= 10; i++ {
		b.Entries = append(b.Entries, entry("s", i, fmt.Sprintf("entry %d", i), at(time.Duration(i)*time.Second)))
	}
	b.Entries = append(b.Entries, entry("other", 11, "not mine", t0))
	apply(t, st, b)

	for _, tc := range []struct {
		name     string
		sid      string
		before   uint64
		limit    int
		want     []uint64
		wantMore bool
	}{
		{"last three", "s", 0, 3, []uint64{8, 9, 10}, true},
		{"before 8", "s", 8, 3, []uint64{5, 6, 7}, true},
		{"reaches the start", "s", 3, 5, []uint64{1, 2}, false},
		{"exactly to the start", "s", 4, 3, []uint64{1, 2, 3}, false},
		{"all", "s", 0, 100, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, false},
		{"before beyond the end", "s", 50, 2, []uint64{9, 10}, true},
		{"before the first", "s", 1, 5, nil, false},
		{"unknown session", "nobody", 0, 10, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, more, err := st.HistoryFor(t.Context(), "", tc.sid, tc.before, tc.limit)
			if err != nil || !slices.Equal(seqs(got), tc.want) || more != tc.wantMore {
				t.Fatalf("History(%q, %d, %d) = %v, more %v, %v; want %v, more %v",
					tc.sid, tc.before, tc.limit, seqs(got), more, err, tc.want, tc.wantMore)
			}
			for _, e := range got {
				if want := fmt.Sprintf("entry %d", e.Seq); e.Text != want {
					t.Errorf("entry %d text %q; want %q", e.Seq, e.Text, want)
				}
			}
		})
	}
}

// searchFixture writes entries in the order of their At (newest last), as
// the registry does. The long entry holds "needle" in its middle.
func searchFixture(t *testing.T, st store.Store) (long string) {
	var words []string
	for i := range 60 {
		words = append(words, []string{"alpha", "beta", "gamma", "delta", "epsilon"}[i%5])
	}
	words[30] = "needle"
	long = strings.Join(words, " ")
	apply(t, st, store.Batch{
		Sessions: []store.Session{live("a", ""), live("b", ""), live("c", "bob")},
		Entries: []store.SessionEntry{
			entry("a", 1, "The quick brown fox jumps", at(1*time.Second)),
			entry("a", 2, "a lazy dog sleeps", at(2*time.Second)),
			entry("b", 1, "Quick thinking saves the FOX", at(3*time.Second)),
			entry("c", 1, "quick fox for bob", at(4*time.Second)),
			entry("b", 2, "foxes are not fox-like", at(5*time.Second)),
			entry("a", 3, long, at(6*time.Second)),
		},
	})
	return long
}

func testSearch(t *testing.T, st store.Store) {
	long := searchFixture(t, st)
	for _, tc := range []struct {
		name, owner, query string
		limit              int
		want               []string
	}{
		{"all words, newest first", "", "quick fox", 10, []string{"b/1", "a/1"}},
		{"case-insensitive", "", "QUICK", 10, []string{"b/1", "a/1"}},
		{"one word", "", "fox", 10, []string{"b/2", "b/1", "a/1"}},
		{"limit", "", "fox", 1, []string{"b/2"}},
		{"no limit no hits", "", "fox", 0, nil},
		{"owner filter", "bob", "quick fox", 10, []string{"c/1"}},
		{"other owner's word", "", "bob", 10, nil},
		{"a missing word", "", "quick cat", 10, nil},
		{"word prefixes", "", "qui", 10, []string{"b/1", "a/1"}},
		{"a prefix of every word", "", "QUI FO", 10, []string{"b/1", "a/1"}},
		{"from the start of a word only", "", "uick", 10, nil},
		{"longer than the word", "", "foxy", 10, nil},
		{"a longer word is not its prefix", "", "foxes", 10, []string{"b/2"}},
		{"punctuation between words", "", "fox...quick!", 10, []string{"b/1", "a/1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hits, err := st.Search(t.Context(), tc.owner, tc.query, tc.limit)
			if err != nil || !slices.Equal(hitKeys(hits), tc.want) {
				t.Fatalf("Search(%q, %q, %d) = %v, %v; want %v", tc.owner, tc.query, tc.limit, hitKeys(hits), err, tc.want)
			}
			word := strings.ToLower(strings.FieldsFunc(tc.query, func(r rune) bool { return r == ' ' || r == '.' || r == '!' })[0])
			for _, h := range hits {
				if !strings.Contains(strings.ToLower(h.Snippet), word) {
					t.Errorf("hit %s/%d snippet %q does not hold %q", h.SessionID, h.Seq, h.Snippet, word)
				}
			}
		})
	}

	hits, err := st.Search(t.Context(), "", "quick", 1)
	if err != nil || len(hits) != 1 {
		t.Fatalf("Search(quick) = %v, %v", hitKeys(hits), err)
	}
	if h := hits[0]; h.SessionID != "b" || h.Title != "title b" || h.Seq != 1 || h.Kind != store.KindPrompt || !h.At.Equal(at(3*time.Second)) {
		t.Errorf("hit = %+v; want b/1, title b, prompt, at t0+3s", h)
	}

	// The snippet is around the word matched, whole or by a prefix.
	for _, q := range []string{"needle", "NeeD"} {
		hits, err = st.Search(t.Context(), "", q, 10)
		if err != nil || len(hits) != 1 {
			t.Fatalf("Search(%s) = %v, %v", q, hitKeys(hits), err)
		}
		sn := hits[0].Snippet
		if !strings.Contains(sn, "needle") || len(sn) >= len(long) || !strings.HasPrefix(sn, "…") || !strings.HasSuffix(sn, "…") {
			t.Errorf("Search(%s) snippet %q: want the word, shorter than the text, cut on both sides with …", q, sn)
		}
		if inner := strings.Trim(sn, "…"); !strings.Contains(long, inner) {
			t.Errorf("Search(%s) snippet %q is not plain text of the entry", q, sn)
		}
	}
}

// hostileQueries are queries that mean something to a full-text engine or
// are not text at all, with how many hits of searchFixture each has when
// taken as plain word prefixes.
var hostileQueries = []struct {
	query string
	want  int
}{
	{`"`, 0}, {`"unbalanced`, 0}, {`"quick`, 2}, {`quick"`, 2}, {`qu"ick`, 0},
	{`*`, 0}, {`a*`, 3}, {`quick*`, 2},
	{`NEAR(`, 0}, {`NEAR(a b`, 0}, {`NEAR(quick fox)`, 0},
	{`-`, 0}, {`-x`, 0}, {`-fox`, 3},
	{`a OR b`, 0}, {`AND`, 0}, {`NOT`, 1}, {`fox NOT`, 1}, {`"fox" OR "dog"`, 0},
	{`(`, 0}, {`)`, 0}, {`(fox`, 3}, {`''`, 0},
	{"\x00", 0}, {"fox\x00", 3}, {"\xff\xfe", 0}, {"\xffquick", 2},
	{`^`, 0}, {`^fox`, 3}, {`:`, 0}, {`col:x`, 0}, {`text:fox`, 0}, {`{text}: fox`, 0},
	{``, 0}, {`   `, 0}, {"\t\n", 0}, {`ünïcödé`, 0}, {`+`, 0}, {`fox + quick`, 2},
}

// HostileQueries returns the hostile queries of the table, as seeds for a
// backend's fuzz target.
func HostileQueries() []string {
	var out []string
	for _, q := range hostileQueries {
		out = append(out, q.query)
	}
	return out
}

func testSearchHostile(t *testing.T, st store.Store) {
	searchFixture(t, st)
	for _, tc := range hostileQueries {
		hits, err := st.Search(t.Context(), "", tc.query, 10)
		if err != nil || len(hits) != tc.want {
			t.Errorf("Search(%q) = %v, %v; want %d hits, no error", tc.query, hitKeys(hits), err, tc.want)
		}
	}
}

// testSearchPrefix: every word of a query matches as the start of a word
// (issue 27: "pomegran" found nothing), of the owner's entries only, newest
// first, and a query word is never read as an operator.
func testSearchPrefix(t *testing.T, st store.Store) {
	apply(t, st, store.Batch{
		Sessions: []store.Session{live("p", "ann"), live("q", "bob")},
		Entries: []store.SessionEntry{
			entry("p", 1, "Pomegranate juice, please", at(1*time.Second)),
			entry("p", 2, "a granite countertop", at(2*time.Second)),
			entry("q", 1, "pomegranates for bob", at(3*time.Second)),
			entry("p", 3, "POMEGRANATES and figs", at(4*time.Second)),
			entry("p", 4, "x1234 OR or_not NEARBY", at(5*time.Second)),
		},
	})
	for _, tc := range []struct {
		name, owner, query string
		want               []string
	}{
		{"a prefix", "ann", "pomegran", []string{"p/3", "p/1"}},
		{"case-folded both ways", "ann", "PomeGRAN", []string{"p/3", "p/1"}},
		{"the whole word still", "ann", "pomegranate", []string{"p/3", "p/1"}},
		{"the plural by its singular", "ann", "pomegranates", []string{"p/3"}},
		{"every word a prefix", "ann", "pome ju", []string{"p/1"}},
		{"one word no prefix of any", "ann", "pome jam", nil},
		{"not inside a word", "ann", "granate", nil},
		{"one letter", "ann", "g", []string{"p/2"}},
		{"digits", "ann", "x12", []string{"p/4"}},
		{"operator words are words", "ann", "OR NEAR", []string{"p/4"}},
		{"an operator prefix", "ann", "o", []string{"p/4"}},
		{"the other owner's", "bob", "pomegran", []string{"q/1"}},
		{"punctuation is no wildcard", "ann", "pom*gran", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hits, err := st.Search(t.Context(), tc.owner, tc.query, 10)
			if err != nil || !slices.Equal(hitKeys(hits), tc.want) {
				t.Fatalf("Search(%q, %q) = %v, %v; want %v", tc.owner, tc.query, hitKeys(hits), err, tc.want)
			}
			for _, h := range hits {
				if h.Snippet == "" {
					t.Errorf("hit %s/%d without a snippet", h.SessionID, h.Seq)
				}
			}
		})
	}
}

func testDelete(t *testing.T, st store.Store) {
	// s is written last: a backend that reuses row ids gives its ids to
	// the next entries, which must not inherit its words.
	apply(t, st, store.Batch{
		Sessions: []store.Session{live("s", "ann"), live("keep", "ann")},
		Entries:  []store.SessionEntry{entry("keep", 1, "zebra herd", t0), entry("s", 1, "zebra crossing", at(time.Second))},
	})
	if ok, err := st.Delete(t.Context(), "bob", "s"); ok || err != nil {
		t.Fatalf("Delete by another owner = %v, %v; want false, nil", ok, err)
	}
	if ok, err := st.Delete(t.Context(), "ann", "s"); !ok || err != nil {
		t.Fatalf("Delete = %v, %v; want true, nil", ok, err)
	}
	if ok, err := st.Delete(t.Context(), "ann", "s"); ok || err != nil {
		t.Fatalf("second Delete = %v, %v; want false, nil", ok, err)
	}
	if _, err := st.Get(t.Context(), "ann", "s"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get after Delete: %v; want ErrNotFound", err)
	}
	if hist, _, err := st.HistoryFor(t.Context(), "", "s", 0, 10); err != nil || len(hist) != 0 {
		t.Errorf("History after Delete = %v, %v; want none", seqs(hist), err)
	}
	if hits, err := st.Search(t.Context(), "ann", "zebra", 10); err != nil || !slices.Equal(hitKeys(hits), []string{"keep/1"}) {
		t.Errorf("Search after Delete = %v, %v; want [keep/1]", hitKeys(hits), err)
	}
	// The id can be used again, from seq 1, with nothing of the old session.
	apply(t, st, store.Batch{Sessions: []store.Session{live("s", "ann")}})
	if got, err := st.Get(t.Context(), "ann", "s"); err != nil || got.LastSeq != 0 {
		t.Errorf("Get of a new session under a deleted id = LastSeq %d, %v; want 0, nil", got.LastSeq, err)
	}
	apply(t, st, store.Batch{Entries: []store.SessionEntry{entry("s", 1, "unrelated words", at(2*time.Second))}})
	if hits, err := st.Search(t.Context(), "ann", "zebra crossing", 10); err != nil || len(hits) != 0 {
		t.Errorf("Search for the deleted entry's words after a new entry = %v, %v; want none", hitKeys(hits), err)
	}
}

func testBatchDeletes(t *testing.T, st store.Store) {
	apply(t, st, store.Batch{
		Sessions: []store.Session{live("s", ""), live("keep", "")},
		Entries:  []store.SessionEntry{entry("s", 1, "walrus", t0), entry("keep", 1, "walrus too", at(time.Second))},
	})
	// Deletes come last in a batch: the entry written with them goes too.
	apply(t, st, store.Batch{Entries: []store.SessionEntry{entry("s", 2, "walrus again", at(2*time.Second))}, Deletes: []string{"s", "never-was"}})
	if _, err := st.Get(t.Context(), "", "s"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get after a batch delete: %v; want ErrNotFound", err)
	}
	if hits, err := st.Search(t.Context(), "", "walrus", 10); err != nil || !slices.Equal(hitKeys(hits), []string{"keep/1"}) {
		t.Errorf("Search after a batch delete = %v, %v; want [keep/1]", hitKeys(hits), err)
	}
	if hist, _, err := st.HistoryFor(t.Context(), "", "s", 0, 10); err != nil || len(hist) != 0 {
		t.Errorf("History after a batch delete = %v, %v; want none", seqs(hist), err)
	}
}

func testPrune(t *testing.T, st store.Store) {
	apply(t, st, store.Batch{
		Sessions: []store.Session{
			closedAt("old", "", t0), closedAt("mid", "bob", at(time.Hour)), closedAt("new", "", at(2*time.Hour)),
			live("live", ""),
		},
		Entries: []store.SessionEntry{entry("old", 1, "ostrich", t0), entry("live", 1, "ostrich alive", at(time.Second))},
	})
	for _, tc := range []struct {
		cutoff time.Time
		want   int
		left   []string
	}{
		{t0, 0, []string{"new", "mid", "old"}},
		{at(time.Nanosecond), 1, []string{"new", "mid"}},
		{at(2 * time.Hour), 1, []string{"new"}},
		{at(3 * time.Hour), 1, nil},
		{at(3 * time.Hour), 0, nil},
	} {
		n, err := st.Prune(t.Context(), tc.cutoff)
		if err != nil || n != tc.want {
			t.Fatalf("Prune(%v) = %d, %v; want %d", tc.cutoff, n, err, tc.want)
		}
		var left []string
		for _, owner := range []string{"", "bob"} {
			got, _, err := st.Closed(t.Context(), store.ListQuery{Owner: owner})
			if err != nil {
				t.Fatalf("Closed: %v", err)
			}
			left = append(left, ids(got)...)
		}
		slices.Sort(left)
		want := slices.Sorted(slices.Values(tc.left))
		if !slices.Equal(left, want) {
			t.Fatalf("after Prune(%v) closed = %v; want %v", tc.cutoff, left, want)
		}
	}
	if hits, err := st.Search(t.Context(), "", "ostrich", 10); err != nil || !slices.Equal(hitKeys(hits), []string{"live/1"}) {
		t.Errorf("Search after Prune = %v, %v; want [live/1]", hitKeys(hits), err)
	}
	if rs, err := st.Restorable(t.Context()); err != nil || !slices.Equal(ids(rs), []string{"live"}) {
		t.Errorf("Restorable after Prune = %v, %v; want [live]", ids(rs), err)
	}
}

func testUnknownSession(t *testing.T, st store.Store) {
	err := st.Apply(t.Context(), store.Batch{
		Sessions: []store.Session{live("new", "")},
		Entries:  []store.SessionEntry{entry("new", 1, "fine", t0), entry("ghost", 1, "orphan", t0)},
	})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Apply with an entry of an unknown session: %v; want ErrNotFound", err)
	}
	// All or nothing: the session of the failed batch was not written.
	if _, err := st.Get(t.Context(), "", "new"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get after a failed batch: %v; want ErrNotFound", err)
	}
	// A session stored by an earlier batch takes entries alone.
	apply(t, st, store.Batch{Sessions: []store.Session{live("new", "")}})
	apply(t, st, store.Batch{Entries: []store.SessionEntry{entry("new", 1, "fine", t0)}})
	if got, err := st.Get(t.Context(), "", "new"); err != nil || got.LastSeq != 1 {
		t.Errorf("Get = LastSeq %d, %v; want 1", got.LastSeq, err)
	}
}

func testClose(t *testing.T, st store.Store) {
	apply(t, st, store.Batch{Sessions: []store.Session{live("s", "")}})
	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ctx := t.Context()
	for name, call := range map[string]func() error{
		"Apply": func() error { return st.Apply(ctx, store.Batch{Sessions: []store.Session{live("x", "")}}) },
		"Restorable": func() error {
			_, err := st.Restorable(ctx)
			return err
		},
		"Get": func() error {
			_, err := st.Get(ctx, "", "s")
			return err
		},
		"Closed": func() error {
			_, _, err := st.Closed(ctx, store.ListQuery{})
			return err
		},
		"Search": func() error {
			_, err := st.Search(ctx, "", "word", 10)
			return err
		},
		"Delete": func() error {
			_, err := st.Delete(ctx, "", "s")
			return err
		},
		"Prune": func() error {
			_, err := st.Prune(ctx, t0)
			return err
		},
		"RestorableFor": func() error {
			_, err := st.RestorableFor(ctx, "")
			return err
		},
		"HistoryFor": func() error {
			_, _, err := st.HistoryFor(ctx, "", "s", 0, 10)
			return err
		},
		"Rename": func() error {
			_, err := st.Rename(ctx, "", "s", "x")
			return err
		},
		"Claim": func() error {
			_, err := st.Claim(ctx, "n", time.Minute, t0)
			return err
		},
		"Renew": func() error {
			_, err := st.Renew(ctx, "n", map[string]uint64{"s": 1}, time.Minute, t0)
			return err
		},
		"Release": func() error {
			_, err := st.Release(ctx, "n")
			return err
		},
		"Settings": func() error {
			_, err := st.Settings(ctx, "")
			return err
		},
		"PutSettings": func() error {
			_, err := st.PutSettings(ctx, "", store.SettingsPatch{Theme: ptr("dark")})
			return err
		},
	} {
		if err := call(); !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close: %v; want ErrClosed", name, err)
		}
	}
}
