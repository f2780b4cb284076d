package handlers_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/static"
	"github.com/dashgate/dashgate/workers"
)

// adminAs serves h's routes under /admin with every request acting for p
// (what package web's auth puts in the context), base path "/".
func adminAs(t *testing.T, h *handlers.Admin, p sessions.Principal) *httptest.Server {
	t.Helper()
	h.BasePath = func(*http.Request) string { return "/" }
	r := chi.NewRouter()
	r.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			next.ServeHTTP(w, req.WithContext(handlers.WithPrincipal(req.Context(), p)))
		})
	})
	r.Route("/admin", h.Routes)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv
}

// fetch GETs path from srv and returns the body, failing unless it is 200.
func fetch(t *testing.T, srv *httptest.Server, path string) string {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	return string(b)
}

func usersJSON(t *testing.T, srv *httptest.Server) []handlers.UserJSON {
	t.Helper()
	var body struct {
		Users []handlers.UserJSON `json:"users"`
	}
	if err := json.Unmarshal([]byte(fetch(t, srv, "/admin/api/users")), &body); err != nil {
		t.Fatal(err)
	}
	return body.Users
}

func sessionsJSON(t *testing.T, srv *httptest.Server, query string) []sessions.Info {
	t.Helper()
	var body struct {
		Sessions []sessions.Info `json:"sessions"`
	}
	if err := json.Unmarshal([]byte(fetch(t, srv, "/admin/api/sessions"+query)), &body); err != nil {
		t.Fatal(err)
	}
	return body.Sessions
}

// rowsOf returns the data-attr values of the rows of one testid in html:
// rowsOf(page, "session-row", "data-session-id").
var rowRe = regexp.MustCompile(`<tr data-testid="([a-z-]+)"([^>]*)>`)

func rowsOf(html, testid, attr string) []string {
	attrRe := regexp.MustCompile(` ` + attr + `="([^"]*)"`)
	var out []string
	for _, m := range rowRe.FindAllStringSubmatch(html, -1) {
		if m[1] != testid {
			continue
		}
		if a := attrRe.FindStringSubmatch(m[2]); a != nil {
			out = append(out, a[1])
		}
	}
	return out
}

