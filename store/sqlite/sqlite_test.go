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

// TestTwoNodesOneFile runs the two-node table with each node on its own
// Store over one file, as two processes would share it (the lease on the
// file that keeps a second dashgate off it is cmd/dashgate's, above this
// package).
func TestTwoNodesOneFile(t *testing.T) {
	t.Parallel()
	for name, run := range map[string]func(*testing.T, store.Store, store.Store){
		"lease lapses":                  storetest.TwoNodes,
		"claims at once":                storetest.ClaimRace,
		"claims of one session at once": storetest.ClaimSessionRace,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := filepath.Join(t.TempDir(), "dashgate.db")
			a := openTest(t, p)
			b := openTest(t, p)
			run(t, a, b)
		})
	}
}
