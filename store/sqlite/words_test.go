package sqlite

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dashgate/dashgate/store"
)

// TestSearchCountsTheFirstWords: only the first store.MaxSearchWords words
// of a query count, so a pasted page finds what its first words find
// instead of costing the index a lookup per word.
func TestSearchCountsTheFirstWords(t *testing.T) {
	t.Parallel()
	s := openTest(t, filepath.Join(t.TempDir(), "dashgate.db"))
	words := make([]string, store.MaxSearchWords)
	for i := range words {
		words[i] = "w" + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	err := s.Apply(t.Context(), store.Batch{
		Sessions: []store.Session{{ID: "s", State: "attached"}},
		Entries:  []store.SessionEntry{{SessionID: "s", Entry: store.Entry{Seq: 1, Text: strings.Join(words, " "), At: time.Now()}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Every word the entry holds, then one it does not: the extra word is
	// past the limit and does not narrow the search to nothing.
	q := strings.Join(words, " ") + " absent"
	hits, err := s.Search(t.Context(), "", q, 10)
	if err != nil || len(hits) != 1 {
		t.Fatalf("Search(%d words + 1 absent) = %d hits, %v; want the entry", len(words), len(hits), err)
	}
	// Within the limit, an absent word still narrows.
	hits, err = s.Search(t.Context(), "", strings.Join(words[:len(words)-1], " ")+" absent", 10)
	if err != nil || len(hits) != 0 {
		t.Fatalf("an absent word within the limit: %d hits, %v; want none", len(hits), err)
	}
}
