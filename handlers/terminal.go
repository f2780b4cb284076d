package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/workers"
)

// Terminal bounds (PROTOCOL.md §3).
const (
	MaxCols       = 2000
	MaxRows       = 1000
	MaxInputFrame = 64 << 10 // bytes of one client frame
)

// TerminalRegistry is what the terminal endpoint needs of the registry.
type TerminalRegistry interface {
	// AttachTerminal acts for p; another user's session answers as a
	// missing one (sessions.ErrNotFound).
	AttachTerminal(ctx context.Context, p sessions.Principal, sid string, o sessions.TerminalOptions) (*sessions.Attachment, error)
}

// Terminal serves GET /ws/pty (PROTOCOL.md §3). Before the upgrade it
// answers as httpError does: among others 403 with the reason when the
// session owner's Unix account was refused (--unix-users; nothing was
// spawned).
type Terminal struct {
	Registry   TerminalRegistry
	Log        *slog.Logger
	Socket     SocketConfig
	OnConn     func(delta int)
	OnInput    func(n int) // bytes written to ptys (metrics)
	InputWrite time.Duration
	connSeq    atomic.Uint64
}

// ControlMessage is a client text frame on /ws/pty.
type ControlMessage struct {
	Type string `json:"type"`
	Cols int    `json:"cols"`
	Rows int    `json:"rows"`
}

// DecodeControl parses and validates a control frame. Only resize exists.
func DecodeControl(frame []byte) (ControlMessage, error) {
	var m ControlMessage
	if err := json.Unmarshal(frame, &m); err != nil {
		return m, fmt.Errorf("control frame is not a JSON object: %w", err)
	}
	if m.Type != "resize" {
		return m, fmt.Errorf("unknown control message type %q", m.Type)
	}
	if m.Cols < 1 || m.Cols > MaxCols || m.Rows < 1 || m.Rows > MaxRows {
		return m, fmt.Errorf("resize out of bounds: cols 1..%d, rows 1..%d", MaxCols, MaxRows)
	}
	return m, nil
}

func parseSize(q string, def, limit int) (uint16, error) {
	if q == "" {
		return uint16(def), nil
	}
	n, err := strconv.Atoi(q)
	if err != nil || n < 1 || n > limit {
		return 0, fmt.Errorf("must be 1..%d", limit)
	}
	return uint16(n), nil
}

// terminalOptions parses the query of /ws/pty; its errors are
// errBadRequest.
func terminalOptions(q url.Values) (sessions.TerminalOptions, error) {
	cols, err := parseSize(q.Get("cols"), 80, MaxCols)
	if err != nil {
		return sessions.TerminalOptions{}, errBadRequest{"cols " + err.Error()}
	}
	rows, err := parseSize(q.Get("rows"), 24, MaxRows)
	if err != nil {
		return sessions.TerminalOptions{}, errBadRequest{"rows " + err.Error()}
	}
	var offset int64
	if s := q.Get("offset"); s != "" {
		if offset, err = strconv.ParseInt(s, 10, 64); err != nil || offset < 0 {
			return sessions.TerminalOptions{}, errBadRequest{"offset must be a byte count"}
		}
	}
	term, err := sessions.TerminalID(q.Get("terminal"))
	if err != nil {
		return sessions.TerminalOptions{}, errBadRequest{"terminal: " + err.Error()}
	}
	if term != sessions.DefaultTerminal && q.Get("session_id") == "" {
		return sessions.TerminalOptions{}, errBadRequest{"terminal needs session_id: a session made by this request has its first terminal alone"}
	}
	return sessions.TerminalOptions{
		Cols: cols, Rows: rows, Keepalive: q.Get("keepalive") == "1",
		ResumeToken: q.Get("resume_token"), Offset: offset, Page: q.Get("page"),
		Share: q.Get("share") == "1", Terminal: term,
	}, nil
}

func (h *Terminal) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	opts, err := terminalOptions(q)
	if err != nil {
		httpError(w, r, h.logger(), err)
		return
	}
	att, err := h.Registry.AttachTerminal(r.Context(), PrincipalFrom(r.Context()), q.Get("session_id"), opts)
	if err != nil {
		httpError(w, r, h.logger(), err) // before the upgrade: a status says why
		return
	}
	wf := &wholeFrames{ResponseWriter: w}
	conn, err := websocket.Accept(wf, r, &websocket.AcceptOptions{InsecureSkipVerify: true}) // origin checked by web
	if err != nil {
		att.Detach(workers.ReasonDetach)
		return
	}
	conn.SetReadLimit(MaxInputFrame)
	log := h.logger().With("conn_id", h.connSeq.Add(1), "endpoint", "pty", "sid", att.SessionID, "remote_addr", r.RemoteAddr)
	if h.OnConn != nil {
		h.OnConn(1)
		defer h.OnConn(-1)
	}

	sock := newSocket(r.Context(), conn)
	fw := newFrameWriter(sock, h.Socket.WriteTimeout)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); h.pump(sock, fw, wf, att) }()
	go func() { defer wg.Done(); pingLoop(sock, h.Socket) }()
	sock.end(h.readInput(sock, fw, att))
	wg.Wait()

	cause := sock.cause()
	reason := sessions.ViewerEndReason(cause)
	att.Detach(reason)
	log.Debug("socket closed", "reason", string(reason), "err", cause)
}

