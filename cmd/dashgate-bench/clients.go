package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// wsHTTP dials WebSockets; its transport is never reused after the upgrade.
var wsHTTP = &http.Client{Transport: &http.Transport{DisableKeepAlives: true, MaxIdleConnsPerHost: -1}}

func dial(ctx context.Context, t *target, path string) (*websocket.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(dctx, t.url("ws", path), &websocket.DialOptions{
		HTTPHeader: t.authHeader(), HTTPClient: wsHTTP,
	})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("dial %s: %s: %w", path, resp.Status, err)
		}
		return nil, fmt.Errorf("dial %s: %w", path, err)
	}
	c.SetReadLimit(4 << 20)
	return c, nil
}

// ---------------------------------------------------------------------------
// Chat socket (PROTOCOL.md §2).

// rpcError is a JSON-RPC error reply.
type rpcError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *rpcError) Error() string { return fmt.Sprintf("rpc error %d: %s", e.Code, e.Message) }

type rpcReply struct {
	result json.RawMessage
	err    error
}

// chat is one chat socket. A reader goroutine hands replies to their
// callers and drops events; reading all the time also answers pings.
type chat struct {
	c     *websocket.Conn
	ready chan struct{} // closed at gateway.ready

	mu     sync.Mutex
	nextID int64
	wait   map[int64]chan rpcReply
	err    error // why the reader stopped

	done chan struct{} // the reader returned
}

func dialChat(ctx context.Context, t *target) (*chat, error) {
	c, err := dial(ctx, t, "ws/chat")
	if err != nil {
		return nil, err
	}
	ch := &chat{c: c, ready: make(chan struct{}), wait: map[int64]chan rpcReply{}, done: make(chan struct{})}
	go ch.read()
	select {
	case <-ch.ready:
		return ch, nil
	case <-ch.done:
		return nil, fmt.Errorf("chat socket closed before gateway.ready: %w", ch.err)
	case <-ctx.Done():
		ch.drop()
		return nil, ctx.Err()
	}
}

func (ch *chat) read() {
	defer close(ch.done)
	var readyOnce sync.Once
	for {
		_, b, err := ch.c.Read(context.Background())
		if err != nil {
			ch.mu.Lock()
			ch.err = err
			wait := ch.wait
			ch.wait = map[int64]chan rpcReply{}
			ch.mu.Unlock()
			for _, w := range wait {
				w <- rpcReply{err: fmt.Errorf("chat socket closed: %w", err)}
			}
			return
		}
		var msg struct {
			ID     *int64          `json:"id"`
			Method string          `json:"method"`
			Result json.RawMessage `json:"result"`
			Error  *rpcError       `json:"error"`
			Params struct {
				Type string `json:"type"`
			} `json:"params"`
		}
		if err := json.Unmarshal(b, &msg); err != nil {
			continue
		}
		if msg.Method == "event" {
			if msg.Params.Type == "gateway.ready" {
				readyOnce.Do(func() { close(ch.ready) })
			}
			continue
		}
		if msg.ID == nil {
			continue
		}
		ch.mu.Lock()
		w := ch.wait[*msg.ID]
		delete(ch.wait, *msg.ID)
		ch.mu.Unlock()
		if w == nil {
			continue
		}
		if msg.Error != nil {
			w <- rpcReply{err: msg.Error}
		} else {
			w <- rpcReply{result: msg.Result}
		}
	}
}

