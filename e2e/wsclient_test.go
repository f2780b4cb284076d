package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// wsDial says how a Go client opens a WebSocket: its headers (Origin,
// Cookie, Authorization), the HTTP client (a cookie jar), and where it dials
// from.
type wsDial struct {
	header http.Header
	client *http.Client // nil: a fresh one
	local  string       // local IP to dial from ("" for any)
}

// bearer is a wsDial that authenticates with the token in a header (no
// Origin: PROTOCOL.md §1 and checkOrigin accept that, as for any
// non-browser client).
func bearer() wsDial {
	return wsDial{header: http.Header{"Authorization": {"Bearer " + testToken}}}
}

// wsConn is a client WebSocket whose reader runs all the time (so the
// client answers the server's pings, as a browser does), keeping text and
// binary frames for the test, and whose TCP connection can be dropped.
type wsConn struct {
	t    *testing.T
	name string
	conn *websocket.Conn
	raw  net.Conn // the TCP connection under it

	mu     sync.Mutex
	texts  [][]byte
	binary bytes.Buffer
	notify chan struct{} // a frame arrived (capacity 1)

	done    chan struct{} // closed when the reader ended
	readErr error
	ended   time.Time
}

// dialWS opens a WebSocket to url. On a refused upgrade it returns the
// HTTP response (its body read) with the error.
func dialWS(t *testing.T, name, url string, o wsDial) (*wsConn, *http.Response, error) {
	t.Helper()
	var raw net.Conn
	var rawMu sync.Mutex
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	if o.local != "" {
		dialer.LocalAddr = &net.TCPAddr{IP: net.ParseIP(o.local)}
	}
	tr := &http.Transport{
		Proxy:             nil,
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err == nil {
				rawMu.Lock()
				raw = c
				rawMu.Unlock()
			}
			return c, err
		},
	}
	client := &http.Client{Transport: tr}
	if o.client != nil {
		client.Jar = o.client.Jar
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, res, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: client, HTTPHeader: o.header})
	if err != nil {
		tr.CloseIdleConnections()
		return nil, res, err
	}
	conn.SetReadLimit(16 << 20)
	rawMu.Lock()
	c := &wsConn{t: t, name: name, conn: conn, raw: raw, notify: make(chan struct{}, 1), done: make(chan struct{})}
	rawMu.Unlock()
	go c.read()
	t.Cleanup(c.Close)
	return c, res, nil
}

// mustDialWS is dialWS that fails the test.
func mustDialWS(t *testing.T, name, url string, o wsDial) *wsConn {
	t.Helper()
	c, res, err := dialWS(t, name, url, o)
	if err != nil {
		status := "no response"
		if res != nil {
			status = res.Status
		}
		t.Fatalf("open %s (%s): %v (%s)", name, url, err, status)
	}
	return c
}

func (c *wsConn) read() {
	defer close(c.done)
	for {
		typ, b, err := c.conn.Read(context.Background())
		if err != nil {
			c.mu.Lock()
			c.readErr, c.ended = err, time.Now()
			c.mu.Unlock()
			return
		}
		c.mu.Lock()
		if typ == websocket.MessageText {
			c.texts = append(c.texts, b)
		} else {
			c.binary.Write(b)
		}
		c.mu.Unlock()
		select {
		case c.notify <- struct{}{}:
		default:
		}
	}
}

// Err is why the reader ended (nil while the socket is open).
func (c *wsConn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.readErr
}

// waitFor polls the frames received so far with cond until it holds, the
// socket ends, or timeout passes.
func (c *wsConn) waitFor(timeout time.Duration, cond func(texts [][]byte, binary []byte) bool) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		ok := cond(c.texts, c.binary.Bytes())
		c.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-c.notify:
		case <-c.done:
			c.mu.Lock()
			ok := cond(c.texts, c.binary.Bytes())
			c.mu.Unlock()
			if ok {
				return nil
			}
			return fmt.Errorf("%s: the socket ended: %v", c.name, c.Err())
		case <-deadline.C:
			return fmt.Errorf("%w: %s: condition not met within %v", errTimeout, c.name, timeout)
		}
	}
}

func (c *wsConn) write(typ websocket.MessageType, b []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.conn.Write(ctx, typ, b)
}

// Drop closes the TCP connection under the socket at once, without a close
// frame, as a crashed browser or a lost network does. With rst it resets
// the connection (SO_LINGER 0) instead of closing it with a FIN.
func (c *wsConn) Drop(rst bool) {
	c.t.Helper()
	if tc, ok := c.raw.(*net.TCPConn); ok && rst {
		if err := tc.SetLinger(0); err != nil {
			c.t.Fatalf("%s: SO_LINGER: %v", c.name, err)
		}
	}
	if err := c.raw.Close(); err != nil {
		c.t.Fatalf("%s: close the TCP connection: %v", c.name, err)
	}
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		c.t.Fatalf("%s: the reader did not end within 5s of the drop", c.name)
	}
}

// Close closes the socket politely (close frame) and waits for its reader.
func (c *wsConn) Close() {
	select {
	case <-c.done:
		c.conn.CloseNow()
		return
	default:
	}
	c.conn.Close(websocket.StatusNormalClosure, "")
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		c.conn.CloseNow()
		c.raw.Close()
		<-c.done
	}
}