func (h *Terminal) logger() *slog.Logger {
	if h.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return h.Log
}

// pump sends hello (with replay_end: where the replay of the buffer ends
// and live output begins), an optional reset, then the program's output as binary
// frames, and the exit frame when it ends; then it closes the socket with
// the code that says why (1000 exit, 4409 takeover). A socket that shares
// the terminal also gets {"type":"attached","count":N} whenever the number
// of sockets attached to it changes.
func (h *Terminal) pump(sock *socket, fw *frameWriter, wf *wholeFrames, att *sessions.Attachment) {
	hello := map[string]any{"type": "hello", "session_id": att.SessionID, "terminal": att.Terminal, "offset": att.Offset, "replay_end": att.ReplayEnd}
	if att.ResumeToken != "" {
		hello["resume_token"] = att.ResumeToken
	}
	if att.Started {
		hello["started"] = true
	}
	if att.Recorded {
		hello["recorded"] = true
	}
	if err := h.writeJSON(fw, hello); err != nil {
		sock.abort(err)
		return
	}
	if att.Reset {
		if err := h.writeJSON(fw, map[string]any{"type": "reset"}); err != nil {
			sock.abort(err)
			return
		}
	}
	// Output that comes while the socket is caught up goes out from the
	// terminal's reader, without waking this goroutine (an echo, bulk
	// output read as fast as it is sent). A write of the reader's that
	// blocks past a takeover or the terminal's end ends the socket at once.
	att.SetDirect(func(p []byte) {
		if err := fw.write(websocket.MessageBinary, p); err != nil {
			sock.abort(err) // Next returns: the socket ended
		}
	}, func(cause error) {
		sock.abort(cause) // records why, unless the socket already ended
		wf.stop()
	})
	buf, put := sessions.FrameBuffer()
	defer put()
	for {
		n, err := att.Next(sock.ctx, buf)
		var exit *sessions.ExitError
		switch {
		case err == nil && n == 0: // a shared terminal's attachments changed
			if err := h.writeJSON(fw, map[string]any{"type": "attached", "count": att.Attached()}); err != nil {
				sock.abort(err)
				return
			}
			continue
		case err == nil:
		case errors.As(err, &exit):
			if werr := h.writeJSON(fw, map[string]any{"type": "exit", "exit_code": exit.Code}); werr != nil {
				sock.abort(werr)
				return
			}
			sock.closeWith(err, websocket.StatusNormalClosure, "exited")
			return
		case errors.Is(err, sessions.ErrTakenOver):
			sock.closeWith(err, 4409, "terminal taken over by another attach")
			return
		case errors.Is(err, sessions.ErrTerminalShutdown):
			sock.closeWith(err, websocket.StatusGoingAway, "server shutting down")
			return
		case errors.Is(err, sessions.ErrTerminalClosed):
			sock.closeWith(err, websocket.StatusNormalClosure, "terminal closed")
			return
		default:
			return // the socket ended
		}
		if err := fw.write(websocket.MessageBinary, buf[:n]); err != nil {
			sock.abort(err)
			return
		}
	}
}

func (h *Terminal) writeJSON(fw *frameWriter, v any) error {
	b, _ := json.Marshal(v)
	return fw.write(websocket.MessageText, b)
}

// readInput writes binary frames to the pty and applies control frames
// until the socket ends. A pty that does not take input within InputWrite
// holds the socket's reading (the client is slowed, nothing is buffered).
//
// Each frame is read into one buffer, kept for the socket's life (at most
// MaxInputFrame): a buffer a frame (Conn.Read's io.ReadAll) was 512 bytes
// a keystroke for the collector.
func (h *Terminal) readInput(sock *socket, fw *frameWriter, att *sessions.Attachment) error {
	var in bytes.Buffer
	for {
		typ, r, err := sock.conn.Reader(sock.connCtx)
		if err != nil {
			return err
		}
		in.Reset()
		if _, err := in.ReadFrom(r); err != nil {
			return err
		}
		frame := in.Bytes()
		if typ == websocket.MessageBinary {
			if err := att.WriteWithin(sock.ctx, frame, h.inputWrite()); err != nil {
				h.logger().Debug("pty input dropped", "sid", att.SessionID, "err", err)
				continue
			}
			if h.OnInput != nil {
				h.OnInput(len(frame))
			}
			continue
		}
		m, err := DecodeControl(frame)
		if err == nil {
			err = att.Resize(uint16(m.Cols), uint16(m.Rows))
		}
		if err != nil {
			if werr := h.writeJSON(fw, map[string]any{"type": "error", "message": err.Error()}); werr != nil {
				sock.abort(werr)
			}
		}
	}
}

func (h *Terminal) inputWrite() time.Duration {
	if h.InputWrite > 0 {
		return h.InputWrite
	}
	return 10 * time.Second
}
