package workers

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dashgate/dashgate/accounts"
)

// Kind says what a child is for.
type Kind string

const (
	KindChat Kind = "chat" // a JSON-lines worker on pipes
	KindPTY  Kind = "pty"  // a program on a pseudo-terminal
)

// Reason says why a child was closed. Values are the worker reasons of
// PROTOCOL.md §6.
type Reason string

const (
	ReasonDetach           Reason = "detach"
	ReasonSessionClosed    Reason = "session_closed"
	ReasonAdminReap        Reason = "admin_reap"
	ReasonExited           Reason = "exited"
	ReasonTimeout          Reason = "timeout"
	ReasonProtocolError    Reason = "protocol_error"
	ReasonShutdown         Reason = "shutdown"
	ReasonKeepaliveExpired Reason = "keepalive_expired"
	ReasonSuperseded       Reason = "superseded"
	ReasonWriteTimeout     Reason = "write_timeout"
	ReasonPingTimeout      Reason = "ping_timeout"
	ReasonStartupSweep     Reason = "startup_sweep"
	// ReasonInterrupted: the worker did not finish an interrupted turn within
	// a second and was recycled. An addition to PROTOCOL.md §6.
	ReasonInterrupted Reason = "interrupted"
	// ReasonSpareUnused: a terminal started ahead of its session (the
	// spare, sessions.Config.PTYSpare) was ended unused. An addition to
	// PROTOCOL.md §6.
	ReasonSpareUnused Reason = "spare_unused"
	// ReasonTerminalClosed: one of a session's terminals was closed by
	// its user (terminal.close, a tab's ×); the session and its other
	// terminals stay. An addition to PROTOCOL.md §6.
	ReasonTerminalClosed Reason = "terminal_closed"
)

// Escalation says how far a close had to go.
type Escalation string

const (
	EscalationNone Escalation = "none" // nothing was alive any more
	EscalationTerm Escalation = "term" // the polite signals (SIGHUP, SIGTERM) sufficed
	EscalationKill Escalation = "kill" // SIGKILL was needed
)

// Environment variables every child receives (PROTOCOL.md §4).
const (
	EnvParentPID = "DASHGATE_PARENT_PID"
	EnvSessionID = "DASHGATE_SESSION_ID"
	EnvInstance  = "DASHGATE_INSTANCE"
	// EnvWorkerID is the marker inherited by every descendant of a child, so
	// the tree can be found even after a member left the process group.
	EnvWorkerID = "DASHGATE_WORKER_ID"
	// EnvMaxLine is the longest request line dashgate may send a chat
	// worker, bytes (a prompt carries its attached files): a worker reads
	// lines at least this long (jsonl does).
	EnvMaxLine = "DASHGATE_MAX_LINE"
)

// eofGrace is how long Close waits for a chat worker to exit on stdin EOF
// before it signals.
const eofGrace = 50 * time.Millisecond

// killWait bounds the wait after SIGKILL (a process in uninterruptible
// sleep can outlive it); past it Close logs at ERROR and returns.
const killWait = 5 * time.Second

// ErrCapacity is matched by Start's error when --max-workers children run
// already (a *CapacityError).
var ErrCapacity = errors.New("worker capacity reached")

// CapacityError is Start's error when Max children (Config.MaxWorkers,
// --max-workers: chat workers and terminal programs together) run
// already. It matches ErrCapacity; its message names the flag.
type CapacityError struct {
	Max int
}

func (e *CapacityError) Error() string {
	return fmt.Sprintf("%s: --max-workers (%d)", ErrCapacity, e.Max)
}

// Is makes errors.Is(err, ErrCapacity) hold.
func (e *CapacityError) Is(target error) bool { return target == ErrCapacity }

// Config configures a Manager.
type Config struct {
	// Instance is the DASHGATE_INSTANCE given to every child. When this
	// process holds that instance (AcquireInstance), the processes dashgate
	// adopted are kept in the instance's directory for a later Sweep.
	Instance   string
	Grace      time.Duration // wait after each polite signal before the next step
	MaxWorkers int           // 0 means no limit; counts chat and pty children
	Log        *slog.Logger
	// OnClose, when set, is called once per closed child after it logged;
	// it must not block (metrics).
	OnClose func(CloseResult)
	// SlowSnapshot is how long Snapshot waits for its read before it
	// answers with the figures of the previous one, the read going on in
	// the background (snapshot.go); 0: DefaultSlowSnapshot.
	SlowSnapshot time.Duration
	// SnapshotMaxAge is how old a slow read's figures get before a call
	// of Snapshot starts the next read; 0: DefaultSnapshotMaxAge.
	SnapshotMaxAge time.Duration
	// Priority is the CPU priority of every child (--child-nice,
	// --child-sched; priority.go); the zero value: dashgate's own.
	Priority Priority
	// PTYPriority, when set, is the priority of pty programs instead
	// (--child-nice auto leaves theirs at dashgate's: see AutoChildNice).
	PTYPriority *Priority
	// Cgroups, when set, contains each child in a cgroup of its own
	// (SetupCgroups); nil means the fallback. The caller closes it after
	// the Manager's children.
	Cgroups *Cgroups
}

