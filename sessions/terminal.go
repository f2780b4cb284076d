package sessions

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime/trace"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dashgate/dashgate/workers"
)

// Terminal errors returned by Attachment.Next.
var (
	ErrTakenOver      = errors.New("terminal taken over by another attach") // close 4409
	ErrTerminalClosed = errors.New("terminal closed")                       // the session or gateway ended it
	// ErrTerminalShutdown is ErrTerminalClosed when dashgate ended the
	// terminal because it is shutting down (the socket closes with 1001).
	ErrTerminalShutdown = fmt.Errorf("%w: dashgate is shutting down", ErrTerminalClosed)
)

// ExitError is returned by Attachment.Next once the program exited and all
// its output was handed out.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return "terminal program exited" }

// MaxFrame is the most output one Next call hands out (one WebSocket frame).
const MaxFrame = 32 << 10

// frameBufs holds MaxFrame buffers (*[]byte): a terminal's reader takes one
// for its life, so that a terminal per connect does not allocate 32 KiB
// for the garbage collector each time (see also FrameBuffer).
var frameBufs = sync.Pool{New: func() any { b := make([]byte, MaxFrame); return &b }}

// FrameBuffer lends a MaxFrame buffer for Next; give it back with its put
// once nothing refers to it any more.
func FrameBuffer() (buf []byte, put func()) {
	bp := frameBufs.Get().(*[]byte)
	return *bp, func() { frameBufs.Put(bp) }
}

// TerminalOptions are the query parameters of /ws/pty (PROTOCOL.md §3).
type TerminalOptions struct {
	Cols, Rows  uint16 // the program starts at this size; 0 means 80x24
	Keepalive   bool   // park the terminal on disconnect
	ResumeToken string // reattach to a parked terminal
	Offset      int64  // output bytes the client already has
	Page        string // the page (tab) of the socket, for Info.Pages
	// Share attaches beside the terminal's other attachments instead of
	// taking it over: every one sees the output and may type; the size
	// follows the one typed into last.
	Share bool
	// Terminal is which of the session's terminals ("" DefaultTerminal;
	// else 1 to 16 of a-z and 0-9, see TerminalID): one not running is
	// started, up to MaxTerminalsPerSession (terminals.go).
	Terminal string
}

// Terminal is one of a session's pty programs (terminals.go), its output
// ring buffer and its attachments: one that took it over, or several that
// share it. It outlives sockets: a parked terminal (no attachment) waits
// for a reattach. Lock order: the registry's mutex, then t.mu.
type Terminal struct {
	r   *Registry
	s   *Session
	id  string // its id in its session (TerminalID); never changes
	pty PTY
	// child is its place in its owner's count (usage.go); by is the admin
	// whose reap ended it (endBy). Both are guarded by r.mu.
	child *child
	by    string

	mu        sync.Mutex
	ring      *Ring
	notify    chan struct{} // closed and replaced on every change
	atts      []*Attachment // in attach order
	sizeBy    *Attachment   // whose size the pty has: the one typed into last
	cols      uint16        // the pty's size as last set
	rows      uint16
	first     bool // started, its first attachment not yet set: output waits for it
	token     string
	parkTimer *time.Timer
	eof       bool // the reader saw the end of the pty
	ended     bool // end started
	exited    bool // the program ended by itself
	shutdown  bool // ended because dashgate is shutting down
	exitCode  int
	// writing is the attachment the reader is writing to itself (see
	// directLocked), nil while it is not; writes counts those writes, so
	// that unblockLocked tells one write from the next.
	writing *Attachment
	writes  uint64

	ready      chan struct{} // closed once pty is set
	readerDone chan struct{}
	endOnce    sync.Once
	endDone    chan struct{}
	// OnOutput, when set, counts output bytes (metrics).
	onOutput func(int)
	rec      Recording // its recording, or nil (recording.go); guarded by mu
}

