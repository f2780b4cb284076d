package sessions

import (
	"context"
	"errors"
	"runtime/trace"
	"sync"
	"time"

	"github.com/dashgate/dashgate/workers"
)

// A spare is a terminal program started ahead of the /ws/pty that will
// want it (Config.PTYSpare). Starting a program costs a fork, an exec and
// the program's own start before its first output (a shell's prompt):
// most of the time from a WebSocket dial to its first output byte. The
// spare pays that before the request comes: an attach without a session
// at the spare's size takes it, and once its first output went out the
// next one is started at that size.
//
// The spare is an ordinary Terminal of a Session that is not in the
// registry yet: its program was spawned through the Spawner like any
// other (the same thread, Pdeathsig, marker and placement, and
// DASHGATE_SESSION_ID naming the session it will serve); its reader
// waits within PTYPending for the first attachment, as any new
// terminal's does, so its output from offset 0 is there when the
// session is registered with it. Until then nothing in the registry
// points at it but r.spares: a spare whose program ends by itself is
// simply not used (end finds no session holding it). There are at most
// burstSpares, all of one size; Shutdown ends them, and a spawn that
// finds the workers at capacity ends one and tries again.
type spare struct {
	s          *Session // not registered until taken
	cols, rows uint16
	ready      chan struct{} // closed once t or err is set
	gen        uint64        // spares.gen when it was taken
	t          *Terminal
	err        error
}

// size is o's terminal size with the defaults of PROTOCOL.md §3.
func (o TerminalOptions) size() (cols, rows uint16) {
	cols, rows = o.Cols, o.Rows
	if cols == 0 {
		cols = 80
	}
	if rows == 0 {
		rows = 24
	}
	return cols, rows
}

// spareCount is how many spares are kept while terminals are opened no
// faster than one starts: one. burstSpares is how many in a burst: from
// an attach that took a spare still starting (terminals opened back to
// back, faster than a fork, an exec and a prompt) until none was taken
// for spareBurstIdle; then the newest is ended (spare_unused). One spare,
// refilled after the last attach's first output, is still starting when
// the next dial comes a millisecond later; with two the next one has had
// a whole connect longer. Beside ttyd and gotty, peerbench's 200
// back-to-back connects a round (issue 43, 2026-12-07): connect p50 1.94
// and 2.28 ms against the best peer's 1.98 and 2.52 with two, 2.06 and
// 2.67 against 1.99 and 2.26 with one. Two always were not better in
// issue 28 (p99 8.4 against 6.8 ms: two shells starting beside the one
// attached and the one closing on two CPUs), and would keep a second idle
// program for a person who opens a terminal now and then.
const (
	spareCount     = 1
	burstSpares    = 2
	spareBurstIdle = time.Second
)

// spares is the registry's pool of spares, a view under its lock as
// admission is. Every method takes the registry's mutex itself.
type spares struct {
	mu        *sync.Mutex // the registry's
	closing   func() bool // the registry's closing (Shutdown began), read under mu
	goTracked func(func())
	// newSession makes the unregistered terminal-only session a spare
	// serves (called under mu); start starts its terminal (outside it).
	newSession func() *Session
	start      func(s *Session, cols, rows uint16) (*Terminal, error)
	idleAfter  time.Duration // Config.PTYSpareIdle

	list []*spare // terminals started ahead for the next new terminal sessions, oldest first (Config.PTYSpare)
	// idle ends the spares idleAfter after the last refill.
	idle *time.Timer
	// gen counts the times the spares were all ended (idle, another
	// size, shutdown): a spare taken before it changed is not given back.
	gen uint64
	// burst is set when an attach took a spare that was still starting:
	// burstSpares are kept until none was taken for spareBurstIdle
	// (lastTake; burstEnd ends it).
	burst    bool
	lastTake time.Time
	burstEnd *time.Timer
}

