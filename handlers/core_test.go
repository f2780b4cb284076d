package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/workers"
)

// TestAdminReapUnownedOrphan: an orphan adopted by dashgate (a subreaper)
// that no worker owns is listed as unowned and reaped through the admin
// handler, every run.
func TestAdminReapUnownedOrphan(t *testing.T) {
	t.Parallel()
	if err := workers.EnableSubreaper(); err != nil {
		t.Fatal("cannot be a subreaper:", err)
	}
	s := newStack(t)
	// sh starts a sleep in its own session and exits: the sleep is
	// reparented to this process, the subreaper, and no worker owns it.
	orphan := startOrphan(t, 330)
	t.Cleanup(func() {
		syscall.Kill(orphan, syscall.SIGKILL)
		var ws syscall.WaitStatus
		syscall.Wait4(orphan, &ws, 0, nil)
	})
	testkit.WaitFor(t, 5*time.Second, "orphan listed as unowned", func() bool {
		for _, u := range s.mgr.Unowned() {
			if u.PID == orphan {
				return true
			}
		}
		return false
	})
	resp := s.post("/admin/workers/"+strconv.Itoa(orphan)+"/reap", nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("reap orphan: %d", resp.StatusCode)
	}
	if !testkit.Gone(orphan) || syscall.Kill(orphan, 0) != syscall.ESRCH {
		t.Fatal("orphan alive (or not reaped) after the reap answered")
	}
	audit := s.logs.Records("admin reap")
	if len(audit) != 1 || audit[0]["target"] != "unowned "+strconv.Itoa(orphan) || audit[0]["result"] != "reaped" {
		t.Fatalf("admin reap records = %v", audit)
	}
}

// TestAdminReapTerminalOnlyShell: reaping the shell of a terminal-only
// session while its socket is open ends the session with admin_reap, and
// the socket is told the terminal closed.
func TestAdminReapTerminalOnlyShell(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	p := s.pty(nil)
	shell, _ := s.ptyTree(t)
	resp := s.post("/admin/workers/"+strconv.Itoa(shell)+"/reap", map[string]string{"Accept": "application/json"})
	if resp.StatusCode != 200 {
		t.Fatalf("reap shell: %d", resp.StatusCode)
	}
	if !testkit.Gone(shell) {
		t.Fatal("shell alive after the reap answered")
	}
	if err := p.closeErr(); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("socket closed with %v, want 1000", err)
	}
	testkit.WaitFor(t, 5*time.Second, "session closed record", func() bool { return len(s.logs.Records("session closed")) == 1 })
	if rec := s.logs.Records("session closed")[0]; rec["end_reason"] != "admin_reap" {
		t.Fatalf("session closed = %v, want end_reason admin_reap", rec)
	}
	if rec := s.workerRecords(shell); len(rec) != 1 || rec[0]["reason"] != "admin_reap" {
		t.Fatalf("worker closed = %v", rec)
	}
}

// TestClosePathsRace: client close, admin reap, detach and TTL expiry hit
// one session at once, many times: each session logs exactly one "session
// closed" record and its worker exactly one "worker closed" record.
func TestClosePathsRace(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{grace: 100 * time.Millisecond, reg: func(c *sessions.Config) { c.DetachedTTL = time.Millisecond }})
	closer := e.chat()
	const rounds = 25
	for i := range rounds {
		owner := e.chat()
		sid := owner.create()
		owner.call("slash.exec", map[string]any{"session_id": sid, "command": "/echo " + strconv.Itoa(i)})
		in, _ := e.reg.Get(sessions.Principal{}, sid)
		pid := in.WorkerPID
		var wg sync.WaitGroup
		start := make(chan struct{})
		race := []func(){
			func() { closer.callRaw("session.close", map[string]any{"session_id": sid}) },
			func() { e.reg.Close(sessions.Principal{}, sid, sessions.EndAdminReap) },
			func() { owner.Drop(false) }, // detach, then TTL
			func() { e.reg.Sweep() },
		}
		for _, f := range race {
			wg.Add(1)
			go func() { defer wg.Done(); <-start; f() }()
		}
		close(start)
		wg.Wait()
		testkit.WaitFor(t, 10*time.Second, "session ended", func() bool { _, live := e.reg.Get(sessions.Principal{}, sid); return !live })
		e.reg.Wait()
		var closes []map[string]any
		for _, r := range e.logs.Records("session closed") {
			if r["sid"] == sid {
				closes = append(closes, r)
			}
		}
		if len(closes) != 1 {
			t.Fatalf("round %d: %d session closed records: %v", i, len(closes), closes)
		}
		testkit.WaitFor(t, 10*time.Second, "worker gone", func() bool { return testkit.Gone(pid) })
		if recs := e.workerRecords(pid); len(recs) != 1 {
			t.Fatalf("round %d: %d worker closed records for %d: %v", i, len(recs), pid, recs)
		}
	}
}