// PID is the program's pid.
func (t *Terminal) PID() int { return t.pty.PID() }

func (t *Terminal) signalLocked() {
	close(t.notify)
	t.notify = make(chan struct{})
}

// parked reports whether the terminal waits for a reattach. It takes t.mu,
// so callers may hold the registry's mutex (lock order) but not t.mu.
func (t *Terminal) parked() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.atts) == 0 && !t.ended
}

// read copies the pty into the ring. While a client is attached it stops
// reading once PTYPending bytes wait unsent, so a slow client blocks the
// program rather than growing the heap (docs/failure-classes.md #18).
func (t *Terminal) read() {
	defer close(t.readerDone)
	bp := frameBufs.Get().(*[]byte)
	defer frameBufs.Put(bp)
	buf := *bp
	pending := int64(t.r.cfg.PTYPending)
	for {
		t.mu.Lock()
		for !t.ended && t.unsentLocked() >= pending {
			ch := t.notify
			t.mu.Unlock()
			<-ch
			t.mu.Lock()
		}
		t.mu.Unlock()
		n, err := t.pty.Read(buf)
		t.mu.Lock()
		var direct *Attachment
		rec := t.rec
		if n > 0 {
			t.ring.Write(buf[:n])
			direct = t.directLocked(n)
		}
		if err != nil {
			t.eof = true
		}
		if direct == nil || err != nil {
			t.signalLocked()
		}
		t.mu.Unlock()
		if direct != nil {
			// Sent before the next read, so after every byte before it
			// and before any after it (which take the ring to Next).
			direct.direct(buf[:n])
			t.mu.Lock()
			t.writing = nil
			t.mu.Unlock()
		}
		if n > 0 && rec != nil {
			rec.Output(buf[:n]) // copies, never waits for the disk
		}
		if n > 0 && t.onOutput != nil {
			t.onOutput(n)
		}
		if err != nil {
			return
		}
	}
}

// directLocked decides whether the n bytes the reader just put in the ring
// go out from the reader itself: when the terminal has one attachment,
// and it set a direct writer, waits in Next with everything before them
// handed out, and has had its first output (with several, each one's
// pump writes, as before). It then hands them out (advances pos), marks
// the write in progress (writing) and returns it; the reader calls its
// direct writer without t.mu, and does not wake Next.
//
// An echo so takes one goroutine wake-up less, and bulk output (a pty
// read coalesces up to MaxFrame) none a frame: reader and pump on two
// goroutines cost a wake-up of the pump's each frame, 30 % more of
// dashgate's CPU a MiB and 15 % less throughput than the reader writing
// alone (BENCHMARKS.md, issue 43). The reader then waits in the socket's
// write while the client is slow, which holds the program as PTYPending
// does; a takeover or the terminal's end does not wait behind such a
// write for long (unblockLocked).
func (t *Terminal) directLocked(n int) *Attachment {
	if len(t.atts) != 1 {
		return nil
	}
	a := t.atts[0]
	if !a.waiting || a.onFirst != nil || a.pos != t.ring.End()-int64(n) {
		return nil
	}
	a.pos += int64(n)
	t.writing = a
	t.writes++
	return a
}

// DirectGrace is how long a takeover of a terminal, or its end, lets the
// reader's write to a socket in progress go on before it ends that
// socket at once (Attachment.SetDirect's stop): a client that does not
// read for that long is gone or asleep, and the terminal's new socket, or
// its end, would otherwise wait for the socket's write timeout or its
// close handshake (5 s). A write to a reading client takes well under a
// millisecond on a LAN; a frame (32 KiB at most) waits a second only for
// a client reading less than 32 KiB a second. A socket so ended gets no
// close frame (its tab reconnects, as after a network error), where a
// takeover's otherwise says 4409.
const DirectGrace = time.Second

