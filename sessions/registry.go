package sessions

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/dashgate/dashgate/accounts"
	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/workers"
)

// Errors a caller maps to the codes of PROTOCOL.md §2.
var (
	ErrNotFound     = errors.New("session not found or already closed") // 4001
	ErrBusy         = errors.New("a turn is already running")           // 4009
	ErrCapacity     = errors.New("session capacity reached")            // 4029; a *CapacityError and a *UserCapacityError match it too
	ErrShuttingDown = errors.New("dashgate is shutting down")           // 4029 too: no new work
	// ErrViewerCapacity: the viewer views Config.MaxViewed sessions already.
	// It is wrapped in a *ViewerCapacityError that names the limit.
	ErrViewerCapacity = errors.New("viewer views the most sessions it may") // 4029

	// errInterrupted is the cause of a slash command's context that
	// Interrupt cancelled.
	errInterrupted = errors.New("interrupted")
)

// StoreError is a failure of the conversation store on a path that needs
// it (a closed session's history, the closed list, search, reopen,
// delete): the caller answers 5005 and may retry.
type StoreError struct{ Err error }

func (e *StoreError) Error() string { return "conversation store: " + e.Err.Error() }
func (e *StoreError) Unwrap() error { return e.Err }

// ViewerCapacityError is returned when a viewer would view more than Limit
// sessions; it matches ErrViewerCapacity.
type ViewerCapacityError struct{ Limit int }

func (e *ViewerCapacityError) Error() string {
	return fmt.Sprintf("this socket views the most sessions it may (%d)", e.Limit)
}

func (e *ViewerCapacityError) Is(target error) bool { return target == ErrViewerCapacity }

// Worker is what a session needs of its chat worker; *workers.Worker has it.
type Worker interface {
	PID() int
	Call(ctx context.Context, method string, params any, onEvent func(workers.Event)) (json.RawMessage, error)
	Close(workers.Reason) workers.CloseResult
	Closing() bool
}

// PTY is what a terminal needs of its program on a pseudo-terminal;
// ProcSpawner's come from workers.Manager. The terminal owns it: it calls
// Close, then Release, once.
type PTY interface {
	PID() int
	// Read blocks for the program's output and returns what is ready, at
	// most len(p) bytes. It fails (EIO or os.ErrClosed) once every holder
	// of the terminal is gone and the output is drained, or after Release.
	Read(p []byte) (int, error)
	// Write sends input, waiting at most until ctx ends.
	Write(ctx context.Context, p []byte) error
	// Resize sets the window size in cells.
	Resize(cols, rows uint16) error
	// Close ends the program's whole tree with escalation and blocks until
	// it is reaped; later calls wait for the first and return its result.
	Close(workers.Reason) workers.CloseResult
	// Release closes the pty master: a Read in progress returns.
	Release() error
}

// SpawnRequest says what child to start for a session.
type SpawnRequest struct {
	SessionID string
	// Cols and Rows are a terminal's first size in cells (0: 80x24).
	Cols, Rows uint16
	// CancelGrace is how long a worker may take to answer a cancelled call
	// before it is recycled (Config.InterruptGrace).
	CancelGrace time.Duration
	// OnClose is called once when the child was closed, whoever closed it;
	// it must not block.
	OnClose func(workers.CloseResult)
	// Owner is the session owner's name (Principal.User; "" for the
	// anonymous user and for a spare not yet attached): ProcSpawner logs it
	// as user on the child's "worker closed" record.
	Owner string
	// Agent is the agent a chat worker is for ("" the built-in worker,
	// else a name of Config.Agents).
	Agent string
	// Account is the Unix account the child runs as (Config.Accounts'
	// answer for Owner); nil: it runs as dashgate. ProcSpawner gives it to
	// workers.Spec.Account. The spawner reads it and never changes it.
	Account *accounts.Account
}

// Spawner starts the children of a session. Errors: workers.ErrCapacity,
// or why the program could not start.
type Spawner interface {
	SpawnWorker(SpawnRequest) (Worker, error)
	SpawnPTY(SpawnRequest) (PTY, error)
}

