package handlers_test

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/workers"
)

// POST /admin/users/{user}/reap, on a real registry with real children:
// every live session of alice (one with a chat worker, one terminal-only
// with a bash on a pty) ends with end_reason admin_reap, one "session
// closed" and one "worker closed" record per child naming the admin
// (by=root); bob's session and worker are left alone; one audit record
// action=reap_user target="user alice"; the page's users table has the
// form; a user with no live session answers 404.
func TestAdminReapUser(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	root := sessions.Principal{User: "root", Admin: true}
	h := &handlers.Admin{Sessions: e.reg.Admin(), Procs: e.mgr, Log: e.log}
	srv := adminAs(t, h, root)
	post := func(path string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+path, nil)
		req.Header.Set("Accept", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		b, _ := io.ReadAll(resp.Body)
		json.Unmarshal(b, &body)
		return resp.StatusCode, body
	}
	withWorker := func(p sessions.Principal) sessions.Info {
		t.Helper()
		v := newViewer(p)
		in, err := e.reg.Create(v, sessions.NewSession{Title: p.User + "'s"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.reg.Exec(t.Context(), v, in.ID, "/echo hi"); err != nil {
			t.Fatal(err)
		}
		in, _ = e.reg.Get(p, in.ID)
		return in
	}
	a1, b1 := withWorker(alice), withWorker(bob)
	att, err := e.reg.AttachTerminal(t.Context(), alice, "", sessions.TerminalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { att.Detach(workers.ReasonDetach) })
	a2, _ := e.reg.Get(alice, att.SessionID)

	page := fetch(t, srv, "/admin")
	if !strings.Contains(page, `<form method="post" action="/admin/users/alice/reap"><button type="submit" data-testid="reap-user"`) {
		t.Fatalf("the users table has no reap form for alice:\n%s", page)
	}

	mark := len(e.logs.Records("admin reap"))
	status, body := post("/admin/users/alice/reap")
	if status != http.StatusOK || body["reaped"] != true || body["count"] != float64(2) || body["end_reason"] != "admin_reap" {
		t.Fatalf("reap alice: %d %v; want 200 reaped 2 admin_reap", status, body)
	}
	rec := auditRecord(t, recordsSince(e.logs, mark, "admin reap"))
	for k, v := range map[string]string{"user": "root", "action": "reap_user", "target": "user alice", "result": "reaped 2"} {
		if rec.Str(k) != v {
			t.Errorf("audit %s=%q, want %q: %v", k, rec.Str(k), v, rec)
		}
	}
	for _, sid := range []string{a1.ID, a2.ID} {
		if _, ok := e.reg.Get(alice, sid); ok {
			t.Errorf("alice's session %s live after the reap", sid)
		}
	}
	for _, pid := range []int{a1.WorkerPID, a2.PTYPID} {
		testkit.WaitFor(t, 5*time.Second, "alice's child reaped", func() bool { return testkit.Reaped(pid) })
		recs := e.workerRecords(pid)
		if len(recs) != 1 || recs[0]["by"] != "root" || recs[0]["reason"] != "session_closed" || recs[0]["user"] != "alice" {
			t.Errorf("worker closed records of alice's %d: %v; want one, by=root reason=session_closed (its session ended) user=alice", pid, recs)
		}
	}
	var closed []string
	for _, r := range e.logs.Records("session closed") {
		if r.Str("user") == "alice" {
			if r.Str("by") != "root" || r.Str("end_reason") != "admin_reap" {
				t.Errorf("session closed of alice: %v; want by=root end_reason=admin_reap", r)
			}
			closed = append(closed, r.Str("sid"))
		}
	}
	slices.Sort(closed)
	want := []string{a1.ID, a2.ID}
	slices.Sort(want)
	if !slices.Equal(closed, want) {
		t.Errorf("session closed records of alice: %v, want one each of %v", closed, want)
	}

	if in, ok := e.reg.Get(bob, b1.ID); !ok || in.WorkerPID != b1.WorkerPID || testkit.Gone(b1.WorkerPID) {
		t.Fatalf("bob's session after alice's reap: %+v (live %v); want it and its worker %d", in, ok, b1.WorkerPID)
	}
	if n := len(e.logs.Records("session closed")); n != 2 {
		t.Errorf("%d session closed records; want alice's 2 only", n)
	}

	mark = len(e.logs.Records("admin reap"))
	if status, body := post("/admin/users/alice/reap"); status != http.StatusNotFound || body["reaped"] != false {
		t.Fatalf("reap alice again: %d %v; want 404", status, body)
	}
	rec = auditRecord(t, recordsSince(e.logs, mark, "admin reap"))
	if rec.Str("action") != "reap_user" || rec.Str("target") != "user alice" || rec.Str("result") != "not_found" {
		t.Errorf("audit of the second reap: %v", rec)
	}
}

// The anonymous user's row (sessions made before users were on) posts to
// /admin/users//reap, and that ends the anonymous user's sessions, not
// alice's.
func TestAdminReapAnonymousUser(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	h := &handlers.Admin{Sessions: e.reg.Admin(), Procs: e.mgr, Log: e.log}
	srv := adminAs(t, h, sessions.AdminPrincipal)
	anon, err := e.reg.Create(nil, sessions.NewSession{Title: ""})
	if err != nil {
		t.Fatal(err)
	}
	in, err := e.reg.Create(newViewer(alice), sessions.NewSession{Title: ""})
	if err != nil {
		t.Fatal(err)
	}
	if page := fetch(t, srv, "/admin"); !strings.Contains(page, `action="/admin/users//reap"`) {
		t.Fatalf("no reap form for the anonymous user:\n%s", page)
	}
	req, _ := http.NewRequest("POST", srv.URL+"/admin/users//reap", nil)
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("reap the anonymous user: %d", resp.StatusCode)
	}
	if _, ok := e.reg.Get(sessions.AdminPrincipal, anon.ID); ok {
		t.Error("the anonymous session is live after its user's reap")
	}
	if _, ok := e.reg.Get(alice, in.ID); !ok {
		t.Error("alice's session gone after the anonymous user's reap")
	}
}
