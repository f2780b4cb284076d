// Package testkit is dashgate's one kit of test helpers, shared by the unit
// tests of every package, the e2e suite and the benchmark binary
// (cmd/dashgate-bench): waits with a deadline, slog capture, /proc checks,
// WebSocket clients of /ws/chat and /ws/pty, and a launcher of the real
// dashgate binary.
//
// The core API takes a context.Context and returns errors, so that a
// program that is not a test can use it; the few helpers that take a
// testing.TB (WaitFor, StartT) are thin wrappers that call tb.Fatalf.
//
// Who owns what:
//   - A *Conn, *Chat or *PTY runs one reader goroutine from Dial until the
//     socket ends; Close or Drop ends it and returns once that goroutine
//     has returned. The caller closes every socket it dialled.
//   - An *Instance is a child process of the caller, waited for by the kit
//     (Exited is closed once it was reaped). Stop or Kill ends it; StartT
//     registers a cleanup that kills it and whatever carries its instance
//     marker if the test did not stop it.
//   - Build's binary lives in a temporary directory that RemoveBuild
//     deletes; call it once at exit (TestMain).
//
// Nothing here sleeps to synchronise: every wait polls its condition with a
// short backoff until a deadline (Poll) or waits on the event itself.
package testkit