// The per-user figures: two users and the anonymous one, with known
// sessions, pids and RSS. Each user's RSS is the sum over their sessions'
// worker and terminal processes only (pid 999 is nobody's); the JSON keeps
// "" for the anonymous user, the page names it "(anonymous)".
func TestAdminUsersFigures(t *testing.T) {
	t.Parallel()
	const MiB = 1 << 20
	list := []sessions.Info{
		{ID: "a1", Owner: "alice", State: sessions.StateAttached, WorkerPID: 101, PTYPID: 102},
		{ID: "a2", Owner: "alice", State: sessions.StateDetached},
		{ID: "b1", Owner: "bob", State: sessions.StateAttached, WorkerPID: 201},
		{ID: "n1", Owner: "", State: sessions.StateDetached, PTYPID: 301},
	}
	table := []workers.ProcInfo{
		{PID: 101, Kind: workers.KindChat, SessionID: "a1", Stats: workers.Stats{RSSBytes: 1 * MiB}},
		{PID: 102, Kind: workers.KindPTY, SessionID: "a1", Stats: workers.Stats{RSSBytes: 2 * MiB}},
		{PID: 201, Kind: workers.KindChat, SessionID: "b1", Stats: workers.Stats{RSSBytes: 4 * MiB}},
		{PID: 301, Kind: workers.KindPTY, SessionID: "n1", Stats: workers.Stats{RSSBytes: 8 * MiB}},
		{PID: 999, Kind: workers.KindChat, SessionID: "gone", Stats: workers.Stats{RSSBytes: 16 * MiB}},
	}
	h := &handlers.Admin{
		Sessions: fakeAdminSessions{list: func() []sessions.Info { return slices.Clone(list) }},
		Procs:    fakeAdminProcs{table: func() []workers.ProcInfo { return slices.Clone(table) }},
	}
	srv := adminAs(t, h, sessions.AdminPrincipal)

	want := []handlers.UserJSON{
		{User: "", Sessions: 1, Workers: 0, Terminals: 1, RSSBytes: 8 * MiB},
		{User: "alice", Sessions: 2, Workers: 1, Terminals: 1, RSSBytes: 3 * MiB},
		{User: "bob", Sessions: 1, Workers: 1, Terminals: 0, RSSBytes: 4 * MiB},
	}
	if got := usersJSON(t, srv); !slices.Equal(got, want) {
		t.Fatalf("/admin/api/users = %+v\nwant %+v", got, want)
	}
	raw := fetch(t, srv, "/admin/api/users")
	if !strings.Contains(raw, `{"user":"","sessions":1,"workers":0,"terminals":1,"rss_bytes":8388608}`) {
		t.Fatalf("/admin/api/users names the anonymous user otherwise than \"user\":\"\": %s", raw)
	}

	page := fetch(t, srv, "/admin")
	for _, w := range []string{
		`<tr data-testid="user-row" data-user="alice" class="">`,
		`<a href="/admin?user=alice" data-testid="user-link" class="">alice</a></td><td data-testid="user-sessions">2</td><td data-testid="user-workers">1</td><td data-testid="user-terminals">1</td><td data-testid="user-rss" title="3145728 bytes">3.0 MiB</td>`,
		`<a href="/admin?user=bob" data-testid="user-link" class="">bob</a></td><td data-testid="user-sessions">1</td><td data-testid="user-workers">1</td><td data-testid="user-terminals">0</td><td data-testid="user-rss" title="4194304 bytes">4.0 MiB</td>`,
		`<a href="/admin?user=" data-testid="user-link" class="anonymous">(anonymous)</a></td><td data-testid="user-sessions">1</td><td data-testid="user-workers">0</td><td data-testid="user-terminals">1</td><td data-testid="user-rss" title="8388608 bytes">8.0 MiB</td>`,
		`data-session-id="n1" data-state="detached" data-user=""><td class="mono">n1</td><td data-testid="session-user" class="anonymous">(anonymous)</td>`,
		`data-session-id="a1" data-state="attached" data-user="alice"><td class="mono">a1</td><td data-testid="session-user">alice</td>`,
	} {
		if !strings.Contains(page, w) {
			t.Errorf("the admin page lacks %s", w)
		}
	}
	if t.Failed() {
		t.Log(page)
	}
}

// The filter by user: /admin?user=NAME and /admin/api/sessions?user=NAME
// keep that user's sessions (and the workers table their children),
// ?user= the anonymous user's, no parameter everyone's; the page's
// refresh (?fragment=1) keeps it, and the actions' forms post under it so
// the page they return to is filtered too.
func TestAdminUserFilter(t *testing.T) {
	t.Parallel()
	list := []sessions.Info{
		{ID: "a1", Owner: "alice", WorkerPID: 101},
		{ID: "b1", Owner: "bob", WorkerPID: 201},
		{ID: "b2", Owner: "bob"},
		{ID: "n1", Owner: ""},
		{ID: "s1", Owner: "a b&c"},
	}
	table := []workers.ProcInfo{{PID: 101, SessionID: "a1"}, {PID: 201, SessionID: "b1"}}
	h := &handlers.Admin{
		Sessions: fakeAdminSessions{list: func() []sessions.Info { return slices.Clone(list) }},
		Procs:    fakeAdminProcs{table: func() []workers.ProcInfo { return slices.Clone(table) }},
	}
	srv := adminAs(t, h, sessions.AdminPrincipal)
	ids := func(l []sessions.Info) []string {
		out := []string{}
		for _, s := range l {
			out = append(out, s.ID)
		}
		return out
	}
	tests := []struct {
		name     string
		query    string
		sessions []string
		workers  []string
	}{
		{"everyone", "", []string{"a1", "b1", "b2", "n1", "s1"}, []string{"101", "201"}},
		{"bob", "?user=bob", []string{"b1", "b2"}, []string{"201"}},
		{"alice", "?user=alice", []string{"a1"}, []string{"101"}},
		{"the anonymous user", "?user=", []string{"n1"}, nil},
		{"a name to escape", "?user=" + url.QueryEscape("a b&c"), []string{"s1"}, nil},
		{"nobody", "?user=carol", []string{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ids(sessionsJSON(t, srv, tt.query)); !slices.Equal(got, tt.sessions) {
				t.Errorf("/admin/api/sessions%s lists %v, want %v", tt.query, got, tt.sessions)
			}
			for _, path := range []string{"/admin" + tt.query, "/admin?fragment=1" + strings.Replace(tt.query, "?", "&", 1)} {
				page := fetch(t, srv, path)
				if got := rowsOf(page, "session-row", "data-session-id"); !slices.Equal(got, tt.sessions) && len(got)+len(tt.sessions) > 0 {
					t.Errorf("GET %s shows sessions %v, want %v", path, got, tt.sessions)
				}
				if got := rowsOf(page, "worker-row", "data-pid"); !slices.Equal(got, tt.workers) {
					t.Errorf("GET %s shows workers %v, want %v", path, got, tt.workers)
				}
				// the users table is everyone's, whatever the filter
				if got := rowsOf(page, "user-row", "data-user"); !slices.Equal(got, []string{"", "a b&amp;c", "alice", "bob"}) {
					t.Errorf("GET %s shows users %v", path, got)
				}
				if tt.query != "" {
					if !strings.Contains(page, `data-testid="user-filter"`) {
						t.Errorf("GET %s does not say it is filtered", path)
					}
					if len(tt.sessions) > 0 && !strings.Contains(page, `/reap`+strings.ReplaceAll(tt.query, "&", "&amp;")+`"`) {
						t.Errorf("GET %s: the reap forms do not post under the filter %s", path, tt.query)
					}
				} else if strings.Contains(page, `data-testid="user-filter"`) {
					t.Errorf("GET %s says it is filtered", path)
				}
			}
		})
	}
}

