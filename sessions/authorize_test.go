package sessions

import (
	"errors"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/workers"
)

// The accounting of authorization, in the spirit of coder's dbauthz: every
// exported method of the types themselves (*Registry and AdminView, walked
// by reflect, not the interfaces their callers happen to use) has an
// entry in accounting, as one of
//
//   - user: it acts for a principal on the sessions it owns. One that
//     takes a session id carries a byID proof, which the test itself
//     checks: bob's call on alice's session (live, and stored closed when
//     the method reaches those) answers exactly as his call on a missing
//     id, so does the admin token's on the anonymous user's (the admin
//     token owns nothing), and alice's own call works. One without an id
//     carries its own two-principal proof.
//   - admin: an admin's (every session), refused or scoped to its own for
//     anyone else as the method says, or without a principal at all and
//     then on AdminView, which only the admin routes are given.
//   - system: it acts for no principal (the server's own calls), with the
//     reason it touches no session of a caller's.
//
// A new exported method without an entry fails TestEveryMethodIsAccounted.

// class is how an exported method is authorized.
type class string

const (
	classUser   class = "user"
	classAdmin  class = "admin"
	classSystem class = "system"
)

// entry is one method's account.
type entry struct {
	class  class
	byID   *byID                              // user, taking a session id
	proof  func(t *testing.T, f *authFixture) // user without an id; admin
	reason string                             // system
}

// byID is the proof of a user method that takes a session id: call calls
// it for p on sid and returns what it answered (comparable with
// reflect.DeepEqual); ok checks alice's own call on each of her sessions.
type byID struct {
	call   func(t *testing.T, f *authFixture, p Principal, sid string) (any, error)
	ok     func(t *testing.T, f *authFixture, sid string, got any, err error)
	closed bool // it reaches stored closed sessions too: bob tries alice's closed one, alice uses it
	manage bool // it lists or ends (an admin may, on any session): the admin token is not a stranger to it
}

// missingID is a session id no one has.
const missingID = "0000000000000000deadbeef"

// authFixture is a registry where alice and the anonymous user each have a
// live session (viewed, with a worker and a history) and a closed one, in
// the store; bob has nothing.
type authFixture struct {
	h                *harness
	r                *Registry
	live, closed     string // alice's
	anon, anonClosed string // the anonymous user's: the admin token's User is "" too
	// files maps a session id to the id of a file uploaded into it, not sent.
	files map[string]string
}

func newAuthFixture(t *testing.T) *authFixture {
	t.Helper()
	h := newHarness(t, nil)
	f := &authFixture{h: h, r: h.r}
	f.live = f.session(t, alice, "alice's", "/echo secret of alice")
	f.closed = f.session(t, alice, "alice's", "/echo closed secret of alice")
	f.anon = f.session(t, anon, "anon's", "/echo secret of anon")
	f.anonClosed = f.session(t, anon, "anon's", "/echo closed secret of anon")
	for _, c := range []struct {
		p   Principal
		sid string
	}{{alice, f.closed}, {anon, f.anonClosed}} {
		if ok, err := f.r.Close(c.p, c.sid, EndClientClose); !ok || err != nil {
			t.Fatalf("%q closes her session: %v, %v", c.p.User, ok, err)
		}
	}
	return f
}

// session makes a session of p's viewed by a socket of p's, with a worker
// that ran command.
func (f *authFixture) session(t *testing.T, p Principal, title, command string) string {
	t.Helper()
	v := viewerOf(p)
	in, err := f.r.Create(v, NewSession{Title: title})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.r.Exec(t.Context(), v, in.ID, command); err != nil {
		t.Fatal(err)
	}
	ref, err := f.r.Attach(t.Context(), p, in.ID, NewAttachment{Name: "secret.txt", Size: -1, Body: strings.NewReader(command)})
	if err != nil {
		t.Fatal(err)
	}
	if f.files == nil {
		f.files = map[string]string{}
	}
	f.files[in.ID] = ref.ID
	return in.ID
}

// fileOf is the id of the file uploaded into sid, or one no session has.
func (f *authFixture) fileOf(sid string) string {
	if id := f.files[sid]; id != "" {
		return id
	}
	return missingID
}

// untouched fails unless the live sessions of alice and of the anonymous
// user are as they were: live, attached, viewed by their one socket, with
// their titles, no model and a worker.
func (f *authFixture) untouched(t *testing.T, after string) {
	t.Helper()
	for _, c := range []struct {
		p          Principal
		sid, title string
	}{{alice, f.live, "alice's"}, {anon, f.anon, "anon's"}} {
		in, ok := f.r.Get(c.p, c.sid)
		if !ok || in.State != StateAttached || in.Viewers != 1 || in.Title != c.title || in.Model != "" || in.WorkerPID == 0 {
			t.Fatalf("%q's session after %s: %+v (live %v)", c.p.User, after, in, ok)
		}
	}
}