// TestMetricsHaveEveryReason: every reason of the reason table has its
// series from the start.
func TestMetricsHaveEveryReason(t *testing.T) {
	t.Parallel()
	m := handlers.NewMetrics(func() []sessions.Info { return nil }, func() map[workers.Kind]int { return nil })
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	body := string(b)
	for _, r := range sessions.EndReasons {
		if want := fmt.Sprintf(`dashgate_session_closes_total{end_reason=%q} 0`, r); !strings.Contains(body, want) {
			t.Errorf("no series %s", want)
		}
	}
	for _, r := range sessions.WorkerReasons {
		if want := fmt.Sprintf(`dashgate_worker_closes_total{escalation="kill",reason=%q} 0`, r); !strings.Contains(body, want) {
			t.Errorf("no series %s", want)
		}
	}
}

// failingRegistry is a chat registry whose Exec fails with an error the
// gateway has no code for.
type failingRegistry struct {
	handlers.ChatRegistry // nil: any other method panics
	err                   error
}

func (f failingRegistry) Exec(ctx context.Context, v sessions.Viewer, sid, command string) (string, error) {
	return "", f.err
}

func (f failingRegistry) DetachViewer(sessions.Viewer, workers.Reason) {}

// TestInternalErrorsLoggedOnce: an error without a code answers -32603
// "internal error" (nothing of it on the wire) and is logged once at
// ERROR; a coded one is not logged.
func TestInternalErrorsLoggedOnce(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		err  error
		code int
		logs int
	}{
		{"internal", errors.New("secret detail"), handlers.CodeInternal, 1},
		{"not found", sessions.ErrNotFound, handlers.CodeNotFound, 0},
		{"viewer capacity", &sessions.ViewerCapacityError{Limit: 7}, handlers.CodeCapacity, 0},
		{"rate limited", &workers.Error{Failure: "rate_limited", Message: "the model server is rate limiting; retry after 7 s", RetryAfter: 7}, handlers.CodeWorkerFailed, 0},
		{"store", &sessions.StoreError{Err: errors.New("disk I/O error")}, handlers.CodeStoreFailed, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOpts{})
			srv := httptest.NewServer(&handlers.Chat{Registry: failingRegistry{err: tt.err}, Log: e.log})
			defer srv.Close()
			e.url = "ws" + strings.TrimPrefix(srv.URL, "http")
			cc := e.chat()
			m := cc.callRaw("slash.exec", map[string]any{"session_id": "x", "command": "/echo"})
			if errCode(m) != tt.code || strings.Contains(fmt.Sprint(m), "secret") {
				t.Fatalf("reply %v, want code %d and no detail", m, tt.code)
			}
			recs := e.logs.Records("internal error")
			if len(recs) != tt.logs {
				t.Fatalf("internal error records: %v", recs)
			}
			if tt.logs == 1 && (recs[0]["level"] != "ERROR" || recs[0]["method"] != "slash.exec" || recs[0]["err"] != "secret detail") {
				t.Fatalf("record: %v", recs[0])
			}
			if tt.code == handlers.CodeCapacity && !strings.Contains(fmt.Sprint(m), "(7)") {
				t.Fatalf("capacity message does not name the limit: %v", m)
			}
			if tt.code == handlers.CodeWorkerFailed {
				data := string(m["error"].(map[string]any)["data"].(json.RawMessage))
				msg := m["error"].(map[string]any)["message"]
				if !strings.Contains(data, `"failure":"rate_limited"`) || !strings.Contains(data, `"retry_after":7`) || msg != "the model server is rate limiting; retry after 7 s" {
					t.Fatalf("a worker's own failure: %v %s", msg, data)
				}
			}
		})
	}
}

// TestTerminalSpawnFailureIs500AndLogged: a terminal program that cannot
// start answers the handshake 500 and logs the cause once at ERROR.
func TestTerminalSpawnFailureIs500AndLogged(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{ptyCmd: []string{"/nonexistent/shell"}})
	_, resp, err := websocket.Dial(t.Context(), e.url+"/ws/pty", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("dial: %v %v", resp, err)
	}
	recs := e.logs.Records("internal error")
	if len(recs) != 1 || recs[0]["level"] != "ERROR" || recs[0]["path"] != "/ws/pty" || !strings.Contains(fmt.Sprint(recs[0]["err"]), "/nonexistent/shell") {
		t.Fatalf("internal error records: %v", recs)
	}
}
