package handlers_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/internal/testkit"
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
		wantTerminalRefused(t, e, "user capacity reached: --max-terminals-per-user (1)")
	})
}

// TestGlobalCapacityNamesTheFlag: the global caps answer 4029 (a terminal
// 503) as the per-user ones do, the message naming the flag and its value,
// and a chat error's data giving both: --max-workers for a chat worker and
// a terminal's program, --max-sessions for a session.
func TestGlobalCapacityNamesTheFlag(t *testing.T) {
	t.Parallel()
	t.Run("max-workers", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, envOpts{workers: 1})
		c, _, err := websocket.Dial(t.Context(), e.url+"/ws/pty", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow() // its terminal holds the one slot
		cc := e.chat()
		m := cc.callRaw("slash.exec", map[string]any{"session_id": cc.create(), "command": "/echo hi"})
		wantCapacity(t, m, "worker capacity reached: --max-workers (1)", "--max-workers", 1)
		wantTerminalRefused(t, e, "worker capacity reached: --max-workers (1)")
	})
	t.Run("max-sessions", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, envOpts{reg: func(c *sessions.Config) { c.MaxSessions = 1 }})
		cc := e.chat()
		cc.create() // viewed by this socket: nothing detached to evict
		m := cc.callRaw("session.create", map[string]any{})
		wantCapacity(t, m, "session capacity reached: --max-sessions (1)", "--max-sessions", 1)
	})
	t.Run("per-user data", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, envOpts{reg: func(c *sessions.Config) { c.MaxSessionsPerUser = 1 }})
		cc := e.chat()
		cc.create()
		m := cc.callRaw("session.create", map[string]any{})
		wantCapacity(t, m, "user capacity reached: --max-sessions-per-user (1)", "--max-sessions-per-user", 1)
	})
}

// wantCapacity fails t unless the reply m is error 4029 with message msg
// and data {"limit": limit, "max": max}.
func wantCapacity(t *testing.T, m map[string]any, msg, limit string, max int) {
	t.Helper()
	e, _ := m["error"].(map[string]any)
	var data map[string]any
	raw, _ := e["data"].(json.RawMessage)
	_ = json.Unmarshal(raw, &data) // nil data fails below
	if errCode(m) != handlers.CodeCapacity || e["message"] != msg ||
		data["limit"] != limit || data["max"] != float64(max) {
		t.Fatalf("reply %v, want %d %q with data limit %q max %d", m, handlers.CodeCapacity, msg, limit, max)
	}
}

// wantTerminalRefused fails t unless a new terminal of e is refused before
// the upgrade with 503 and a body holding msg.
func wantTerminalRefused(t *testing.T, e *env, msg string) {
	t.Helper()
	_, resp, err := websocket.Dial(t.Context(), e.url+"/ws/pty", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("another terminal: %v %v", resp, err)
	}
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), msg) {
		t.Fatalf("body %q does not name the limit (%q)", body, msg)
	}
}

// TestTerminalRefusalSaysTheCap: a session whose terminal was refused at
// a cap gets the cap's sentence from GET /terminal/refusal as "retrying"
// (the page retries, and says why), and nothing once its terminal started.
func TestTerminalRefusalSaysTheCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 1})
	refusal := httptest.NewServer(&handlers.TerminalRefusal{Registry: e.reg})
	t.Cleanup(refusal.Close)
	why := func(sid string) map[string]string {
		t.Helper()
		resp, err := http.Get(refusal.URL + "?session_id=" + sid)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]string
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /terminal/refusal: %d %v", resp.StatusCode, err)
		}
		return body
	}
	first := e.pty(url.Values{}) // a terminal-only session's terminal holds the one slot
	first.waitText("hello")
	sid := e.chat().create()
	_, resp, err := websocket.Dial(t.Context(), e.url+"/ws/pty?session_id="+sid, nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("the session's terminal at --max-workers 1: %v %v", resp, err)
	}
	if got := why(sid); got["refusal"] != "" || got["retrying"] != "worker capacity reached: --max-workers (1)" {
		t.Fatalf("refused at the cap: %v", got)
	}
	if recs := e.logs.Records("terminal refused"); len(recs) != 1 || recs[0]["sid"] != sid {
		t.Fatalf("terminal refused records %v, want one naming %s", recs, sid)
	}
	first.drop() // its session closes, and its terminal with it
	testkit.WaitFor(t, 10*time.Second, "the slot free", func() bool { return e.mgr.Count() == 0 })
	e.pty(url.Values{"session_id": {sid}}).waitText("hello")
	if got := why(sid); got["refusal"] != "" || got["retrying"] != "" {
		t.Fatalf("after its terminal started: %v", got)
	}
}
