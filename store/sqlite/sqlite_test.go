package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store {
		return openTest(t, filepath.Join(t.TempDir(), "dashgate.db"))
	})
}

// openTest opens the store at path and closes it when t ends.
func openTest(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(t.Context(), path, Options{})
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
