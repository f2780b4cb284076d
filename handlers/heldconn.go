package handlers

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"sync"
)

// heldConn is a hijacked connection whose writes a socket's writer can
// hold and send together: coder/websocket flushes every message with a
// write(2) of its own, and a writer that finds several frames queued
// (a loaded gateway falls behind its streams) sends them, one WebSocket
// message each, in order, with one (BENCHMARKS.md, issue 28). Writes of
// other goroutines while held (a ping, a close frame) join the held
// bytes in their order.
type heldConn struct {
	net.Conn
	mu      sync.Mutex // held while writing to Conn too: nothing is sent out of order
	holding bool
	buf     []byte
	writes  int // write(2)s sent to Conn, for tests
}

func (c *heldConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holding {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	c.writes++
	return c.Conn.Write(p)
}

// hold keeps the writes from now on until release.
func (c *heldConn) hold() {
	c.mu.Lock()
	c.holding = true
	c.mu.Unlock()
}

// heldMax bounds the buffer a release keeps for the next hold.
const heldMax = 64 << 10

// release sends what was held with one write and stops holding. It
// blocks as a write does (the socket's write timeout ends it).
func (c *heldConn) release() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holding = false
	if len(c.buf) == 0 {
		return nil
	}
	c.writes++
	_, err := c.Conn.Write(c.buf)
	if cap(c.buf) > heldMax {
		c.buf = nil
	} else {
		c.buf = c.buf[:0]
	}
	return err
}

// holdingWriter is the ResponseWriter a WebSocket is accepted on: its
// Hijack hands coder/websocket a heldConn (conn, once hijacked).
type holdingWriter struct {
	http.ResponseWriter
	conn *heldConn
}

func (w *holdingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("http.ResponseWriter does not implement http.Hijacker")
	}
	nc, brw, err := h.Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.conn = &heldConn{Conn: nc}
	// The response (101) is flushed by Hijack; what the client sent
	// already is in brw.Reader, kept. Writes go through the heldConn.
	return w.conn, bufio.NewReadWriter(brw.Reader, bufio.NewWriterSize(w.conn, brw.Writer.Size())), nil
}
