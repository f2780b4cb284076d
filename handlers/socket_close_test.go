package handlers

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestSocketEndBesideCloseWith: a close with a code (closeWith: the
// terminal's pump when its session is reaped, the chat writer's slow
// consumer) and the read loop's end (the page closing the socket itself
// at the same moment) come together, closeWith first. end must wait for
// that close: closeWith counts it (closing.Add) in the same hold of s.mu
// that records its cause, so an end, which records its own under s.mu
// first, either sees it counted or finds the cause taken and nothing to
// count. Counted after letting go of s.mu, the Add could come beside
// end's Wait: the race detector's data race in sync.WaitGroup (Add
// concurrent with Wait; dashgate exited 66 in CI, e2e
// TestFirstPromptTitlesTheSession), and an end that returned before the
// close it should have waited for. Run with -race.
func TestSocketEndBesideCloseWith(t *testing.T) {
	accepted := make(chan *websocket.Conn)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		accepted <- c
	}))
	defer srv.Close()
	errPump, errRead := errors.New("terminal closed"), errors.New("peer closed")
	for i := range 200 {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		cc, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
		if err != nil {
			cancel()
			t.Fatalf("round %d: dial: %v", i, err)
		}
		cc.CloseRead(ctx) // answers the server's close frame
		var s *socket
		select {
		case c := <-accepted:
			s = newSocket(context.Background(), c)
		case <-ctx.Done():
			t.Fatalf("round %d: no connection accepted", i)
		}
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			s.closeWith(errPump, websocket.StatusNormalClosure, "terminal closed")
		}()
		for s.cause() == nil { // closeWith recorded first; end comes right after
			if ctx.Err() != nil {
				t.Fatalf("round %d: closeWith recorded nothing", i)
			}
			runtime.Gosched()
		}
		s.end(errRead)
		if got := s.cause(); got != errPump {
			t.Fatalf("round %d: cause %v, want the first one, %v", i, got, errPump)
		}
		<-closed
		cc.CloseNow()
		cancel()
	}
}
