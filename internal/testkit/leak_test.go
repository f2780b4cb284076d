package testkit_test

import (
	"testing"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/workers"
)

// TestSpawnThreadFunctionName: the kit's leak check ignores the spawning
// goroutine by the name workers gives it.
func TestSpawnThreadFunctionName(t *testing.T) {
	if testkit.SpawnThreadFunction != workers.SpawnThreadFunction {
		t.Fatalf("testkit.SpawnThreadFunction = %q, workers.SpawnThreadFunction = %q", testkit.SpawnThreadFunction, workers.SpawnThreadFunction)
	}
}
