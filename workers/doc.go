// Package workers starts, watches and ends dashgate's child processes, and
// nothing else: of the project it imports only accounts (a leaf), for the
// Unix account a child runs as.
//
// Ownership. A [Manager] owns every child it starts. Each child is a [Proc]:
// exactly one goroutine calls cmd.Wait for it, and one supervisor goroutine
// runs its teardown when the child exits by itself or asks to be recycled.
// [Proc.Close] is idempotent; it ends the child's whole tree with escalation
// (SIGHUP for a pty, then SIGTERM, then the kill, each step only for what is
// still alive after the grace), and returns only once the tree is gone, the
// child reaped and its drain goroutines returned. It logs exactly one INFO
// record, msg="worker closed".
//
// The tree. In cgroup mode ([Config.Cgroups], [SetupCgroups]) each child
// starts inside a cgroup v2 of its own (clone3 with CLONE_INTO_CGROUP), its
// tree is that cgroup's members and, since a root process can leave any
// cgroup, what the fallback claims outside it; the kill is cgroup.kill
// (SIGKILL for those outside), and gone means populated 0 and those outside
// gone (docs/containment.md). In the fallback it is the process
// group, for a pty the terminal session, the descendants by parent pid,
// every process that still carries the child's DASHGATE_WORKER_ID marker,
// and every adopted process that holds the child's terminal or pipes; the
// kill is SIGKILL to each.
//
// Accounts. A child with [Spec.Account] runs as that Unix account (uid,
// gid, full group list, HOME/USER/LOGNAME/SHELL, cwd its home or "/", a
// pty owned by it with group tty and mode 0620); in cgroup mode its leaf
// is Dir/user-<name>/<leaf>, under a directory with the per-account limits
// (CgroupOptions.UserMemoryMax, UserPidsMax, UserCPUMax) that exists while
// one of the account's children does. Every cgroup directory is root's and
// 0755, so the account cannot move a process out of its cgroup; a child
// running as root (dashgate's own, or --allow-root-users) can, and the
// fallback's claims are what still find it.
//
// A [Worker] is a Proc speaking the JSON-lines worker protocol over pipes
// (PROTOCOL.md §4); a pty Proc exposes the pty master through [Proc.PTY].
//
// Parent death. Children get Pdeathsig=SIGKILL. Linux delivers it when the
// *thread* that forked the child exits (prctl(2), PR_SET_PDEATHSIG). The Go
// runtime ends an OS thread when a goroutine exits while locked to it
// (runtime.LockOSThread), which any code may do; so every fork runs on one
// goroutine locked to its own thread for the life of the process, and the
// signal fires exactly when dashgate dies. That goroutine never ends: leak
// checkers ignore SpawnThreadFunction.
//
// Orphans. [EnableSubreaper] makes dashgate the reaper of orphaned
// descendants (prctl(2), PR_SET_CHILD_SUBREAPER); [Manager.RunReaper] reaps
// those by pid, never with wait(-1), which would steal os/exec's statuses.
//
// Crash recovery. [AcquireInstance] takes a flock in the state directory;
// [Sweep] ends the processes of instances whose lock is free, by their
// cgroups first, then by their DASHGATE_INSTANCE variable and the list of
// processes each had adopted (pid and start time, kept beside its lock by
// [Manager.RunReaper]).
package workers