// unblockLocked ends a's socket with cause (its stop) when the reader's
// direct write to a, in progress now, is still the one in progress after
// DirectGrace. t.mu must be held.
func (t *Terminal) unblockLocked(a *Attachment, cause error) {
	if a == nil || t.writing != a || a.stop == nil {
		return
	}
	at := t.writes
	time.AfterFunc(DirectGrace, func() {
		t.mu.Lock()
		stuck := t.writing == a && t.writes == at
		t.mu.Unlock()
		if stuck {
			a.stop(cause)
		}
	})
}

// unsentLocked is how many output bytes wait for the slowest attachment,
// or for the first one while it is being set up; a parked terminal has
// none. The slowest sets the pace: a stuck tab blocks the program until
// its socket's write timeout detaches it.
func (t *Terminal) unsentLocked() int64 {
	if t.first {
		return t.ring.End() - t.ring.Start()
	}
	var most int64
	for _, a := range t.atts {
		most = max(most, t.ring.End()-a.pos)
	}
	return most
}

// end closes the terminal once: its program's whole tree with escalation,
// the reader, the pty. natural means the program exited by itself. It then
// unhooks the terminal from its session, which ends a terminal-only session
// left without one (end reason per terminalEndReason). Later calls wait
// for the first.
func (t *Terminal) end(reason workers.Reason, natural bool) {
	t.endOnce.Do(func() {
		t.mu.Lock()
		t.ended = true
		if t.parkTimer != nil {
			t.parkTimer.Stop()
		}
		t.signalLocked()
		t.unblockLocked(t.writing, ErrTerminalClosed) // the reader must get back to its read, which ends
		t.mu.Unlock()

		res := t.pty.Close(reason)
		select { // the reader ends with EIO once the tree is gone (pty(7))
		case <-t.readerDone:
		case <-time.After(time.Second):
			t.pty.Release()
			<-t.readerDone
		}
		t.pty.Release()
		t.closeRecording()

		t.mu.Lock()
		t.exited = natural || res.Reason == workers.ReasonExited
		t.shutdown = reason == workers.ReasonShutdown
		t.exitCode = res.ExitCode
		if res.Signal != "" {
			t.exitCode = 128 + int(unix.SignalNum(res.Signal))
		}
		endReason := terminalEndReason(res.Reason)
		if t.exited {
			endReason = EndPTYExit
		}
		t.signalLocked() // the attachment sees the end through Next
		t.mu.Unlock()

		r, s := t.r, t.s
		r.mu.Lock()
		var after func()
		if s.terms.remove(t) {
			s.endedPTYPID = t.PID() // its session's close record names it
			if s.terminalOnly && s.live() && len(s.terms.list) == 0 {
				if r.claimLocked(s, endReason) {
					s.endBy = t.by
					after = func() { r.finish(s) }
				}
			}
		}
		r.mu.Unlock()
		if after != nil {
			after()
		}
		close(t.endDone)
	})
	<-t.endDone
}

// endBy is end(reason, false) caused by the admin by ("" for none, see
// byOf): the program's "worker closed" record and the close record of a
// terminal-only session it ends name them.
func (t *Terminal) endBy(reason workers.Reason, by string) {
	if by != "" {
		t.r.mu.Lock()
		t.by = by
		t.r.mu.Unlock()
		if n, ok := t.pty.(interface{ AddCloseAttr(string, any) }); ok {
			n.AddCloseAttr("by", by)
		}
	}
	t.end(reason, false)
}

