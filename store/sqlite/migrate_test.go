package sqlite

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dashgate/dashgate/store"
)

// schema1DB is a store written by dashgate before migrations moved to
// goose (commit 316fe7a, PRAGMA user_version 1, no goose table): the
// sessions and entries of schema1Sessions and schema1Entries, closed
// cleanly. It is never rewritten: each test opens a copy.
const schema1DB = "testdata/schema1.db"

var schema1T0 = time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)

func s1at(d time.Duration) time.Time { return schema1T0.Add(d) }

// schema1Sessions are the sessions of schema1DB, as written, with LastSeq.
var schema1Sessions = []store.Session{
	{ID: "live-ann", Owner: "ann", Title: "Ann's live chat", CreatedAt: schema1T0, LastActive: s1at(time.Minute), State: "detached", Model: "qwen3:8b", LastSeq: 3},
	{ID: "suspended-none", Owner: "", Title: "unowned suspended", CreatedAt: schema1T0, LastActive: s1at(2 * time.Minute), State: store.StateSuspended, LastSeq: 1},
	{ID: "closed-bob", Owner: "bob", Title: "Bob's closed chat", CreatedAt: schema1T0, LastActive: s1at(3 * time.Minute), State: store.StateClosed, EndReason: "client_close", ClosedAt: s1at(time.Hour), LastSeq: 2},
	{ID: "empty-ann", Owner: "ann", Title: "", CreatedAt: schema1T0, LastActive: schema1T0, State: "attached"},
}

// schema1Entries are the entries of schema1DB by session.
var schema1Entries = map[string][]store.Entry{
	"live-ann": {
		{Seq: 1, Role: store.RoleUser, Kind: store.KindPrompt, Text: "where is the walrus", At: s1at(time.Second), TurnID: "t1"},
		{Seq: 2, Role: store.RoleAssistant, Kind: store.KindReply, Text: "the walrus sleeps on ice", At: s1at(2 * time.Second), TurnID: "t1", Status: "complete", Usage: &store.Usage{InputTokens: 12, OutputTokens: 34}},
		{Seq: 3, Role: store.RoleTool, Kind: store.KindSlashOutput, Text: "exit 3", At: s1at(3 * time.Second), Data: []byte(`{"exit_code":3}`)},
	},
	"suspended-none": {
		{Seq: 1, Role: store.RoleAssistant, Kind: store.KindReply, Text: "interrupted penguin", At: s1at(4 * time.Second), Interrupted: true, Status: "interrupted"},
	},
	"closed-bob": {
		{Seq: 1, Role: store.RoleUser, Kind: store.KindPrompt, Text: "bob asks about the walrus", At: s1at(5 * time.Second)},
		{Seq: 2, Role: store.RoleSystem, Kind: store.KindError, Text: "model gone", At: s1at(6 * time.Second), Code: -32001},
	},
}

// copySchema1 copies schema1DB into a temporary directory and returns the
// copy's path.
func copySchema1(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(schema1DB)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "dashgate.db")
	writeFile(t, p, data)
	return p
}

