package handlers_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/sessions"
)

// TestAdminDashboardListsOwnSessions: on the dashboard (the chat socket)
// an admin user is a user like any other: session.list holds its own
// sessions, never another user's (their titles are that user's words;
// admins list everyone's on /admin, titles hidden), and another user's
// session.changed never reaches its sockets (found by a new-user trial:
// alice, an admin, saw bob's sessions and titles in her list, live).
func TestAdminDashboardListsOwnSessions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	mux := http.NewServeMux()
	mux.Handle("/ws/chat", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := sessions.Principal{User: r.Header.Get("X-Test-User"), Admin: r.Header.Get("X-Test-Admin") == "1"}
		chat := &handlers.Chat{Registry: e.reg, Log: e.log, Version: "test"}
		chat.ServeHTTP(w, r.WithContext(handlers.WithPrincipal(r.Context(), p)))
	}))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	dial := func(user, admin string) *chatClient {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		conn, _, err := testkit.DialChat(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/ws/chat",
			testkit.DialOptions{Header: http.Header{"X-Test-User": {user}, "X-Test-Admin": {admin}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return &chatClient{Chat: conn, t: t}
	}
	alice, bob := dial("alice", "1"), dial("bob", "")
	own := alice.create()
	bobs := bob.create()
	bob.call("session.rename", map[string]any{"session_id": bobs, "title": "bob's secret plan"})
	alice.call("session.rename", map[string]any{"session_id": own, "title": "alice's"})
	// The changes are told in order: alice's own rename comes after bob's.
	alice.waitChange(own, "attached alice's <nil>")
	if got := alice.changes(bobs); len(got) > 0 {
		t.Fatalf("the admin's socket was told of bob's session: %q", got)
	}
	list := alice.call("session.list", nil)["sessions"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["session_id"] != own {
		t.Fatalf("the admin's session.list = %v; want its own session %s alone", list, own)
	}
}