// Spec describes a child to start.
type Spec struct {
	Kind      Kind
	SessionID string
	Path      string
	Args      []string
	Env       []string // the environment, before the DASHGATE_* variables are added
	Dir       string
	Cols      uint16 // pty only; 0 means 80
	Rows      uint16 // pty only; 0 means 24
	// PTYUnpolled (pty only) hands the master over outside Go's poller: PTY
	// is then a non-blocking descriptor that Go never waits on (a read
	// that would block returns EAGAIN), for a caller that polls it itself
	// (sessions' pty poller). false: PTY is in Go's poller, so Close
	// interrupts a Read and deadlines work.
	PTYUnpolled bool
	// CancelGrace (chat only) is how long the worker may take to answer a
	// cancelled call before it is closed with ReasonInterrupted;
	// 0 means DefaultCancelGrace.
	CancelGrace time.Duration
	// OnClose, when set, is called once with the result after the child was
	// closed, whoever closed it. It runs on the closing goroutine and must
	// not call Close.
	OnClose func(CloseResult)
	// LogAttrs are key, value pairs added to the child's "worker closed"
	// record (a session's owner as user, say), as AddCloseAttr adds them,
	// from the start: a child that ends at once logs them too.
	LogAttrs []any
	// Account, when set, is the Unix account the child runs as (issue 25;
	// dashgate must be root or hold CAP_SETUID, CAP_SETGID and CAP_CHOWN):
	// its uid, gid and full group list (setgroups, setgid, setuid in the
	// forked child, before Pdeathsig is armed: the kernel clears it on a
	// credential change, and Go sets it after); HOME, USER, LOGNAME and
	// SHELL in Env replaced by the account's; the working directory Dir
	// when set and the account can enter it, else the account's Home when
	// it can, else "/" (not logged: Teleport does the same); a pty's slave
	// owned by the account, group tty, mode 0620; in cgroup mode, the leaf
	// under Dir/user-<Account.Name>. nil: the child runs as dashgate. The
	// Manager reads it and never changes it.
	Account *accounts.Account
	// LoginShell (pty) runs Account.Shell (Path without an Account) as a
	// login shell: argv0 "-" + its base name, Args ignored.
	LoginShell bool
	// EOFGrace (chat only) is how long Close waits, after closing the
	// worker's stdin, for it to exit before any signal; 0: eofGrace, or
	// the Manager's Grace when shorter. A worker that ends children of its
	// own politely on EOF (the ACP bridge: session/cancel, the agent's
	// stdin closed, its exit awaited) is given more.
	EOFGrace time.Duration
}

// CloseResult tells how a child ended.
type CloseResult struct {
	PID         int
	Kind        Kind
	SessionID   string
	Reason      Reason
	ExitCode    int    // -1 when killed by a signal
	Signal      string // e.g. "SIGTERM"; "" when it exited
	Escalation  Escalation
	Signals     []string // signals sent, in order
	Descendants int      // processes other than the leader that had to be ended (cgroup members, in cgroup mode)
	Duration    time.Duration
	Cgroup      string // the child's cgroup directory; "" in the fallback
}

// unreaped holds the pid of every child any Manager of this process
// started whose exit status os/exec has not yet collected. Reaping is
// process-wide (wait4), so the orphan reaper checks this, not one
// Manager's table: with two Managers in a process (the tests run many), one
// must never take the exit status of the other's child.
//
// Two locks, so that a fork waiting for its CPU on a saturated machine
// holds up nothing but the next fork (BENCHMARKS.md, issue 28: behind one
// lock, a reaped child's Wait queued behind the churn's spawns for more
// than killWait, and its close logged an ERROR):
//   - spawnMu serialises forks (the spawning threads share it); only a
//     start takes it;
//   - regMu guards unreaped, markers and the fork count, each hold short.
//     A fork counts itself begun under regMu before it forks and done
//     after it registered its child (or failed). lockSettled takes regMu
//     once every fork begun before the call is done: a reader that listed
//     dashgate's children and then calls it finds every child it listed
//     registered (or an orphan), and waits for one fork at most, never for
//     the queue of spawns behind it.
var (
	spawnMu  sync.Mutex
	regMu    sync.Mutex
	regDone  = sync.NewCond(&regMu) // broadcast when a fork is done
	unreaped = map[int]int{}        // pid → count (a pid reused while its old Wait returns counts twice); guarded by regMu
	// markers holds the marker of every child not yet closed, of any
	// Manager; guarded by regMu. A process carrying one of them belongs
	// to that child (claimed), one carrying an unknown value to nobody.
	markers = map[string]bool{}
	// forksBegun and forksDone count forks; guarded by regMu. Forks are
	// serial (spawnMu), so they end in the order they begin.
	forksBegun, forksDone uint64
)

