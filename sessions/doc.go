// Package sessions is dashgate's session registry: the state machine of a
// session, its viewers, its worker and terminal, and every way it ends.
//
// Ownership. The [Registry] owns every [Session]; a session owns at most one
// chat worker and one [Terminal], each started lazily. One mutex, the
// registry's, guards all session state; nothing slow runs under it: spawning
// and teardown happen outside it, and fan-out to viewers only queues (a
// [Viewer]'s Deliver must not block).
//
// Ending. Every end of a session, whatever the reason, goes through one
// funnel (Registry.end): it claims the session under the lock, tears down
// the worker and the terminal in parallel outside it, tells the viewers
// (event session.closed) and logs one INFO "session closed" record. Every
// close of a worker or terminal goes through workers.Proc.Close, which logs
// one INFO "worker closed" record.
//
// Liveness is per session: a session counts its viewers (the chat sockets
// that created, resumed or used it, and its terminal socket). When the last
// one leaves, the session detaches and its worker is closed at once, even
// mid-turn; the session then waits --detached-ttl for a resume, watched by a
// timer of its own and by a periodic sweep that repairs a lost timer.
//
// Blocking. Close, Shutdown and Exec block (bounded by the grace, the worker
// timeout or the context); everything else returns at once.
package sessions