// sessionIDs returns the ids of the unregistered sessions the spares
// serve (their programs' DASHGATE_SESSION_ID), oldest first.
func (ps *spares) sessionIDs() []string {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := make([]string, 0, len(ps.list))
	for _, sp := range ps.list {
		out = append(out, sp.s.id)
	}
	return out
}

// wantLocked is how many spares to keep (spareCount, or burstSpares in
// a burst). The registry's mutex must be held.
func (ps *spares) wantLocked() int {
	if ps.burst {
		return burstSpares
	}
	return spareCount
}

// take returns the oldest spare when it has o's size (nil otherwise:
// spares of another size are ended). The one returned may still be
// starting: see (*spare).wait; then the spares are in a burst (burst). It
// starts no new one: see refill.
func (ps *spares) take(o TerminalOptions) *spare {
	cols, rows := o.size()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.closing() || len(ps.list) == 0 {
		return nil
	}
	if sp := ps.list[0]; sp.cols == cols && sp.rows == rows {
		ps.list = ps.list[1:]
		sp.gen = ps.gen
		select {
		case <-sp.ready:
		default:
			ps.burst = true // opened faster than one starts
		}
		if ps.burst {
			ps.lastTake = time.Now()
			if ps.burstEnd == nil {
				ps.burstEnd = time.AfterFunc(spareBurstIdle, ps.endBurst)
			}
		}
		return sp
	}
	ps.endLocked(workers.ReasonSpareUnused)
	return nil
}

// endLocked ends every spare with reason (on tracked goroutines) and
// counts the generation. The registry's mutex must be held.
func (ps *spares) endLocked(reason workers.Reason) {
	for _, sp := range ps.list {
		ps.goTracked(func() { sp.end(reason) })
	}
	ps.list = nil
	ps.gen++
}

// refill starts spares of cols×rows until there are wantLocked (unless
// dashgate is shutting down). An attach without a session calls it once
// its first output was handed to the socket (see Attachment.onFirst): a
// spawn started earlier runs beside that request's own path (fork holds
// the spawn thread's P until exec, and the request's goroutines wait
// behind it: 1.7 ms of the WebSocket accept in BenchmarkTerminalConnect),
// and would hold up a request that has to spawn its own terminal.
func (ps *spares) refill(cols, rows uint16) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if len(ps.list) > 0 && (ps.list[0].cols != cols || ps.list[0].rows != rows) {
		return // the next request of that size takes them or ends them
	}
	for !ps.closing() && len(ps.list) < ps.wantLocked() {
		next := &spare{s: ps.newSession(), cols: cols, rows: rows, ready: make(chan struct{})}
		ps.list = append(ps.list, next)
		ps.goTracked(func() {
			next.t, next.err = ps.start(next.s, cols, rows)
			close(next.ready)
		})
	}
	if ps.closing() {
		return
	}
	if ps.idle == nil {
		ps.idle = time.AfterFunc(ps.idleAfter, ps.expire)
	} else {
		ps.idle.Reset(ps.idleAfter)
	}
}

// endBurst ends a burst once no spare was taken for spareBurstIdle (it
// looks again when one was since it was set): the spares beyond
// spareCount, the newest, end (reason spare_unused).
func (ps *spares) endBurst() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if left := spareBurstIdle - time.Since(ps.lastTake); left > 0 && !ps.closing() {
		ps.burstEnd.Reset(left)
		return
	}
	ps.burstEnd, ps.burst = nil, false
	if ps.closing() {
		return // Shutdown ends them
	}
	for len(ps.list) > spareCount {
		sp := ps.list[len(ps.list)-1]
		ps.list = ps.list[:len(ps.list)-1]
		ps.goTracked(func() { sp.end(workers.ReasonSpareUnused) })
	}
}

// expire ends the spares (reason spare_unused): no terminal was asked
// for without a session for PTYSpareIdle. The next such attach starts its
// own terminal, and spares again once its first output went out.
func (ps *spares) expire() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.closing() {
		return // Shutdown ends them
	}
	ps.endLocked(workers.ReasonSpareUnused)
}

