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
	"testing"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/workers"
)

// Errors a caller maps to the codes of PROTOCOL.md §2.
var (
	ErrNotFound     = errors.New("session not found or already closed") // 4001
	ErrBusy         = errors.New("a turn is already running")           // 4009
	ErrCapacity     = errors.New("session capacity reached")            // 4029
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
	Spawner         Spawner
	Log             *slog.Logger // discarded when nil
	DetachedTTL     time.Duration
	SweepInterval   time.Duration // 30s
	MaxSessions     int           // 1000 live sessions
	MaxViewed       int           // 100: sessions one viewer (chat socket) may view at once
	WorkerTimeout   time.Duration // 60s
	InterruptGrace  time.Duration // 1s: how long an interrupted worker may take to stop
	PTYKeepalive    time.Duration // how long a parked terminal waits; 0 disables parking
	PTYBuffer       int           // ring buffer per terminal, bytes (1 MiB)
	PTYPending      int           // unsent output per terminal before the pty is no longer read (256 KiB)
	HistoryMessages int           // 200: entries a session keeps in memory, and what resume returns
	HistoryBytes    int           // 1 MiB: text a session keeps in memory
	// Store keeps conversations (nil: a store.Memory). The caller opens and
	// closes it; Close flushes the registry's writes to it first.
	Store store.Store
	// SuspendOnShutdown: Shutdown suspends chat sessions (stored, restored
	// by the next Restore) instead of closing them. Set it when Store
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
	// PTYSpare keeps two terminal programs started ahead, once a terminal
	// was asked for without a session: the next such attach at the same
	// size takes one (its first output is there already) instead of
	// waiting for a spawn. See spare.go.
	PTYSpare bool
	// PTYSpareIdle ends the spares (reason spare_unused) once no terminal
	// was asked for without a session for this long: a spare's reason is a
	// terminal about to open, and it does not outlive that reason by more.
	// 0 means DefaultSpareIdle.
	PTYSpareIdle time.Duration
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

	mu       sync.Mutex
	sessions map[string]*Session
	viewing  map[Viewer]map[*Session]struct{}
	ended    map[string]string // recently closed ids and their owners, for session.close -> closed:false
	endedQ   []string
	closing  bool                // Shutdown started
	watchers map[Viewer]struct{} // sockets told of every session change (changes.go)
	spares   []*spare            // terminals started ahead for the next new terminal sessions, oldest first (Config.PTYSpare)
	// spareIdle ends the spares PTYSpareIdle after the last refill.
	spareIdle *time.Timer

	journal *journal // writes to cfg.Store
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
	return &Registry{
		cfg: cfg, log: cfg.Log,
		sessions: map[string]*Session{},
		viewing:  map[Viewer]map[*Session]struct{}{},
		ended:    map[string]string{},
		journal:  newJournal(cfg.Store, cfg.Log),
	}
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

// setState moves s to next. An illegal move is a bug: it is logged at
// ERROR and, in a test binary, panics so the test fails loudly. r.mu must
// be held.
func (r *Registry) setState(s *Session, next State) {
	if err := s.setState(next); err != nil {
		r.log.Error("session state", "sid", s.id, "err", err)
		if testing.Testing() {
			panic(err)
		}
		return
	}
	r.changedLocked(s)
}

// Run sweeps detached sessions past their TTL every SweepInterval until ctx
// is done; it repairs any timer that was lost (docs/failure-classes.md #5). It blocks.
func (r *Registry) Run(ctx context.Context) {
	t := time.NewTicker(r.cfg.SweepInterval)
	defer t.Stop()
	prune := time.NewTicker(r.cfg.PruneInterval)
	defer prune.Stop()
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

// Sweep ends every detached session whose TTL has passed and returns how
// many it ended. It blocks until they are torn down.
func (r *Registry) Sweep() int {
	now := time.Now()
	r.mu.Lock()
	var due []*Session
	for _, s := range r.sessions {
		if s.state == StateDetached && now.Sub(s.detachedAt) >= r.cfg.DetachedTTL {
			due = append(due, s)
		}
	}
	r.mu.Unlock()
	return r.endAll(due, EndDetachedTTL)
}

// endAll ends sessions concurrently and returns how many this call ended.
func (r *Registry) endAll(ss []*Session, reason EndReason) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	n := 0
	for _, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r.end(s, reason) {
				mu.Lock()
				n++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return n
}

// emitLocked queues an event for every viewer of s; the viewers' writers
// encode it, once, outside the lock. payload must not change afterwards.
// r.mu must be held.
func (r *Registry) emitLocked(s *Session, typ string, payload any) {
	s.seq++
	ev := NewEvent(typ, s.id, s.seq, payload)
	for v := range s.viewers {
		v.Deliver(ev)
	}
}

// viewLocked makes v a viewer of s and s attached. It fails with
// ErrNotFound for a viewer whose socket is gone, and with a
// *ViewerCapacityError when v views MaxViewed other sessions. r.mu must be
// held.
func (r *Registry) viewLocked(s *Session, v Viewer) error {
	if v == nil {
		return nil
	}
	if viewerGone(v) {
		return ErrNotFound
	}
	if _, ok := s.viewers[v]; !ok {
		if err := r.viewerFullLocked(v); err != nil {
			return err
		}
		set := r.viewing[v]
		if set == nil {
			set = map[*Session]struct{}{}
			r.viewing[v] = set
		}
		set[s] = struct{}{}
		s.viewers[v] = struct{}{}
	}
	if s.state != StateAttached {
		r.setState(s, StateAttached)
		if s.ttlTimer != nil {
			s.ttlTimer.Stop()
			s.ttlTimer = nil
		}
		if g := s.grace; g != nil { // back in time: the turn and its worker go on
			g.timer.Stop()
			s.grace = nil
		}
		s.lastActive = time.Now()
		r.saveLocked(s)
	}
	s.lastActive = time.Now()
	return nil
}

// viewerFullLocked fails with a *ViewerCapacityError when v may view no
// more sessions. r.mu must be held.
func (r *Registry) viewerFullLocked(v Viewer) error {
	if v != nil && len(r.viewing[v]) >= r.cfg.MaxViewed {
		return &ViewerCapacityError{Limit: r.cfg.MaxViewed}
	}
	return nil
}

// Create makes a session viewed by v and owned by its principal. It evicts the least recently active
// detached session when MaxSessions are live, or fails with ErrCapacity when
// none is detached. Other errors: ErrShuttingDown, ErrNotFound (v is gone),
// ErrViewerCapacity (v views MaxViewed sessions).
func (r *Registry) Create(v Viewer, title string, closeOnDisconnect bool) (Info, error) {
	return r.create(principalOf(v), v, title, closeOnDisconnect, false)
}

// create makes a session owned by p; v, when not nil, must carry p.
func (r *Registry) create(p Principal, v Viewer, title string, closeOnDisconnect, terminalOnly bool) (Info, error) {
	return r.register(v, newSession(p.User, title, closeOnDisconnect, terminalOnly), nil)
}

// newSession returns a session of owner not yet in the registry (see register).
func newSession(owner, title string, closeOnDisconnect, terminalOnly bool) *Session {
	return &Session{
		id: newID(), owner: owner, title: title, closeOnDisconnect: closeOnDisconnect, terminalOnly: terminalOnly,
		state: StateCreated, viewers: map[Viewer]struct{}{}, spawnMu: semaphore.NewWeighted(1), finished: make(chan struct{}),
	}
}

// register adds s, made by newSession, viewed by v, with the terminal t
// already started for it (a spare; nil for none). It fails like Create,
// and with ErrNotFound when t ended before it could be given to s.
func (r *Registry) register(v Viewer, s *Session, t *Terminal) (Info, error) {
	now := time.Now()
	s.createdAt, s.liveSince, s.lastActive = now, now, now
	r.mu.Lock()
	if r.closing {
		r.mu.Unlock()
		return Info{}, ErrShuttingDown
	}
	if v != nil && viewerGone(v) {
		r.mu.Unlock()
		return Info{}, ErrNotFound
	}
	if err := r.viewerFullLocked(v); err != nil {
		r.mu.Unlock()
		return Info{}, err
	}
	if t != nil {
		// Lock order: r.mu, then t.mu. A terminal that ended already has
		// run the part of end that looks at its session (which did not
		// hold it); one that ends later finds it there and ends s.
		t.mu.Lock()
		ended := t.ended
		t.mu.Unlock()
		if ended {
			r.mu.Unlock()
			return Info{}, ErrNotFound
		}
	}
	evict, err := r.makeRoomLocked()
	if err != nil {
		r.mu.Unlock()
		return Info{}, err
	}
	s.term = t
	r.sessions[s.id] = s
	r.saveLocked(s)
	r.viewLocked(s, v) // cannot fail: v is not gone and has room
	in := s.info()
	r.mu.Unlock()
	if evict != nil {
		r.goTracked(func() { r.finish(evict) })
	}
	return in, nil
}

// makeRoomLocked claims the least recently active detached session when
// MaxSessions are live (the caller finishes it outside the lock), or fails
// with ErrCapacity when none is detached. r.mu must be held.
func (r *Registry) makeRoomLocked() (*Session, error) {
	if r.liveCountLocked() < r.cfg.MaxSessions {
		return nil, nil
	}
	var evict *Session
	for _, s := range r.sessions {
		if s.state == StateDetached && (evict == nil || s.lastActive.Before(evict.lastActive)) {
			evict = s
		}
	}
	if evict == nil {
		return nil, ErrCapacity
	}
	r.claimLocked(evict, EndLRUEvict) // frees its slot now
	return evict, nil
}

func (r *Registry) liveCountLocked() int {
	n := 0
	for _, s := range r.sessions {
		if s.live() {
			n++
		}
	}
	return n
}

// ResumeResult is what session.resume answers.
type ResumeResult struct {
	Info
	History          []Message
	PendingApprovals []Approval
}

// Resume attaches s to v and returns its history. Errors: ErrNotFound
// (also for a session v's principal may not use), ErrViewerCapacity.
func (r *Registry) Resume(v Viewer, sid string) (ResumeResult, error) {
	r.mu.Lock()
	s := r.sessions[sid]
	if s == nil || !s.live() || !authorize(principalOf(v), s.owner, accessUse) {
		r.mu.Unlock()
		return ResumeResult{}, ErrNotFound
	}
	if err := r.viewLocked(s, v); err != nil {
		r.mu.Unlock()
		return ResumeResult{}, err
	}
	unloaded := s.unloaded
	r.mu.Unlock()
	if unloaded {
		ctx, cancel := context.WithTimeout(context.Background(), storeReadTimeout)
		defer cancel()
		if err := r.load(ctx, s); err != nil {
			// The conversation goes on from memory; the next resume retries.
			r.log.Warn("history load", "sid", sid, "err", err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !s.live() {
		return ResumeResult{}, ErrNotFound
	}
	return ResumeResult{Info: s.info(), History: slices.Clone(s.history), PendingApprovals: s.pendingLocked()}, nil
}

// storeReadTimeout bounds a store read on a path that has no context of
// its own (resume).
const storeReadTimeout = 5 * time.Second

// load reads the latest stored entries of a restored or reopened session
// into its memory, below the entries it got since. Errors: *StoreError.
func (r *Registry) load(ctx context.Context, s *Session) error {
	entries, _, err := r.cfg.Store.History(ctx, s.id, 0, r.cfg.HistoryMessages)
	if err != nil {
		return &StoreError{err}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !s.unloaded {
		return nil
	}
	s.unloaded = false
	if len(s.history) > 0 {
		first := s.history[0].Seq
		entries = slices.DeleteFunc(entries, func(e Message) bool { return e.Seq >= first })
	}
	s.history = append(entries, s.history...)
	s.histBytes = 0
	for _, e := range s.history {
		s.histBytes += len(e.Text)
	}
	r.trimLocked(s)
	return nil
}

// List returns a snapshot of the live sessions p may list (its own; every
// one for an admin), oldest first.
func (r *Registry) List(p Principal) []Info {
	r.mu.Lock()
	out := make([]Info, 0, len(r.sessions))
	for _, s := range r.sessions {
		if s.live() && authorize(p, s.owner, accessManage) {
			out = append(out, s.info())
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
	s := r.sessions[sid]
	if s == nil || !s.live() || !authorize(p, s.owner, accessManage) {
		return Info{}, false
	}
	return s.info(), true
}

// Close ends a session of p's (any session for an admin) with reason and
// blocks until it is torn down. It returns false when the session had
// already ended (or is ending), and ErrNotFound when the id was never known
// (or was forgotten long ago) or is another user's.
func (r *Registry) Close(p Principal, sid string, reason EndReason) (bool, error) {
	r.mu.Lock()
	s := r.sessions[sid]
	if s != nil && !authorize(p, s.owner, accessManage) {
		s = nil
	}
	owner, wasEnded := r.ended[sid]
	wasEnded = wasEnded && authorize(p, owner, accessManage)
	r.mu.Unlock()
	if s == nil {
		if wasEnded {
			return false, nil
		}
		return false, ErrNotFound
	}
	return r.end(s, reason), nil
}

// ReapDetached ends every detached session p may end (its own; every one
// for an admin) with end_reason=admin_reap and returns how many it ended.
func (r *Registry) ReapDetached(p Principal) int {
	r.mu.Lock()
	var due []*Session
	for _, s := range r.sessions {
		if s.state == StateDetached && authorize(p, s.owner, accessManage) {
			due = append(due, s)
		}
	}
	r.mu.Unlock()
	return r.endAll(due, EndAdminReap)
}

// Shutdown refuses new sessions and ends every session with
// end_reason=shutdown, concurrently, until ctx ends. The viewers get
// session.closed first. When ctx ends first, the teardowns go on; Wait
// joins them.
func (r *Registry) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	r.closing = true
	if r.spareIdle != nil {
		r.spareIdle.Stop()
	}
	for _, sp := range r.spares {
		r.goTracked(func() { sp.end(workers.ReasonShutdown) })
	}
	r.spares = nil
	all := make([]*Session, 0, len(r.sessions))
	for _, s := range r.sessions {
		all = append(all, s)
	}
	r.mu.Unlock()
	done := make(chan struct{})
	r.goTracked(func() { r.endAll(all, EndShutdown); close(done) })
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// DetachViewer removes v from every session it views: each session left
// without a viewer detaches (its worker closed at once with reason, even
// mid-turn; reason is detach, write_timeout or ping_timeout) or,
// when created with close_on_disconnect, closes. It returns at once; the
// teardowns run in the background (see Wait).
func (r *Registry) DetachViewer(v Viewer, reason workers.Reason) {
	r.mu.Lock()
	var work []func()
	for s := range r.viewing[v] {
		delete(s.viewers, v)
		if len(s.viewers) == 0 && s.live() {
			if f := r.detachLocked(s, reason); f != nil {
				work = append(work, f)
			}
		}
	}
	delete(r.viewing, v)
	r.mu.Unlock()
	for _, f := range work {
		r.goTracked(f)
	}
}

// Leave stops v viewing sid (session.detach): when v was its last viewer
// the session detaches as if the socket had gone (worker closed with
// reason detach). It reports whether v was viewing sid; ErrNotFound for an
// unknown or ended session, or one v's principal may not use.
func (r *Registry) Leave(v Viewer, sid string) (bool, error) {
	r.mu.Lock()
	s := r.sessions[sid]
	if s == nil || !s.live() || !authorize(principalOf(v), s.owner, accessUse) {
		r.mu.Unlock()
		return false, ErrNotFound
	}
	if _, ok := s.viewers[v]; !ok {
		r.mu.Unlock()
		return false, nil
	}
	delete(s.viewers, v)
	if set := r.viewing[v]; set != nil {
		delete(set, s)
	}
	var work func()
	if len(s.viewers) == 0 {
		work = r.detachLocked(s, workers.ReasonDetach)
	}
	r.mu.Unlock()
	if work != nil {
		r.goTracked(work)
	}
	return true, nil
}

// detachLocked handles the last viewer leaving s and returns the slow part
// to run outside the lock. r.mu must be held.
func (r *Registry) detachLocked(s *Session, reason workers.Reason) func() {
	parked := s.term != nil && s.term.parked()
	if s.closeOnDisconnect || (s.terminalOnly && !parked) {
		if !r.claimLocked(s, EndCloseOnDisconnect) {
			return nil
		}
		return func() { r.finish(s) }
	}
	if s.state == StateDetached {
		return nil
	}
	r.setState(s, StateDetached)
	now := time.Now()
	s.detachedAt, s.lastActive = now, now
	r.saveLocked(s)
	s.ttlTimer = time.AfterFunc(r.cfg.DetachedTTL, func() { r.expire(s) })
	if t := s.turn; r.cfg.DetachTurnGrace > 0 && t != nil && !t.done && s.worker != nil && len(s.approvals) == 0 {
		// The turn may finish (its reply saved); then, or at the end of
		// the grace, the worker goes (see endGraceLocked).
		s.grace = &turnGrace{start: now, reason: reason}
		s.grace.timer = time.AfterFunc(r.cfg.DetachTurnGrace, func() {
			r.mu.Lock()
			work := r.endGraceLocked(s)
			r.mu.Unlock()
			if work != nil {
				r.goTracked(work)
			}
		})
		return nil
	}
	r.denyApprovalsLocked(s, ByDetach)
	r.interruptTurnLocked(s)
	w := s.worker
	s.worker = nil
	if w == nil {
		return nil
	}
	return func() { w.Close(reason) }
}

// turnGrace is a detached session's running turn let finish
// (Config.DetachTurnGrace).
type turnGrace struct {
	start  time.Time
	reason workers.Reason
	timer  *time.Timer
}

// endGraceLocked ends the grace of a detached session: its turn, if it
// still runs, is interrupted, and the slow part returned closes its worker
// with the detach reason, the record carrying turn_grace_ms. A viewer
// coming back (or the session ending) ends the grace without closing
// anything. r.mu must be held.
func (r *Registry) endGraceLocked(s *Session) func() {
	g := s.grace
	if g == nil {
		return nil
	}
	s.grace = nil
	g.timer.Stop()
	if s.state != StateDetached {
		return nil
	}
	r.denyApprovalsLocked(s, ByDetach)
	r.interruptTurnLocked(s)
	w := s.worker
	s.worker = nil
	if w == nil {
		return nil
	}
	ms := time.Since(g.start).Milliseconds()
	return func() {
		if n, ok := w.(interface{ AddCloseAttr(string, any) }); ok {
			n.AddCloseAttr("turn_grace_ms", ms)
		}
		w.Close(g.reason)
	}
}

// expire is the detach timer of s.
func (r *Registry) expire(s *Session) {
	r.mu.Lock()
	due := s.state == StateDetached && time.Since(s.detachedAt) >= r.cfg.DetachedTTL
	r.mu.Unlock()
	if due {
		r.goTracked(func() { r.end(s, EndDetachedTTL) })
	}
}

// end is the one close funnel of a session: every end reason comes here.
// It reports whether this call ended s (false: it was ending already).
func (r *Registry) end(s *Session, reason EndReason) bool {
	r.mu.Lock()
	ok := r.claimLocked(s, reason)
	r.mu.Unlock()
	if ok {
		r.finish(s)
	}
	return ok
}

// claimLocked moves s to closing, takes its worker and terminal, ends its
// turn and tells its viewers. r.mu must be held; finish must follow.
func (r *Registry) claimLocked(s *Session, reason EndReason) bool {
	if !s.live() {
		return false
	}
	s.endReason = reason // before the state: session.changed carries it
	r.setState(s, StateClosing)
	if g := s.grace; g != nil { // finish closes the worker
		g.timer.Stop()
		s.grace = nil
	}
	if s.ttlTimer != nil {
		s.ttlTimer.Stop()
		s.ttlTimer = nil
	}
	r.denyApprovalsLocked(s, ByClose)
	r.interruptTurnLocked(s)
	if r.suspends(s, reason) {
		r.emitLocked(s, "session.closed", map[string]any{"end_reason": reason, "suspended": true})
	} else {
		r.emitLocked(s, "session.closed", map[string]any{"end_reason": reason})
		r.appendLocked(s, Message{Role: store.RoleSystem, Kind: store.KindNotice, Text: endNotices[reason]})
	}
	for v := range s.viewers {
		if set := r.viewing[v]; set != nil {
			delete(set, s)
		}
	}
	s.viewers = map[Viewer]struct{}{}
	return true
}

// suspends reports whether s, ending with reason, is suspended (stored to
// be restored at the next start) rather than closed.
func (r *Registry) suspends(s *Session, reason EndReason) bool {
	return reason == EndShutdown && r.cfg.SuspendOnShutdown && !s.terminalOnly
}

// finish tears down a claimed session outside the lock, worker and terminal
// in parallel, then stores it and logs its one record: "session closed",
// or "session suspended" for a chat session at shutdown when
// Config.SuspendOnShutdown is set.
func (r *Registry) finish(s *Session) {
	defer close(s.finished)
	start := time.Now()
	r.mu.Lock()
	w, t := s.worker, s.term
	s.worker, s.term = nil, nil
	reason := s.endReason
	r.mu.Unlock()

	wreason := childReason(reason)
	var wg sync.WaitGroup
	workerPID, ptyPID := 0, 0
	if w != nil {
		workerPID = w.PID()
		wg.Add(1)
		go func() { defer wg.Done(); w.Close(wreason) }()
	}
	if ptyPID = s.endedPTYPID; t != nil {
		ptyPID = t.PID()
		wg.Add(1)
		go func() { defer wg.Done(); t.end(wreason, false) }()
	}
	wg.Wait()

	r.mu.Lock()
	r.setState(s, StateClosed)
	delete(r.sessions, s.id)
	r.ended[s.id] = s.owner
	r.endedQ = append(r.endedQ, s.id)
	if len(r.endedQ) > 4096 {
		delete(r.ended, r.endedQ[0])
		r.endedQ = r.endedQ[1:]
	}
	turns := s.turns
	now := time.Now()
	suspended := r.suspends(s, reason)
	if !s.terminalOnly {
		row := s.row()
		if suspended {
			row.State = store.StateSuspended
		} else {
			row.State, row.EndReason, row.ClosedAt = store.StateClosed, string(reason), now
		}
		r.journal.putSession(row)
	}
	r.mu.Unlock()

	if suspended {
		r.log.Info("session suspended",
			"sid", s.id,
			"duration_ms", now.Sub(s.liveSince).Milliseconds(),
			"close_ms", now.Sub(start).Milliseconds(),
			"worker_pid", workerPID,
			"turns", turns,
		)
		return
	}
	r.log.Info("session closed",
		"sid", s.id,
		"end_reason", string(reason),
		"duration_ms", now.Sub(s.liveSince).Milliseconds(),
		"close_ms", now.Sub(start).Milliseconds(),
		"worker_pid", workerPID,
		"pty_pid", ptyPID,
		"turns", turns,
	)
	if r.cfg.OnSessionClose != nil {
		r.cfg.OnSessionClose(reason)
	}
}

// use finds a live session for a call from v and makes v a viewer of it (a
// socket using a session views it, so its liveness is tracked). Errors:
// ErrNotFound (also for a session v's principal may not use),
// ErrViewerCapacity.
func (r *Registry) use(v Viewer, sid string) (*Session, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sessions[sid]
	if s == nil || !s.live() || !authorize(principalOf(v), s.owner, accessUse) {
		return nil, ErrNotFound
	}
	if err := r.viewLocked(s, v); err != nil {
		return nil, err
	}
	return s, nil
}

// ensureWorker returns the session's live worker, spawning one when there is
// none. Spawns are serialised per session, so concurrent calls never start
// two; a worker whose session ended while it was spawned is closed at once.
func (r *Registry) ensureWorker(ctx context.Context, s *Session) (Worker, error) {
	if err := s.spawnMu.Acquire(ctx, 1); err != nil {
		return nil, err
	}
	defer s.spawnMu.Release(1)
	r.mu.Lock()
	if !s.live() {
		r.mu.Unlock()
		return nil, ErrNotFound
	}
	if w := s.worker; w != nil && !w.Closing() {
		r.mu.Unlock()
		return w, nil
	}
	s.worker = nil
	r.mu.Unlock()

	spawn := func() (Worker, error) {
		return r.cfg.Spawner.SpawnWorker(SpawnRequest{
			SessionID: s.id, CancelGrace: r.cfg.InterruptGrace,
			OnClose: func(res workers.CloseResult) { r.workerGone(s, res) },
		})
	}
	w, err := spawn()
	for errors.Is(err, workers.ErrCapacity) && r.dropSpare() {
		w, err = spawn() // a spare terminal held the last slot
	}
	if errors.Is(err, workers.ErrCapacity) {
		return nil, err
	}
	if err != nil {
		r.log.Warn("worker spawn failed", "sid", s.id, "err", err)
		return nil, &workers.Error{Failure: workers.FailSpawn, Message: err.Error()}
	}
	r.mu.Lock()
	if s.state != StateAttached && s.state != StateCreated {
		detached := s.state == StateDetached
		r.mu.Unlock()
		w.Close(spawnRaceReason(detached))
		return nil, ErrNotFound
	}
	s.worker = w
	r.mu.Unlock()
	return w, nil
}

// workerGone is called once per closed worker of s.
func (r *Registry) workerGone(s *Session, res workers.CloseResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.worker == nil || s.worker.PID() != res.PID {
		return // the session closed it itself, and knows
	}
	s.worker = nil
	r.denyApprovalsLocked(s, ByClose) // its tool runs went with it
	if s.execs > 0 {
		// A command it was running fails with it: its error is told first
		// (see Exec), so the history reads command, error, exit.
		s.exited = &res
		return
	}
	r.exitedLocked(s, res)
}

// exitedLocked tells the viewers, and the history, that the worker of s
// went away. r.mu must be held.
func (r *Registry) exitedLocked(s *Session, res workers.CloseResult) {
	payload := map[string]any{"reason": res.Reason, "exit_code": res.ExitCode}
	if res.Signal != "" {
		payload["signal"] = res.Signal
	}
	r.emitLocked(s, "worker.exited", payload)
	r.appendLocked(s, Message{Role: store.RoleSystem, Kind: store.KindNotice, Text: workerNotice(res)})
}

// Exec runs a slash command in the session's worker (spawning it when
// needed) and returns its output. v becomes a viewer of the session.
// Errors: ErrNotFound, workers.ErrCapacity, *workers.Error.
func (r *Registry) Exec(ctx context.Context, v Viewer, sid, command string) (string, error) {
	s, err := r.use(v, sid)
	if err != nil {
		return "", err
	}
	// A slash command and its output, or its error, are part of the
	// conversation: a resumed session shows them. The command is shown
	// when it is sent; its result, unless the session ended meanwhile or
	// the caller went.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r.mu.Lock()
	r.appendLocked(s, Message{Role: store.RoleUser, Kind: store.KindSlash, Text: command})
	s.execs++
	unregister := r.execStopLocked(s, func() { cancel(errInterrupted) })
	r.mu.Unlock()
	out, err := r.exec(ctx, s, command)
	interrupted := err != nil && errors.Is(context.Cause(ctx), errInterrupted)
	if interrupted && errors.Is(err, context.Canceled) {
		// Interrupted, and the worker gave no answer of its own (it was
		// still starting, or did not stop within the grace and was
		// recycled): the command failed, and says why.
		err = &workers.Error{Failure: workers.FailInterrupted, Message: "command interrupted"}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	unregister()
	shown := !errors.Is(err, ErrNotFound) && !errors.Is(err, context.Canceled)
	if s.live() && shown {
		if err != nil {
			code, msg := r.cfg.DescribeError(err)
			// An interrupted command's error says so (the dashboard shows
			// it as stopped, not as a failure).
			r.appendLocked(s, Message{Role: store.RoleSystem, Kind: store.KindError, Text: msg, Code: code, Interrupted: interrupted})
		} else {
			r.appendLocked(s, Message{Role: store.RoleAssistant, Kind: store.KindSlashOutput, Text: out})
		}
	}
	if s.execs--; s.execs == 0 && s.exited != nil {
		res := *s.exited
		s.exited = nil
		if s.live() {
			r.exitedLocked(s, res)
		}
	}
	return out, err
}

func (r *Registry) exec(ctx context.Context, s *Session, command string) (string, error) {
	w, err := r.ensureWorker(ctx, s)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.WorkerTimeout)
	defer cancel()
	raw, err := w.Call(ctx, "slash", map[string]string{"command": command}, nil)
	r.touch(s)
	if err != nil {
		return "", err
	}
	var res struct {
		Output string `json:"output"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return "", &workers.Error{Failure: workers.FailProtocol, Message: "result is not {\"output\": string}"}
	}
	return res.Output, nil
}

func (r *Registry) touch(s *Session) {
	r.mu.Lock()
	s.lastActive = time.Now()
	r.mu.Unlock()
}

// appendLocked adds an entry to the history of s (giving it the next seq
// unless it has one, reserved earlier) and queues it for the store. Memory
// keeps the latest entries within the bounds. r.mu must be held.
func (r *Registry) appendLocked(s *Session, m Message) {
	if m.Seq == 0 {
		s.entrySeq++
		m.Seq = s.entrySeq
	}
	if m.At.IsZero() {
		m.At = time.Now()
	}
	i := len(s.history)
	for i > 0 && s.history[i-1].Seq > m.Seq { // a reply whose seq was reserved at its prompt
		i--
	}
	s.history = slices.Insert(s.history, i, m)
	s.histBytes += len(m.Text)
	r.trimLocked(s)
	if !s.terminalOnly {
		r.journal.putEntry(s.id, m)
		r.saveLocked(s)
	}
}

// trimLocked drops the oldest entries of s beyond the memory bounds (the
// store keeps them).
func (r *Registry) trimLocked(s *Session) {
	for len(s.history) > r.cfg.HistoryMessages || (s.histBytes > r.cfg.HistoryBytes && len(s.history) > 1) {
		s.histBytes -= len(s.history[0].Text)
		s.history[0] = Message{}
		s.history = s.history[1:]
	}
}

// saveLocked queues the row of s for the store (a terminal-only session
// is not stored: it has no conversation). r.mu must be held.
func (r *Registry) saveLocked(s *Session) {
	if !s.terminalOnly {
		r.journal.putSession(s.row())
	}
}

// Prompt starts a turn: it records the prompt and returns the turn id and a
// start function that the caller calls once it has sent its reply, so that
// the reply precedes the turn's events. Errors: ErrNotFound, ErrBusy.
func (r *Registry) Prompt(v Viewer, sid, text string) (string, func(), error) {
	s, err := r.use(v, sid)
	if err != nil {
		return "", nil, err
	}
	r.mu.Lock()
	if s.turn != nil {
		r.mu.Unlock()
		return "", nil, ErrBusy
	}
	// WorkerTimeout bounds the silence of a turn, not its length: every
	// event the worker sends restarts it, and it stands still while the turn
	// waits for a viewer's approval or a tool runs.
	ctx, cancelCause := context.WithCancelCause(context.Background())
	cancel := func() { cancelCause(context.Canceled) }
	now := time.Now()
	t := &turn{id: newID(), at: now, cancel: cancel, finished: make(chan struct{})}
	t.idle = time.AfterFunc(r.cfg.WorkerTimeout, func() { cancelCause(context.DeadlineExceeded) })
	s.turn = t
	s.turns++
	r.appendLocked(s, Message{Role: store.RoleUser, Kind: store.KindPrompt, Text: text, At: now, TurnID: t.id})
	t.promptSeq = s.entrySeq
	r.mu.Unlock()
	start := func() { r.goTracked(func() { r.runTurn(ctx, s, t, text) }) }
	return t.id, start, nil
}

func (r *Registry) runTurn(ctx context.Context, s *Session, t *turn, text string) {
	defer t.cancel()
	w, err := r.ensureWorker(ctx, s)
	if err != nil {
		r.finishTurn(s, t, "", true, err)
		return
	}
	r.mu.Lock()
	unloaded := s.unloaded
	r.mu.Unlock()
	if unloaded { // restored: the model gets the earlier conversation too
		if err := r.load(ctx, s); err != nil {
			r.log.Warn("history load", "sid", s.id, "err", err)
		}
	}
	r.mu.Lock()
	params := map[string]any{"text": text, "turn_id": t.id, "history": r.modelHistoryLocked(s, t), "model": s.model}
	r.mu.Unlock()
	raw, err := w.Call(ctx, "prompt", params, func(ev workers.Event) { r.onEvent(s, t, w, ev) })
	if err != nil {
		r.finishTurn(s, t, "", true, err)
		return
	}
	var res struct {
		Output      string       `json:"output"`
		Interrupted bool         `json:"interrupted"`
		Status      string       `json:"status"`
		Usage       *store.Usage `json:"usage"`
	}
	json.Unmarshal(raw, &res)
	r.mu.Lock()
	t.usage, t.status = res.Usage, res.Status
	r.mu.Unlock()
	r.finishTurn(s, t, res.Output, res.Interrupted, nil)
}

// checkpointEvery bounds how much streamed text a crash can lose: a
// streaming reply is queued for the store at most this long after a delta
// arrived, so with the journal's delay it is stored within 250 ms.
const checkpointEvery = 250*time.Millisecond - journalDelay

// checkpoint queues the text t streamed so far as its (interrupted) reply.
func (r *Registry) checkpoint(s *Session, t *turn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t.ckpt = nil
	if !t.done {
		r.journal.putEntry(s.id, t.reply(t.text, true, nil))
	}
}

// reply is the history entry of t's answer.
func (t *turn) reply(text string, interrupted bool, usage *store.Usage) Message {
	return Message{Seq: t.seq, Role: store.RoleAssistant, Kind: store.KindReply, Text: text, At: t.at,
		TurnID: t.id, Interrupted: interrupted, Usage: usage, Status: t.replyStatus(interrupted)}
}

// replyStatus is the status of t's reply: the worker's word, else error
// (the turn failed), interrupted or complete.
func (t *turn) replyStatus(interrupted bool) string {
	switch {
	case t.status != "":
		return t.status
	case t.failed:
		return "error"
	case interrupted:
		return "interrupted"
	}
	return "complete"
}

// finishTurn ends t once: history, message.complete and, on failure, an
// error event and entry.
func (r *Registry) finishTurn(s *Session, t *turn, output string, interrupted bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !t.done {
		t.failed = err != nil && !errors.Is(err, context.Canceled)
		r.completeTurnLocked(s, t, output, interrupted)
		if t.failed {
			code, msg := r.cfg.DescribeError(err)
			payload := map[string]any{"message": msg, "code": code}
			data := failureData(err)
			if data != nil {
				payload["data"] = data
			}
			r.emitLocked(s, "error", payload)
			r.appendLocked(s, Message{Role: store.RoleSystem, Kind: store.KindError, Text: msg, Code: code, TurnID: t.id, Data: data})
		}
	}
}

func (r *Registry) completeTurnLocked(s *Session, t *turn, output string, interrupted bool) {
	t.done = true
	close(t.finished)
	t.idle.Stop()
	if t.ckpt != nil {
		t.ckpt.Stop()
		t.ckpt = nil
	}
	if s.turn == t {
		s.turn = nil
	}
	r.denyApprovalsLocked(s, ByInterrupt) // none is left when the turn ended by itself
	if output == "" {
		output = t.text
	}
	reply := t.reply(output, interrupted, t.usage)
	r.appendLocked(s, reply)
	payload := map[string]any{"turn_id": t.id, "text": output, "interrupted": interrupted, "status": reply.Status}
	if t.usage != nil {
		payload["usage"] = t.usage
	}
	r.emitLocked(s, "message.complete", payload)
	if s.grace != nil { // the turn finished within its grace: the worker goes now
		if work := r.endGraceLocked(s); work != nil {
			r.goTracked(work)
		}
	}
}

// interruptTurnLocked ends the running turn as interrupted and cancels its
// call. r.mu must be held.
func (r *Registry) interruptTurnLocked(s *Session) {
	t := s.turn
	if t == nil || t.done {
		return
	}
	t.cancel()
	r.completeTurnLocked(s, t, "", true)
}

// Interrupt stops the running turn of sid: the worker is asked to cancel and
// is recycled when it does not answer within InterruptGrace. It returns
// "interrupted", or "idle" when no turn ran. It blocks until the turn ended
// or InterruptGrace plus a second passed.
func (r *Registry) Interrupt(v Viewer, sid string) (string, error) {
	s, err := r.use(v, sid)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	t := s.turn
	r.denyApprovalsLocked(s, ByInterrupt)
	// Running slash commands are cancelled too (the worker is asked to
	// stop them, as a prompt).
	stopped := len(s.execStops)
	for c := range s.execStops {
		(*c)()
	}
	r.mu.Unlock()
	if t == nil {
		if stopped > 0 {
			return "interrupted", nil
		}
		return "idle", nil
	}
	t.cancel()
	select {
	case <-t.finished:
	case <-time.After(r.cfg.InterruptGrace + time.Second):
		r.mu.Lock()
		if !t.done {
			r.completeTurnLocked(s, t, "", true)
		}
		r.mu.Unlock()
	}
	return "interrupted", nil
}

// ReapWorker ends the child with pid of a live session, as an administrator
// asked: a chat worker is closed with reason admin_reap (its session stays,
// and its viewers get worker.exited); a terminal is ended with reason
// admin_reap, which ends a terminal-only session with end_reason
// admin_reap. It blocks until the child is reaped. ErrNotFound: no
// session p may end (its own; any for an admin) has a child with that pid.
func (r *Registry) ReapWorker(p Principal, pid int) error {
	r.mu.Lock()
	var w Worker
	var t *Terminal
	var owner *Session
	for _, s := range r.sessions {
		if !s.live() || !authorize(p, s.owner, accessManage) {
			continue
		}
		if s.worker != nil && s.worker.PID() == pid {
			w = s.worker
			break
		}
		if s.term != nil && s.term.PID() == pid {
			t, owner = s.term, s
			break
		}
	}
	r.mu.Unlock()
	switch {
	case w != nil:
		w.Close(workers.ReasonAdminReap)
	case t != nil:
		t.end(workers.ReasonAdminReap, false)
		r.mu.Lock()
		if owner.live() && !owner.terminalOnly {
			// Its chat viewers, and its history, say what happened.
			r.emitLocked(owner, "notice", map[string]any{"text": terminalReapNotice})
			r.appendLocked(owner, Message{Role: store.RoleSystem, Kind: store.KindNotice, Text: terminalReapNotice})
		}
		r.mu.Unlock()
	default:
		return ErrNotFound
	}
	return nil
}
