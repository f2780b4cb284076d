package e2e_test

import (
	"context"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/dashgate/dashgate/internal/testkit"
)

// bearer authenticates with the token in a header (no Origin: PROTOCOL.md
// §1 and checkOrigin accept that, as for any non-browser client).
func bearer() testkit.DialOptions { return testkit.DialOptions{Token: testToken} }

// chatConn is a /ws/chat client of one test; its methods fail the test.
type chatConn struct {
	*testkit.Chat
	t    *testing.T
	name string
}

// openChat opens /ws/chat at url and waits for gateway.ready; the cleanup
// closes it.
func openChat(t *testing.T, name, url string, o testkit.DialOptions) *chatConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, res, err := testkit.DialChat(ctx, url, o)
	if err != nil {
		t.Fatalf("open %s: %v (%s)", name, err, status(res))
	}
	t.Cleanup(func() { c.Close() })
	return &chatConn{Chat: c, t: t, name: name}
}

func status(res *http.Response) string {
	if res == nil {
		return "no response"
	}
	return res.Status
}

// call is Chat.Call bounded by 10 s.
func (c *chatConn) call(method string, params any, out any) error {
	ctx, cancel := context.WithTimeout(c.t.Context(), 10*time.Second)
	defer cancel()
	return c.Call(ctx, method, params, out)
}

func (c *chatConn) mustCall(method string, params any, out any) {
	c.t.Helper()
	if err := c.call(method, params, out); err != nil {
		c.t.Fatalf("%s: %v", c.name, err)
	}
}

// createSession makes a session attached to this socket.
func (c *chatConn) createSession(title string) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.t.Context(), 10*time.Second)
	defer cancel()
	sid, err := c.CreateSession(ctx, title)
	if err != nil {
		c.t.Fatalf("%s: %v", c.name, err)
	}
	return sid
}

// slash runs a slash command in sid and returns its output.
func (c *chatConn) slash(sid, command string) (string, error) {
	ctx, cancel := context.WithTimeout(c.t.Context(), 10*time.Second)
	defer cancel()
	return c.Slash(ctx, sid, command)
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

// drop is Conn.Drop failing the test.
func (c *chatConn) drop(rst bool) {
	c.t.Helper()
	if err := c.Drop(rst); err != nil {
		c.t.Fatalf("%s: %v", c.name, err)
	}
}

// ptyConn is a /ws/pty client of one test.
type ptyConn struct {
	*testkit.PTY
	t    *testing.T
	name string
}

// openPTY opens a terminal at url and waits for its hello and the shell's
// first output; the cleanup closes it.
func openPTY(t *testing.T, name, url string, o testkit.DialOptions) *ptyConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	p, res, err := testkit.DialPTY(ctx, url, o)
	if err != nil {
		t.Fatalf("open %s: %v (%s)", name, err, status(res))
	}
	t.Cleanup(func() { p.Close() })
	if _, err := p.WaitOutput(ctx, regexp.MustCompile(`.`)); err != nil {
		t.Fatalf("%s: no prompt: %v", name, err)
	}
	return &ptyConn{PTY: p, t: t, name: name}
}

// run types line and Enter, and waits until a line of output after it
// matches want.
func (c *ptyConn) run(line string, want *regexp.Regexp, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(c.t.Context(), timeout)
	defer cancel()
	_, err := c.Run(ctx, line, want)
	return err
}

// write sends one frame within 5 s.
func (c *ptyConn) write(typ websocket.MessageType, b []byte) error {
	ctx, cancel := context.WithTimeout(c.t.Context(), 5*time.Second)
	defer cancel()
	return c.Write(ctx, typ, b)
}

// drop is Conn.Drop failing the test.
func (c *ptyConn) drop(rst bool) {
	c.t.Helper()
	if err := c.Drop(rst); err != nil {
		c.t.Fatalf("%s: %v", c.name, err)
	}
}

// isRefused reports whether err is a refused upgrade with status code.
func isRefused(res *http.Response, err error, code int) bool {
	return err != nil && res != nil && res.StatusCode == code
}
