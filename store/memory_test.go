package store_test

import (
	"testing"

	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/store/storetest"
)

func TestMemory(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store {
		m := store.NewMemory()
		t.Cleanup(func() { m.Close() })
		return m
	})
}
