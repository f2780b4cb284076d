package handlers

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/dashgate/dashgate/sessions"
)

// socket is the lifecycle of one WebSocket: why it ended (the first cause
// wins) and how it is closed. coder/websocket closes the connection,
// without a close frame, when the context of a Read, Write or Ping ends
// while it runs, so those use connCtx, which never ends: a stuck write or
// an unanswered ping is ended by its own timer (abort), the socket's end
// by CloseNow, and a close with a code goes through conn.Close from
// another goroutine (the read loop sees the handshake end). Had they used
// ctx, the server's shutdown would race its own 1001 close frame.
type socket struct {
	conn    *websocket.Conn
	ctx     context.Context // ends with the socket or the server: loops stop on it
	cancel  context.CancelCauseFunc
	connCtx context.Context // never ends (see above)

	stop func() bool // stops the parent's AfterFunc (newSocket)

	// mu guards first, and orders a close's count on closing with end's
	// wait: the call that records the first cause is the only one that
	// may start a close in the background (closeWith), and it counts that
	// close (closing.Add) before it lets go of mu. end records its own
	// cause, under mu, before it waits (closing.Wait), so a close started
	// before it is counted when it waits, and one asked for after it finds
	// the cause taken and starts nothing. An Add from zero beside a Wait
	// is a misuse of sync.WaitGroup (the race detector's data race, and an
	// end that returned with the close still running).
	mu      sync.Mutex
	first   error          // why the socket ended: the first cause recorded
	closing sync.WaitGroup // closeWith's close in progress; Add under mu only
}

func newSocket(parent context.Context, conn *websocket.Conn) *socket {
	ctx, cancel := context.WithCancelCause(parent)
	s := &socket{conn: conn, ctx: ctx, cancel: cancel, connCtx: context.WithoutCancel(parent)}
	// The parent ends for one of two reasons: the server shutting down (its
	// base context) closes the socket with 1001; the socket's user revoked
	// (package web's Revoke cancels the request with
	// sessions.ErrViewerRevoked) closes it with CloseRevoked.
	s.stop = context.AfterFunc(parent, func() {
		cause := context.Cause(parent)
		if errors.Is(cause, sessions.ErrViewerRevoked) {
			s.closeWith(cause, CloseRevoked, CloseRevokedReason)
			return
		}
		s.closeWith(cause, websocket.StatusGoingAway, "server shutting down")
	})
	return s
}

// CloseRevoked is the close code of a WebSocket whose user lost access
// (removed from, or changed in, --users-file) while it was open, with
// CloseRevokedReason as its reason. Its sessions detach as when the
// browser goes (sessions.ViewerEndReason).
const (
	CloseRevoked       websocket.StatusCode = 4403
	CloseRevokedReason                      = "access revoked: user removed"
)

// record makes cause the socket's when none was recorded before, and
// reports whether it did.
func (s *socket) record(cause error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recordLocked(cause)
}

// recordLocked is record with s.mu held.
func (s *socket) recordLocked(cause error) bool {
	if s.first != nil {
		return false
	}
	s.first = cause
	return true
}

// closeWith ends the socket with a close frame (code, reason), once: the
// handshake runs in the background, and end waits for it.
func (s *socket) closeWith(cause error, code websocket.StatusCode, reason string) {
	s.mu.Lock()
	first := s.recordLocked(cause)
	if first {
		s.closing.Add(1) // under mu, with the cause: see socket
	}
	s.mu.Unlock()
	if !first {
		return
	}
	go func() {
		defer s.closing.Done()
		s.conn.Close(code, reason)
		s.cancel(cause)
	}()
}

// abort ends the socket at once, without a handshake (the peer is not
// answering: ping or write timeout).
func (s *socket) abort(cause error) {
	if s.record(cause) {
		s.cancel(cause)
		s.conn.CloseNow()
	}
}

// end is called when the read loop returned err; it closes whatever is left
// and waits for a close in progress. Its record comes before its wait
// (see socket).
func (s *socket) end(err error) {
	s.record(err)
	s.cancel(err)
	s.stop()
	s.conn.CloseNow()
	s.closing.Wait()
}

func (s *socket) cause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first
}

// The causes a socket records when its peer stops reading or answering;
// sessions.ViewerEndReason maps them to write_timeout and ping_timeout.
var (
	errWriteTimeout = sessions.ErrViewerWriteTimeout
	errPingTimeout  = sessions.ErrViewerPingTimeout
)

// frameWriter writes a socket's frames from any of its goroutines (a
// terminal's: the pty's reader, its pump, its input loop's error
// replies), one at a time, each within timeout (10 s when not set): one
// timer for them all, armed again for each. A time.AfterFunc a frame was
// three allocations a keystroke's echo (issue 43).
type frameWriter struct {
	mu      sync.Mutex
	wt      writeTimer
	timeout time.Duration
}

func newFrameWriter(s *socket, timeout time.Duration) *frameWriter {
	return &frameWriter{wt: writeTimer{s: s}, timeout: timeout}
}

// write writes one frame; past the timeout the socket is aborted with
// errWriteTimeout, which it returns. The timer records the cause before
// the connection closes, so the read loop's error never masks it. A
// write waits for another goroutine's to end.
func (w *frameWriter) write(typ websocket.MessageType, b []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.wt.s
	return w.wt.timed(w.timeout, func() error { return s.conn.Write(s.connCtx, typ, b) })
}

// writeTimer bounds the writes of one writer at a time (a goroutine, or
// frameWriter's holder of its lock): one timer, made at its first write
// and armed again for each (a timer and its func a write were two
// allocations a frame, a delta's on a chat socket; issue 43).
type writeTimer struct {
	s *socket
	t *time.Timer
}

// timed runs write within timeout (10 s when not set); past it the
// socket is aborted with errWriteTimeout, which it returns.
func (w *writeTimer) timed(timeout time.Duration, write func() error) error {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	if w.t == nil {
		w.t = time.AfterFunc(timeout, func() { w.s.abort(errWriteTimeout) })
	} else {
		w.t.Reset(timeout)
	}
	err := write()
	if !w.t.Stop() {
		return errWriteTimeout
	}
	return err
}

// pingLoop pings every interval, whether or not earlier pings were
// answered: each ping is traffic, so a proxy's read timeout shorter than
// the ping timeout never cuts a socket dashgate would keep (a client not
// reading for a while answers late, but answers). The socket is aborted
// (reason ping_timeout) when its oldest unanswered ping is older than the
// timeout: each ping has its own timer. It runs whatever the bind address
// (docs/failure-classes.md #15) and returns once its pings have.
func pingLoop(s *socket, cfg SocketConfig) {
	if cfg.PingInterval <= 0 {
		return
	}
	timeout := cfg.PingTimeout
	if timeout <= 0 {
		timeout = cfg.PingInterval
	}
	var pings sync.WaitGroup
	defer pings.Wait()
	t := time.NewTicker(cfg.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		// At most timeout/interval pings wait at once: past the timeout
		// the socket ends, and with it every Ping.
		pings.Go(func() {
			pt := time.AfterFunc(timeout, func() { s.abort(errPingTimeout) })
			err := s.conn.Ping(s.connCtx)
			if pt.Stop() && err != nil {
				s.abort(err)
			}
		})
	}
}
