package handlers_test

import (
	"testing"

	"github.com/dashgate/dashgate/store"
)

// openStore is the store the handler tests run on.
func openStore(t *testing.T) store.Store {
	return store.NewMemory()
}