// shutdownLocked stops the timers and ends the spares (reason
// shutdown). The registry's mutex must be held.
func (ps *spares) shutdownLocked() {
	if ps.idle != nil {
		ps.idle.Stop()
	}
	if ps.burstEnd != nil {
		ps.burstEnd.Stop()
	}
	ps.endLocked(workers.ReasonShutdown)
}

// wait returns the spare's terminal once started, or nil when it could
// not start or ctx ended first (then the spare is ended when it is).
func (sp *spare) wait(ctx context.Context, r *Registry) *Terminal {
	select {
	case <-sp.ready:
		return sp.t
	case <-ctx.Done():
		r.goTracked(func() { sp.end(workers.ReasonSpareUnused) })
		return nil
	}
}

// end ends the spare's terminal, once it started, with reason.
func (sp *spare) end(reason workers.Reason) {
	<-sp.ready
	if sp.t != nil {
		sp.t.end(reason, false)
	}
}

// giveBack returns sp, taken by take but not given to a session (a cap
// refused it), to the front of the spares: it is still the oldest. When
// the spares were all ended since it was taken (dashgate is shutting
// down, they were ended idle or for another size), or others fill their
// number again or have another size, it is ended instead.
func (ps *spares) giveBack(sp *spare) {
	ps.mu.Lock()
	fits := !ps.closing() && sp.gen == ps.gen && len(ps.list) < ps.wantLocked() &&
		(len(ps.list) == 0 || ps.list[0].cols == sp.cols && ps.list[0].rows == sp.rows)
	if fits {
		sp.s.owner = ""
		ps.list = append([]*spare{sp}, ps.list...)
	}
	ps.mu.Unlock()
	if !fits {
		ps.goTracked(func() { sp.end(workers.ReasonSpareUnused) })
	}
}

// drop ends a spare, if there is one (the newest), and reports whether
// it held a slot: a spawn that met workers.ErrCapacity may then try
// again. Spares come back with the next attach without a session.
func (ps *spares) drop() bool {
	ps.mu.Lock()
	var sp *spare
	if n := len(ps.list); n > 0 {
		sp = ps.list[n-1]
		ps.list = ps.list[:n-1]
	}
	ps.mu.Unlock()
	if sp == nil {
		return false
	}
	sp.end(workers.ReasonSpareUnused)
	return sp.t != nil
}

// attachSpare registers a new terminal-only session with the spare sp
// (taken by spares.take) and attaches to it. It returns ok false, with
// nothing registered, when the spare cannot serve: it did not start, or
// its program ended already; the caller then starts a terminal as usual.
func (r *Registry) attachSpare(ctx context.Context, p Principal, sp *spare, o TerminalOptions) (a *Attachment, ok bool, err error) {
	region := trace.StartRegion(ctx, "wait for spare")
	t := sp.wait(ctx, r)
	region.End()
	if t == nil {
		return nil, false, ctx.Err()
	}
	r.mu.Lock() // its terminal's end may read the session already
	sp.s.owner = p.User
	r.mu.Unlock()
	in, err := r.register(nil, sp.s, t)
	if errors.Is(err, ErrNotFound) { // its program ended before it was taken
		r.goTracked(func() { sp.end(workers.ReasonSpareUnused) })
		return nil, false, nil
	}
	if errors.Is(err, ErrCapacity) { // p's caps, or the global one: the spare waits for the next
		r.spares.giveBack(sp)
		return nil, true, err
	}
	if err != nil {
		r.goTracked(func() { sp.end(workers.ReasonSpareUnused) })
		return nil, true, err
	}
	t.startRecording(p.User) // from its first output, which its ring holds
	a, err = r.attachTerminal(ctx, p, in.ID, o)
	if err != nil {
		r.Close(p, in.ID, EndCloseOnDisconnect)
	}
	return a, true, err
}
