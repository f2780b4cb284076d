package handlers_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/static"
	"github.com/dashgate/dashgate/templates"
	"github.com/dashgate/dashgate/web"
	"github.com/dashgate/dashgate/workers"
)

const token = "test-token"

// stack is the whole server: web middleware, chat, terminal, admin, metrics.
type stack struct {
	*env
	http *httptest.Server
}

func newStack(t *testing.T) *stack {
	t.Helper()
	return newStackWith(t, envOpts{})
}

// newStackWith is newStack over an env of o (its metrics hooks are the
// stack's).
func newStackWith(t *testing.T, o envOpts) *stack {
	t.Helper()
	var metrics *handlers.Metrics
	o.onSessionClose = func(r sessions.EndReason) { metrics.SessionClosed(r) }
	o.onWorkerClose = func(r workers.CloseResult) { metrics.WorkerClosed(r) }
	e := newEnv(t, o)
	metrics = handlers.NewMetrics(e.reg.Admin().List, e.mgr.CountByKind)
	e.hdr = http.Header{"Authorization": {"Bearer " + token}}
	log := e.logger()
	adm := &handlers.Admin{Sessions: e.reg.Admin(), Procs: e.mgr, Metrics: metrics, Log: log, Version: "test"}
	srv, err := web.New(web.Config{Token: token, Log: log}, web.Handlers{
		Chat:     &handlers.Chat{Registry: e.reg, Log: log, OnConn: metrics.Conn("chat")},
		Terminal: &handlers.Terminal{Registry: e.reg, Log: log, OnConn: metrics.Conn("pty")},
		Admin:    adm, Metrics: metrics.Handler(),
	})
	if err != nil {
		t.Fatal(err)
	}
	adm.BasePath = srv.BasePath
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.CloseClientConnections(); hs.Close() })
	s := &stack{env: e, http: hs}
	s.env.url = "ws" + strings.TrimPrefix(hs.URL, "http")
	return s
}