// beginFork counts a fork begun; the caller holds spawnMu and calls
// endFork once the child is registered or the fork failed.
func beginFork() {
	regMu.Lock()
	forksBegun++
	regMu.Unlock()
}

// endFork runs register (nil: nothing to register) under regMu and counts
// the fork done.
func endFork(register func()) {
	regMu.Lock()
	if register != nil {
		register()
	}
	forksDone++
	regDone.Broadcast()
	regMu.Unlock()
}

// lockSettled locks regMu once every fork begun before the call is done;
// the caller unlocks regMu.
func lockSettled() {
	regMu.Lock()
	for target := forksBegun; forksDone < target; {
		regDone.Wait()
	}
}

// Manager starts children and keeps the table of the live ones.
// Its methods are safe for concurrent use.
type Manager struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	procs   map[int]*Proc
	reserve int // slots taken by starts in progress

	wg sync.WaitGroup // supervisor and waiter goroutines

	snap snapshots // the last admin snapshot (snapshot.go)

	priorityWarn sync.Once // the first child whose priority could not be set is logged

	statOrphan func(pid int) (procStat, bool) // the reaper's readStat; a test counts its reads
}

// NewManager returns a Manager. Call Wait after closing every child to join
// its goroutines.
func NewManager(cfg Config) *Manager {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Manager{cfg: cfg, log: cfg.Log, procs: map[int]*Proc{}}
}

// Grace is the configured grace period.
func (m *Manager) Grace() time.Duration { return m.cfg.Grace }

// Proc is one child process and the tree it starts.
type Proc struct {
	m       *Manager
	spec    Spec
	cmd     *exec.Cmd
	pid     int
	marker  string
	started time.Time
	cg      *cgroup // nil in the fallback
	// stdio names the child's terminal or pipes as /proc/<pid>/fd links
	// show them ("/dev/pts/3", "pipe:[4711]"): the fallback claims an
	// adopted process that still holds one.
	stdio map[string]bool
	// groupGone: the leader was reaped and nothing had its pid as group or
	// session any more (tree), so that pid may name someone else's group.
	groupGone atomic.Bool

	pty    *os.File // pty master (KindPTY)
	tty    *os.File // its slave, held from openPTY until the fork is done
	stdin  *os.File // write end of the child's stdin (KindChat)
	stdout *os.File // read end of the child's stdout (KindChat)
	stderr *os.File // read end of the child's stderr (KindChat)

	drains sync.WaitGroup // goroutines reading stdout/stderr

	waited  chan struct{} // closed once cmd.Wait returned
	state   *os.ProcessState
	closing atomic.Bool
	closeRq chan Reason // a close asked for by a drain goroutine

	closeOnce sync.Once
	closed    chan struct{}
	result    CloseResult

	attrMu     sync.Mutex
	closeAttrs []any // added to the "worker closed" record (AddCloseAttr)
}

// AddCloseAttr adds key=value to the child's "worker closed" record (a
// session's turn_grace_ms, say); a key added before (here or in
// Spec.LogAttrs) gets the new value instead, so the record never has a key
// twice. Call it before Close.
func (p *Proc) AddCloseAttr(key string, value any) {
	p.attrMu.Lock()
	defer p.attrMu.Unlock()
	for i := 0; i+1 < len(p.closeAttrs); i += 2 {
		if p.closeAttrs[i] == key {
			p.closeAttrs[i+1] = value
			return
		}
	}
	p.closeAttrs = append(p.closeAttrs, key, value)
}

// Start spawns a child per spec. The child is in a new process group
// (KindChat) or a new session with the pty as its controlling terminal
// (KindPTY), and gets Pdeathsig=SIGKILL. It fails with a *CapacityError
// (ErrCapacity) when MaxWorkers children are running. The caller owns the Proc and must Close it.
func (m *Manager) Start(spec Spec) (*Proc, error) { return m.start(spec, nil) }

