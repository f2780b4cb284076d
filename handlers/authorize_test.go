package handlers_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/sessions"
)

// Authorization is accounted for in package sessions
// (TestEveryMethodIsAccounted walks the exported methods of
// *sessions.Registry and sessions.AdminView, which the handlers' interfaces
// are cut from). This file proves the same on the wire: over real sockets,
// on a real registry (real workers, real ptys, a real SQLite file),
// another user's session answers every session method as a missing one.

// The handlers reach the registry through these interfaces, each cut
// from an accounted type.
var (
	_ handlers.ChatRegistry     = (*sessions.Registry)(nil)
	_ handlers.SessionWatcher   = (*sessions.Registry)(nil)
	_ handlers.TerminalRegistry = (*sessions.Registry)(nil)
	_ handlers.Transcripts      = (*sessions.Registry)(nil)
	_ handlers.AdminSessions    = sessions.AdminView{}
	_ handlers.AdminCluster     = sessions.AdminView{}
)

// TestHandlersHoldInterfaces: no handler holds the registry or its admin
// view itself, only an interface of the methods it calls (a concrete
// registry would reach any method, such as one a test here does not
// cover).
func TestHandlersHoldInterfaces(t *testing.T) {
	t.Parallel()
	concrete := []reflect.Type{reflect.TypeFor[*sessions.Registry](), reflect.TypeFor[sessions.AdminView]()}
	for _, h := range []any{handlers.Chat{}, handlers.Terminal{}, handlers.Admin{}, handlers.Export{}} {
		typ := reflect.TypeOf(h)
		for i := range typ.NumField() {
			f := typ.Field(i)
			for _, c := range concrete {
				if f.Type == c {
					t.Errorf("handlers.%s.%s is a %v: give it an interface of the methods it calls", typ.Name(), f.Name, c)
				}
			}
		}
	}
}

var (
	alice = sessions.Principal{User: "alice"}
	bob   = sessions.Principal{User: "bob"}
)

// missing is a session id no one has.
const missing = "0000000000000000deadbeef"

// authViewer is a socket's viewer carrying its principal.
type authViewer struct {
	p      sessions.Principal
	done   chan struct{}
	mu     sync.Mutex
	events []*sessions.Event
}

func newViewer(p sessions.Principal) *authViewer {
	return &authViewer{p: p, done: make(chan struct{})}
}

func (v *authViewer) Principal() sessions.Principal { return v.p }
func (v *authViewer) Done() <-chan struct{}         { return v.done }
func (v *authViewer) Deliver(ev *sessions.Event) {
	v.mu.Lock()
	v.events = append(v.events, ev)
	v.mu.Unlock()
}

// twoUsers is a registry where alice has a live session (with a worker and
// a history) and a closed one, both stored in a real SQLite file.
type twoUsers struct {
	e      *env
	reg    *sessions.Registry
	av     *authViewer // alice's socket, viewing live
	live   string
	closed string
}

func newTwoUsers(t *testing.T) *twoUsers {
	t.Helper()
	e := storeEnv(t, openStore(t))
	f := &twoUsers{e: e, reg: e.reg, av: newViewer(alice)}
	f.live = f.aliceSession(t, f.av, "/echo secret of alice")
	f.closed = f.aliceSession(t, newViewer(alice), "/echo closed secret")
	if ok, err := f.reg.Close(alice, f.closed, sessions.EndClientClose); !ok || err != nil {
		t.Fatalf("alice closes her session: %v, %v", ok, err)
	}
	return f
}

// aliceSession makes a session of alice viewed by v, with a worker that
// ran command.
func (f *twoUsers) aliceSession(t *testing.T, v *authViewer, command string) string {
	t.Helper()
	in, err := f.reg.Create(v, sessions.NewSession{Title: "alice's"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.reg.Exec(t.Context(), v, in.ID, command); err != nil {
		t.Fatal(err)
	}
	return in.ID
}

// stillAlices fails unless alice's live session is as it was: live,
// attached, viewed by her socket alone, with its title.
func (f *twoUsers) stillAlices(t *testing.T) {
	t.Helper()
	in, ok := f.reg.Get(alice, f.live)
	if !ok || in.State != sessions.StateAttached || in.Viewers != 1 || in.Title != "alice's" || in.Model != "" || in.WorkerPID == 0 {
		t.Fatalf("alice's session after bob's call: %+v (live %v)", in, ok)
	}
}

// TestForeignSessionOnTheWire: over real sockets, another user's session
// answers every session method with the very reply of a missing one (code
// and message), and /ws/pty refuses it with the same status.
func TestForeignSessionOnTheWire(t *testing.T) {
	t.Parallel()
	f := newTwoUsers(t)
	// The principal is resolved at the edge (web's auth, here a header)
	// and read by the handlers from the request.
	as := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p := sessions.Principal{User: r.Header.Get("X-Test-User")}
			h.ServeHTTP(w, r.WithContext(handlers.WithPrincipal(r.Context(), p)))
		})
	}
	mux := http.NewServeMux()
	mux.Handle("/ws/chat", as(&handlers.Chat{Registry: f.reg, Log: f.e.log, Version: "test"}))
	mux.Handle("/ws/pty", as(&handlers.Terminal{Registry: f.reg, Log: f.e.log}))
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
	mine, theirs := dial("alice"), dial("bob")

	calls := []struct {
		method string
		params map[string]any
	}{
		{"session.resume", nil},
		{"session.reopen", nil},
		{"session.history", nil},
		{"session.rename", map[string]any{"title": "bob's"}},
		{"session.configure", map[string]any{"model": "m"}},
		{"session.interrupt", nil},
		{"session.detach", nil},
		{"slash.exec", map[string]any{"command": "/echo bob"}},
		{"prompt.submit", map[string]any{"text": "hi"}},
		{"approval.respond", map[string]any{"request_id": "r", "choice": "once"}},
		{"session.close", nil},
		{"session.delete", nil},
	}
	for _, c := range calls {
		for _, sid := range []string{f.live, f.closed} {
			params := func(sid string) map[string]any {
				p := map[string]any{"session_id": sid}
				for k, v := range c.params {
					p[k] = v
				}
				return p
			}
			foreign := theirs.callRaw(c.method, params(sid))["error"]
			absent := theirs.callRaw(c.method, params(missing))["error"]
			if foreign == nil || !reflect.DeepEqual(foreign, absent) {
				t.Errorf("%s of alice's session %s answers bob %v; a missing one %v", c.method, sid, foreign, absent)
			}
		}
	}
	f.stillAlices(t)
	if n := len(mine.call("session.list", map[string]any{"include_closed": true})["sessions"].([]any)); n != 2 {
		t.Errorf("alice lists %d sessions after bob's calls; want her 2", n)
	}

	status := func(user, sid string) int {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		p, res, err := testkit.DialPTY(ctx, url+"/ws/pty?session_id="+sid, testkit.DialOptions{Header: http.Header{"X-Test-User": {user}}})
		if err == nil {
			p.Close()
			return http.StatusSwitchingProtocols
		}
		if res == nil {
			t.Fatalf("/ws/pty %s: %v", sid, err)
		}
		return res.StatusCode
	}
	if foreign, absent := status("bob", f.live), status("bob", missing); foreign != absent || foreign == http.StatusSwitchingProtocols {
		t.Errorf("/ws/pty of alice's session answers bob %d, a missing one %d", foreign, absent)
	}
	if got := status("alice", f.live); got != http.StatusSwitchingProtocols {
		t.Errorf("/ws/pty of alice's session answers alice %d", got)
	}
}
