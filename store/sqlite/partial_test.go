package sqlite

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/dashgate/dashgate/store"
)

// TestPartialEntriesIndexedWhenDone: a streaming reply's checkpoints
// (store.Entry.Partial) are stored and read back but not searchable; its
// last write (not partial) is, and replaces them in the index; one a
// crash left partial is searchable after the next Open. The FTS index
// stays consistent through every step (its integrity-check).
func TestPartialEntriesIndexedWhenDone(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "dashgate.db")
	s := openTest(t, p)
	when := time.Date(2026, 12, 6, 7, 8, 9, 0, time.UTC)
	ctx := t.Context()
	put := func(st *Store, seq uint64, text string, partial bool) {
		t.Helper()
		if err := st.Apply(ctx, store.Batch{Entries: []store.SessionEntry{{SessionID: "s", Entry: store.Entry{
			Seq: seq, Role: store.RoleAssistant, Kind: store.KindReply, Text: text, At: when, Partial: partial, Interrupted: partial}}}}); err != nil {
			t.Fatal(err)
		}
	}
	hits := func(st *Store, word string) int {
		t.Helper()
		h, err := st.Search(ctx, "", word, 10)
		if err != nil {
			t.Fatal(err)
		}
		return len(h)
	}
	// intact checks the index: against the entries (full) when none is
	// partial, else within itself (a partial entry is in the content table
	// and, rightly, not in the index).
	intact := func(st *Store, full bool) {
		t.Helper()
		rank := 0
		if full {
			rank = 1
		}
		if _, err := st.w.ExecContext(ctx, `INSERT INTO entries_fts (entries_fts, rank) VALUES ('integrity-check', ?)`, rank); err != nil {
			t.Fatalf("the search index is not consistent (full %v): %v", full, err)
		}
	}
	if err := s.Apply(ctx, store.Batch{Sessions: []store.Session{{ID: "s", Title: "t", CreatedAt: when, LastActive: when, State: store.StateSuspended}}}); err != nil {
		t.Fatal(err)
	}
	put(s, 1, "quokka", true)
	put(s, 1, "quokka marmalade", true)
	if n := hits(s, "quokka"); n != 0 {
		t.Fatalf("a checkpoint is searchable (%d hits)", n)
	}
	intact(s, false)
	put(s, 1, "quokka marmalade pelican", false)
	if hits(s, "pelican") != 1 || hits(s, "quokka") != 1 {
		t.Fatal("the reply's last write is not searchable")
	}
	intact(s, true)
	// Written partial again (a regenerate's checkpoint of that seq would
	// not be; a store must still keep its index right): out of the index.
	put(s, 1, "zanzibar", true)
	if hits(s, "pelican") != 0 || hits(s, "zanzibar") != 0 {
		t.Fatal("an entry written partial again is still searchable by its old or new text")
	}
	intact(s, false)

	// A crash's last checkpoint: searchable once the store opens again.
	put(s, 2, "lighthouse tangerine", true)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openTest(t, p)
	if hits(s2, "lighthouse") != 1 || hits(s2, "zanzibar") != 1 {
		t.Fatal("the entries a crash left partial are not searchable after Open")
	}
	intact(s2, true)
	h, _, err := s2.HistoryFor(ctx, "", "s", 0, 10)
	if err != nil || len(h) != 2 || h[1].Text != "lighthouse tangerine" {
		t.Fatalf("history = %+v, %v", h, err)
	}
}