// start is Start with a hook that runs before the child's supervisor, so
// drain goroutines are counted before anyone may wait for them.
func (m *Manager) start(spec Spec, beforeSupervise func(*Proc)) (*Proc, error) {
	m.mu.Lock()
	if m.cfg.MaxWorkers > 0 && len(m.procs)+m.reserve >= m.cfg.MaxWorkers {
		m.mu.Unlock()
		return nil, &CapacityError{Max: m.cfg.MaxWorkers}
	}
	m.reserve++
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.reserve--
		m.mu.Unlock()
	}()

	p := &Proc{
		m:          m,
		spec:       spec,
		marker:     newMarker(),
		waited:     make(chan struct{}),
		closed:     make(chan struct{}),
		closeRq:    make(chan Reason, 1),
		closeAttrs: slices.Clone(spec.LogAttrs),
	}
	cmd := exec.Command(spec.Path, spec.Args...)
	if spec.LoginShell {
		cmd = loginShell(spec)
	}
	cmd.Dir = spec.Dir
	env := slices.Clip(spec.Env)
	if a := spec.Account; a != nil {
		cmd.Dir = workDir(spec.Dir, a)
		env = accountEnv(env, a)
	}
	cmd.Env = append(env,
		EnvParentPID+"="+strconv.Itoa(os.Getpid()),
		EnvSessionID+"="+spec.SessionID,
		EnvInstance+"="+m.cfg.Instance,
		EnvWorkerID+"="+p.marker,
	)
	p.cmd = cmd

	cgfd := -1
	if c := m.cfg.Cgroups; c != nil {
		var user string
		if spec.Account != nil {
			user = spec.Account.Name
		}
		g, err := c.leaf(user, string(spec.Kind)+"-"+p.marker)
		if err != nil {
			return nil, fmt.Errorf("start %s %q: %w", spec.Kind, spec.Path, err)
		}
		if cgfd, err = g.open(); err != nil {
			c.release(g)
			return nil, fmt.Errorf("start %s %q: open cgroup: %w", spec.Kind, spec.Path, err)
		}
		p.cg = g
	}

	// The pty pair is opened before spawnMu: only the fork needs it
	// (BENCHMARKS.md, issue 28: a third of the spawn's time under it).
	if spec.Kind == KindPTY {
		if err := p.openPTY(); err != nil {
			if cgfd >= 0 {
				unix.Close(cgfd)
			}
			if p.cg != nil {
				m.cfg.Cgroups.release(p.cg)
			}
			return nil, fmt.Errorf("start %s %q: %w", spec.Kind, spec.Path, err)
		}
	}
	prio := m.cfg.priorityOf(spec.Kind)
	sp := spawnerFor(prio.inherited())
	spawnMu.Lock()
	beginFork()
	var err error
	sp.run(func() { err = p.start(cgfd, sp) })
	if err != nil {
		endFork(nil)
	} else {
		p.pid = cmd.Process.Pid
		p.started = time.Now()
		endFork(func() {
			unreaped[p.pid]++
			markers[p.marker] = true
		})
		m.mu.Lock()
		m.procs[p.pid] = p
		m.mu.Unlock()
	}
	spawnMu.Unlock()
	if cgfd >= 0 {
		unix.Close(cgfd)
	}
	if p.tty != nil {
		p.tty.Close() // the child holds its own copy
		p.tty = nil
		if err != nil {
			p.pty.Close()
		}
	}
	if err != nil {
		if p.cg != nil {
			m.cfg.Cgroups.release(p.cg)
		}
		return nil, fmt.Errorf("start %s %q: %w", spec.Kind, spec.Path, err)
	}

	if prio.afterExec() {
		if err := prio.applyTree(p.pid); err != nil {
			m.priorityWarn.Do(func() {
				m.log.Warn("child priority not set", "worker_pid", p.pid, "kind", string(spec.Kind), "err", err)
			})
		}
	}
	if beforeSupervise != nil {
		beforeSupervise(p)
	}
	m.wg.Add(2)
	go p.wait()
	go p.supervise()
	return p, nil
}

// start forks the child on the spawning thread; with cgfd >= 0 the child
// starts inside that cgroup (clone3 with CLONE_INTO_CGROUP), so it never
// runs outside it.
func (p *Proc) start(cgfd int, sp *spawner) error {
	if sp.err != nil {
		return sp.err
	}
	if p.spec.Account != nil && sp.capsErr != nil {
		return fmt.Errorf("start as %s: %w", p.spec.Account.Name, sp.capsErr)
	}
	cmd := p.cmd
	attr := func(a *syscall.SysProcAttr) *syscall.SysProcAttr {
		if cgfd >= 0 {
			a.UseCgroupFD, a.CgroupFD = true, cgfd
		}
		if acct := p.spec.Account; acct != nil {
			a.Credential = &syscall.Credential{Uid: acct.UID, Gid: acct.GID, Groups: slices.Clone(acct.Groups)}
		}
		return a
	}
	if p.spec.Kind == KindPTY {
		return startOnPTY(cmd, p.tty, attr(&syscall.SysProcAttr{Setsid: true, Setctty: true, Pdeathsig: syscall.SIGKILL}))
	}
	cmd.SysProcAttr = attr(&syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL})
	inR, inW, err := os.Pipe()
	if err != nil {
		return err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW, outR, outW)
		return err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	err = cmd.Start()
	closeAll(inR, outW, errW) // the child holds its own copies
	if err != nil {
		closeAll(inW, outR, errR)
		return err
	}
	p.stdin, p.stdout, p.stderr = inW, outR, errR
	p.stdio = map[string]bool{}
	for _, f := range []*os.File{inW, outR, errR} {
		if ino, ok := inode(f); ok {
			p.stdio["pipe:["+strconv.FormatUint(ino, 10)+"]"] = true
		}
	}
	return nil
}