// sameAnswer fails unless foreign (the answer for a session not the
// caller's) is exactly absent (the answer for a missing id).
func sameAnswer(t *testing.T, what string, foreign, absent any, foreignErr, absentErr error) {
	t.Helper()
	errText := func(err error) string {
		if err == nil {
			return "<nil>"
		}
		return err.Error()
	}
	if !reflect.DeepEqual(foreign, absent) || errText(foreignErr) != errText(absentErr) ||
		errors.Is(foreignErr, ErrNotFound) != errors.Is(absentErr, ErrNotFound) {
		t.Fatalf("%s answers %#v, %v; a missing id %#v, %v; want the same", what, foreign, foreignErr, absent, absentErr)
	}
}

// prove runs a byID proof on a fresh fixture.
func (b *byID) prove(t *testing.T, f *authFixture) {
	type stranger struct {
		p   Principal
		sid string
	}
	tries := []stranger{{bob, f.live}}
	if b.closed {
		tries = append(tries, stranger{bob, f.closed})
	}
	if !b.manage { // the admin token owns nothing, not even the anonymous user's
		tries = append(tries, stranger{AdminPrincipal, f.anon})
		if b.closed {
			tries = append(tries, stranger{AdminPrincipal, f.anonClosed})
		}
	}
	for _, s := range tries {
		foreign, foreignErr := b.call(t, f, s.p, s.sid)
		absent, absentErr := b.call(t, f, s.p, missingID)
		sameAnswer(t, "a call as "+actorOf(s.p)+" on another's session "+s.sid, foreign, absent, foreignErr, absentErr)
	}
	f.untouched(t, "the strangers' calls")
	own := []string{f.live}
	if b.closed {
		own = append(own, f.closed)
	}
	for _, sid := range own {
		got, err := b.call(t, f, alice, sid)
		b.ok(t, f, sid, got, err)
	}
}

func actorOf(p Principal) string {
	if p == AdminPrincipal {
		return "the admin token"
	}
	return p.User
}

// noErr is an ok of byID: alice's call did not fail.
func noErr(t *testing.T, _ *authFixture, sid string, got any, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("alice's call on her session %s: %v, %v", sid, got, err)
	}
}

// listed reports whether list has sid.
func listed(list []Info, sid string) bool {
	return slices.ContainsFunc(list, func(in Info) bool { return in.ID == sid })
}

// detachedOf makes a session of p's that is detached (its socket gone).
func (f *authFixture) detachedOf(t *testing.T, p Principal) string {
	t.Helper()
	v := viewerOf(p)
	in, err := f.r.Create(v, NewSession{Title: ""})
	if err != nil {
		t.Fatal(err)
	}
	v.leave()
	f.r.DetachViewer(v, workers.ReasonDetach)
	return in.ID
}

