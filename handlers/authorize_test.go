package handlers_test

import (
	"context"
	"errors"
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
	"github.com/dashgate/dashgate/workers"
)

// The accounting of authorization, in the spirit of coder's dbauthz: every
// method the handlers call on the registry (the interfaces below) has an
// entry in authChecks, and each entry proves, on a real registry (real
// workers, real ptys, a real SQLite file) with two principals, that
// another user's session answers exactly as a missing one, or that an
// admin's method reaches every session. Adding a method to one of these
// interfaces without an entry fails TestEveryRegistryMethodIsAuthorized.

// handlerFacing are the interfaces through which the handlers reach the
// registry.
var handlerFacing = []reflect.Type{
	reflect.TypeFor[handlers.ChatRegistry](),
	reflect.TypeFor[handlers.SessionWatcher](),
	reflect.TypeFor[handlers.TerminalRegistry](),
	reflect.TypeFor[handlers.AdminSessions](),
	reflect.TypeFor[handlers.AdminCluster](),
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

// changed returns the session.changed events v got for sid.
func (v *authViewer) changed(sid string) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for _, ev := range v.events {
		if c, ok := ev.Payload.(sessions.Change); ok && ev.Type == "session.changed" && c.SessionID == sid {
			n++
		}
	}
	return n
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
	in, err := f.reg.Create(v, "alice's", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.reg.Exec(t.Context(), v, in.ID, command); err != nil {
		t.Fatal(err)
	}
	return in.ID
}

// asMissing fails unless foreign, the answer for another user's session,
// is the answer for a missing one: ErrNotFound, word for word.
func asMissing(t *testing.T, what string, foreign, absent error) {
	t.Helper()
	if !errors.Is(foreign, sessions.ErrNotFound) || !errors.Is(absent, sessions.ErrNotFound) || foreign.Error() != absent.Error() {
		t.Fatalf("%s: another user's session answers %v, a missing one %v; want both %v", what, foreign, absent, sessions.ErrNotFound)
	}
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

func listed(list []sessions.Info, sid string) bool {
	for _, in := range list {
		if in.ID == sid {
			return true
		}
	}
	return false
}

// authChecks holds, per "Interface.Method", the proof that the method is
// authorized.
var authChecks = map[string]func(t *testing.T, f *twoUsers){
	"ChatRegistry.Create": func(t *testing.T, f *twoUsers) {
		bv := newViewer(bob)
		in, err := f.reg.Create(bv, "bob's", false)
		if err != nil {
			t.Fatal(err)
		}
		if listed(f.reg.List(alice), in.ID) || !listed(f.reg.List(bob), in.ID) {
			t.Fatalf("bob's new session: listed for alice %v, for bob %v", listed(f.reg.List(alice), in.ID), listed(f.reg.List(bob), in.ID))
		}
		_, foreign := f.reg.Resume(newViewer(alice), in.ID)
		_, absent := f.reg.Resume(newViewer(alice), missing)
		asMissing(t, "alice resumes bob's new session", foreign, absent)
	},
	"ChatRegistry.Resume": func(t *testing.T, f *twoUsers) {
		for _, p := range []sessions.Principal{bob, sessions.AdminPrincipal} {
			_, foreign := f.reg.Resume(newViewer(p), f.live)
			_, absent := f.reg.Resume(newViewer(p), missing)
			asMissing(t, "resume as "+p.User, foreign, absent)
		}
		f.stillAlices(t)
	},
	"ChatRegistry.Close": func(t *testing.T, f *twoUsers) {
		_, foreign := f.reg.Close(bob, f.live, sessions.EndClientClose)
		_, absent := f.reg.Close(bob, missing, sessions.EndClientClose)
		asMissing(t, "close", foreign, absent)
		f.stillAlices(t)
		// One alice closed a moment ago: "closed": false for her, not
		// found for bob.
		_, ended := f.reg.Close(bob, f.closed, sessions.EndClientClose)
		asMissing(t, "close of alice's ended session", ended, absent)
		if ok, err := f.reg.Close(alice, f.closed, sessions.EndClientClose); ok || err != nil {
			t.Fatalf("alice closes her ended session again: %v, %v; want false, nil", ok, err)
		}
	},
	"ChatRegistry.List": func(t *testing.T, f *twoUsers) {
		if got := f.reg.List(bob); len(got) != 0 {
			t.Fatalf("bob lists %+v; want none of alice's", got)
		}
		if !listed(f.reg.List(alice), f.live) {
			t.Fatal("alice does not list her session")
		}
	},
	"ChatRegistry.Exec": func(t *testing.T, f *twoUsers) {
		bv := newViewer(bob)
		_, foreign := f.reg.Exec(t.Context(), bv, f.live, "/echo bob was here")
		_, absent := f.reg.Exec(t.Context(), bv, missing, "/echo bob was here")
		asMissing(t, "slash.exec", foreign, absent)
		f.stillAlices(t)
	},
	"ChatRegistry.Prompt": func(t *testing.T, f *twoUsers) {
		bv := newViewer(bob)
		_, _, foreign := f.reg.Prompt(bv, f.live, "hello")
		_, _, absent := f.reg.Prompt(bv, missing, "hello")
		asMissing(t, "prompt.submit", foreign, absent)
		f.stillAlices(t)
	},
	"ChatRegistry.Interrupt": func(t *testing.T, f *twoUsers) {
		bv := newViewer(bob)
		_, foreign := f.reg.Interrupt(bv, f.live)
		_, absent := f.reg.Interrupt(bv, missing)
		asMissing(t, "session.interrupt", foreign, absent)
	},
	"ChatRegistry.Leave": func(t *testing.T, f *twoUsers) {
		bv := newViewer(bob)
		_, foreign := f.reg.Leave(bv, f.live)
		_, absent := f.reg.Leave(bv, missing)
		asMissing(t, "session.detach", foreign, absent)
		f.stillAlices(t)
	},
	// DetachViewer acts on the sessions its viewer views, and a viewer
	// views only what authorize let it: bob's socket going leaves alice's
	// session as it was.
	"ChatRegistry.DetachViewer": func(t *testing.T, f *twoUsers) {
		bv := newViewer(bob)
		f.reg.Resume(bv, f.live)
		f.reg.Exec(t.Context(), bv, f.live, "/echo x")
		close(bv.done)
		f.reg.DetachViewer(bv, workers.ReasonDetach)
		f.reg.Wait()
		f.stillAlices(t)
	},
	"ChatRegistry.Reopen": func(t *testing.T, f *twoUsers) {
		bv := newViewer(bob)
		_, absent := f.reg.Reopen(t.Context(), bv, missing)
		for _, sid := range []string{f.live, f.closed} {
			_, foreign := f.reg.Reopen(t.Context(), bv, sid)
			asMissing(t, "session.reopen", foreign, absent)
		}
		if listed(f.reg.List(sessions.AdminPrincipal), f.closed) {
			t.Fatal("bob's reopen brought alice's closed session back")
		}
	},
	"ChatRegistry.Delete": func(t *testing.T, f *twoUsers) {
		absent := f.reg.Delete(t.Context(), bob, missing)
		for _, sid := range []string{f.live, f.closed} {
			asMissing(t, "session.delete", f.reg.Delete(t.Context(), bob, sid), absent)
		}
		f.stillAlices(t)
		if _, _, err := f.reg.History(t.Context(), alice, f.closed, 0, 10); err != nil {
			t.Fatalf("alice's closed session after bob's delete: %v", err)
		}
	},
	"ChatRegistry.Rename": func(t *testing.T, f *twoUsers) {
		absent := f.reg.Rename(t.Context(), bob, missing, "bob's now")
		for _, sid := range []string{f.live, f.closed} {
			asMissing(t, "session.rename", f.reg.Rename(t.Context(), bob, sid, "bob's now"), absent)
		}
		f.stillAlices(t)
		closed, _, err := f.reg.ListClosed(t.Context(), alice, time.Time{}, 10)
		if err != nil || len(closed) != 1 || closed[0].Title != "alice's" {
			t.Fatalf("alice's closed sessions after bob's rename: %+v, %v", closed, err)
		}
		if err := f.reg.Rename(t.Context(), alice, f.closed, "alice's, renamed"); err != nil {
			t.Fatalf("alice renames her closed session: %v", err)
		}
		closed, _, err = f.reg.ListClosed(t.Context(), alice, time.Time{}, 10)
		if err != nil || len(closed) != 1 || closed[0].Title != "alice's, renamed" {
			t.Fatalf("alice's closed sessions after her rename: %+v, %v", closed, err)
		}
	},
	"ChatRegistry.History": func(t *testing.T, f *twoUsers) {
		_, _, absent := f.reg.History(t.Context(), bob, missing, 0, 10)
		for _, sid := range []string{f.live, f.closed} {
			_, _, foreign := f.reg.History(t.Context(), bob, sid, 0, 10)
			asMissing(t, "session.history", foreign, absent)
			if es, _, err := f.reg.History(t.Context(), alice, sid, 0, 10); err != nil || len(es) == 0 {
				t.Fatalf("alice's history: %v, %v", es, err)
			}
		}
	},
	"ChatRegistry.ListClosed": func(t *testing.T, f *twoUsers) {
		if got, _, err := f.reg.ListClosed(t.Context(), bob, time.Time{}, 10); err != nil || len(got) != 0 {
			t.Fatalf("bob's closed sessions: %+v, %v; want none", got, err)
		}
		if got, _, err := f.reg.ListClosed(t.Context(), alice, time.Time{}, 10); err != nil || len(got) != 1 || got[0].ID != f.closed {
			t.Fatalf("alice's closed sessions: %+v, %v", got, err)
		}
	},
	"ChatRegistry.Search": func(t *testing.T, f *twoUsers) {
		if hits, err := f.reg.Search(t.Context(), bob, "secret", 10); err != nil || len(hits) != 0 {
			t.Fatalf("bob finds %+v, %v; want nothing of alice's", hits, err)
		}
		if hits, err := f.reg.Search(t.Context(), alice, "secret", 10); err != nil || len(hits) != 4 { // two commands, two outputs
			t.Fatalf("alice finds %+v, %v", hits, err)
		}
	},
	"ChatRegistry.RespondApproval": func(t *testing.T, f *twoUsers) {
		bv := newViewer(bob)
		_, foreign := f.reg.RespondApproval(t.Context(), bv, f.live, "req-1", sessions.ChoiceOnce)
		_, absent := f.reg.RespondApproval(t.Context(), bv, missing, "req-1", sessions.ChoiceOnce)
		asMissing(t, "approval.respond", foreign, absent)
		if ok, err := f.reg.RespondApproval(t.Context(), f.av, f.live, "req-1", sessions.ChoiceOnce); ok || err != nil {
			t.Fatalf("alice answers an unknown approval: %v, %v; want false, nil", ok, err)
		}
	},
	"ChatRegistry.Configure": func(t *testing.T, f *twoUsers) {
		bv := newViewer(bob)
		asMissing(t, "session.configure", f.reg.Configure(bv, f.live, "bobs-model"), f.reg.Configure(bv, missing, "bobs-model"))
		f.stillAlices(t)
	},
	"SessionWatcher.Watch": func(t *testing.T, f *twoUsers) {
		aw, bw := newViewer(alice), newViewer(bob)
		defer f.reg.Watch(aw)()
		defer f.reg.Watch(bw)()
		if err := f.reg.Rename(t.Context(), alice, f.live, "alice's"); err != nil {
			t.Fatal(err)
		}
		// Both watchers are told in one pass of the registry's teller:
		// once alice's watcher has it, bob's would have too.
		testkit.WaitFor(t, 5*time.Second, "alice's watcher told", func() bool { return aw.changed(f.live) > 0 })
		if aw.changed(f.live) != 1 || bw.changed(f.live) != 0 {
			t.Fatalf("session.changed of alice's rename: alice's watcher %d, bob's %d; want 1, 0", aw.changed(f.live), bw.changed(f.live))
		}
	},
	"TerminalRegistry.AttachTerminal": func(t *testing.T, f *twoUsers) {
		_, foreign := f.reg.AttachTerminal(t.Context(), bob, f.live, sessions.TerminalOptions{})
		_, absent := f.reg.AttachTerminal(t.Context(), bob, missing, sessions.TerminalOptions{})
		asMissing(t, "terminal attach", foreign, absent)
		if in, _ := f.reg.Get(alice, f.live); in.PTYPID != 0 {
			t.Fatalf("bob's attach started alice's terminal: %+v", in)
		}
		// Bob's own terminal (no session_id) is his: alice cannot take it.
		a, err := f.reg.AttachTerminal(t.Context(), bob, "", sessions.TerminalOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Detach(workers.ReasonDetach)
		_, foreign = f.reg.AttachTerminal(t.Context(), alice, a.SessionID, sessions.TerminalOptions{})
		asMissing(t, "alice attaches bob's terminal", foreign, absent)
	},
	// The admin page's methods act for the admin, who may list and end
	// every session (and reads none: see ChatRegistry.Resume); a user
	// doing the same reaches only their own.
	"AdminSessions.List": func(t *testing.T, f *twoUsers) {
		bin, err := f.reg.Create(newViewer(bob), "bob's", false)
		if err != nil {
			t.Fatal(err)
		}
		all := f.reg.Admin().List()
		if !listed(all, f.live) || !listed(all, bin.ID) {
			t.Fatalf("the admin lists %+v; want alice's and bob's", all)
		}
		if listed(f.reg.List(bob), f.live) {
			t.Fatal("bob lists alice's session")
		}
	},
	"AdminSessions.Close": func(t *testing.T, f *twoUsers) {
		sid := f.aliceSession(t, newViewer(alice), "/echo x")
		_, foreign := f.reg.Close(bob, sid, sessions.EndAdminReap)
		_, absent := f.reg.Close(bob, missing, sessions.EndAdminReap)
		asMissing(t, "reap as bob", foreign, absent)
		if ok, err := f.reg.Admin().Close(sessions.AdminPrincipal, sid, sessions.EndAdminReap); !ok || err != nil {
			t.Fatalf("the admin reaps alice's session: %v, %v", ok, err)
		}
	},
	"AdminSessions.ReapDetached": func(t *testing.T, f *twoUsers) {
		v := newViewer(alice)
		sid := f.aliceSession(t, v, "/echo x")
		close(v.done)
		f.reg.DetachViewer(v, workers.ReasonDetach)
		if n := f.reg.ReapDetached(bob); n != 0 {
			t.Fatalf("bob reaped %d detached sessions; want 0", n)
		}
		if _, ok := f.reg.Get(alice, sid); !ok {
			t.Fatal("alice's detached session gone after bob's reap")
		}
		if n := f.reg.Admin().ReapDetached(sessions.AdminPrincipal); n != 1 {
			t.Fatalf("the admin reaped %d detached sessions; want alice's", n)
		}
	},
	"AdminSessions.ReapUser": func(t *testing.T, f *twoUsers) {
		// Only an admin reaps a user's sessions: bob (no admin) reaps
		// none of alice's, nor of his own.
		bv := newViewer(bob)
		bin, err := f.reg.Create(bv, "bob's", false)
		if err != nil {
			t.Fatal(err)
		}
		if n := f.reg.ReapUser(bob, "alice"); n != 0 {
			t.Fatalf("bob reaped %d of alice's sessions; want 0", n)
		}
		if n := f.reg.ReapUser(bob, "bob"); n != 0 {
			t.Fatalf("bob (no admin) reaped %d of his own sessions; want 0", n)
		}
		f.stillAlices(t)
		if n := f.reg.Admin().ReapUser(sessions.AdminPrincipal, "alice"); n != 1 {
			t.Fatalf("the admin reaped %d of alice's sessions; want her live one", n)
		}
		if _, ok := f.reg.Get(alice, f.live); ok {
			t.Fatal("alice's session live after the admin reaped her")
		}
		if _, ok := f.reg.Get(bob, bin.ID); !ok {
			t.Fatal("bob's session gone after the admin reaped alice")
		}
	},
	"AdminSessions.ReapWorker": func(t *testing.T, f *twoUsers) {
		in, _ := f.reg.Get(alice, f.live)
		asMissing(t, "worker reap as bob", f.reg.ReapWorker(bob, in.WorkerPID), f.reg.ReapWorker(bob, 1<<30))
		f.stillAlices(t)
		if err := f.reg.Admin().ReapWorker(sessions.AdminPrincipal, in.WorkerPID); err != nil {
			t.Fatalf("the admin reaps alice's worker: %v", err)
		}
		testkit.WaitFor(t, 5*time.Second, "alice's worker reaped", func() bool { return testkit.Reaped(in.WorkerPID) })
	},
	// AdminCluster is the registry's AdminView, which only the admin
	// routes are given (as AdminSessions). Node and Elsewhere read no
	// session of a user's beyond what the admin lists anyway; ForwardReap
	// acts, so it checks its principal itself.
	"AdminCluster.Node": func(t *testing.T, f *twoUsers) {
		if node := f.reg.Admin().Node(); node != "" {
			t.Fatalf("a registry that claimed no lease names node %q", node)
		}
	},
	"AdminCluster.Elsewhere": func(t *testing.T, f *twoUsers) {
		if rows, err := f.reg.Admin().Elsewhere(t.Context(), time.Now()); rows != nil || err != nil {
			t.Fatalf("Elsewhere of a node alone: %v, %v; want nothing", rows, err)
		}
	},
	"AdminCluster.ForwardReap": func(t *testing.T, f *twoUsers) {
		in, _ := f.reg.Get(alice, f.live)
		rr := sessions.RemoteReap{Node: "other", PID: in.WorkerPID}
		if err := f.reg.Admin().ForwardReap(bob, rr); !errors.Is(err, sessions.ErrNotFound) {
			t.Fatalf("a reap forwarded by bob, no admin: %v; want %v", err, sessions.ErrNotFound)
		}
		if err := f.reg.Admin().ForwardReap(sessions.AdminPrincipal, rr); !errors.Is(err, sessions.ErrNoCluster) {
			t.Fatalf("the admin's forward on a node alone: %v; want %v", err, sessions.ErrNoCluster)
		}
		f.stillAlices(t)
	},
}

// TestEveryRegistryMethodIsAuthorized: every method of the handler-facing
// interfaces has an authorization check, the check exists only for a
// method that does, and each passes with two principals.
func TestEveryRegistryMethodIsAuthorized(t *testing.T) {
	t.Parallel()
	want := map[string]bool{}
	for _, it := range handlerFacing {
		for i := range it.NumMethod() {
			name := it.Name() + "." + it.Method(i).Name
			want[name] = true
			if authChecks[name] == nil {
				t.Errorf("%s has no entry in authChecks: say how it is authorized, and prove it", name)
			}
		}
	}
	for name := range authChecks {
		if !want[name] {
			t.Errorf("authChecks has %s, which no handler-facing interface has", name)
		}
	}
	if t.Failed() {
		return
	}
	for _, it := range handlerFacing {
		for i := range it.NumMethod() {
			name := it.Name() + "." + it.Method(i).Name
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				authChecks[name](t, newTwoUsers(t))
			})
		}
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