// Config configures a Registry. Zero durations and sizes take the defaults
// noted.
type Config struct {
	Spawner       Spawner
	Log           *slog.Logger // discarded when nil
	DetachedTTL   time.Duration
	SweepInterval time.Duration // 30s
	MaxSessions   int           // 1000 live sessions
	MaxViewed     int           // 100: sessions one viewer (chat socket) may view at once
	// MaxSessionsPerUser, MaxWorkersPerUser and MaxTerminalsPerUser cap
	// what one owner (Principal.User; the anonymous user "" is one like any
	// other) has live, beside the global caps (0: no limit). Sessions: its
	// live ones, attached or detached, terminal-only ones included; at the
	// cap a create or reopen evicts its own least recently active detached
	// session (end_reason lru_evict), else fails. Workers: its sessions'
	// chat workers; a call that would spawn one more fails. Terminals: its
	// sessions' terminal programs (a spare once attached); an attach that
	// would start one more fails. Each failure is a *UserCapacityError
	// naming the flag (usage.go). DefaultUserCaps gives values derived
	// from MaxSessions and --max-workers for when users are on.
	MaxSessionsPerUser, MaxWorkersPerUser, MaxTerminalsPerUser int
	WorkerTimeout                                              time.Duration // 60s
	InterruptGrace                                             time.Duration // 1s: how long an interrupted worker may take to stop
	PTYKeepalive                                               time.Duration // how long a parked terminal waits; 0 disables parking
	PTYBuffer                                                  int           // ring buffer per terminal, bytes (1 MiB)
	PTYPending                                                 int           // unsent output per terminal before the pty is no longer read (256 KiB)
	HistoryMessages                                            int           // 200: entries a session keeps in memory, and what resume returns
	HistoryBytes                                               int           // 1 MiB: text a session keeps in memory
	// Store keeps conversations (nil: a store.Memory). The caller opens and
	// closes it; Close flushes the registry's writes to it first.
	Store store.Store
	// StoreBacklog bounds the history entries queued for Store while it
	// fails (0: 100000); beyond it new entries stay in memory only and
	// their loss is counted in one ERROR record (journal.go).
	StoreBacklog int
	// SuspendOnShutdown: Shutdown suspends chat sessions (stored, restored
	// by the next start's Claim) instead of closing them. Set it when Store
	// outlives the process.
	SuspendOnShutdown bool
	// HistoryRetention: closed sessions older than this are deleted from
	// the store by Run, every PruneInterval (0 keeps them forever).
	HistoryRetention time.Duration
	PruneInterval    time.Duration // 1h
	// DescribeError turns a failed command's error into the code and
	// message its history entry keeps (the viewer's error reply); nil: 0
	// and err.Error().
	DescribeError func(error) (code int, message string)
	// ApprovalTimeout denies a tool run nobody approved (5m).
	ApprovalTimeout time.Duration
	// AgentContext bounds the text of the conversation sent with a prompt,
	// bytes (32 KiB); the oldest entries are dropped first.
	AgentContext int
	// Attach bounds the files attached to prompts (attachments.go).
	Attach AttachLimits
	// DetachTurnGrace lets a streaming turn finish for at most this long
	// after its session's last viewer left (0: the worker is closed at once,
	// mid-turn). A turn waiting for an approval gets none.
	DetachTurnGrace time.Duration
	// OnSessionClose, when set, is called once per closed session after its
	// record was logged; it must not block (metrics).
	OnSessionClose func(EndReason)
	// OnPTYOutput, when set, is called with the size of each pty read; it
	// must not block (metrics).
	OnPTYOutput func(int)
	// Changes, when set, carries session.changed between the registries
	// that share a store (changes.go): this registry publishes its
	// sessions' changes on it and, while Run runs, tells its watchers those
	// of the others. nil: its watchers hear of its own sessions only.
	Changes ChangeBus
	// PTYSpare keeps a terminal program started ahead, once a terminal
	// was asked for without a session: the next such attach at the same
	// size takes it (its first output is there already, or on its way)
	// instead of waiting for a spawn. See spare.go.
	PTYSpare bool
	// PTYSpareIdle ends the spares (reason spare_unused) once no terminal
	// was asked for without a session for this long: a spare's reason is a
	// terminal about to open, and it does not outlive that reason by more.
	// 0 means DefaultSpareIdle.
	PTYSpareIdle time.Duration
	// Accounts, when set (--unix-users), gives the Unix account each
	// session owner's children run as: it is asked at each spawn of a chat
	// worker or a terminal (never under the registry's lock; it may block,
	// bounded by its own timeouts), and its account goes to the Spawner in
	// SpawnRequest.Account. When it fails nothing is spawned: a refusal
	// (errors.Is(err, accounts.ErrRefused)) is returned as is, its message
	// the reason, and kept in the session's history as one notice (a chat
	// call) or answered 403 (/ws/pty), with one WARN "unix account
	// refused" record (sid, user, reason); any other error is a spawn
	// failure. nil: children run as dashgate. With it set PTYSpare is off:
	// a spare would start before anyone asked, as nobody's account.
	Accounts func(user string) (*accounts.Account, error)
	// Agents names the agents a session may talk to besides the built-in
	// worker (--agent; the Spawner knows how to start each, see
	// SpawnRequest.Agent). DefaultAgent is the one a session.create that
	// names none gets ("" or BuiltinAgent: the built-in worker).
	Agents       []string
	DefaultAgent string
	// Record, when set (--record-terminals), starts the recording of a
	// terminal of owner's session sid at cols×rows (recording.go): for a
	// terminal as it starts, for a spare as a session takes it. It is
	// called under the terminal's lock and must not block (no I/O).
	// nil: terminals are not recorded.
	Record func(owner, sid string, cols, rows uint16) Recording
}

