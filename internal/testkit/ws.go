package testkit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// DialOptions say how a client opens a WebSocket.
type DialOptions struct {
	Token     string         // sent as "Authorization: Bearer <Token>" when not empty
	Origin    string         // the Origin header when not empty (browsers send one; other clients need not)
	Header    http.Header    // more headers (Cookie, ...)
	Jar       http.CookieJar // cookies to send, as a logged-in browser would
	LocalIP   string         // dial from this local address ("": any)
	ReadLimit int64          // largest frame read, in bytes; 0: 16 MiB
	// Socket is a Unix socket to dial instead of the URL's host (dashgate
	// on --addr unix:PATH); the URL's host is still sent as Host.
	Socket string
}

// Frame is one WebSocket message.
type Frame struct {
	Type websocket.MessageType // websocket.MessageText or websocket.MessageBinary
	Data []byte
}

// Conn is a client WebSocket whose reader goroutine runs from Dial until
// the socket ends, so that it answers the server's pings as a browser does.
// Frames are queued, without bound, until Next takes them. Its TCP
// connection can be dropped (Drop). The caller ends it with Close or Drop.
type Conn struct {
	ws  *websocket.Conn
	raw net.Conn // the TCP connection under it

	// handle takes each frame read (nil: queue it for Next), and onEnd
	// runs once the socket ended, before Done is closed. Set before the
	// reader starts.
	handle func(Frame)
	onEnd  func()

	mu     sync.Mutex
	queue  []Frame
	resume chan struct{} // non-nil while paused; closed by Resume
	err    error         // why the reader ended
	ended  time.Time     // when it ended
	notify chan struct{}
	done   chan struct{} // closed when the reader returned
}

// Dial opens a WebSocket to url (ws://...). On a refused upgrade it returns
// the server's response with the error (its body is closed).
func Dial(ctx context.Context, url string, o DialOptions) (*Conn, *http.Response, error) {
	c, res, err := dial(ctx, url, o)
	if err != nil {
		return nil, res, err
	}
	c.start()
	return c, res, nil
}

func dial(ctx context.Context, url string, o DialOptions) (*Conn, *http.Response, error) {
	var raw net.Conn
	var rawMu sync.Mutex
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	if o.LocalIP != "" {
		dialer.LocalAddr = &net.TCPAddr{IP: net.ParseIP(o.LocalIP)}
	}
	tr := &http.Transport{
		Proxy:             nil,
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if o.Socket != "" {
				network, addr = "unix", o.Socket
			}
			c, err := dialer.DialContext(ctx, network, addr)
			if err == nil {
				rawMu.Lock()
				raw = c
				rawMu.Unlock()
			}
			return c, err
		},
	}
	hdr := o.Header.Clone()
	if hdr == nil {
		hdr = http.Header{}
	}
	if o.Token != "" {
		hdr.Set("Authorization", "Bearer "+o.Token)
	}
	if o.Origin != "" {
		hdr.Set("Origin", o.Origin)
	}
	ws, res, err := websocket.Dial(ctx, url, &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: tr, Jar: o.Jar},
		HTTPHeader: hdr,
	})
	if err != nil {
		tr.CloseIdleConnections()
		return nil, res, fmt.Errorf("dial %s: %w", url, err)
	}
	limit := o.ReadLimit
	if limit == 0 {
		limit = 16 << 20
	}
	ws.SetReadLimit(limit)
	rawMu.Lock()
	defer rawMu.Unlock()
	return &Conn{ws: ws, raw: raw, notify: make(chan struct{}, 1), done: make(chan struct{})}, res, nil
}

func (c *Conn) start() { go c.read() }

func (c *Conn) read() {
	defer close(c.done)
	for {
		c.mu.Lock()
		resume := c.resume
		c.mu.Unlock()
		if resume != nil {
			<-resume
		}
		typ, b, err := c.ws.Read(context.Background())
		if err != nil {
			c.mu.Lock()
			c.err, c.ended = err, time.Now()
			c.mu.Unlock()
			if c.onEnd != nil {
				c.onEnd()
			}
			c.wake()
			return
		}
		f := Frame{Type: typ, Data: b}
		if c.handle != nil {
			c.handle(f)
			continue
		}
		c.mu.Lock()
		c.queue = append(c.queue, f)
		c.mu.Unlock()
		c.wake()
	}
}

func (c *Conn) wake() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// Next takes the oldest frame not yet taken, waiting for one. Once the
// socket ended and the queue is empty it returns the reader's error (a
// websocket.CloseError for a close frame: see websocket.CloseStatus);
// when ctx ends first, ctx's error.
func (c *Conn) Next(ctx context.Context) (Frame, error) {
	for {
		c.mu.Lock()
		if len(c.queue) > 0 {
			f := c.queue[0]
			c.queue[0] = Frame{}
			c.queue = c.queue[1:]
			c.mu.Unlock()
			return f, nil
		}
		err := c.err
		c.mu.Unlock()
		if err != nil {
			return Frame{}, err
		}
		select {
		case <-c.notify:
		case <-ctx.Done():
			return Frame{}, ctx.Err()
		}
	}
}

// Write sends one frame.
func (c *Conn) Write(ctx context.Context, typ websocket.MessageType, b []byte) error {
	return c.ws.Write(ctx, typ, b)
}

// Err is why the reader ended; nil while the socket is open.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// EndedAt is when the reader ended; zero while the socket is open.
func (c *Conn) EndedAt() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ended
}

// Pause stops reading the socket after the frame being read, as a stalled
// browser does: the server's frames back up in the TCP buffers and its
// writes block, and pings go unanswered. Resume, Close or Drop ends the
// pause.
func (c *Conn) Pause() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.resume == nil {
		c.resume = make(chan struct{})
	}
}

// Resume reads the socket again after Pause.
func (c *Conn) Resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.resume != nil {
		close(c.resume)
		c.resume = nil
	}
}

// Done is closed once the reader ended (the socket is closed).
func (c *Conn) Done() <-chan struct{} { return c.done }

// Drop closes the TCP connection under the socket at once, without a close
// frame, as a crashed browser or a lost network does; with rst it resets it
// (SO_LINGER 0, a TCP RST) instead of sending a FIN. It returns once the
// reader ended, or an error after 5 s.
func (c *Conn) Drop(rst bool) error {
	c.Resume()
	if tc, ok := c.raw.(*net.TCPConn); ok && rst {
		if err := tc.SetLinger(0); err != nil {
			return fmt.Errorf("SO_LINGER: %w", err)
		}
	}
	if err := c.raw.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("close the TCP connection: %w", err)
	}
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-c.done:
		return nil
	case <-t.C:
		return errors.New("the reader did not end within 5s of the drop")
	}
}

// Close closes the socket politely (close frame 1000, waiting up to 5 s for
// the server's) and returns once the reader ended. Closing an ended socket
// is a no-op.
func (c *Conn) Close() error {
	c.Resume()
	select {
	case <-c.done:
		c.ws.CloseNow()
		return nil
	default:
	}
	err := c.ws.Close(websocket.StatusNormalClosure, "")
	// coder/websocket bounds its close handshake (5 s); the reader ends
	// when it does, or once the connection is torn down below.
	c.ws.CloseNow()
	<-c.done
	return err
}