// call sends one request and waits for its reply.
func (ch *chat) call(ctx context.Context, method string, params any, result any) error {
	ch.mu.Lock()
	if ch.err != nil {
		err := ch.err
		ch.mu.Unlock()
		return fmt.Errorf("%s: chat socket closed: %w", method, err)
	}
	ch.nextID++
	id := ch.nextID
	w := make(chan rpcReply, 1)
	ch.wait[id] = w
	ch.mu.Unlock()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err := ch.c.Write(ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("%s: write: %w", method, err)
	}
	select {
	case r := <-w:
		if r.err != nil {
			return fmt.Errorf("%s: %w", method, r.err)
		}
		if result != nil {
			if err := json.Unmarshal(r.result, result); err != nil {
				return fmt.Errorf("%s: decode result: %w", method, err)
			}
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

func (ch *chat) create(ctx context.Context) (string, error) {
	var res struct {
		SessionID string `json:"session_id"`
	}
	if err := ch.call(ctx, "session.create", map[string]any{"title": "bench"}, &res); err != nil {
		return "", err
	}
	if res.SessionID == "" {
		return "", errors.New("session.create: no session_id")
	}
	return res.SessionID, nil
}

func (ch *chat) exec(ctx context.Context, sid, command string) (string, error) {
	var res struct {
		Output *string `json:"output"`
	}
	if err := ch.call(ctx, "slash.exec", map[string]any{"session_id": sid, "command": command}, &res); err != nil {
		return "", err
	}
	if res.Output == nil {
		return "", errors.New("slash.exec: no output")
	}
	return *res.Output, nil
}

// close ends the socket with a close frame and waits for the reader.
func (ch *chat) close() error {
	err := ch.c.Close(websocket.StatusNormalClosure, "bench done")
	<-ch.done
	return err
}

// drop closes the TCP connection without a close frame.
func (ch *chat) drop() {
	ch.c.CloseNow()
	<-ch.done
}

// alive reports whether the reader still runs, and why it stopped.
func (ch *chat) alive() (bool, error) {
	select {
	case <-ch.done:
		return false, ch.err
	default:
		return true, nil
	}
}

// ---------------------------------------------------------------------------
// Terminal socket (PROTOCOL.md §3).

type ptyHello struct {
	Type      string `json:"type"`
	SessionID string `json:"session_id"`
	Offset    int64  `json:"offset"`
}

// term is one /ws/pty socket, read by its owner (no reader goroutine: the
// measurements read inline).
type term struct {
	c     *websocket.Conn
	hello ptyHello
	ctx   context.Context // reads: coder/websocket closes the socket when a Read's context ends
	stop  context.CancelFunc
	exit  *int // set by the exit frame
}

func dialTerm(ctx context.Context, t *target, query string) (*term, error) {
	c, err := dial(ctx, t, "ws/pty?"+query)
	if err != nil {
		return nil, err
	}
	tm := &term{c: c}
	tm.ctx, tm.stop = context.WithCancel(ctx)
	typ, b, err := c.Read(tm.ctx)
	if err != nil {
		tm.stop()
		return nil, fmt.Errorf("read hello: %w", err)
	}
	if typ != websocket.MessageText || json.Unmarshal(b, &tm.hello) != nil || tm.hello.Type != "hello" {
		tm.close()
		return nil, fmt.Errorf("first terminal frame is not hello: %q", b)
	}
	return tm, nil
}

func (tm *term) send(p []byte) error {
	return tm.c.Write(tm.ctx, websocket.MessageBinary, p)
}

// next reads one frame: output bytes into buf (n), or a text frame (an exit
// frame sets tm.exit). A frame larger than buf is an error.
func (tm *term) next(buf []byte) (n int, text []byte, err error) {
	typ, r, err := tm.c.Reader(tm.ctx)
	if err != nil {
		return 0, nil, err
	}
	if typ == websocket.MessageText {
		b, err := io.ReadAll(r)
		if err != nil {
			return 0, nil, err
		}
		var m struct {
			Type     string `json:"type"`
			ExitCode int    `json:"exit_code"`
		}
		if json.Unmarshal(b, &m) == nil && m.Type == "exit" {
			tm.exit = &m.ExitCode
		}
		return 0, b, nil
	}
	for n < len(buf) {
		k, err := r.Read(buf[n:])
		n += k
		if errors.Is(err, io.EOF) {
			return n, nil, nil
		}
		if err != nil {
			return n, nil, err
		}
	}
	// buf full: the frame must end here
	if k, err := r.Read(make([]byte, 1)); k != 0 || !errors.Is(err, io.EOF) {
		return n, nil, errors.New("terminal frame larger than the read buffer")
	}
	return n, nil, nil
}

// waitExit reads until the exit frame and the close, discarding output.
func (tm *term) waitExit() error {
	buf := make([]byte, 64<<10)
	for tm.exit == nil {
		if _, _, err := tm.next(buf); err != nil {
			return fmt.Errorf("terminal closed before its exit frame: %w", err)
		}
	}
	for {
		if _, _, err := tm.next(buf); err != nil {
			if websocket.CloseStatus(err) == websocket.StatusNormalClosure {
				return nil
			}
			return fmt.Errorf("terminal close after exit: %w", err)
		}
	}
}

func (tm *term) close() error {
	err := tm.c.Close(websocket.StatusNormalClosure, "bench done")
	tm.stop()
	return err
}