// DefaultSpareIdle is Config.PTYSpareIdle's default.
const DefaultSpareIdle = time.Minute

func (c *Config) defaults() {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.DetachedTTL <= 0 {
		c.DetachedTTL = 10 * time.Minute
	}
	if c.SweepInterval <= 0 {
		c.SweepInterval = 30 * time.Second
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = 1000
	}
	if c.MaxViewed <= 0 {
		c.MaxViewed = 100
	}
	if c.WorkerTimeout <= 0 {
		c.WorkerTimeout = 60 * time.Second
	}
	if c.InterruptGrace <= 0 {
		c.InterruptGrace = time.Second
	}
	if c.PTYBuffer <= 0 {
		c.PTYBuffer = 1 << 20
	}
	if c.PTYPending <= 0 {
		c.PTYPending = 256 << 10
	}
	if c.HistoryMessages <= 0 {
		c.HistoryMessages = 200
	}
	if c.HistoryBytes <= 0 {
		c.HistoryBytes = 1 << 20
	}
	if c.Store == nil {
		c.Store = store.NewMemory()
	}
	if c.ApprovalTimeout <= 0 {
		c.ApprovalTimeout = 5 * time.Minute
	}
	if c.AgentContext <= 0 {
		c.AgentContext = 32 << 10
	}
	c.Attach.defaults()
	if c.PruneInterval <= 0 {
		c.PruneInterval = time.Hour
	}
	if c.PTYSpareIdle <= 0 {
		c.PTYSpareIdle = DefaultSpareIdle
	}
	if c.DescribeError == nil {
		c.DescribeError = func(err error) (int, string) { return 0, err.Error() }
	}
}

// Registry holds every session. Its methods are safe for concurrent use.
type Registry struct {
	cfg Config
	log *slog.Logger
	id  string // tells its own announcements apart on Config.Changes

	mu       sync.Mutex
	sessions map[string]*Session
	viewers  viewerIndex // who views what (viewers.go)
	usage    usageIndex  // what each user has live, for the per-user caps (usage.go)
	ended    recentEnds  // the sessions that ended here lately, for session.close -> closed:false
	closing  bool        // Shutdown started
	tell     teller      // session.changed: told to the watching sockets, published and heard on Config.Changes (changes.go)
	spares   spares      // terminals started ahead (spare.go)

	// The session caps and the default-title counter, over usage (admission.go).
	admission admission
	// The store-facing reads: history, the closed list, search, transcripts (archive.go).
	archive archive

	journal *journal // writes to cfg.Store
	lease   lease    // this node's hold on its sessions (lease.go), zero until Claim
	tracked tracker  // teardowns, turns and terminal readers
}

// tracker counts goroutines; unlike sync.WaitGroup, starting one while
// another goroutine waits is allowed (a timer may fire during shutdown).
type tracker struct {
	mu   sync.Mutex
	n    int
	zero *sync.Cond
}

func (t *tracker) add(d int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.zero == nil {
		t.zero = sync.NewCond(&t.mu)
	}
	t.n += d
	if t.n == 0 {
		t.zero.Broadcast()
	}
}

func (t *tracker) wait() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.zero == nil {
		t.zero = sync.NewCond(&t.mu)
	}
	for t.n > 0 {
		t.zero.Wait()
	}
}

