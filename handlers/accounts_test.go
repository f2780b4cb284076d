package handlers_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/user"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/dashgate/dashgate/accounts"
	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/sessions"
)

// currentAccount is the account this test runs as, a stand-in for a
// user's own (the real-account tests are in sessions and e2e).
func currentAccount(t *testing.T) *accounts.Account {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &accounts.Account{Name: u.Username, UID: uint32(uid), GID: uint32(gid), Groups: []uint32{uint32(gid)}, Home: t.TempDir(), Shell: "/bin/sh"}
}

// With sessions.Config.Accounts, over a real server and real children:
// mallory, whom the lookup refuses, gets her slash.exec and prompt.submit
// answered 5004 with the refusal's sentence as the message
// (data.failure "spawn"), the chat history keeps it as notices (not error
// entries), and /ws/pty answers 403 with the reason as its body, for her
// session and without one; nothing is logged at ERROR. alice's worker
// starts beside her.
func TestAccountRefusalAnswers(t *testing.T) {
	t.Parallel()
	reason := `no Unix account for dashgate user "mallory"`
	acct := currentAccount(t)
	e := newEnv(t, envOpts{reg: func(c *sessions.Config) {
		c.Accounts = func(u string) (*accounts.Account, error) {
			if u == "alice" {
				return acct, nil
			}
			return nil, &accounts.RefusedError{User: u, Reason: reason}
		}
	}})
	as := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p := sessions.Principal{User: r.Header.Get("X-Test-User")}
			h.ServeHTTP(w, r.WithContext(handlers.WithPrincipal(r.Context(), p)))
		})
	}
	mux := http.NewServeMux()
	mux.Handle("/ws/chat", as(&handlers.Chat{Registry: e.reg, Log: e.log, Version: "test"}))
	mux.Handle("/ws/pty", as(&handlers.Terminal{Registry: e.reg, Log: e.log}))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	url := "ws" + strings.TrimPrefix(srv.URL, "http")
	dial := func(user string) *chatClient {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		c, _, err := testkit.DialChat(ctx, url+"/ws/chat", testkit.DialOptions{Header: http.Header{"X-Test-User": {user}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return &chatClient{Chat: c, t: t}
	}

	mallory := dial("mallory")
	sid := mallory.create()
	for _, c := range []struct{ method, key, value string }{
		{"slash.exec", "command", "/echo hi"},
		{"prompt.submit", "text", "hello"},
	} {
		m := mallory.callRaw(c.method, map[string]any{"session_id": sid, c.key: c.value})
		rpcErr, _ := m["error"].(map[string]any)
		var data map[string]any
		raw, _ := rpcErr["data"].(json.RawMessage)
		json.Unmarshal(raw, &data)
		if errCode(m) != handlers.CodeWorkerFailed || rpcErr["message"] != reason || data["failure"] != "spawn" {
			t.Errorf("mallory's %s: %v; want %d %q with data.failure spawn", c.method, m, handlers.CodeWorkerFailed, reason)
		}
	}
	hist := mallory.call("session.history", map[string]any{"session_id": sid})
	var kinds []string
	for _, raw := range hist["entries"].([]any) {
		en := raw.(map[string]any)
		kinds = append(kinds, en["kind"].(string))
		if en["kind"] == "notice" && en["text"] != reason {
			t.Errorf("mallory's notice %q; want %q", en["text"], reason)
		}
	}
	if got := strings.Join(kinds, ","); got != "slash,notice,notice" {
		t.Errorf("mallory's history kinds %s; want slash,notice,notice", got)
	}

	for _, path := range []string{"/ws/pty?session_id=" + sid, "/ws/pty"} {
		_, resp, err := websocket.Dial(t.Context(), url+path, &websocket.DialOptions{HTTPHeader: http.Header{"X-Test-User": {"mallory"}}})
		if err == nil || resp == nil {
			t.Fatalf("mallory's %s: %v, %v; want 403", path, resp, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusForbidden || strings.TrimSpace(string(body)) != reason {
			t.Errorf("mallory's %s: %d %q; want 403 %q", path, resp.StatusCode, body, reason)
		}
	}
	if recs := e.logs.Records("internal error"); len(recs) > 0 {
		t.Errorf("a refusal logged as an internal error: %v", recs)
	}

	alice := dial("alice")
	asid := alice.create()
	if out := alice.call("slash.exec", map[string]any{"session_id": asid, "command": "/echo hi"}); out["output"] != "hi" {
		t.Errorf("alice's /echo: %v", out)
	}
}
