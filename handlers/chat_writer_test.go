package handlers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/dashgate/dashgate/sessions"
)

func delta(sid, turn, text string, seq uint64) *sessions.Event {
	return sessions.NewDeltaEvent(sid, seq, turn, text)
}

// describe is frames as "type sid seq text" lines, a reply as its bytes.
func describe(frames []any) string {
	var b strings.Builder
	for _, f := range frames {
		if ev, ok := f.(*sessions.Event); ok {
			text := ""
			if p, ok := ev.Payload.(*sessions.Delta); ok {
				text = p.Text
			}
			fmt.Fprintf(&b, "%s %s %d %s\n", ev.Type, ev.SessionID, ev.Seq, text)
		} else {
			fmt.Fprintf(&b, "reply %s\n", f)
		}
	}
	return b.String()
}

// TestWriterMergesDeltasAndPutsControlFirst: frames taken by a socket
// that is behind go out with the answers, approval.* and session.closed
// first, and the deltas of one message merged into one event (texts in
// order, the last seq), a session's other events keeping their place:
// another session's deltas between them do not end the run, an event of
// its own session or a new turn does.
func TestWriterMergesDeltasAndPutsControlFirst(t *testing.T) {
	frames := []any{
		delta("a", "t1", "Hel", 1),
		delta("b", "u1", "One", 1),
		delta("a", "t1", "lo ", 2),
		[]byte(`{"id":1}`),
		delta("a", "t1", "world", 3),
		delta("b", "u1", " two", 2),
		sessions.NewEvent("tool.start", "a", 4, map[string]any{"tool_id": "x"}),
		delta("a", "t1", "!", 5),
		sessions.NewEvent("approval.request", "b", 3, map[string]any{"id": "p"}),
		delta("b", "u2", "new turn", 4),
		sessions.NewEvent("session.closed", "c", 9, map[string]any{"end_reason": "admin_reap"}),
		delta("a", "t1", "?", 6),
	}
	got := describe(mergeDeltas(controlFirst(frames)))
	want := `reply {"id":1}
approval.request b 3 
session.closed c 9 
message.delta a 3 Hello world
message.delta b 2 One two
tool.start a 4 
message.delta a 6 !?
message.delta b 4 new turn
`
	if got != want {
		t.Fatalf("frames written:\n%s\nwant:\n%s", got, want)
	}
	// Nothing to merge or reorder: the frames as they were, the lone
	// deltas the very events queued (their encoding is shared).
	one := []any{delta("a", "t1", "x", 1), sessions.NewEvent("tool.start", "a", 2, nil), delta("a", "t1", "y", 3)}
	out := mergeDeltas(controlFirst(append([]any(nil), one...)))
	for i := range one {
		if out[i] != one[i] {
			t.Fatalf("frame %d was replaced: %s", i, describe(out))
		}
	}
}

// chatConnPair is a chatConn over a real WebSocket whose client end is
// returned (read it, or not), with WriteTimeout timeout and no heldConn
// (each frame its own write); the client's receive buffer is small, so
// that writes block soon when it does not read.
func chatConnPair(t *testing.T, timeout time.Duration) (*chatConn, *websocket.Conn) {
	t.Helper()
	got := make(chan *websocket.Conn, 1)
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		got <- conn
		<-stop // the connection is the test's
	}))
	t.Cleanup(srv.Close)
	dialer := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2048) })
	}}
	client, _, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(srv.URL, "http"),
		&websocket.DialOptions{HTTPClient: &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}})
	if err != nil {
		t.Fatal(err)
	}
	conn := <-got
	sock := newSocket(context.Background(), conn)
	t.Cleanup(func() {
		client.CloseNow()
		sock.end(errors.New("test over"))
		close(stop)
	})
	c := &chatConn{h: &Chat{Socket: SocketConfig{WriteTimeout: timeout}}, conn: conn, sock: sock, wt: writeTimer{s: sock}, out: make(chan any, 1)}
	return c, client
}

// TestChatWriterDeltaNoAllocation: the chat writer writes a delta's frame
// without an allocation (its encoding in its buffer, its write timeout
// one timer armed again), and the timer is stopped after each write.
func TestChatWriterDeltaNoAllocation(t *testing.T) {
	c, client := chatConnPair(t, time.Minute)
	go func() { // reads, as a browser does
		for {
			_, r, err := client.Reader(context.Background())
			if err != nil {
				return
			}
			io.Copy(io.Discard, r)
		}
	}()
	evs := make([]*sessions.Event, 101) // AllocsPerRun's warm-up and runs
	for i := range evs {
		evs[i] = delta("0123456789abcdef01234567", "89abcdef0123456701234567", "a \"word\"\n", uint64(i))
	}
	i := 0
	n := testing.AllocsPerRun(100, func() {
		if err := c.writeQueued(evs[i]); err != nil {
			t.Fatal(err)
		}
		i++
	})
	if n != 0 {
		t.Fatalf("the writer's write of a delta: %v allocations, want 0", n)
	}
	if c.wt.t.Stop() {
		t.Fatal("the write timeout is still armed after the write")
	}
}

// TestChatWriterTimeout: a chat write blocked for the write timeout (the
// client does not read) ends the socket with errWriteTimeout, with the
// writer's one timer as with a timer a write.
func TestChatWriterTimeout(t *testing.T) {
	c, _ := chatConnPair(t, 100*time.Millisecond)
	done := make(chan error, 1)
	go func() {
		big := delta("s", "t", strings.Repeat("x", 64<<10), 1)
		for range 4096 { // 256 MiB: far beyond any socket buffer
			if err := c.writeQueued(big); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if !errors.Is(err, errWriteTimeout) || !errors.Is(c.sock.cause(), errWriteTimeout) {
			t.Fatalf("write error %v, socket's cause %v; want the write timeout", err, c.sock.cause())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a blocked write was not ended by the write timeout in 20 s")
	}
}
