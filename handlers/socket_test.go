package handlers_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/sessions"
)

// TestRevokedUserSocketsClose4403: a request context cancelled with
// sessions.ErrViewerRevoked (package web's Revoke does so for a removed
// user) closes the chat and terminal sockets with 4403 and its reason,
// not 1001, and the chat socket's session detaches.
func TestRevokedUserSocketsClose4403(t *testing.T) {
	t.Parallel()
	base, revoke := context.WithCancelCause(context.Background())
	defer revoke(nil)
	e := newEnv(t, envOpts{base: base})
	p := e.pty(nil)
	p.waitText("hello")
	cc := e.chat()
	sid := cc.create()
	revoke(sessions.ErrViewerRevoked)

	check := func(what string, err error) {
		t.Helper()
		var ce websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != handlers.CloseRevoked || ce.Reason != "access revoked: user removed" {
			t.Errorf("%s socket closed with %v, want 4403 %q", what, err, "access revoked: user removed")
		}
	}
	check("terminal", p.closeErr())
	testkit.WaitFor(t, 10*time.Second, "chat socket closed", func() bool { return cc.Err() != nil })
	check("chat", cc.Err())
	testkit.WaitFor(t, 10*time.Second, "session detached", func() bool {
		in, ok := e.reg.Get(sessions.Principal{}, sid)
		return ok && in.State == sessions.StateDetached
	})
}
