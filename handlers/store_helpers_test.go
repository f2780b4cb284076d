package handlers_test

import (
	"path/filepath"
	"testing"

	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/store/sqlite"
)

// openStore opens a real SQLite store in the test's temp dir; the test's
// cleanup closes it.
func openStore(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "dashgate.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
