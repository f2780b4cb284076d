// Package sessions is dashgate's session registry: the state machine of a
// session, its viewers, its worker and terminal, and every way it ends.
//
// Ownership. The [Registry] owns every [Session]; a session owns at most one
// chat worker ([Worker]) and MaxTerminalsPerSession [Terminal]s (each over
// a [PTY] of its own, by id: terminals.go), each started lazily
// through a [Spawner] (the children sit behind interfaces, so tests fake
// them). One mutex, the registry's, guards all session state but a
// session's event stream (its seq, the fan-out to its viewers, its turn's
// streamed text and checkpoints), which its own stream lock guards, taken
// after the registry's: a turn's deltas and checkpoints take only that one.
// Nothing slow runs under either: spawning and teardown happen outside
// them, and fan-out to viewers only queues an [Event] (a [Viewer]'s
// Deliver must not block; the viewer's writer encodes it, once for all
// viewers, with Event.Encode). session.changed is told to the watchers by
// a goroutine of its own, in order (changes.go).
//
// Files, one per concern, each opening with what it owns: registry.go (the
// config, the constructor, Run, List/Get, the tracker), viewers.go (the
// viewer index, the cap, the principal and authorize), lifecycle.go (make,
// attach, detach and grace, TTL and sweep, the end funnel, shutdown),
// children.go (the chat worker), terminal.go, terminals.go (a session's
// several, by id) and spare.go (terminals),
// turn.go (a prompt's turn and its approvals), commands.go (slash
// commands), conversation.go (history, entry seqs, the registry's calls
// on the store), admission.go (the admission type: the session caps for
// every way a session becomes live, and the default-title counter),
// archive.go (the archive type: the store-facing reads behind those
// calls),
// lease.go (a node's hold on its sessions), changes.go (session.changed),
// journal.go (the write-behind queue), reasons.go (the table), usage.go
// (what each user has live: the per-user caps, the fair shares of the
// global ones and AdminView.UsersSummary),
// accounts.go (the Unix account a session's children run as), recording.go
// (a terminal's recording, Config.Record: started with its program or when
// a session takes a spare, fed by its reader, closed after it).
//
// Spares. With Config.PTYSpare the registry also owns up to two terminals
// started ahead of the sessions they will serve (spare.go): not in the
// registry until an attach without a session takes one, ended by Shutdown
// or to free a worker slot. Config.Accounts turns them off.
//
// Fair shares. A global cap takes only from users over their fair share
// of it (the cap over the users holding some, the asker counted): at
// MaxSessions the detached session evicted is one of the user most over
// theirs; at the child cap (workers.ErrCapacity) a spawn reclaims an idle
// chat worker of the user most over theirs (reason reclaimed), never a
// worker in use (usage.go, children.go). DefaultUserCaps derives per-user
// caps from the global ones.
//
// Unix accounts. With Config.Accounts every chat worker (so an agent and
// its tools) and every terminal of a session starts as its owner's
// account, looked up at each spawn; an owner the lookup refuses gets
// nothing spawned (accounts.go). Registry.ReapUser ends all of one user's
// sessions for an admin.
//
// Who views what. The registry's viewer index is the only record of which
// viewer views which session; it enforces Config.MaxViewed per viewer, and a session
// that ends by any path leaves every viewer's count at once. Transports
// keep no copy.
//
// Who is asking. Every call acts for a [Principal] (a [Viewer] carries
// it; calls without a viewer take it as a parameter) and every exported
// method that takes a session id reaches it through one lookup-and-authorize
// step (findLocked and its kin in viewers.go, archive.stored for a stored
// one): another user's session answers exactly as a missing one
// (ErrNotFound). authorize_test.go accounts for every exported method of
// [Registry] and [AdminView] as user, admin or system. A session's owner
// is set when it is made and written with every stored row (the
// conversation stamps it, in one place); store queries carry it. Admins
// ([AdminPrincipal], [Registry.Admin]) list and end any session, and read
// none but their own; the admin token's principal owns none at all
// ([Principal.Owns]), not even the anonymous user's.
//
// Leases. After Claim (a node of a cluster) every stored row and entry
// carries its session's epoch; a write the store fences as another node's,
// or a lease a renewal could not keep, ends the session with end_reason
// lease_lost and nothing more of it is written. FlushStore releases the
// leases at a clean stop.
//
// Reasons. reasons.go is the one table of end reasons ([EndReason]),
// worker reasons (workers.Reason) and every translation between them and
// from the end of a socket ([ViewerEndReason]); the metrics and the tests
// take their lists from it.
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
// Blocking. Close, CloseTerminal, ReapWorker, Shutdown and Exec block (bounded by the
// grace, the worker timeout or the context); everything else returns at
// once. Wait joins every goroutine the registry started, Shutdown's
// teardowns included.
package sessions