// The page's script refreshes the body with the page's own ?user= filter.
// (The e2e suite drives the page in Chromium; this pins the script's
// query so a refresh that drops the filter fails here too.)
func TestAdminRefreshKeepsTheFilter(t *testing.T) {
	t.Parallel()
	b, err := static.FS.ReadFile("js/admin.js")
	if err != nil {
		t.Fatal(err)
	}
	js := string(b)
	for _, want := range []string{
		`fetch(base + 'admin?' + fragmentQuery()`,
		`if (here.has('user')) q.set('user', here.get('user'));`,
	} {
		if !strings.Contains(js, want) {
			t.Fatalf("admin.js lacks %q", want)
		}
	}
}

// An admin never gains a user's chat or terminal by being admin: the page
// links to no session (no dashboard link carries a session id, nothing
// points at /ws/), only to the dashboard's front page and the filters;
// the only things naming a session are its reap form.
func TestAdminPageOpensNoSession(t *testing.T) {
	t.Parallel()
	list := []sessions.Info{
		{ID: "0123456789abcdef01234567", Owner: "alice", WorkerPID: 101, PTYPID: 102},
		{ID: "76543210fedcba9876543210", Owner: "root", WorkerPID: 201},
	}
	table := []workers.ProcInfo{{PID: 101, SessionID: list[0].ID}, {PID: 102, Kind: workers.KindPTY, SessionID: list[0].ID}, {PID: 201, SessionID: list[1].ID}}
	h := &handlers.Admin{
		Sessions: fakeAdminSessions{list: func() []sessions.Info { return slices.Clone(list) }},
		Procs:    fakeAdminProcs{table: func() []workers.ProcInfo { return slices.Clone(table) }},
	}
	// root is an admin user with a session of their own: even that one
	// opens from the dashboard, not from here.
	srv := adminAs(t, h, sessions.Principal{User: "root", Admin: true})
	page := fetch(t, srv, "/admin")
	hrefs := regexp.MustCompile(`(href|src|action|formaction)="([^"]*)"`).FindAllStringSubmatch(page, -1)
	if len(hrefs) == 0 {
		t.Fatal("no link on the page")
	}
	for _, m := range hrefs {
		link := m[2]
		switch {
		case strings.Contains(link, "/ws/"), strings.Contains(link, "session_id"):
			t.Errorf("%s=%q opens a session's socket", m[1], link)
		case m[1] == "action" && strings.HasSuffix(strings.SplitN(link, "?", 2)[0], "/reap"):
			// a reap: allowed
		case strings.Contains(link, list[0].ID), strings.Contains(link, list[1].ID):
			t.Errorf("%s=%q names a session without reaping it", m[1], link)
		}
	}
	if strings.Count(page, list[0].ID) == 0 {
		t.Fatal("alice's session is not on the page")
	}
}

