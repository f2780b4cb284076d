package testkit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"

	"github.com/coder/websocket"
)

// Hello is the first frame of a terminal socket (PROTOCOL.md §3).
type Hello struct {
	Type      string `json:"type"` // "hello"
	SessionID string `json:"session_id"`
	Terminal  string `json:"terminal"` // its id in the session (issue 42)
	Offset    int64  `json:"offset"`   // output bytes produced before the first binary frame that follows
	// ReplayEnd is the output offset where the replay of the buffer ends
	// and live output begins (nil: the hello had none).
	ReplayEnd   *int64 `json:"replay_end,omitempty"`
	ResumeToken string `json:"resume_token,omitempty"`
	// Recorded: the server records the terminal (--record-terminals).
	Recorded bool `json:"recorded,omitempty"`
}

// PTY is a /ws/pty client (PROTOCOL.md §3). Frames after the hello are
// queued by the Conn's reader until Next, WaitOutput or WaitExit takes
// them. Close or Drop ends it.
type PTY struct {
	*Conn
	Hello Hello

	exit *int // set once an exit frame was taken
}

// DialPTY opens the terminal at url (ws://.../ws/pty?session_id=...) and
// reads its hello frame. On a refused upgrade it returns the server's
// response with the error.
func DialPTY(ctx context.Context, url string, o DialOptions) (*PTY, *http.Response, error) {
	conn, res, err := Dial(ctx, url, o)
	if err != nil {
		return nil, res, err
	}
	p := &PTY{Conn: conn}
	f, err := conn.Next(ctx)
	if err == nil && (f.Type != websocket.MessageText || json.Unmarshal(f.Data, &p.Hello) != nil || p.Hello.Type != "hello") {
		err = fmt.Errorf("first terminal frame is not a hello: %q", f.Data)
	}
	if err != nil {
		conn.Close()
		return nil, res, fmt.Errorf("terminal hello: %w", err)
	}
	return p, res, nil
}

// Send types p (a binary frame: keys as a terminal sends them, "\r" for
// Enter).
func (p *PTY) Send(ctx context.Context, b []byte) error {
	return p.Write(ctx, websocket.MessageBinary, b)
}

// Next takes the next frame, as Conn.Next; an exit frame is also recorded
// for ExitCode.
func (p *PTY) Next(ctx context.Context) (Frame, error) {
	f, err := p.Conn.Next(ctx)
	if err == nil && f.Type == websocket.MessageText {
		var m struct {
			Type     string `json:"type"`
			ExitCode int    `json:"exit_code"`
		}
		if json.Unmarshal(f.Data, &m) == nil && m.Type == "exit" {
			p.exit = &m.ExitCode
		}
	}
	return f, err
}

// ExitCode is the exit code of the exit frame, once taken.
func (p *PTY) ExitCode() (int, bool) {
	if p.exit == nil {
		return 0, false
	}
	return *p.exit, true
}

// ansiCSI matches the control sequences a shell writes (bracketed paste
// mode on and off around each command, colours).
var ansiCSI = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)

// WaitOutput takes frames until a line of the output taken during this
// call matches want, and returns that line. Lines are what a terminal
// shows: control sequences removed, a carriage return starting the line
// over. The error (the socket ended, ctx ended) carries the output seen.
func (p *PTY) WaitOutput(ctx context.Context, want *regexp.Regexp) (string, error) {
	var out []byte
	for {
		f, err := p.Next(ctx)
		if err != nil {
			return "", fmt.Errorf("no line matching %s: %w; output:\n%q", want, err, out)
		}
		if f.Type != websocket.MessageBinary {
			continue
		}
		out = append(out, f.Data...)
		for l := range bytes.SplitSeq(ansiCSI.ReplaceAll(out, nil), []byte("\n")) {
			l = bytes.TrimRight(l, "\r")
			if i := bytes.LastIndexByte(l, '\r'); i >= 0 {
				l = l[i+1:]
			}
			if want.Match(l) {
				return string(l), nil
			}
		}
	}
}

// Run types line and Enter, then WaitOutput(want).
func (p *PTY) Run(ctx context.Context, line string, want *regexp.Regexp) (string, error) {
	if err := p.Send(ctx, []byte(line+"\r")); err != nil {
		return "", fmt.Errorf("type %q: %w", line, err)
	}
	got, err := p.WaitOutput(ctx, want)
	if err != nil {
		return "", fmt.Errorf("after %q: %w", line, err)
	}
	return got, nil
}

// WaitExit takes frames, discarding output, until the exit frame and then
// the server's close 1000, and returns the exit code.
func (p *PTY) WaitExit(ctx context.Context) (int, error) {
	for {
		_, err := p.Next(ctx)
		if err == nil {
			continue
		}
		code, ok := p.ExitCode()
		switch {
		case !ok:
			return 0, fmt.Errorf("terminal ended before its exit frame: %w", err)
		case websocket.CloseStatus(err) != websocket.StatusNormalClosure:
			return code, fmt.Errorf("terminal close after its exit frame: %w", err)
		}
		return code, nil
	}
}