// openPTY opens the child's pty pair (see openPTYPair): p.pty is the
// master, non-blocking (in Go's poller unless Spec.PTYUnpolled), and p.tty
// the slave the child gets.
func (p *Proc) openPTY() error {
	cols, rows := p.spec.Cols, p.spec.Rows
	if cols == 0 {
		cols = 80
	}
	if rows == 0 {
		rows = 24
	}
	pair, err := openPTYPair(&unix.Winsize{Col: cols, Row: rows}, p.spec.Account, !p.spec.PTYUnpolled)
	if err != nil {
		return err
	}
	if p.spec.PTYUnpolled {
		// os.NewFile leaves a blocking descriptor out of the poller; it
		// stays out once it is made non-blocking.
		p.pty = os.NewFile(uintptr(pair.master), "/dev/ptmx")
		if err := unix.SetNonblock(pair.master, true); err != nil {
			p.pty.Close()
			unix.Close(pair.slave)
			return fmt.Errorf("pty master: %w", err)
		}
	} else {
		p.pty = os.NewFile(uintptr(pair.master), "/dev/ptmx") // non-blocking: in the poller
	}
	p.tty = os.NewFile(uintptr(pair.slave), pair.name)
	p.stdio = map[string]bool{pair.name: true}
	return nil
}

// Children get Pdeathsig=SIGKILL, which Linux ties to the thread that
// forked them, not the process (prctl(2), PR_SET_PDEATHSIG: "the parent
// thread"). The Go runtime ends a thread when a goroutine exits while locked
// to it, and any goroutine may lock the thread it runs on; so every fork runs
// on a goroutine locked to its thread for the life of the process (one per
// child priority, priority.go): that thread is never reused by anyone, and
// never exits before dashgate does.

// dropInheritedCaps clears the spawning thread's ambient and inheritable
// capabilities (capabilities are per thread; only children forked from it
// see the change). A dashgate that is not root but holds CAP_SETUID and
// the others as ambient capabilities (a systemd unit's
// AmbientCapabilities=) would otherwise hand them on: ambient capabilities
// survive a change between two non-root uids and the execve after it, and
// a user's shell with CAP_SETUID becomes root. As root they are cleared by
// the change to the account's uid anyway. Effective and permitted stay:
// the child needs CAP_SETUID and CAP_SETGID for that change.
func dropInheritedCaps() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clear the ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("read the capabilities: %w", err)
	}
	if data[0].Inheritable == 0 && data[1].Inheritable == 0 {
		return nil
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clear the inheritable capabilities: %w", err)
	}
	return nil
}

// SpawnThreadFunction is the spawning goroutine's function, for leak
// checkers' ignore lists (it lives as long as the process by design).
const SpawnThreadFunction = "github.com/dashgate/dashgate/workers.spawnLoop"

// inode is f's inode number (fstat through SyscallConn: Fd would put f in
// blocking mode).
func inode(f *os.File) (uint64, bool) {
	sc, err := f.SyscallConn()
	if err != nil {
		return 0, false
	}
	var st unix.Stat_t
	var serr error
	if err := sc.Control(func(fd uintptr) { serr = unix.Fstat(int(fd), &st) }); err != nil || serr != nil {
		return 0, false
	}
	return st.Ino, true
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

func newMarker() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// wait is the one goroutine that calls cmd.Wait for this child.
func (p *Proc) wait() {
	defer p.m.wg.Done()
	awaitExit(p.pid)
	p.cmd.Wait()
	regMu.Lock()
	if unreaped[p.pid]--; unreaped[p.pid] <= 0 {
		delete(unreaped, p.pid)
	}
	regMu.Unlock()
	p.state = p.cmd.ProcessState
	close(p.waited)
}

// supervise closes the child when it exits by itself or a drain goroutine
// asks for it, and returns once the child is closed.
func (p *Proc) supervise() {
	defer p.m.wg.Done()
	select {
	case <-p.waited:
		p.Close(ReasonExited)
	case r := <-p.closeRq:
		p.Close(r)
	case <-p.closed:
	}
}

// requestClose asks the supervisor to close the child; it never blocks and
// is safe from a drain goroutine (which Close joins).
func (p *Proc) requestClose(r Reason) {
	select {
	case p.closeRq <- r:
	default:
	}
}

// PID is the child's process id (also its process group id).
func (p *Proc) PID() int { return p.pid }

// Kind is the child's kind.
func (p *Proc) Kind() Kind { return p.spec.Kind }

// SessionID is the session the child works for.
func (p *Proc) SessionID() string { return p.spec.SessionID }

// StartedAt is when the child was started.
func (p *Proc) StartedAt() time.Time { return p.started }

// PTY is the pty master of a KindPTY child (nil otherwise). The caller owns
// it and closes it after Close: reads return the program's last output and
// then EIO once every process holding the terminal is gone (pty(7)), so
// nothing written before the end is lost.
func (p *Proc) PTY() *os.File { return p.pty }

// Resize sets the pty's window size (TIOCSWINSZ, tty_ioctl(4)); the kernel
// sends SIGWINCH to the terminal's foreground process group.
func (p *Proc) Resize(cols, rows uint16) error {
	if p.pty == nil {
		return errors.New("not a pty")
	}
	sc, err := p.pty.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	err = sc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	})
	if err != nil {
		return err
	}
	return ierr
}