// auditRecord fails unless recs is one INFO "admin reap" record with
// exactly the keys of an audit record, and returns it.
func auditRecord(t *testing.T, recs []testkit.Record) testkit.Record {
	t.Helper()
	if len(recs) != 1 {
		t.Fatalf("%d admin reap records, want 1: %v", len(recs), recs)
	}
	rec := recs[0]
	var keys []string
	for k := range rec {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []string{"action", "level", "msg", "remote", "remote_addr", "result", "target", "time", "user"}; !slices.Equal(keys, want) {
		t.Fatalf("audit record keys %v, want %v: %v", keys, want, rec)
	}
	if rec.Str("level") != "INFO" {
		t.Fatalf("audit record at %s: %v", rec.Str("level"), rec)
	}
	host, _, err := net.SplitHostPort(rec.Str("remote"))
	if err != nil || host != "127.0.0.1" || rec.Str("remote_addr") != rec.Str("remote") {
		t.Fatalf("audit record's remote %q (remote_addr %q): want the client's 127.0.0.1:port in both", rec.Str("remote"), rec.Str("remote_addr"))
	}
	return rec
}

// Every admin action logs one INFO audit record naming who acted (the
// admin user, or "admin-token" for the admin token), from where, the
// action, its target and its result; on a real registry with real
// workers and a real orphan.
func TestAdminAuditRecords(t *testing.T) {
	t.Parallel()
	if err := workers.EnableSubreaper(); err != nil {
		t.Fatal("cannot be a subreaper:", err)
	}
	for _, by := range []struct {
		name string
		p    sessions.Principal
		user string
	}{
		{"admin token", sessions.AdminPrincipal, "admin-token"},
		{"admin user", sessions.Principal{User: "root", Admin: true}, "root"},
	} {
		t.Run(by.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOpts{})
			h := &handlers.Admin{Sessions: e.reg.Admin(), Procs: e.mgr, Log: e.log}
			srv := adminAs(t, h, by.p)
			post := func(path string) int {
				t.Helper()
				req, _ := http.NewRequest("POST", srv.URL+path, nil)
				req.Header.Set("Accept", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp.StatusCode
			}
			av := newViewer(alice)
			in, err := e.reg.Create(av, sessions.NewSession{Title: "alice's"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.reg.Exec(t.Context(), av, in.ID, "/echo hi"); err != nil {
				t.Fatal(err)
			}
			worker, _ := e.reg.Get(alice, in.ID)

			type action struct {
				name, path             string
				status                 int
				action, target, result string
			}
			steps := []action{
				{"reap worker", "/admin/workers/" + strconv.Itoa(worker.WorkerPID) + "/reap", 200, "reap_worker", "worker " + strconv.Itoa(worker.WorkerPID), "reaped"},
				{"reap a missing worker", "/admin/workers/999999999/reap", 404, "reap_worker", "worker 999999999", "not_found"},
				{"reap session", "/admin/sessions/" + in.ID + "/reap", 200, "reap_session", "session " + in.ID, "reaped"},
				{"reap a missing session", "/admin/sessions/" + missing + "/reap", 404, "reap_session", "session " + missing, "not_found"},
				{"reap detached", "/admin/sessions/reap-detached", 200, "reap_detached", "detached sessions", "reaped 1"},
			}
			for _, st := range steps {
				if st.action == "reap_detached" {
					// one detached session of bob's to reap
					bv := newViewer(bob)
					if _, err := e.reg.Create(bv, sessions.NewSession{Title: "bob's"}); err != nil {
						t.Fatal(err)
					}
					e.reg.DetachViewer(bv, workers.ReasonDetach)
					testkit.WaitFor(t, 5*time.Second, "bob's session detached", func() bool {
						l := e.reg.List(bob)
						return len(l) == 1 && l[0].State == sessions.StateDetached
					})
				}
				mark := len(e.logs.Records("admin reap"))
				if got := post(st.path); got != st.status {
					t.Fatalf("%s: %d, want %d", st.name, got, st.status)
				}
				rec := auditRecord(t, recordsSince(e.logs, mark, "admin reap"))
				for k, v := range map[string]string{"user": by.user, "action": st.action, "target": st.target, "result": st.result} {
					if rec.Str(k) != v {
						t.Errorf("%s: audit %s=%q, want %q: %v", st.name, k, rec.Str(k), v, rec)
					}
				}
			}

			// An orphan adopted by dashgate (the subreaper) that no worker owns.
			orphan := startOrphan(t, 331)
			t.Cleanup(func() {
				syscall.Kill(orphan, syscall.SIGKILL)
				var ws syscall.WaitStatus
				syscall.Wait4(orphan, &ws, 0, nil)
			})
			testkit.WaitFor(t, 5*time.Second, "orphan listed as unowned", func() bool {
				return slices.ContainsFunc(e.mgr.Unowned(), func(u workers.Unowned) bool { return u.PID == orphan })
			})
			mark := len(e.logs.Records("admin reap"))
			if got := post("/admin/workers/" + strconv.Itoa(orphan) + "/reap"); got != 200 {
				t.Fatalf("reap unowned: %d", got)
			}
			rec := auditRecord(t, recordsSince(e.logs, mark, "admin reap"))
			for k, v := range map[string]string{"user": by.user, "action": "reap_unowned", "target": "unowned " + strconv.Itoa(orphan), "result": "reaped"} {
				if rec.Str(k) != v {
					t.Errorf("reap unowned: audit %s=%q, want %q: %v", k, rec.Str(k), v, rec)
				}
			}
		})
	}
}

// recordsSince is lb's records of msg after the first n of them.
func recordsSince(lb *testkit.LogBuffer, n int, msg string) []testkit.Record {
	return lb.Records(msg)[n:]
}

// The figures on a real registry: alice's and bob's sessions made over
// their own viewers, with real workers; an anonymous session made before
// users were on. The users table counts them, the filter keeps each
// user's, and a worker's RSS goes to its owner.
func TestAdminUsersOnRealSessions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	h := &handlers.Admin{Sessions: e.reg.Admin(), Procs: e.mgr}
	srv := adminAs(t, h, sessions.AdminPrincipal)
	newSession := func(v *authViewer, worker bool) string {
		t.Helper()
		in, err := e.reg.Create(v, sessions.NewSession{Title: ""})
		if err != nil {
			t.Fatal(err)
		}
		if worker {
			if _, err := e.reg.Exec(t.Context(), v, in.ID, "/echo hi"); err != nil {
				t.Fatal(err)
			}
		}
		return in.ID
	}
	av, bv := newViewer(alice), newViewer(bob)
	a1, a2, b1 := newSession(av, true), newSession(av, false), newSession(bv, false)
	anon, err := e.reg.Create(nil, sessions.NewSession{Title: ""})
	if err != nil {
		t.Fatal(err)
	}
	users := usersJSON(t, srv)
	if len(users) != 3 || users[0].User != "" || users[1].User != "alice" || users[2].User != "bob" {
		t.Fatalf("users = %+v", users)
	}
	if u := users[1]; u.Sessions != 2 || u.Workers != 1 || u.Terminals != 0 || u.RSSBytes == 0 {
		t.Errorf("alice = %+v, want 2 sessions, 1 worker with its RSS", u)
	}
	if u := users[2]; u.Sessions != 1 || u.Workers != 0 || u.RSSBytes != 0 {
		t.Errorf("bob = %+v, want 1 session, no worker, no RSS", u)
	}
	if u := users[0]; u.Sessions != 1 || u.Workers != 0 {
		t.Errorf("the anonymous user = %+v, want 1 session", u)
	}
	for q, want := range map[string][]string{"?user=alice": {a1, a2}, "?user=bob": {b1}, "?user=": {anon.ID}} {
		var got []string
		for _, s := range sessionsJSON(t, srv, q) {
			got = append(got, s.ID)
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("/admin/api/sessions%s = %v, want %v", q, got, want)
		}
	}
	for _, s := range sessionsJSON(t, srv, "") {
		if (s.ID == a1 && s.Owner != "alice") || (s.ID == anon.ID && s.Owner != "") {
			t.Errorf("session %s: user %q", s.ID, s.Owner)
		}
	}
	if raw := fetch(t, srv, "/admin/api/sessions?user="); !strings.Contains(raw, `"user":""`) {
		t.Errorf("the anonymous user's session has no \"user\":\"\": %s", raw)
	}
}
