package testkit_test

import (
	"testing"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/workers"
)

// TestSpawnThreadFunctionName: the kit's leak check ignores the spawning
// goroutine by the name workers gives it.
func TestSpawnThreadFunctionName(t *testing.T) {
	if testkit.SpawnThreadFunction != workers.SpawnThreadFunction {
		t.Fatalf("testkit.SpawnThreadFunction = %q, workers.SpawnThreadFunction = %q", testkit.SpawnThreadFunction, workers.SpawnThreadFunction)
	}
}

// TestPTYPollerFunctionName: the kit's leak check ignores the pty poller's
// goroutine by the name sessions gives it.
func TestPTYPollerFunctionName(t *testing.T) {
	if testkit.PTYPollerFunction != sessions.PTYPollerFunction {
		t.Fatalf("testkit.PTYPollerFunction = %q, sessions.PTYPollerFunction = %q", testkit.PTYPollerFunction, sessions.PTYPollerFunction)
	}
}