// Exited is closed once the child itself has exited and been reaped
// (its tree may still be ending).
func (p *Proc) Exited() <-chan struct{} { return p.waited }

// Closed is closed once Close has finished.
func (p *Proc) Closed() <-chan struct{} { return p.closed }

// Closing reports whether Close has started.
func (p *Proc) Closing() bool { return p.closing.Load() }

// Close ends the child and its whole tree with escalation, waits until the
// child is reaped and its drain goroutines returned, closes its pipes or pty,
// logs one INFO "worker closed" record and returns how it went. It is safe to
// call any number of times from any goroutine (not from OnClose): later
// calls wait for the first and return its result.
func (p *Proc) Close(reason Reason) CloseResult {
	p.closeOnce.Do(func() {
		p.closing.Store(true)
		p.result = p.teardown(reason)
		regMu.Lock()
		delete(markers, p.marker)
		regMu.Unlock()
		p.m.mu.Lock()
		delete(p.m.procs, p.pid)
		p.m.mu.Unlock()
		p.logClose(p.result)
		close(p.closed)
		if p.m.cfg.OnClose != nil {
			p.m.cfg.OnClose(p.result)
		}
		if p.spec.OnClose != nil {
			p.spec.OnClose(p.result)
		}
	})
	<-p.closed
	return p.result
}

func (p *Proc) teardown(reason Reason) CloseResult {
	start := time.Now()
	res := CloseResult{PID: p.pid, Kind: p.spec.Kind, SessionID: p.spec.SessionID, Reason: reason, Escalation: EscalationNone}
	select {
	case <-p.waited: // its pid may be someone else's by now
	default:
		if !p.m.cfg.priorityOf(p.spec.Kind).zero() {
			restoreTree(p.pid) // ended at the children's priority, it could wait for its CPU past killWait
		}
	}
	if p.stdin != nil {
		// A worker exits on stdin EOF (PROTOCOL.md §4): give it a moment to
		// do so cleanly before any signal.
		p.stdin.Close()
		wait := min(eofGrace, p.m.cfg.Grace)
		if p.spec.EOFGrace > 0 {
			wait = p.spec.EOFGrace
		}
		t := time.NewTimer(wait)
		select {
		case <-p.waited:
		case <-t.C:
		}
		t.Stop()
	}
	polite := []syscall.Signal{syscall.SIGTERM}
	if p.spec.Kind == KindPTY {
		polite = []syscall.Signal{syscall.SIGHUP, syscall.SIGTERM}
	}
	ended := map[int]bool{}
	live := p.firstTree()
	for _, sig := range polite {
		if len(live) == 0 {
			break
		}
		p.signal(live, sig)
		res.Escalation = EscalationTerm
		res.Signals = append(res.Signals, signalName(sig))
		for _, pid := range live {
			ended[pid] = true
		}
		live = p.awaitGone(p.m.cfg.Grace, sig, ended)
	}
	if len(live) > 0 {
		if p.cg != nil {
			p.cg.kill() // every member at once: a fork racing with it cannot escape
		}
		p.signal(live, syscall.SIGKILL) // in cgroup mode for those that left it

		res.Escalation = EscalationKill
		res.Signals = append(res.Signals, "SIGKILL")
		for _, pid := range live {
			ended[pid] = true
		}
		if live = p.awaitGone(killWait, syscall.SIGKILL, ended); len(live) > 0 {
			p.m.log.Error("processes survived SIGKILL", "sid", p.spec.SessionID, "worker_pid", p.pid, "pids", live)
		}
	}
	reaped := true
	select {
	case <-p.waited:
	case <-time.After(killWait):
		reaped = false
		// After the last signal sent, whichever it was (a tree that
		// went at SIGTERM can still leave its leader unwaited).
		p.m.log.Error("worker not reaped", "sid", p.spec.SessionID, "worker_pid", p.pid, "escalation", res.Escalation, "signals", res.Signals)
	}
	delete(ended, p.pid)
	res.Descendants = len(ended)
	if res.Descendants > 0 {
		// Members that died after their parent were reparented to dashgate
		// (the subreaper) as zombies: reap them now, not at the next
		// SIGCHLD round.
		p.m.reapZombieOrphans(false)
	}

	// Drains end at EOF, once every holder of the write ends is gone; bound
	// the wait, then close the read ends under them.
	drained := make(chan struct{})
	go func() { p.drains.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(time.Second):
		closeAll(p.stdout, p.stderr)
		<-drained
	}
	for _, f := range []*os.File{p.stdout, p.stderr} {
		if f != nil {
			f.Close()
		}
	}

	if p.cg != nil {
		res.Cgroup = p.cg.dir
		if err := p.m.cfg.Cgroups.release(p.cg); err != nil {
			p.m.log.Warn("cgroup not removed", "sid", p.spec.SessionID, "worker_pid", p.pid, "cgroup", p.cg.dir, "err", err)
		}
	}

	res.ExitCode = -1
	if st := p.state; reaped && st != nil { // p.state is written before waited closes
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.Signal = signalName(ws.Signal())
		} else {
			res.ExitCode = st.ExitCode()
		}
	}
	res.Duration = time.Since(start)
	return res
}