// New returns an empty registry. Run its sweep with Run; end it with Shutdown
// and Wait.
func New(cfg Config) *Registry {
	cfg.defaults()
	if cfg.Accounts != nil {
		cfg.PTYSpare = false // see Config.Accounts
	}
	r := &Registry{
		cfg: cfg, log: cfg.Log, id: newID(),
		sessions: map[string]*Session{},
		viewers:  newViewerIndex(cfg.MaxViewed),
		usage:    newUsageIndex(&cfg),
		ended:    recentEnds{owners: map[string]string{}},
		journal:  newJournal(cfg.Store, cfg.Log).withBacklog(cfg.StoreBacklog),
	}
	r.admission = newAdmission(cfg.MaxSessions, &r.usage, func(s *Session) { r.claimLocked(s, EndLRUEvict) })
	r.archive = archive{store: cfg.Store, journal: r.journal, mu: &r.mu, maxEntries: cfg.HistoryMessages, maxBytes: cfg.HistoryBytes}
	r.spares = spares{
		mu: &r.mu, closing: func() bool { return r.closing }, goTracked: r.goTracked, idleAfter: cfg.PTYSpareIdle,
		newSession: func() *Session { return r.newSession("", "terminal", false, true) },
		start: func(s *Session, cols, rows uint16) (*Terminal, error) {
			return r.startTerminal(s, TerminalOptions{Cols: cols, Rows: rows}, true)
		},
	}
	r.tell = teller{
		mu: &r.mu, closing: func() bool { return r.closing }, bus: cfg.Changes, origin: r.id,
		goTracked: r.goTracked, reap: r.remoteReap,
	}
	r.lease = lease{mu: &r.mu, sessions: r.sessions, store: cfg.Store, notice: r.noticeLocked, queued: r.journal.rowsQueued, lost: r.leaseLost}
	r.journal.onFenced = r.leaseLost
	r.journal.onOutage = r.storeOutage
	return r
}

func newID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// goTracked runs f on a goroutine that Wait joins.
func (r *Registry) goTracked(f func()) {
	r.tracked.add(1)
	go func() {
		defer r.tracked.add(-1)
		f()
	}()
}

// Wait joins every teardown, turn and terminal goroutine the registry
// started, Shutdown's included.
func (r *Registry) Wait() { r.tracked.wait() }

// Run sweeps detached sessions past their TTL every SweepInterval until ctx
// is done; it repairs any timer that was lost (docs/failure-classes.md #5).
// After a Claim it renews the leases; with Config.Changes it tells the
// watchers the changes other registries publish. It blocks.
func (r *Registry) Run(ctx context.Context) {
	t := time.NewTicker(r.cfg.SweepInterval)
	defer t.Stop()
	prune := time.NewTicker(r.cfg.PruneInterval)
	defer prune.Stop()
	if bus := r.cfg.Changes; bus != nil {
		defer bus.Subscribe(r.tell.heard)()
	}
	var leases sync.WaitGroup // after Claim: the renewals (lease.go)
	defer leases.Wait()
	leases.Go(func() { r.lease.run(ctx) })
	r.Prune(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.Sweep()
		case <-prune.C:
			r.Prune(ctx)
		}
	}
}

// Prune deletes the closed sessions older than Config.HistoryRetention
// from the store (none when it is 0) and returns how many; a failure is
// logged at WARN (the next run retries).
func (r *Registry) Prune(ctx context.Context) int {
	if r.cfg.HistoryRetention <= 0 {
		return 0
	}
	n, err := r.cfg.Store.Prune(ctx, time.Now().Add(-r.cfg.HistoryRetention))
	if err != nil {
		r.log.Warn("history retention", "err", err)
		return 0
	}
	if n > 0 {
		r.log.Info("history pruned", "sessions", n, "retention", r.cfg.HistoryRetention.String())
	}
	return n
}

// List returns a snapshot of the live sessions p may list (its own; every
// one for an admin), oldest first.
func (r *Registry) List(p Principal) []Info {
	r.adoptForList(p) // a cluster's: p's sessions another node let go (adopt.go)
	r.mu.Lock()
	var out []Info
	if p.Admin {
		out = make([]Info, 0, len(r.sessions))
		for _, s := range r.sessions {
			if s.live() && authorize(p, s.owner, accessManage) {
				out = append(out, s.info())
			}
		}
	} else { // its own: the usage index holds them, not a walk of everyone's
		own := r.usage.owned(p.User)
		out = make([]Info, 0, len(own))
		for s := range own {
			if s.live() && authorize(p, s.owner, accessManage) {
				out = append(out, s.info())
			}
		}
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b Info) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out
}

// Get returns a snapshot of one live session p may list; false as for a
// missing one otherwise.
func (r *Registry) Get(p Principal, sid string) (Info, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.findLocked(p, sid, accessManage)
	if s == nil {
		return Info{}, false
	}
	return s.info(), true
}

// checkpointEvery bounds how much streamed text a crash can lose: a
// streaming reply is queued for the store at most this long after a delta
// arrived, so with the journal's delay it is stored within 250 ms.
const checkpointEvery = 250*time.Millisecond - journalDelay
