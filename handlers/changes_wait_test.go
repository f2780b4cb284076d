package handlers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/dashgate/dashgate/sessions"
)

// heldSocket serves one chat socket with a held connection (as ServeHTTP
// makes it, without a registry) and returns it with the client's end.
func heldSocket(t *testing.T, wait time.Duration) (*chatConn, *websocket.Conn) {
	t.Helper()
	got := make(chan *chatConn, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hw := &holdingWriter{ResponseWriter: w}
		conn, err := websocket.Accept(hw, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		got <- &chatConn{h: &Chat{}, conn: conn, sock: newSocket(context.Background(), conn), held: hw.conn,
			out: make(chan any, 8), changedWait: wait}
	}))
	t.Cleanup(srv.Close)
	client, _, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.CloseNow() })
	c := <-got
	t.Cleanup(func() { c.stopChanges(); c.sock.end(nil) })
	return c, client
}

// readFrames reads n text messages from client.
func readFrames(t *testing.T, client *websocket.Conn, n int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var out []string
	for range n {
		_, b, err := client.Read(ctx)
		if err != nil {
			t.Fatalf("after %q: %v", out, err)
		}
		out = append(out, string(b))
	}
	return out
}

func changedEvent(sid string) *sessions.Event {
	return sessions.NewEvent("session.changed", "", 0, sessions.Change{SessionID: sid, State: sessions.StateAttached})
}

// A session.changed told to a socket waits for its next frame and goes
// out with it: no wake-up of the writer of its own, one write(2) for
// both, the answer first, the changes in their order after it.
func TestChangesRideWithNextFrame(t *testing.T) {
	t.Parallel()
	c, client := heldSocket(t, time.Hour)
	c.Deliver(changedEvent("s-1"))
	c.Deliver(changedEvent("s-2"))
	if len(c.out) != 0 || c.changesN.Load() != 2 {
		t.Fatalf("two changes told: %d frames queued for the writer, %d waiting; want 0 and 2", len(c.out), c.changesN.Load())
	}
	c.held.mu.Lock()
	before := c.held.writes
	c.held.mu.Unlock()
	if err := c.writeQueued([]byte(`{"jsonrpc":"2.0","id":1,"result":{}}`)); err != nil {
		t.Fatal(err)
	}
	c.held.mu.Lock()
	writes := c.held.writes - before
	c.held.mu.Unlock()
	got := readFrames(t, client, 3)
	if writes != 1 || !strings.Contains(got[0], `"id":1`) || !strings.Contains(got[1], "s-1") || !strings.Contains(got[2], "s-2") {
		t.Errorf("an answer with two changes waiting: %d writes, frames %q; want 1 write: the answer, s-1, s-2", writes, got)
	}
}

// With no frame to ride with, the changes go out alone once changedWait
// has passed, in one write, and nothing more is written for them.
func TestChangesWrittenAloneAfterWait(t *testing.T) {
	t.Parallel()
	c, client := heldSocket(t, time.Millisecond)
	go c.writeLoop()
	c.Deliver(changedEvent("s-1"))
	c.Deliver(changedEvent("s-2"))
	got := readFrames(t, client, 2)
	if !strings.Contains(got[0], "s-1") || !strings.Contains(got[1], "s-2") {
		t.Errorf("changes written alone: %q; want s-1 then s-2", got)
	}
	// A later change arms the timer again.
	c.Deliver(changedEvent("s-3"))
	if got := readFrames(t, client, 1); !strings.Contains(got[0], "s-3") {
		t.Errorf("a change after the first were written: %q; want s-3", got)
	}
}