func (p *Proc) logClose(r CloseResult) {
	attrs := []any{"sid", r.SessionID, "worker_pid", r.PID, "kind", string(r.Kind), "reason", string(r.Reason)}
	if r.Signal != "" {
		attrs = append(attrs, "signal", r.Signal)
	} else {
		attrs = append(attrs, "exit_code", r.ExitCode)
	}
	attrs = append(attrs,
		"escalation", string(r.Escalation),
		"signals", strings.Join(r.Signals, ","),
		"descendants", r.Descendants,
		"duration_ms", r.Duration.Milliseconds(),
		"lifetime_ms", time.Since(p.started).Milliseconds(),
	)
	if r.Cgroup != "" {
		attrs = append(attrs, "cgroup", r.Cgroup)
	}
	p.attrMu.Lock()
	attrs = append(attrs, p.closeAttrs...)
	p.attrMu.Unlock()
	p.m.log.Info("worker closed", attrs...)
}

func signalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return "signal " + strconv.Itoa(int(s))
}

// tree lists the live (non-zombie) members of the child's tree: in the
// fallback what claimed finds; in cgroup mode its cgroup's members
// (cgroup.procs) and, outside the cgroup, what claimed finds. Root can move
// any process out of any cgroup (by writing another cgroup's cgroup.procs),
// and one that left still carries the marker, or holds the terminal or
// pipes, it had inside.
func (p *Proc) tree() []int {
	if p.cg == nil {
		return p.claimed()
	}
	members := p.cg.procs()
	for _, pid := range p.claimed() {
		if !slices.Contains(members, pid) {
			members = append(members, pid)
		}
	}
	return members
}

// firstTree is the tree a close signals first. In cgroup mode that is the
// cgroup's members while it has any: a member that left it is looked for
// once the cgroup is empty (awaitGone), so a close reads /proc once, not
// twice, and gets the same signals, later.
func (p *Proc) firstTree() []int {
	if p.cg != nil {
		if members := p.cg.procs(); len(members) > 0 {
			return members
		}
	}
	return p.tree()
}