// post sends an admin action the way a same-origin form would.
func (s *stack) post(path string, hdr map[string]string) *http.Response {
	s.t.Helper()
	req, _ := http.NewRequest("POST", s.http.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func (s *stack) get(path string) string {
	s.t.Helper()
	req, _ := http.NewRequest("GET", s.http.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		s.t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	return string(b)
}

func TestAdminReapSession(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	cc := s.chat()
	sid := cc.create()
	cc.call("slash.exec", map[string]any{"session_id": sid, "command": "/echo hi"})
	pid := s.mgr.Procs()[0].PID()

	page := s.get("/admin")
	if !strings.Contains(page, `data-testid="session-row" data-session-id="`+sid+`"`) || !strings.Contains(page, `data-pid="`+strconv.Itoa(pid)+`"`) {
		t.Fatal("the admin page does not list the session and its worker")
	}
	resp := s.post("/admin/sessions/"+sid+"/reap", nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/admin" {
		t.Fatalf("reap: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if !testkit.Gone(pid) {
		t.Fatalf("worker %d alive after the reap returned", pid)
	}
	ev := cc.waitEvent("session.closed", sid)
	if ev["payload"].(map[string]any)["end_reason"] != "admin_reap" {
		t.Fatalf("session.closed = %v", ev)
	}
	recs := s.logs.Records("session closed")
	if len(recs) != 1 || recs[0]["end_reason"] != "admin_reap" {
		t.Fatalf("session closed records = %v", recs)
	}
	audit := s.logs.Records("admin reap")
	if len(audit) != 1 || audit[0]["target"] != "session "+sid || audit[0]["result"] != "reaped" || audit[0]["remote_addr"] == nil {
		t.Fatalf("admin reap records = %v", audit)
	}
	if strings.Contains(s.get("/admin"), sid) {
		t.Fatal("reaped session still on the page")
	}
}

func TestAdminReapWorkerKeepsSession(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	cc := s.chat()
	sid := cc.create()
	cc.call("slash.exec", map[string]any{"session_id": sid, "command": "/echo hi"})
	pid := s.mgr.Procs()[0].PID()
	resp := s.post("/admin/workers/"+strconv.Itoa(pid)+"/reap", map[string]string{"Accept": "application/json"})
	if resp.StatusCode != 200 {
		t.Fatalf("reap worker: %d", resp.StatusCode)
	}
	if !testkit.Gone(pid) {
		t.Fatal("worker alive after reap")
	}
	ev := cc.waitEvent("worker.exited", sid)
	if ev["payload"].(map[string]any)["reason"] != "admin_reap" {
		t.Fatalf("worker.exited = %v", ev)
	}
	if out := cc.call("slash.exec", map[string]any{"session_id": sid, "command": "/echo again"}); out["output"] != "again" {
		t.Fatalf("after worker reap: %v", out)
	}
	if p := s.mgr.Procs(); len(p) != 1 || p[0].PID() == pid {
		t.Fatal("no new worker")
	}
	if rec := s.workerRecords(pid); len(rec) != 1 || rec[0]["reason"] != "admin_reap" {
		t.Fatalf("worker record = %v", rec)
	}
}

func TestAdminRefusals(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	cc := s.chat()
	sid := cc.create()
	cc.call("slash.exec", map[string]any{"session_id": sid, "command": "/echo hi"})
	pid := s.mgr.Procs()[0].PID()
	// a process that is not ours: must never be signalled (started through
	// workers.Start, so that no worker's close in a parallel test takes it
	// for an escapee between its fork and its exec)
	outsider := exec.Command("sleep", "60")
	wait, err := workers.Start(outsider)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { outsider.Process.Kill(); wait() })
	tests := []struct {
		name string
		path string
		hdr  map[string]string
		want int
	}{
		{"foreign origin", "/admin/sessions/" + sid + "/reap", map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": ""}, 403},
		{"cross-site fetch", "/admin/workers/" + strconv.Itoa(pid) + "/reap", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"wrong token", "/admin/sessions/" + sid + "/reap", map[string]string{"Authorization": "Bearer wrong"}, 401},
		{"unknown session", "/admin/sessions/nope/reap", nil, 404},
		{"unknown pid", "/admin/workers/999999999/reap", nil, 404},
		{"pid 1", "/admin/workers/1/reap", nil, 404},
		{"not a descendant of dashgate", "/admin/workers/" + strconv.Itoa(syscall.Getppid()) + "/reap", nil, 404},
	}
	for _, tt := range tests {
		if resp := s.post(tt.path, tt.hdr); resp.StatusCode != tt.want {
			t.Fatalf("%s: %d, want %d", tt.name, resp.StatusCode, tt.want)
		}
	}
	if testkit.Gone(pid) || len(s.reg.List(sessions.Principal{})) != 1 {
		t.Fatal("a refused request reaped something")
	}
	if syscall.Kill(outsider.Process.Pid, 0) != nil {
		t.Fatal("outsider signalled")
	}
}

func TestAdminJSONAndMetrics(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	cc := s.chat()
	sid := cc.create()
	cc.call("slash.exec", map[string]any{"session_id": sid, "command": "/echo hi"})
	var ws struct{ Workers []handlers.WorkerJSON }
	json.Unmarshal([]byte(s.get("/admin/api/workers")), &ws)
	if len(ws.Workers) != 1 || ws.Workers[0].Kind != "chat" || ws.Workers[0].SessionID != sid || ws.Workers[0].RSSBytes == 0 || ws.Workers[0].NumThreads == 0 {
		t.Fatalf("workers = %+v", ws)
	}
	var ss struct{ Sessions []sessions.Info }
	json.Unmarshal([]byte(s.get("/admin/api/sessions")), &ss)
	if len(ss.Sessions) != 1 || ss.Sessions[0].WorkerPID != ws.Workers[0].PID || ss.Sessions[0].State != sessions.StateAttached {
		t.Fatalf("sessions = %+v", ss)
	}
	m := s.get("/metrics")
	for _, want := range []string{`dashgate_sessions{state="attached"} 1`, `dashgate_workers{kind="chat"} 1`, `dashgate_ws_connections{endpoint="chat"} 1`} {
		if !strings.Contains(m, want) {
			t.Fatalf("metrics lack %q", want)
		}
	}
	cc.call("session.close", map[string]any{"session_id": sid})
	m = s.get("/metrics")
	for _, want := range []string{`dashgate_sessions{state="attached"} 0`, `dashgate_workers{kind="chat"} 0`, `dashgate_session_closes_total{end_reason="client_close"} 1`, `dashgate_worker_closes_total{escalation=`, `dashgate_worker_close_seconds_count 1`} {
		if !strings.Contains(m, want) {
			t.Fatalf("metrics after close lack %q:\n%s", want, m)
		}
	}
}

func TestAdminComponents(t *testing.T) {
	t.Parallel()
	v := templates.AdminView{
		BasePath: "/dg/",
		Sessions: []templates.SessionRow{{ID: "s1", Title: "t", State: "detached", Created: "1s ago", CreatedExact: "2026-01-01T00:00:00Z", WorkerPID: 42}},
		Workers:  []templates.WorkerRow{{PID: 42, Kind: "chat", SessionID: "s1", RSS: "5.0 MiB", RSSExact: "5242880 bytes"}},
		Unowned:  []templates.UnownedRow{{PID: 77, PPID: 1, State: "Z"}},
	}
	var b strings.Builder
	templates.Admin(v).Render(context.Background(), &b)
	html := b.String()
	for _, want := range []string{
		`data-testid="session-row" data-session-id="s1" data-state="detached"`,
		`action="/dg/admin/sessions/s1/reap"`,
		`data-testid="worker-row" data-pid="42"`,
		`title="5242880 bytes"`,
		`title="2026-01-01T00:00:00Z"`,
		`action="/dg/admin/workers/42/reap"`,
		`data-testid="unowned-row" data-pid="77"`,
		`action="/dg/admin/sessions/reap-detached"`,
		`src="/dg/static/v/` + static.Version() + `/js/admin.js"`,
	} {
		if !strings.Contains(html, want) {
			t.Fatalf("admin page lacks %q", want)
		}
	}
	// Every asset at its versioned URL (issue 41), none at the old one.
	if n, v := strings.Count(html, `"/dg/static/`), strings.Count(html, `"/dg/static/v/`+static.Version()+`/`); n != v || n < 4 {
		t.Errorf("admin page links %d assets, %d of them versioned; want at least 4, all versioned", n, v)
	}
}
