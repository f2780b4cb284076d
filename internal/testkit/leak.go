package testkit

import (
	"testing"

	"go.uber.org/goleak"
)

// SpawnThreadFunction is workers.SpawnThreadFunction: the function of the
// goroutine that forks every child, locked to its own thread for the life
// of the process by design, so that Pdeathsig fires only when dashgate
// dies. The kit imports nothing of the project, so it names it here; a
// test of the kit fails when the two drift.
const SpawnThreadFunction = "github.com/dashgate/dashgate/workers.spawnLoop"

// PTYPollerFunction is sessions.PTYPollerFunction: the function of the
// goroutine that the terminals' shared epoll starts with the first
// terminal, parked in Go's poller for the life of the process by design.
const PTYPollerFunction = "github.com/dashgate/dashgate/sessions.(*readPoller).backstop"

// leakIgnores are the goroutines every package's leak check ignores, on
// top of goleak's defaults (which already ignore os/signal's loop and the
// testing package's own):
var leakIgnores = []goleak.Option{
	// workers' spawning goroutine, started by the first spawn of any
	// package (workers, sessions, handlers, ...); a package that never
	// spawns has none to ignore.
	goleak.IgnoreAnyFunction(SpawnThreadFunction),
	// sessions' pty poller, started by the first terminal (PTYPollerFunction).
	goleak.IgnoreAnyFunction(PTYPollerFunction),
	// the kit's own forking goroutine, started by the first Start
	// (ForkThreadFunction).
	goleak.IgnoreAnyFunction(ForkThreadFunction),
}

// VerifyNoLeaks runs m's tests, then fails the run (a non-zero exit) when
// goroutines are left, as goleak.VerifyTestMain does, ignoring those every
// package may have (goleak's defaults and leakIgnores: the spawning
// goroutine, the pty poller, the kit's forking goroutine); opts add a package's own ignores or a
// goleak.Cleanup. It does not return: call it last in TestMain.
func VerifyNoLeaks(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(m, append(append([]goleak.Option{}, leakIgnores...), opts...)...)
}