// TestOpenSchema1 opens a file of the schema before goose: every session
// and entry is there, search finds them, the new columns read as unowned,
// and the file is at the newest version in both goose's table and
// user_version; it opens again as it is.
func TestOpenSchema1(t *testing.T) {
	t.Parallel()
	p := copySchema1(t)
	if user, applied := versionsOf(t, p); user != 1 || applied != 0 {
		t.Fatalf("%s: user_version %d, goose version %d; want the schema before goose (1, no goose table)", schema1DB, user, applied)
	}
	s := openTest(t, p)
	ctx := t.Context()

	for _, want := range schema1Sessions {
		got, err := s.Get(ctx, want.Owner, want.ID)
		if err != nil {
			t.Fatalf("Get(%q, %q): %v", want.Owner, want.ID, err)
		}
		if got.ID != want.ID || got.Owner != want.Owner || got.Title != want.Title || got.State != want.State ||
			got.EndReason != want.EndReason || got.Model != want.Model || got.LastSeq != want.LastSeq ||
			!got.CreatedAt.Equal(want.CreatedAt) || !got.LastActive.Equal(want.LastActive) ||
			!got.ClosedAt.Equal(want.ClosedAt) || got.ClosedAt.IsZero() != want.ClosedAt.IsZero() ||
			got.Node != "" || !got.LeaseUntil.IsZero() || got.Epoch != 0 {
			t.Errorf("session:\n got  %+v\n want %+v (unowned, epoch 0)", got, want)
		}
		hist, more, err := s.HistoryFor(ctx, want.Owner, want.ID, 0, 100)
		if err != nil || more || len(hist) != len(schema1Entries[want.ID]) {
			t.Fatalf("HistoryFor(%q) = %d entries, more %v, %v; want %d", want.ID, len(hist), more, err, len(schema1Entries[want.ID]))
		}
		for i, w := range schema1Entries[want.ID] {
			g := hist[i]
			usageOK := (g.Usage == nil) == (w.Usage == nil) && (g.Usage == nil || *g.Usage == *w.Usage)
			if g.Seq != w.Seq || g.Role != w.Role || g.Kind != w.Kind || g.Text != w.Text || !g.At.Equal(w.At) ||
				g.TurnID != w.TurnID || g.Interrupted != w.Interrupted || g.Code != w.Code || g.Status != w.Status ||
				string(g.Data) != string(w.Data) || !usageOK {
				t.Errorf("entry of %s:\n got  %+v\n want %+v", want.ID, g, w)
			}
		}
	}
	rs, err := s.Restorable(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(rs, func(a, b store.Session) int { return strings.Compare(a.ID, b.ID) })
	if got, want := sessionIDs(rs), []string{"empty-ann", "live-ann", "suspended-none"}; !slices.Equal(got, want) {
		t.Errorf("Restorable = %v; want %v", got, want)
	}
	for _, tc := range []struct {
		owner, query string
		want         []string
	}{
		{"ann", "walrus", []string{"live-ann/2", "live-ann/1"}},
		{"bob", "walrus", []string{"closed-bob/1"}},
		{"", "penguin", []string{"suspended-none/1"}},
		{"ann", "WALR", []string{"live-ann/2", "live-ann/1"}},
		{"", "p", []string{"suspended-none/1"}},
	} {
		hits, err := s.Search(ctx, tc.owner, tc.query, 10)
		var got []string
		for _, h := range hits {
			got = append(got, fmt.Sprintf("%s/%d", h.SessionID, h.Seq))
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Search(%q, %q) = %v, %v; want %v", tc.owner, tc.query, got, err, tc.want)
		}
	}
	// The upgraded file takes writes of the new schema.
	if err := s.Apply(ctx, store.Batch{Entries: []store.SessionEntry{{SessionID: "live-ann", Entry: store.Entry{Seq: 4, Kind: store.KindPrompt, Text: "after upgrade"}}}}); err != nil {
		t.Fatalf("Apply after upgrade: %v", err)
	}
	// The full-text table made again (00003, with its prefix index) is
	// kept in step by the triggers of before.
	if hits, err := s.Search(ctx, "ann", "upgr", 10); err != nil || len(hits) != 1 || hits[0].Seq != 4 {
		t.Errorf("Search(upgr) after an upgrade = %+v, %v; want live-ann/4", hits, err)
	}
	var ddl string
	if err := s.r.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE name = 'entries_fts'`).Scan(&ddl); err != nil || !strings.Contains(ddl, "prefix = '1 2 3'") {
		t.Errorf("entries_fts after an upgrade: %q, %v; want its prefix index (prefix = '1 2 3')", ddl, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	user, applied := versionsOf(t, p)
	if user != schemaVersion || applied != schemaVersion {
		t.Errorf("after Open: user_version %d, goose version %d; want both %d", user, applied, schemaVersion)
	}
	s = openTest(t, p)
	if got, err := s.Get(ctx, "ann", "live-ann"); err != nil || got.LastSeq != 4 {
		t.Errorf("Get after reopen = LastSeq %d, %v; want 4", got.LastSeq, err)
	}
}

// TestOpenGooseNewer: a file whose goose table records a step this code
// does not have (user_version not raised) is refused and left unchanged.
func TestOpenGooseNewer(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "dashgate.db")
	if err := openTest(t, p).Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO `+gooseTable+` (version_id, is_applied) VALUES (?, 1)`, schemaVersion+1); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	before := stateOf(t, p)
	_, err = Open(t.Context(), p, Options{})
	want := fmt.Sprintf("store %s has schema version %d; this dashgate knows up to %d", p, schemaVersion+1, schemaVersion)
	if !errors.Is(err, ErrNewerSchema) || err.Error() != want {
		t.Errorf("Open error %q; want ErrNewerSchema reading %q", err, want)
	}
	before.check(t, stateOf(t, p))
}

// versionsOf reads the file's PRAGMA user_version and newest goose step.
func versionsOf(t *testing.T, p string) (user, applied int) {
	t.Helper()
	db, err := sql.Open("sqlite", p)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	user, applied, err = readVersion(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	return user, applied
}

func sessionIDs(ss []store.Session) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.ID)
	}
	return out
}