// Attachment is one socket attached to a terminal. It is also a Viewer of
// the session (it receives no chat events).
type Attachment struct {
	t   *Terminal
	pos int64 // next output offset to hand out; guarded by t.mu
	// Guarded by t.mu: the size this socket asked for, whether it asked
	// for keepalive, and the attachment count its socket was last told
	// (Next; -1 for a socket that takes over and is never told).
	cols, rows uint16
	keepalive  bool
	toldPeers  int
	// onFirst, guarded by t.mu, runs once when Next first hands out
	// output, or at Detach if it never did (the spare's refill).
	onFirst func()
	// direct and stop, set once by SetDirect, write output to the socket
	// and end it at once; waiting, guarded by t.mu, is true while Next
	// waits with nothing to hand out (the reader then calls direct itself,
	// see directLocked).
	direct  func([]byte)
	stop    func(cause error)
	waiting bool
	kicked  chan struct{}
	gone    chan struct{} // closed by Detach

	// Hello fields (PROTOCOL.md §3).
	SessionID   string
	Terminal    string // the terminal's id in its session (TerminalID)
	Offset      int64  // offset of the first byte Next hands out
	ReplayEnd   int64  // output offset at the attach: bytes before it are a replay
	ResumeToken string // set when keepalive was asked for
	Reset       bool   // the client must clear its screen before the replay
	Started     bool   // this attach started the terminal's program: none ran for the session
	Recorded    bool   // the terminal is recorded (Config.Record)
	detachOnce  sync.Once
	page        string
	principal   Principal // who attached: the owner of its session
}

// Deliver implements Viewer: a terminal socket carries no chat events.
func (a *Attachment) Deliver(*Event) {}

// Done implements Viewer: it is closed by Detach.
func (a *Attachment) Done() <-chan struct{} { return a.gone }

// Principal implements Viewer: who attached.
func (a *Attachment) Principal() Principal { return a.principal }

// Kicked is closed when another attach took the terminal over.
func (a *Attachment) Kicked() <-chan struct{} { return a.kicked }

// Attached is how many sockets are attached to a's terminal, a included.
func (a *Attachment) Attached() int {
	a.t.mu.Lock()
	defer a.t.mu.Unlock()
	return len(a.t.atts)
}