// chatConn is a /ws/chat client speaking JSON-RPC 2.0 (PROTOCOL.md §2).
type chatConn struct {
	*wsConn
	nextID int
}

type rpcError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
}

func (e *rpcError) Error() string {
	return fmt.Sprintf("rpc error %d: %s %s", e.Code, e.Message, e.Data)
}

// openChat opens /ws/chat at url and waits for gateway.ready.
func openChat(t *testing.T, name, url string, o wsDial) *chatConn {
	t.Helper()
	c := &chatConn{wsConn: mustDialWS(t, name, url, o)}
	if err := c.waitFor(10*time.Second, func(texts [][]byte, _ []byte) bool {
		for _, b := range texts {
			var ev struct {
				Method string `json:"method"`
				Params struct {
					Type string `json:"type"`
				} `json:"params"`
			}
			if json.Unmarshal(b, &ev) == nil && ev.Method == "event" && ev.Params.Type == "gateway.ready" {
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatalf("no gateway.ready: %v", err)
	}
	return c
}

// call sends one request and waits up to 10 s for its reply; result is
// decoded into out (may be nil).
func (c *chatConn) call(method string, params any, out any) error {
	c.nextID++
	id := c.nextID
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err := c.write(websocket.MessageText, req); err != nil {
		return fmt.Errorf("%s: send %s: %w", c.name, method, err)
	}
	var reply struct {
		ID     *int            `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  *rpcError       `json:"error"`
	}
	err := c.waitFor(10*time.Second, func(texts [][]byte, _ []byte) bool {
		for _, b := range texts {
			reply.ID, reply.Result, reply.Error = nil, nil, nil
			if json.Unmarshal(b, &reply) == nil && reply.ID != nil && *reply.ID == id {
				return true
			}
		}
		return false
	})
	if err != nil {
		return fmt.Errorf("%s: no reply to %s: %w", c.name, method, err)
	}
	if reply.Error != nil {
		return reply.Error
	}
	if out != nil {
		return json.Unmarshal(reply.Result, out)
	}
	return nil
}

func (c *chatConn) mustCall(method string, params any, out any) {
	c.t.Helper()
	if err := c.call(method, params, out); err != nil {
		c.t.Fatal(err)
	}
}

// createSession makes a session attached to this socket.
func (c *chatConn) createSession(title string) string {
	c.t.Helper()
	var r struct {
		SessionID string `json:"session_id"`
	}
	c.mustCall("session.create", map[string]any{"title": title}, &r)
	if r.SessionID == "" {
		c.t.Fatalf("%s: session.create gave no session_id", c.name)
	}
	return r.SessionID
}

// slash runs a slash command in sid and returns its output.
func (c *chatConn) slash(sid, command string) (string, error) {
	var r struct {
		Output string `json:"output"`
	}
	err := c.call("slash.exec", map[string]any{"session_id": sid, "command": command}, &r)
	return r.Output, err
}

// mustEcho runs /echo text in sid and checks the output.
func (c *chatConn) mustEcho(sid, text string) {
	c.t.Helper()
	out, err := c.slash(sid, "/echo "+text)
	if err != nil {
		c.t.Fatalf("/echo %s in %s: %v", text, sid, err)
	}
	if out != text {
		c.t.Fatalf("/echo %s in %s answered %q", text, sid, out)
	}
}

// ptyConn is a /ws/pty client (PROTOCOL.md §3).
type ptyConn struct{ *wsConn }

// openPTY opens a terminal at url and waits for its hello and the shell's
// first output.
func openPTY(t *testing.T, name, url string, o wsDial) *ptyConn {
	t.Helper()
	c := &ptyConn{mustDialWS(t, name, url, o)}
	if err := c.waitFor(10*time.Second, func(texts [][]byte, bin []byte) bool {
		return len(texts) > 0 && bytes.Contains(texts[0], []byte(`"hello"`)) && len(bin) > 0
	}); err != nil {
		t.Fatalf("no hello and prompt: %v", err)
	}
	return c
}

// run types line and Enter, and waits until a line of output after it
// matches want.
func (c *ptyConn) run(line string, want *regexp.Regexp, timeout time.Duration) error {
	c.mu.Lock()
	from := c.binary.Len()
	c.mu.Unlock()
	if err := c.write(websocket.MessageBinary, []byte(line+"\r")); err != nil {
		return fmt.Errorf("%s: type %q: %w", c.name, line, err)
	}
	var out []byte
	err := c.waitFor(timeout, func(_ [][]byte, bin []byte) bool {
		out = append(out[:0], bin[from:]...)
		for _, l := range bytes.Split(ansiCSI.ReplaceAll(out, nil), []byte("\n")) {
			// What a terminal shows: a carriage return starts the line over.
			l = bytes.TrimRight(l, "\r")
			if i := bytes.LastIndexByte(l, '\r'); i >= 0 {
				l = l[i+1:]
			}
			if want.Match(l) {
				return true
			}
		}
		return false
	})
	if err != nil {
		return fmt.Errorf("%s: no line matching %s after %q: %w; output:\n%q", c.name, want, line, err, out)
	}
	return nil
}

// ansiCSI matches the terminal control sequences bash writes (bracketed
// paste mode on and off around each command).
var ansiCSI = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)

// isRefused reports whether err is a refused upgrade with status code.
func isRefused(res *http.Response, err error, code int) bool {
	return err != nil && res != nil && res.StatusCode == code
}