// claimed lists the live members of the child's tree the fallback knows:
// the leader until it is reaped, its process group, for a pty its terminal
// session, its descendants by parent pid, every process carrying its marker,
// and every adopted process holding its terminal or pipes; zombie orphans
// of dashgate found on the way are reaped.
func (p *Proc) claimed() []int {
	self := os.Getpid()
	leaderReaped := false
	select {
	case <-p.waited:
		leaderReaped = true // its pid may belong to someone else by now
	default:
	}
	// Between fork and exec a new child holds a copy of every descriptor
	// dashgate has, other children's pipes included, and would pass for an
	// escapee that kept them. A fork registers its child before it counts
	// itself done: so once lockSettled returns after the listing, every
	// child a fork in flight during it made is registered.
	// Every registered leader is another child's (or this one's), never an
	// escapee of this one: a new terminal can hold this one's freed
	// /dev/pts/N. The listing is done outside regMu, so that it does not
	// hold up the next spawn.
	//
	// With dashgate a subreaper, every member outside the leader's subtree
	// was reparented to dashgate (an orphan never goes above the nearest
	// subreaper, prctl(2)), and no member is below another registered
	// leader (a process's parent chain only ever shortens to dashgate): so
	// only the subtrees of the leader and of dashgate's children that no
	// child registered are read (listSubtrees), not the whole of /proc.
	// dashgate's children are listed before lockSettled, the subtrees after.
	// Without a subreaper, every process is read (listProcs).
	var procs []procStat
	var kids []int
	subreaper := isSubreaper()
	if subreaper {
		kids = childPIDs(nil, "self") // every thread's: a plain exec's child holding the pipes too
	} else {
		procs = scanProcs()
	}
	lockSettled()
	leaders := make(map[int]bool, len(unreaped))
	for pid, n := range unreaped {
		if n > 0 && pid != p.pid {
			leaders[pid] = true
		}
	}
	others := make(map[string]bool, len(markers))
	for mk := range markers {
		if mk != p.marker {
			others[mk] = true
		}
	}
	regMu.Unlock()
	if subreaper {
		roots := slices.DeleteFunc(kids, func(pid int) bool { return leaders[pid] })
		procs = listSubtrees(roots)
	}
	children := newChildIndex(procs) // one index for both walks
	var desc map[int]bool
	if !leaderReaped {
		desc = children.descendants(p.pid)
	}
	// A member that left the group, the session and the parent chain is
	// found by its marker, or, when it dropped its environment (env -i), by
	// the child's terminal or pipes it still holds. It was reparented to
	// dashgate (the subreaper) or, without one, to init: only those are read.
	mine := children.descendants(self)
	// After the leader was reaped, its pid stays out of reach of new
	// processes only while some process (a zombie too) still has it as its
	// group or session (the kernel keeps a pid in use while it names one).
	// Once the group was seen empty, a process with that group is someone
	// else's: the group is no longer matched, nor signalled.
	useGroup := !p.groupGone.Load()
	grouped := false
	var out []int
	for _, st := range procs {
		if st.pid == self {
			continue
		}
		if leaderReaped && st.pid == p.pid {
			continue
		}
		if st.pgrp == p.pid || st.sid == p.pid {
			grouped = true
		}
		if st.zombie() {
			// Gone. An adopted orphan's zombie is reaped whoever it belonged
			// to: a member killed here (its marker unreadable once it is a
			// zombie) must not wait for the next SIGCHLD round.
			if st.ppid == self && st.pid != p.pid {
				p.m.reapOrphan(st.pid)
			}
			continue
		}
		member := st.pid == p.pid || desc[st.pid] ||
			(useGroup && (st.pgrp == p.pid || (p.spec.Kind == KindPTY && st.sid == p.pid)))
		if !member && !leaders[st.pid] && (mine[st.pid] || st.ppid == 1) {
			// Its marker decides: this child's, or another live child's;
			// a process without one (env -i), or with a value no child
			// has (forged), is judged by the terminal or pipes it holds.
			switch marker := environValue(st.pid, EnvWorkerID); {
			case marker == p.marker:
				member = true
			case !others[marker]:
				member = holdsAny(st.pid, p.stdio)
			}
		}
		if member {
			out = append(out, st.pid)
		}
	}
	if leaderReaped && !grouped {
		p.groupGone.Store(true)
	}
	return out
}

// signal sends sig to every listed member and, in the fallback, to the
// process group (a cgroup's members are all listed).
func (p *Proc) signal(pids []int, sig syscall.Signal) {
	if p.cg == nil && !p.groupGone.Load() {
		unix.Kill(-p.pid, sig)
	}
	for _, pid := range pids {
		unix.Kill(pid, sig)
	}
}

// awaitGone polls until the tree is empty or d passed, and returns the
// members still alive. A member counts as gone when it no longer exists or
// is a zombie; zombies that are dashgate's orphans are reaped here. In
// cgroup mode it first waits for the cgroup to be empty, then polls for
// the members that left it, and sends sig to each found that is not in
// signalled yet (adding it): see firstTree.
func (p *Proc) awaitGone(d time.Duration, sig syscall.Signal, signalled map[int]bool) []int {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	if p.cg != nil && !p.cg.awaitEmpty(d) {
		return p.tree()
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	waited := p.waited
	seenEmpty := false
	for {
		live := p.tree()
		if len(live) == 0 {
			// In the fallback the tree must be seen empty twice, a tick
			// apart: a member whose parent is exiting is in no list while
			// the kernel reparents it (to dashgate, the subreaper), and a
			// scan in that moment sees none. A close that ended there
			// left a nohup'd and a HUP-ignoring sleep alive, the leader
			// having exited 38 ms after it started (CI, 2026-12-06).
			if p.cg != nil || seenEmpty {
				return nil
			}
			seenEmpty = true
			select {
			case <-deadline.C:
				return nil
			case <-tick.C:
			}
			continue
		} else {
			seenEmpty = false
		}
		if p.cg != nil {
			for _, pid := range live {
				if !signalled[pid] {
					signalled[pid] = true
					p.signal([]int{pid}, sig)
				}
			}
		}
		select {
		case <-deadline.C:
			return live
		case <-waited:
			waited = nil // the leader went: look again at once
		case <-tick.C:
		}
	}
}
