package handlers_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/sessions"
)

// TestUserCapacityAnswers4029NamingTheLimit: a per-user cap answers a chat
// call with 4029 and the registry's message naming the flag, exactly, even
// when the error is wrapped; the terminal handshake answers 503 with it.
func TestUserCapacityAnswers4029NamingTheLimit(t *testing.T) {
	t.Parallel()
	t.Run("worker over rpc", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, envOpts{reg: func(c *sessions.Config) { c.MaxWorkersPerUser = 1 }})
		cc := e.chat()
		first, second := cc.create(), cc.create()
		cc.call("slash.exec", map[string]any{"session_id": first, "command": "/echo hi"})
		m := cc.callRaw("slash.exec", map[string]any{"session_id": second, "command": "/echo hi"})
		want := "user capacity reached: --max-workers-per-user (1)"
		if errCode(m) != handlers.CodeCapacity || m["error"].(map[string]any)["message"] != want {
			t.Fatalf("reply %v, want %d %q", m, handlers.CodeCapacity, want)
		}
	})
	t.Run("wrapped", func(t *testing.T) {
		t.Parallel()
		uc := &sessions.UserCapacityError{Limit: sessions.LimitSessionsPerUser, Max: 7}
		code, msg := handlers.DescribeError(fmt.Errorf("make room: %w", uc))
		if code != handlers.CodeCapacity || msg != "user capacity reached: --max-sessions-per-user (7)" {
			t.Fatalf("DescribeError = %d %q", code, msg)
		}
	})
	t.Run("terminal handshake", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, envOpts{reg: func(c *sessions.Config) { c.MaxTerminalsPerUser = 1 }})
		c, _, err := websocket.Dial(t.Context(), e.url+"/ws/pty", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		_, resp, err := websocket.Dial(t.Context(), e.url+"/ws/pty", nil)
		if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("second terminal: %v %v", resp, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(body), "user capacity reached: --max-terminals-per-user (1)") {
			t.Fatalf("body %q does not name the limit", body)
		}
	})
}
