package e2e_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/dashgate/dashgate/internal/testkit"
)

// clusterRows is what node b's admin API says of the cluster's sessions
// and workers: the rows with their node.
type clusterRows struct {
	Sessions []struct {
		SessionID string `json:"session_id"`
		Node      string `json:"node"`
	} `json:"sessions"`
	Workers []struct {
		PID       int    `json:"pid"`
		SessionID string `json:"session_id"`
		Kind      string `json:"kind"`
		Node      string `json:"node"`
	} `json:"workers"`
}

// Issue 26, "the admin page sees the cluster": two nodes on one
// PostgreSQL. A chat worker runs on node a (a socket's /echo there); node
// b's admin lists the session and the worker with node a (the store, a's
// heartbeat), POSTs the worker's reap on b, which forwards it (202, its
// audit record result=forwarded node=a), and a reaps it: the pid is gone,
// a's log has the worker's close (reason admin_reap, by=admin-token) and
// one "remote reap" record from node b; the session stays live on a.
func TestPostgresClusterAdminReap(t *testing.T) {
	if os.Getenv(testkit.EnvE2E) != "1" {
		t.Skip("a PostgreSQL cluster of two nodes: set DASHGATE_E2E=1 to run it")
	}
	storeURL := testkit.Postgres(t)
	a := startNode(t, storeURL, "a", filepath.Join(t.TempDir(), "state-a"), "")
	b := startNode(t, storeURL, "b", filepath.Join(t.TempDir(), "state-b"), "")

	chat := a.chat(t)
	sid := chat.createSession("on a")
	chat.mustEcho(sid, "hello")
	w, ok := a.Worker(sid, "chat")
	if !ok {
		t.Fatalf("no chat worker of %s on node a", sid)
	}

	// Node b lists a's session (from the store) and its worker (from a's
	// next heartbeat, every 5 s), each with node a.
	var rows clusterRows
	var lastErr error
	if !testkit.Until(30*time.Second, func() bool {
		rows = clusterRows{}
		if lastErr = b.getJSON("admin/api/sessions", &rows); lastErr != nil {
			return false
		}
		if lastErr = b.getJSON("admin/api/workers", &rows); lastErr != nil {
			return false
		}
		var session, worker bool
		for _, s := range rows.Sessions {
			session = session || (s.SessionID == sid && s.Node == "a")
		}
		for _, x := range rows.Workers {
			worker = worker || (x.PID == w.PID && x.SessionID == sid && x.Kind == "chat" && x.Node == "a")
		}
		return session && worker
	}) {
		t.Fatalf("node b's admin does not list a's session %s and worker %d with node a within 30 s: %+v, %v", sid, w.PID, rows, lastErr)
	}

	mark := a.logMark()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, b.URL(fmt.Sprintf("admin/workers/%d/reap?node=a", w.PID)), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Accept", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var answer struct {
		Forwarded bool   `json:"forwarded"`
		Node      string `json:"node"`
	}
	err = json.NewDecoder(res.Body).Decode(&answer)
	res.Body.Close()
	if res.StatusCode != http.StatusAccepted || err != nil || !answer.Forwarded || answer.Node != "a" {
		t.Fatalf("POST the reap of a's worker on b: %s %+v %v; want 202 forwarded to a", res.Status, answer, err)
	}
	if rec, ok := b.waitLog(5*time.Second, func(r logRecord) bool { return r.Msg() == "admin reap" }); !ok ||
		rec.Str("result") != "forwarded" || rec.Str("node") != "a" || rec.Str("action") != "reap_worker" {
		t.Fatalf("node b's audit record %v; want result=forwarded node=a action=reap_worker", rec)
	}

	closed, ok := a.waitLogSince(mark, 10*time.Second, func(r logRecord) bool {
		pid, _ := r.Int("worker_pid")
		return r.Msg() == "worker closed" && pid == w.PID
	})
	if !ok {
		t.Fatalf("node a did not close worker %d after b's reap; a's log:\n%s", w.PID, a.logText())
	}
	if closed.Str("reason") != "admin_reap" || closed.Str("by") != "admin-token" {
		t.Fatalf("a's worker closed record %v; want reason=admin_reap by=admin-token", closed)
	}
	if rec, ok := a.waitLogSince(mark, 5*time.Second, func(r logRecord) bool { return r.Msg() == "remote reap" }); !ok ||
		rec.Str("from_node") != "b" || rec.Str("by") != "admin-token" || rec.Str("target") != fmt.Sprintf("worker %d", w.PID) {
		t.Fatalf("a's remote reap record %v; want from_node=b by=admin-token", rec)
	}
	if !testkit.Until(5*time.Second, func() bool { return errors.Is(syscall.Kill(w.PID, 0), syscall.ESRCH) }) {
		t.Fatalf("worker %d still exists after a reaped it", w.PID)
	}
	if s, ok := a.Session(sid); !ok || s.WorkerPID != 0 {
		t.Fatalf("session %s on a after its worker's reap: %+v, listed %v; want live without a worker", sid, s, ok)
	}
}

// The same from node b's admin page in a browser: a's worker's row says
// node a; its reap button, confirmed, says the reap went to node a, and a
// reaps the worker (reason admin_reap, by=admin-token).
func TestPostgresClusterAdminPageReap(t *testing.T) {
	if os.Getenv(testkit.EnvE2E) != "1" {
		t.Skip("a PostgreSQL cluster of two nodes: set DASHGATE_E2E=1 to run it")
	}
	storeURL := testkit.Postgres(t)
	a := startNode(t, storeURL, "a", filepath.Join(t.TempDir(), "state-a"), "")
	b := startNode(t, storeURL, "b", filepath.Join(t.TempDir(), "state-b"), "")
	chat := a.chat(t)
	sid := chat.createSession("on a")
	chat.mustEcho(sid, "hello")
	w, ok := a.Worker(sid, "chat")
	if !ok {
		t.Fatalf("no chat worker of %s on node a", sid)
	}

	br := newBrowser(t)
	admin := br.newTab(t, "admin of b")
	admin.Do("open b's admin page", chromedp.Navigate(b.LoginURL("/admin")))
	row := workerRow(w.PID) + `[data-node="a"]`
	// The page refreshes itself; a's worker shows after a's next heartbeat.
	admin.mustWaitJS(30*time.Second, "b's page lists a's worker with node a", adminLoaded+" && "+exists(row), adminState)
	mark := a.logMark()
	confirmReap(t, admin, "reap a's worker on b", row+` [data-testid="reap-worker"]`)
	admin.mustWaitJS(5*time.Second, "the page says the reap went to node a",
		`(document.querySelector('[data-testid="admin-result"]')?.textContent ?? '').includes('Sent to node a')`,
		`document.querySelector('[data-testid="admin-result"]')?.textContent`)
	closed, ok := a.waitLogSince(mark, 10*time.Second, func(r logRecord) bool {
		pid, _ := r.Int("worker_pid")
		return r.Msg() == "worker closed" && pid == w.PID
	})
	if !ok || closed.Str("reason") != "admin_reap" || closed.Str("by") != "admin-token" {
		t.Fatalf("a's worker closed record %v (found %v); want reason=admin_reap by=admin-token", closed, ok)
	}
}