// AttachTerminal attaches a socket to terminal o.Terminal of sid, starting
// its program when the session runs no terminal of that id (up to
// MaxTerminalsPerSession: then ErrTerminalsFull). sid "" makes a terminal-only session
// of p's that closes with its terminal. A terminal already attached
// elsewhere is taken over (the other attachment's Kicked closes). The
// returned attachment, a Viewer carrying p, must be Detached when the
// socket ends. With o.Share it joins the other attachments instead. Errors: ErrTerminalID, ErrNotFound (also for another user's session),
// ErrCapacity (a *UserCapacityError when a new terminal-only session or a
// new program would pass the owner's MaxSessionsPerUser or
// MaxTerminalsPerUser), workers.ErrCapacity, an *accounts.RefusedError
// (Config.Accounts refused the owner: nothing was spawned, and a new
// terminal-only session was closed again) and spawn errors.
func (r *Registry) AttachTerminal(ctx context.Context, p Principal, sid string, o TerminalOptions) (*Attachment, error) {
	defer trace.StartRegion(ctx, "attach terminal").End() // go test -trace: BenchmarkTerminalConnect
	var err error
	if o.Terminal, err = TerminalID(o.Terminal); err != nil {
		return nil, err
	}
	terminalOnly := sid == ""
	if terminalOnly && o.Terminal != DefaultTerminal {
		return nil, ErrTerminalID // a session made here has its first terminal alone
	}
	if terminalOnly {
		// Refused before a spare is taken or a session made for it.
		if _, ok := p.owner(); !ok { // the admin token's principal owns nothing
			return nil, ErrNotFound
		}
		r.mu.Lock()
		err = r.usage.room(p.User, kindTerminal)
		r.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	if terminalOnly && r.cfg.PTYSpare {
		a, err := r.attachTerminalOnly(ctx, p, o)
		if a != nil {
			cols, rows := o.size()
			a.setOnFirst(func() { r.spares.refill(cols, rows) })
		}
		return a, err
	}
	if terminalOnly {
		in, err := r.create(p, nil, NewSession{Title: "terminal"}, true)
		if err != nil {
			return nil, err
		}
		sid = in.ID
	}
	a, err := r.attachTerminal(ctx, p, sid, o)
	if err != nil && terminalOnly {
		r.Close(p, sid, EndCloseOnDisconnect)
	}
	if !terminalOnly {
		r.noteTerminalStart(sid, err)
	}
	return a, err
}

// noteTerminalStart keeps why a terminal of session sid was refused at a
// cap (Session.startRefused), logging it at WARN once until one of its
// terminals attaches (err nil), which forgets it; other errors change
// nothing. A page whose upgrade got 503 retries, and asks
// TerminalRefusal why meanwhile.
func (r *Registry) noteTerminalStart(sid string, err error) {
	capped := errors.Is(err, ErrCapacity) || errors.Is(err, workers.ErrCapacity)
	if err != nil && !capped {
		return
	}
	r.mu.Lock()
	s := r.sessions[sid]
	if s == nil {
		r.mu.Unlock()
		return
	}
	first := capped && s.startRefused == nil
	if capped {
		s.startRefused = err
	} else {
		s.startRefused = nil
	}
	owner := s.owner
	r.mu.Unlock()
	if first {
		r.log.Warn("terminal refused", "sid", sid, "user", owner, "err", err)
	}
}

// attachTerminalOnly is AttachTerminal without a session when spares are
// on: the spare when it fits, else a terminal started now.
func (r *Registry) attachTerminalOnly(ctx context.Context, p Principal, o TerminalOptions) (*Attachment, error) {
	if sp := r.spares.take(o); sp != nil {
		if a, ok, err := r.attachSpare(ctx, p, sp, o); ok || ctx.Err() != nil {
			return a, errors.Join(err, ctx.Err())
		}
	}
	in, err := r.create(p, nil, NewSession{Title: "terminal"}, true)
	if err != nil {
		return nil, err
	}
	a, err := r.attachTerminal(ctx, p, in.ID, o)
	if err != nil {
		r.Close(p, in.ID, EndCloseOnDisconnect)
	}
	return a, err
}

// attachTerminal is AttachTerminal on a session, o.Terminal canonical
// (TerminalID).
func (r *Registry) attachTerminal(ctx context.Context, p Principal, sid string, o TerminalOptions) (*Attachment, error) {
	r.mu.Lock()
	s := r.findEndingLocked(p, sid, accessUse) // live or not, told below under spawnMu
	r.mu.Unlock()
	if s == nil {
		return nil, ErrNotFound
	}
	if err := s.spawnMu.Acquire(ctx, 1); err != nil {
		return nil, err
	}
	defer s.spawnMu.Release(1)

	r.mu.Lock()
	if !s.live() {
		r.mu.Unlock()
		return nil, ErrNotFound
	}
	t := s.terms.get(o.Terminal)
	if t == nil && s.terms.full() {
		r.mu.Unlock()
		return nil, ErrTerminalsFull
	}
	r.mu.Unlock()
	fresh := false
	if t == nil {
		if err := r.lease.mayWork(s); err != nil { // ErrLeaseUnproven (lease.go)
			return nil, err
		}
		var err error
		if t, err = r.startTerminal(s, o, false); err != nil {
			return nil, err
		}
		fresh = true
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if !s.live() || (s.terms.get(o.Terminal) != t && !fresh) {
		if fresh {
			r.goTracked(func() { t.end(workers.ReasonSessionClosed, false) })
		}
		return nil, ErrNotFound
	}
	if fresh {
		s.terms.add(t) // spawns of s are serialised (spawnMu): none added one of this id meanwhile
	}
	cols, rows := o.size()
	a := &Attachment{t: t, kicked: make(chan struct{}), gone: make(chan struct{}), SessionID: s.id, Terminal: t.id, page: o.Page, principal: p,
		cols: cols, rows: rows, keepalive: o.Keepalive, toldPeers: -1, Started: fresh}
	if o.Share {
		a.toldPeers = 0 // told at its first Next
	}
	t.mu.Lock()
	if t.ended {
		t.mu.Unlock()
		// Its program ended before it was in the set (an exit at once):
		// its end found nothing to unhook there, so this does.
		if s.terms.remove(t) {
			s.endedPTYPID = t.PID()
		}
		return nil, ErrNotFound
	}
	if !o.Share {
		for _, old := range t.atts {
			close(old.kicked)
			t.unblockLocked(old, ErrTakenOver) // the reader must get back to the new socket
		}
		t.atts = nil
	}
	if t.parkTimer != nil {
		t.parkTimer.Stop()
		t.parkTimer = nil
	}
	want := int64(0)
	tokenOK := o.ResumeToken != "" && o.ResumeToken == t.token
	if tokenOK {
		want = o.Offset
	}
	if start, end := t.ring.Start(), t.ring.End(); want < start || want > end {
		a.pos, a.Reset = start, true
	} else {
		a.pos, a.Reset = want, !tokenOK && o.Offset > 0
	}
	a.Offset, a.ReplayEnd = a.pos, t.ring.End()
	a.Recorded = t.recordedLocked()
	if o.Keepalive {
		a.ResumeToken = t.token
	}
	t.atts, t.first = append(t.atts, a), false
	if len(t.atts) == 1 {
		t.sizeBy = a // alone, its resizes apply at once
	}
	t.signalLocked()
	t.mu.Unlock()
	r.viewLocked(s, a) // cannot fail: a is new and not gone
	return a, nil
}

// startTerminal starts s's terminal o.Terminal ("" DefaultTerminal: a
// spare's); isSpare says it is the spare
// (which never ends itself to make room, and counts for no user until
// register gives it to a session). Any other takes a slot of the owner's
// MaxTerminalsPerUser first (a *UserCapacityError when there is none),
// given back when the spawn fails or, through its OnClose, when the
// program closes. At the global child cap it ends a spare, else reclaims
// an idle chat worker of the user most over their fair share
// (reclaimWorker; never another user's terminal), and tries again. With
// Config.Accounts the program runs as its owner's account; a refusal is
// returned as is (see accountOf) and nothing is spawned.
func (r *Registry) startTerminal(s *Session, o TerminalOptions, isSpare bool) (*Terminal, error) {
	defer trace.StartRegion(context.Background(), "spawn pty").End()
	c := &child{kind: kindTerminal}
	if !isSpare {
		r.mu.Lock()
		var err error
		c, err = r.usage.reserve(s.owner, kindTerminal)
		r.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	release := func() {
		r.mu.Lock()
		r.usage.release(c)
		r.mu.Unlock()
	}
	t := &Terminal{
		child: c,
		r:     r, s: s, id: cmp.Or(o.Terminal, DefaultTerminal),
		ring:       NewRing(r.cfg.PTYBuffer),
		first:      true,
		notify:     make(chan struct{}),
		token:      newID(),
		ready:      make(chan struct{}),
		readerDone: make(chan struct{}),
		endDone:    make(chan struct{}),
		onOutput:   r.cfg.OnPTYOutput,
	}
	t.cols, t.rows = o.size()
	req := SpawnRequest{SessionID: s.id, Cols: o.Cols, Rows: o.Rows, Owner: s.owner,
		OnClose: func(res workers.CloseResult) {
			release()
			if res.Reason == workers.ReasonExited {
				// the program ended by itself: end the terminal, off the
				// closing goroutine
				r.goTracked(func() { <-t.ready; t.end(res.Reason, true) })
			}
		}}
	acct, err := r.accountOf(s)
	var pty PTY
	if err == nil {
		req.Account = acct
		pty, err = r.cfg.Spawner.SpawnPTY(req)
	}
	for errors.Is(err, workers.ErrCapacity) && !isSpare && (r.spares.drop() || r.reclaimWorker(s.owner)) {
		pty, err = r.cfg.Spawner.SpawnPTY(req) // a spare, or an idle worker of a user over their share, held the last slot
	}
	if err != nil {
		release() // no OnClose comes for a child that never started
		return nil, err
	}
	r.mu.Lock()
	c.pid = pty.PID()
	r.mu.Unlock()
	t.pty = pty
	close(t.ready)
	if !isSpare {
		t.startRecording(s.owner) // a spare's starts when a session takes it (attachSpare)
	}
	r.goTracked(t.read)
	return t, nil
}

// Next waits for output after the attachment's position, copies at most
// len(buf) bytes of it into buf and advances. For an attachment made with
// TerminalOptions.Share it returns 0 and a nil error, before any output,
// whenever the number of attachments changed since it last did (Attached
// tells the new one). It returns *ExitError once the program exited and its
// output was all handed out, ErrTakenOver after a takeover,
// ErrTerminalClosed when the terminal was ended otherwise, or ctx's error.
func (a *Attachment) Next(ctx context.Context, buf []byte) (int, error) {
	t := a.t
	t.mu.Lock()
	for {
		select {
		case <-a.kicked:
			t.mu.Unlock()
			return 0, ErrTakenOver
		default:
		}
		if a.toldPeers >= 0 && a.toldPeers != len(t.atts) && !t.ended {
			a.toldPeers = len(t.atts)
			t.mu.Unlock()
			return 0, nil
		}
		if n := t.ring.ReadAt(buf, a.pos); n > 0 {
			a.pos += int64(n)
			t.signalLocked() // the reader may wait for room
			first := a.onFirst
			a.onFirst = nil
			t.mu.Unlock()
			if first != nil {
				first()
			}
			return n, nil
		}
		if a.pos < t.ring.Start() { // rolled out while we were away
			a.pos = t.ring.Start()
			continue
		}
		if t.ended && t.eof {
			exited, code := t.exited, t.exitCode
			done := t.endDoneClosed()
			if done {
				t.mu.Unlock()
				if exited {
					return 0, &ExitError{Code: code}
				}
				if t.shutdown {
					return 0, ErrTerminalShutdown
				}
				return 0, ErrTerminalClosed
			}
		}
		ch := t.notify
		a.waiting = a.direct != nil
		t.mu.Unlock()
		select {
		case <-ch:
		case <-a.kicked:
		case <-t.endDone:
		case <-ctx.Done():
			t.mu.Lock()
			a.waiting = false
			t.mu.Unlock()
			return 0, ctx.Err()
		}
		t.mu.Lock()
		a.waiting = false
	}
}

// SetDirect lets the terminal's reader write output to the socket itself
// while Next waits with everything before it handed out (up to MaxFrame
// bytes a call; see Terminal.directLocked). write is called from the
// reader's goroutine, one call at a time, in output order, and never while
// a Next of a is handing out output; the bytes it gets count as handed out
// (pos, offsets, the reader's room), as if Next had returned them. It must
// bound its own wait (a write timeout) and need no lock of the terminal:
// while it blocks, the program's output is not read. stop must end the
// socket at once, so that a write of it in progress returns: it is called
// (from a timer's goroutine, with ErrTakenOver or ErrTerminalClosed) when
// a write has blocked for DirectGrace past a takeover or the terminal's
// end. Call it once, before the first Next.
func (a *Attachment) SetDirect(write func([]byte), stop func(cause error)) {
	a.t.mu.Lock()
	a.direct, a.stop = write, stop
	a.t.mu.Unlock()
}

func (t *Terminal) endDoneClosed() bool {
	select {
	case <-t.endDone:
		return true
	default:
		return false
	}
}

// setOnFirst sets the attachment's onFirst.
func (a *Attachment) setOnFirst(f func()) {
	a.t.mu.Lock()
	a.onFirst = f
	a.t.mu.Unlock()
}

// Write sends input to the program, waiting at most until ctx ends. When
// another attachment typed last, the terminal first takes a's size (the
// size follows the socket typed into last).
func (a *Attachment) Write(ctx context.Context, p []byte) error {
	t := a.t
	t.mu.Lock()
	var err error
	if t.sizeBy != a {
		err = t.resizeLocked(a)
	}
	t.mu.Unlock()
	if err != nil {
		return err
	}
	return t.pty.Write(ctx, p)
}

// WriteWithin is Write waiting at most d (and until ctx ends). p goes in
// whole: another attachment's write comes before or after it. What the
// pty takes at once is written without a timer: a keystroke arms none.
func (a *Attachment) WriteWithin(ctx context.Context, p []byte, d time.Duration) error {
	t := a.t
	w, ok := t.pty.(interface {
		WriteWithin(context.Context, []byte, time.Duration) error
	})
	if !ok {
		wctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return a.Write(wctx, p)
	}
	t.mu.Lock()
	var err error
	if t.sizeBy != a {
		err = t.resizeLocked(a)
	}
	t.mu.Unlock()
	if err != nil {
		return err
	}
	return w.WriteWithin(ctx, p, d)
}

// Resize records the size a's socket asked for (cols x rows cells) and
// applies it when a is the attachment typed into last (or the only one).
func (a *Attachment) Resize(cols, rows uint16) error {
	t := a.t
	t.mu.Lock()
	defer t.mu.Unlock()
	a.cols, a.rows = cols, rows
	if t.sizeBy != a {
		return nil
	}
	return t.resizeLocked(a)
}

// resizeLocked gives the pty a's size, unless it has it already, and makes
// a the attachment whose size it follows.
func (t *Terminal) resizeLocked(a *Attachment) error {
	t.sizeBy = a
	if t.cols == a.cols && t.rows == a.rows {
		return nil
	}
	if err := t.pty.Resize(a.cols, a.rows); err != nil {
		return err
	}
	t.cols, t.rows = a.cols, a.rows
	if t.rec != nil {
		t.rec.Resize(a.cols, a.rows)
	}
	return nil
}

// PID is the program's pid.
func (a *Attachment) PID() int { return a.t.PID() }

// Detach is called once the socket ended, with why (detach, write_timeout,
// ping_timeout, superseded). A terminal attached with keepalive is parked
// for PTYKeepalive; otherwise it is ended with that reason. The socket stops
// viewing the session. Safe to call twice.
func (a *Attachment) Detach(reason workers.Reason) {
	a.detachOnce.Do(func() {
		close(a.gone)
		t, r := a.t, a.t.r
		t.mu.Lock()
		first := a.onFirst
		a.onFirst = nil
		current := slices.Contains(t.atts, a)
		park := false
		if current {
			t.atts = slices.DeleteFunc(t.atts, func(b *Attachment) bool { return b == a })
			if t.sizeBy == a {
				t.sizeBy = nil
				if n := len(t.atts); n > 0 {
					_ = t.resizeLocked(t.atts[n-1]) // the latest to attach; a failure shows at its next resize
				}
			}
			t.signalLocked() // the others are told the new count
		}
		last := current && len(t.atts) == 0
		if last {
			park = a.keepalive && !t.ended && r.cfg.PTYKeepalive > 0 && reason != workers.ReasonShutdown
			if park {
				t.parkTimer = time.AfterFunc(r.cfg.PTYKeepalive, func() {
					r.goTracked(func() { t.end(workers.ReasonKeepaliveExpired, false) })
				})
			}
			t.signalLocked()
		}
		t.mu.Unlock()
		if park {
			// The program keeps running for a reattach: say so, since the
			// socket is gone (the tab closed or reloaded).
			r.log.Info("terminal parked", "sid", t.s.id, "user", a.principal.User, "pty_pid", t.PID(),
				"keepalive_ms", r.cfg.PTYKeepalive.Milliseconds(), "reason", string(reason))
		}
		if last && !park {
			r.goTracked(func() { t.end(reason, false) })
		}
		r.DetachViewer(a, reason)
		if first != nil {
			first()
		}
	})
}