// settingsProof: alice's and the anonymous user's settings are each
// their own; bob reads none of alice's, and the admin token, which owns
// nothing, neither reads nor writes any (ErrNotFound), the anonymous
// user's included.
func settingsProof(t *testing.T, f *authFixture) {
	ctx := t.Context()
	dark, light := "dark", "light"
	if _, err := f.r.PutSettings(ctx, alice, store.SettingsPatch{Theme: &dark}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.r.PutSettings(ctx, anon, store.SettingsPatch{Theme: &light}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.r.PutSettings(ctx, AdminPrincipal, store.SettingsPatch{Theme: &dark}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the admin token writes settings: %v; want ErrNotFound", err)
	}
	for _, c := range []struct {
		p    Principal
		want string
	}{{alice, dark}, {anon, light}, {bob, ""}} {
		if s, err := f.r.Settings(ctx, c.p); err != nil || s.Theme != c.want {
			t.Fatalf("%s's settings: %+v, %v; want theme %q", actorOf(c.p), s, err, c.want)
		}
	}
	if s, err := f.r.Settings(ctx, AdminPrincipal); !errors.Is(err, ErrNotFound) || s != (store.Settings{}) {
		t.Fatalf("the admin token's settings: %+v, %v; want none, ErrNotFound", s, err)
	}
}

// reapDetachedProof: reap (Registry's or AdminView's) ends only the
// caller's own detached sessions for a user, every one for an admin.
func reapDetachedProof(reap func(f *authFixture, by Principal) int) func(t *testing.T, f *authFixture) {
	return func(t *testing.T, f *authFixture) {
		sid := f.detachedOf(t, alice)
		if n := reap(f, bob); n != 0 {
			t.Fatalf("bob reaped %d detached sessions; want none of alice's", n)
		}
		if _, ok := f.r.Get(alice, sid); !ok {
			t.Fatal("alice's detached session gone after bob's reap")
		}
		if n := reap(f, AdminPrincipal); n != 1 {
			t.Fatalf("the admin reaped %d detached sessions; want alice's", n)
		}
	}
}

// reapUserProof: reap (Registry's or AdminView's) ends a user's sessions
// for an admin only; bob, no admin, reaps no one's, not even his own.
func reapUserProof(reap func(f *authFixture, by Principal, user string) int) func(t *testing.T, f *authFixture) {
	return func(t *testing.T, f *authFixture) {
		mine := f.session(t, bob, "bob's", "/echo x")
		if n := reap(f, bob, "alice"); n != 0 {
			t.Fatalf("bob reaped %d of alice's sessions; want 0", n)
		}
		if n := reap(f, bob, "bob"); n != 0 {
			t.Fatalf("bob (no admin) reaped %d of his own sessions; want 0", n)
		}
		f.untouched(t, "bob's reaps")
		if n := reap(f, AdminPrincipal, "alice"); n != 1 {
			t.Fatalf("the admin reaped %d of alice's sessions; want her live one", n)
		}
		if _, ok := f.r.Get(alice, f.live); ok {
			t.Fatal("alice's session live after the admin reaped her")
		}
		if _, ok := f.r.Get(bob, mine); !ok {
			t.Fatal("bob's session gone after the admin reaped alice")
		}
	}
}

// reapWorkerProof: reap (Registry's or AdminView's) of another user's
// worker answers bob as an unknown pid does; the admin's reaps it.
func reapWorkerProof(reap func(f *authFixture, by Principal, pid int) error) func(t *testing.T, f *authFixture) {
	return func(t *testing.T, f *authFixture) {
		in, _ := f.r.Get(alice, f.live)
		foreign, absent := reap(f, bob, in.WorkerPID), reap(f, bob, 1<<30)
		sameAnswer(t, "bob's reap of alice's worker", nil, nil, foreign, absent)
		f.untouched(t, "bob's reap")
		if err := reap(f, AdminPrincipal, in.WorkerPID); err != nil {
			t.Fatalf("the admin reaps alice's worker: %v", err)
		}
	}
}

// closeProof: close (Registry's or AdminView's) of another user's
// session answers bob as a missing id; the admin's ends it.
func closeProof(closeAs func(f *authFixture, by Principal, sid string) (bool, error)) func(t *testing.T, f *authFixture) {
	return func(t *testing.T, f *authFixture) {
		for _, sid := range []string{f.live, f.closed} {
			foreign, foreignErr := closeAs(f, bob, sid)
			absent, absentErr := closeAs(f, bob, missingID)
			sameAnswer(t, "bob's close of alice's session", foreign, absent, foreignErr, absentErr)
		}
		f.untouched(t, "bob's closes")
		if ok, err := closeAs(f, AdminPrincipal, f.live); !ok || err != nil {
			t.Fatalf("the admin closes alice's session: %v, %v", ok, err)
		}
	}
}

// accounting is every exported method of *Registry and AdminView, by
// "Type.Method".
var accounting = map[string]entry{
	// Sessions by id, for their owner.
	"Registry.Resume": {class: classUser, byID: &byID{
		call: func(t *testing.T, f *authFixture, p Principal, sid string) (any, error) {
			return f.r.Resume(viewerOf(p), sid)
		},
		ok: func(t *testing.T, f *authFixture, sid string, got any, err error) {
			if res, _ := got.(ResumeResult); err != nil || res.ID != sid || len(res.History) == 0 {
				t.Fatalf("alice resumes her session: %+v, %v", got, err)
			}
		},
	}},
	"Registry.Reopen": {class: classUser, byID: &byID{
		closed: true,
		call: func(t *testing.T, f *authFixture, p Principal, sid string) (any, error) {
			return f.r.Reopen(t.Context(), viewerOf(p), sid)
		},
		ok: func(t *testing.T, f *authFixture, sid string, got any, err error) {
			if res, _ := got.(ResumeResult); err != nil || res.ID != sid || len(res.History) == 0 {
				t.Fatalf("alice reopens her session %s: %+v, %v", sid, got, err)
			}
		},
	}},
	"Registry.Close": {class: classUser, byID: &byID{
		closed: true, manage: true, // an admin ends any session: see AdminView.Close
		call: func(t *testing.T, f *authFixture, p Principal, sid string) (any, error) {
			return f.r.Close(p, sid, EndClientClose)
		},
		ok: func(t *testing.T, f *authFixture, sid string, got any, err error) {
			if want := sid == f.live; got != want || err != nil { // her closed one: "closed": false
				t.Fatalf("alice closes her session %s: %v, %v; want %v", sid, got, err, want)
			}
		},
	}},
	"Registry.Get": {class: classUser, byID: &byID{
		manage: true, // an admin lists any session: see AdminView.List
		call: func(t *testing.T, f *authFixture, p Principal, sid string) (any, error) {
			in, ok := f.r.Get(p, sid)
			return struct {
				Info
				OK bool
			}{in, ok}, nil
		},
		ok: func(t *testing.T, f *authFixture, sid string, got any, err error) {
			if !reflect.ValueOf(got).FieldByName("OK").Bool() {
				t.Fatalf("alice gets her session: %+v", got)
			}
		},
	}},
	"Registry.TerminalRefusal": {class: classUser, byID: &byID{
		call: func(t *testing.T, f *authFixture, p Principal, sid string) (any, error) {
			return nil, f.r.TerminalRefusal(p, sid)
		},
		ok: noErr,
	}},
	"Registry.TerminalDir": {class: classUser, byID: &byID{
		call: func(t *testing.T, f *authFixture, p Principal, sid string) (any, error) {
			dir, _, err := f.r.TerminalDir(p, sid, "")
			return dir, err
		},
		ok: func(t *testing.T, f *authFixture, sid string, got any, err error) {
			if dir, _ := got.(string); err != nil || dir == "" {
				t.Fatalf("alice's terminal directory of %s: %q, %v", sid, got, err)
			}
		},
	}},
	"Registry.Exec": {class: classUser, byID: &byID{
		call: func(t *testing.T, f *authFixture, p Principal, sid string) (any, error) {
			return f.r.Exec(t.Context(), viewerOf(p), sid, "/echo who was here")
		},
		ok: noErr,
	}},
	"Registry.Prompt": {class: classUser, byID: &byID{
		call: func(t *testing.T, f *authFixture, p Principal, sid string) (any, error) {
			id, start, err := f.r.Prompt(viewerOf(p), sid, "hello")
			if start != nil {
				start()
			}
			return id, err
		},
		ok: func(t *testing.T, f *authFixture, sid string, got any, err error) {
			if err != nil || got == "" {
				t.Fatalf("alice's prompt: %v, %v", got, err)
			}
		},
	}},
	"Registry.Interrupt": {class: classUser, byID: &byID{
		call: func(t *testing.T, f *authFixture, p Principal, sid string) (any, error) {
			return f.r.Interrupt(viewerOf(p), sid)
		},
		ok: noErr,
	}},
	"Registry.RespondApproval": {class: classUser, byID: &byID{
		call: func(t *testing.T, f *authFixture, p Principal, sid string) (any, error) {
			return f.r.RespondApproval(t.Context(), viewerOf(p), sid, "req-1", ChoiceOnce)
		},
		ok: func(t *testing.T, f *authFixture, sid string, got any, err error) {
			if got != false || err != nil {
				t.Fatalf("alice answers an unknown approval: %v, %v; want false, nil", got, err)
			}
		},
	}},
	"Registry.Configure": {class: classUser, byID: &byID{
		call: func(t *testing.T, f *authFixture, p Principal, sid string) (any, error) {
			return nil, f.r.Configure(viewerOf(p), sid, "a-model")
		},
		ok: noErr,
	}},
	"Registry.Leave": {class: classUser, byID: &byID{
		call: func(t *testing.T, f *authFixture, p Principal, sid string) (any, error) {
			return f.r.Leave(viewerOf(p), sid)
		},
		ok: noErr, // a socket not viewing it: false, nil
	}},
	"Registry.AttachTerminal": {class: classUser, byID: &byID{
		call: func(t *testing.T, f *authFixture, p Principal, sid string) (any, error) {
			a, err := f.r.AttachTerminal(t.Context(), p, sid, TerminalOptions{})
			if a != nil {
				a.Detach(workers.ReasonDetach)
			}
			return a != nil, err
		},
		ok: func(t *testing.T, f *authFixture, sid string, got any, err error) {
			if got != true || err != nil {
				t.Fatalf("alice attaches her session's terminal: %v, %v", got, err)
			}
		},
	}, proof: func(t *testing.T, f *authFixture) {
		// Without a session id: a terminal-only session of the caller's,
		// which no one else attaches; the admin token, owning nothing,
		// gets none.
		a, err := f.r.AttachTerminal(t.Context(), bob, "", TerminalOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Detach(workers.ReasonDetach)
		_, foreign := f.r.AttachTerminal(t.Context(), alice, a.SessionID, TerminalOptions{})
		_, absent := f.r.AttachTerminal(t.Context(), alice, missingID, TerminalOptions{})
		sameAnswer(t, "alice attaches bob's terminal", nil, nil, foreign, absent)
		if _, err := f.r.AttachTerminal(t.Context(), AdminPrincipal, "", TerminalOptions{}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("the admin token's own terminal: %v; want %v", err, ErrNotFound)
		}
	}},
	"Registry.CloseTerminal": {class: classUser, byID: &byID{
		call: func(t *testing.T, f *authFixture, p Principal, sid string) (any, error) {
			return f.r.CloseTerminal(p, sid, "")
		},
		ok: func(t *testing.T, f *authFixture, sid string, got any, err error) {
			if got != false || err != nil {
				t.Fatalf("alice closes the terminal her session does not run: %v, %v; want false, nil", got, err)
			}
		},
	}},
	"Registry.History": {class: classUser, byID: &byID{
		closed: true,
		call: func(t *testing.T, f *authFixture, p Principal, sid string) (any, error) {
			es, more, err := f.r.History(t.Context(), p, sid, 0, 10)
			return []any{es, more}, err
		},
		ok: func(t *testing.T, f *authFixture, sid string, got any, err error) {
			if err != nil || len(got.([]any)[0].([]Message)) == 0 {
				t.Fatalf("alice's history of %s: %v, %v", sid, got, err)
			}
		},
	}},
	"Registry.Transcript": {class: classUser, byID: &byID{
		closed: true,
		call: func(t *testing.T, f *authFixture, p Principal, sid string) (any, error) {
			return f.r.Transcript(t.Context(), p, sid)
		},
		ok: func(t *testing.T, f *authFixture, sid string, got any, err error) {
			if tr, _ := got.(Transcript); err != nil || tr.ID != sid || len(tr.Entries) == 0 {
				t.Fatalf("alice's transcript of %s: %+v, %v", sid, got, err)
			}
		},
	}},
	"Registry.Attach": {class: classUser, byID: &byID{
		call: func(t *testing.T, f *authFixture, p Principal, sid string) (any, error) {
			return f.r.Attach(t.Context(), p, sid, NewAttachment{Name: "x.txt", Size: -1, Body: strings.NewReader("x")})
		},
		ok: func(t *testing.T, f *authFixture, sid string, got any, err error) {
			if ref, _ := got.(store.AttachmentRef); err != nil || ref.ID == "" || ref.Name != "x.txt" {
				t.Fatalf("alice attaches a file to %s: %+v, %v", sid, got, err)
			}
		},
	}},
	"Registry.Unattach": {class: classUser, byID: &byID{
		call: func(t *testing.T, f *authFixture, p Principal, sid string) (any, error) {
			return nil, f.r.Unattach(t.Context(), p, sid, f.fileOf(sid))
		},
		ok: noErr,
	}},
	"Registry.Attachment": {class: classUser, byID: &byID{
		closed: true,
		call: func(t *testing.T, f *authFixture, p Principal, sid string) (any, error) {
			return f.r.Attachment(t.Context(), p, sid, f.fileOf(sid))
		},
		ok: func(t *testing.T, f *authFixture, sid string, got any, err error) {
			if a, _ := got.(store.Attachment); err != nil || a.ID != f.files[sid] || !strings.HasPrefix(string(a.Data), "/echo") {
				t.Fatalf("alice's file of %s: %+v, %v", sid, got, err)
			}
		},
	}},
	"Registry.Rename": {class: classUser, byID: &byID{
		closed: true,
		call: func(t *testing.T, f *authFixture, p Principal, sid string) (any, error) {
			return nil, f.r.Rename(t.Context(), p, sid, "renamed")
		},
		ok: func(t *testing.T, f *authFixture, sid string, got any, err error) {
			tr, terr := f.r.Transcript(t.Context(), alice, sid)
			if err != nil || terr != nil || tr.Title != "renamed" {
				t.Fatalf("alice renames %s: %v; its title %q, %v", sid, err, tr.Title, terr)
			}
		},
	}},
	"Registry.Delete": {class: classUser, byID: &byID{
		closed: true,
		call: func(t *testing.T, f *authFixture, p Principal, sid string) (any, error) {
			return nil, f.r.Delete(t.Context(), p, sid)
		},
		ok: func(t *testing.T, f *authFixture, sid string, got any, err error) {
			if _, _, herr := f.r.History(t.Context(), alice, sid, 0, 10); err != nil || !errors.Is(herr, ErrNotFound) {
				t.Fatalf("alice deletes %s: %v; its history then %v", sid, err, herr)
			}
		},
	}},

	// A user's own, without an id.
	"Registry.Create": {class: classUser, proof: func(t *testing.T, f *authFixture) {
		bv := viewerOf(bob)
		in, err := f.r.Create(bv, NewSession{Title: "bob's"})
		if err != nil {
			t.Fatal(err)
		}
		if listed(f.r.List(alice), in.ID) || !listed(f.r.List(bob), in.ID) {
			t.Fatalf("bob's new session: listed for alice %v, for bob %v", listed(f.r.List(alice), in.ID), listed(f.r.List(bob), in.ID))
		}
		_, foreign := f.r.Resume(viewerOf(alice), in.ID)
		_, absent := f.r.Resume(viewerOf(alice), missingID)
		sameAnswer(t, "alice resumes bob's new session", nil, nil, foreign, absent)
		n := len(f.r.Admin().List())
		if _, err := f.r.Create(viewerOf(AdminPrincipal), NewSession{Title: "the admin token's"}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("the admin token makes a session: %v; want %v (it owns nothing)", err, ErrNotFound)
		}
		if got := len(f.r.Admin().List()); got != n {
			t.Fatalf("%d sessions after the admin token's create; want %d", got, n)
		}
	}},
	"Registry.List": {class: classUser, proof: func(t *testing.T, f *authFixture) {
		if got := f.r.List(bob); len(got) != 0 {
			t.Fatalf("bob lists %+v; want none of alice's", got)
		}
		if !listed(f.r.List(alice), f.live) || listed(f.r.List(alice), f.anon) {
			t.Fatalf("alice lists %+v; want hers alone", f.r.List(alice))
		}
		// An admin lists every session (it reads none: see Resume).
		if all := f.r.List(AdminPrincipal); !listed(all, f.live) || !listed(all, f.anon) {
			t.Fatalf("the admin lists %+v; want alice's and the anonymous user's", all)
		}
	}},
	"Registry.ListClosed": {class: classUser, proof: func(t *testing.T, f *authFixture) {
		for _, c := range []struct {
			p    Principal
			want []string
		}{{bob, nil}, {AdminPrincipal, nil}, {alice, []string{f.closed}}, {anon, []string{f.anonClosed}}} {
			got, _, err := f.r.ListClosed(t.Context(), c.p, time.Time{}, 10)
			var ids []string
			for _, s := range got {
				ids = append(ids, s.ID)
			}
			if err != nil || !slices.Equal(ids, c.want) {
				t.Fatalf("%s's closed sessions: %v, %v; want %v", actorOf(c.p), ids, err, c.want)
			}
		}
	}},
	"Registry.Search": {class: classUser, proof: func(t *testing.T, f *authFixture) {
		for _, c := range []struct {
			p    Principal
			want int
		}{{bob, 0}, {AdminPrincipal, 0}, {alice, 4}, {anon, 4}} { // two commands, two outputs
			if hits, err := f.r.Search(t.Context(), c.p, "secret", 10); err != nil || len(hits) != c.want {
				t.Fatalf("%s finds %+v, %v; want %d hits", actorOf(c.p), hits, err, c.want)
			}
		}
	}},
	// A user's settings are the user's own (issue 42).
	"Registry.Settings":    {class: classUser, proof: settingsProof},
	"Registry.PutSettings": {class: classUser, proof: settingsProof},
	// DetachViewer acts on the sessions its viewer views, and a viewer
	// views only what the lookup let it.
	"Registry.DetachViewer": {class: classUser, proof: func(t *testing.T, f *authFixture) {
		for _, c := range []struct {
			p   Principal
			sid string
		}{{bob, f.live}, {AdminPrincipal, f.anon}} {
			v := viewerOf(c.p)
			f.r.Resume(v, c.sid)
			f.r.Exec(t.Context(), v, c.sid, "/echo x")
			v.leave()
			f.r.DetachViewer(v, workers.ReasonDetach)
		}
		f.r.Wait()
		f.untouched(t, "the strangers' sockets went")
	}},
	"Registry.Watch": {class: classUser, proof: func(t *testing.T, f *authFixture) {
		aw, bw, tw := viewerOf(alice), viewerOf(bob), viewerOf(anon)
		defer f.r.Watch(aw)()
		defer f.r.Watch(bw)()
		defer f.r.Watch(tw)()
		if err := f.r.Rename(t.Context(), alice, f.live, "alice's, renamed"); err != nil {
			t.Fatal(err)
		}
		// The watchers are told in one pass of the registry's teller:
		// once alice's has the rename, the others would have too.
		testkit.WaitFor(t, 5*time.Second, "alice's watcher told", func() bool {
			return slices.ContainsFunc(changesOf(aw, f.live), func(c Change) bool { return c.Title == "alice's, renamed" })
		})
		if b, n := len(changesOf(bw, f.live)), len(changesOf(tw, f.live)); b != 0 || n != 0 {
			t.Fatalf("session.changed of alice's session: bob's watcher %d, the anonymous user's %d; want none", b, n)
		}
	}},

	// The admin's: every session for an admin, a user's own for anyone
	// else (Registry), or the admin view's (AdminView).
	"Registry.ReapDetached":  {class: classAdmin, proof: reapDetachedProof(func(f *authFixture, by Principal) int { return f.r.ReapDetached(by) })},
	"AdminView.ReapDetached": {class: classAdmin, proof: reapDetachedProof(func(f *authFixture, by Principal) int { return f.r.Admin().ReapDetached(by) })},
	"Registry.ReapUser":      {class: classAdmin, proof: reapUserProof(func(f *authFixture, by Principal, u string) int { return f.r.ReapUser(by, u) })},
	"AdminView.ReapUser":     {class: classAdmin, proof: reapUserProof(func(f *authFixture, by Principal, u string) int { return f.r.Admin().ReapUser(by, u) })},
	"Registry.ReapWorker":    {class: classAdmin, proof: reapWorkerProof(func(f *authFixture, by Principal, pid int) error { return f.r.ReapWorker(by, pid) })},
	"AdminView.ReapWorker":   {class: classAdmin, proof: reapWorkerProof(func(f *authFixture, by Principal, pid int) error { return f.r.Admin().ReapWorker(by, pid) })},
	"AdminView.Close": {class: classAdmin, proof: closeProof(func(f *authFixture, by Principal, sid string) (bool, error) {
		return f.r.Admin().Close(by, sid, EndAdminReap)
	})},
	"AdminView.ForwardReap": {class: classAdmin, proof: func(t *testing.T, f *authFixture) {
		in, _ := f.r.Get(alice, f.live)
		rr := RemoteReap{Node: "other", PID: in.WorkerPID}
		if err := f.r.Admin().ForwardReap(bob, rr); !errors.Is(err, ErrNotFound) {
			t.Fatalf("a reap forwarded by bob, no admin: %v; want %v", err, ErrNotFound)
		}
		if err := f.r.Admin().ForwardReap(AdminPrincipal, rr); !errors.Is(err, ErrNoCluster) {
			t.Fatalf("the admin's forward on a node alone: %v; want %v", err, ErrNoCluster)
		}
		f.untouched(t, "the forwards")
	}},
	// No principal: only the admin routes hold an AdminView.
	"AdminView.List": {class: classAdmin, proof: func(t *testing.T, f *authFixture) {
		if all := f.r.Admin().List(); !listed(all, f.live) || !listed(all, f.anon) {
			t.Fatalf("the admin view lists %+v; want alice's and the anonymous user's", all)
		}
	}},
	"AdminView.UsersSummary": {class: classAdmin, proof: func(t *testing.T, f *authFixture) {
		users := map[string]int{}
		for _, u := range f.r.Admin().UsersSummary() {
			users[u.User] = u.Sessions
		}
		if users["alice"] != 1 || users[""] != 1 || len(users) != 2 {
			t.Fatalf("the admin view's users: %v; want alice and the anonymous user, one session each", users)
		}
	}},
	"AdminView.Elsewhere": {class: classAdmin, proof: func(t *testing.T, f *authFixture) {
		if rows, err := f.r.Admin().Elsewhere(t.Context(), time.Now()); rows != nil || err != nil {
			t.Fatalf("Elsewhere of a node alone: %v, %v; want nothing", rows, err)
		}
	}},

	// The server's own calls.
	"Registry.Admin":        {class: classSystem, reason: "returns the admin view, whose methods are accounted as AdminView's; only the admin routes are given it"},
	"AdminView.Node":        {class: classSystem, reason: "names this node (\"\" alone); reads no session"},
	"AdminView.Spares":      {class: classSystem, reason: "the session ids of the spare terminals, which no user owns yet; reads no listed session"},
	"AdminView.StoreOutage": {class: classSystem, reason: "whether the store refuses writes, since when, how many entries wait; reads no session"},
	"Registry.Run":          {class: classSystem, reason: "the registry's own loop (sweeps, retention) until ctx ends"},
	"Registry.Shutdown":     {class: classSystem, reason: "ends every session with end_reason shutdown, at the process's stop"},
	"Registry.Wait":         {class: classSystem, reason: "joins the background teardowns; touches no session"},
	"Registry.Sweep":        {class: classSystem, reason: "expires detached sessions past their TTL, by time alone"},
	"Registry.Prune":        {class: classSystem, reason: "drops stored conversations past retention, by time alone"},
	"Registry.Claim":        {class: classSystem, reason: "a node's startup claim of its sessions' leases, each to its stored owner"},
	"Registry.FlushStore":   {class: classSystem, reason: "writes what is queued for the store and releases the leases, at the process's stop"},
}

// accountedTypes are the types whose exported methods must each have an
// entry, by the name the entries use.
var accountedTypes = map[string]reflect.Type{
	"Registry":  reflect.TypeOf(&Registry{}),
	"AdminView": reflect.TypeOf(AdminView{}),
}

// exportedMethods lists "Type.Method" for every exported method of the
// accounted types.
func exportedMethods() []string {
	var out []string
	for name, typ := range accountedTypes {
		for i := range typ.NumMethod() { // exported ones only
			out = append(out, name+"."+typ.Method(i).Name)
		}
	}
	sort.Strings(out)
	return out
}

// sessionData are the types that carry a session's contents (its title,
// history, entries, stored row): a system method returns none of them.
var sessionData = []reflect.Type{
	reflect.TypeFor[Info](), reflect.TypeFor[ResumeResult](), reflect.TypeFor[Transcript](),
	reflect.TypeFor[Message](), reflect.TypeFor[store.Session](), reflect.TypeFor[store.Hit](),
	reflect.TypeFor[RemoteSession](), reflect.TypeFor[Session](),
}

// fitsSignature checks the class of method name against what it takes
// and returns: a user's acts for a principal (a Principal or Viewer
// parameter); a system one takes none and returns no session's contents;
// an admin's without a principal is the admin view's.
func fitsSignature(name string, c class) error {
	typ, method, _ := strings.Cut(name, ".")
	m, _ := accountedTypes[typ].MethodByName(method)
	viewer := reflect.TypeFor[Viewer]()
	principal := false
	for i := 1; i < m.Type.NumIn(); i++ { // 0 is the receiver
		in := m.Type.In(i)
		principal = principal || in == reflect.TypeFor[Principal]() || (in.Kind() == reflect.Interface && in.Implements(viewer))
	}
	data := false
	for i := range m.Type.NumOut() {
		out := m.Type.Out(i)
		for out.Kind() == reflect.Slice || out.Kind() == reflect.Pointer || out.Kind() == reflect.Array {
			out = out.Elem()
		}
		data = data || slices.Contains(sessionData, out)
	}
	switch {
	case c == classUser && !principal:
		return errors.New("a user's method acts for a principal: it takes a Principal or a Viewer")
	case c == classSystem && principal:
		return errors.New("a system method acts for no principal, yet it takes one: a user's or an admin's")
	case c == classSystem && data:
		return errors.New("a system method returns no session's contents: who may read them?")
	case c == classAdmin && !principal && typ != "AdminView":
		return errors.New("an admin's method without a principal is AdminView's (only the admin routes are given it)")
	}
	return nil
}

// TestEveryMethodIsAccounted: every exported method of *Registry and
// AdminView has an entry (and every entry a method), each entry is of a
// class with what that class needs, and each proof passes.
func TestEveryMethodIsAccounted(t *testing.T) {
	t.Parallel()
	methods := exportedMethods()
	for _, name := range methods {
		e, ok := accounting[name]
		switch {
		case !ok:
			t.Errorf("%s has no entry in accounting: say whether it is a user's (with its two-principal proof), an admin's or the system's", name)
		case e.class == classUser && e.byID == nil && e.proof == nil,
			e.class == classAdmin && (e.proof == nil || e.byID != nil):
			t.Errorf("%s (%s) has no proof", name, e.class)
		case e.class == classSystem && (e.reason == "" || e.proof != nil || e.byID != nil):
			t.Errorf("%s (system) needs a reason and no proof", name)
		case e.class != classUser && e.class != classAdmin && e.class != classSystem:
			t.Errorf("%s has class %q", name, e.class)
		}
	}
	for _, name := range methods {
		if err := fitsSignature(name, accounting[name].class); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name := range accounting {
		if !slices.Contains(methods, name) {
			t.Errorf("accounting has %s, which is no exported method of the accounted types", name)
		}
	}
	if t.Failed() {
		return
	}
	for _, name := range methods {
		e := accounting[name]
		if e.class == classSystem {
			continue
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if e.byID != nil {
				e.byID.prove(t, newAuthFixture(t))
			}
			if e.proof != nil {
				e.proof(t, newAuthFixture(t))
			}
		})
	}
}

// TestAdminTokenOwnsNothing: the admin token's principal has the
// anonymous user's User (""), yet owns none of its sessions; the
// anonymous user itself (the dashboard token without users) owns them.
func TestAdminTokenOwnsNothing(t *testing.T) {
	t.Parallel()
	if AdminPrincipal.Owns("") || !anon.Owns("") || !alice.Owns("alice") || !carol.Owns("carol") || carol.Owns("") {
		t.Fatalf("Owns(\"\"): admin token %v, anonymous %v; alice's own %v, an admin user's own %v, anonymous for an admin user %v",
			AdminPrincipal.Owns(""), anon.Owns(""), alice.Owns("alice"), carol.Owns("carol"), carol.Owns(""))
	}
}
