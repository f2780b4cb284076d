package e2e_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dashgate/dashgate/internal/testkit"
)

// leaseDeadline bounds each wait on a lease: the nodes run with the
// default --node-expiry (15 s, renewed every 5 s), the lease's ttl, so a
// dead node's lease lapses up to 15 s after its death.
const leaseDeadline = 60 * time.Second

// startNode starts one node of a PostgreSQL cluster: the shared store, its
// node id, the suite's token (login cookies without users are keyed by
// the tokens, so the nodes take each other's), the state directory state
// and, when addr is not empty, that address (a restart keeps the address
// nginx names).
func startNode(t *testing.T, storeURL, id, state, addr string) *dashgate {
	t.Helper()
	args := []string{
		"--worker-grace", workerGrace.String(),
		"--log-level", "debug",
		"--pty-cmd", "/bin/bash --noprofile --norc",
		"--store", storeURL,
		"--node-id", id,
		"--trusted-proxies", "127.0.0.1/32",
		"--state-dir", state,
	}
	if addr != "" {
		args = append(args, "--addr", addr)
	}
	return launch(t, testkit.Options{Sub: "serve", Dir: t.TempDir(), Args: args})
}

// historyLine is a history entry as compared here: who and what.
type historyLine struct {
	Role string `json:"role"`
	Text string `json:"text"`
}

// Issue 26: two nodes sharing one PostgreSQL database behind
// deploy/nginx/dashgate-cluster.conf. A browser pinned to node a makes a
// session there; a is killed (SIGKILL); once a's lease lapsed, the same
// browser (same cookies, which nginx now sends to b) resumes the session
// on b with its whole history, b adopts it (one "session adopted" record,
// from_node=a) and runs its next command in a worker of its own. Node a,
// started again on its state directory, neither takes the session back
// nor writes into it.
func TestPostgresClusterFailover(t *testing.T) {
	if os.Getenv(testkit.EnvE2E) != "1" {
		t.Skip("the PostgreSQL cluster failover takes about a lease's ttl (30 s): set DASHGATE_E2E=1 to run it")
	}
	requireNginx(t)
	storeURL := testkit.Postgres(t)
	stateA := filepath.Join(t.TempDir(), "state-a")
	a := startNode(t, storeURL, "a", stateA, "")
	b := startNode(t, storeURL, "b", filepath.Join(t.TempDir(), "state-b"), "")
	n := startNginx(t, nginxSite{file: "dashgate-cluster.conf", upstreams: []string{a.Addr, b.Addr}})

	// A browser pinned to a (the cookie's random part spreads them;
	// 2^-30 to miss a 30 times).
	c := loginPinned(t, n, "browser", "a", "a", "b")

	chat := openChat(t, "chat to a", n.WS("/ws/chat"), c.ws(n))
	sid := chat.createSession("failover")
	chat.mustEcho(sid, "hello")
	if _, ok := a.Session(sid); !ok {
		t.Fatalf("session %s is not on node a, the node its browser is pinned to", sid)
	}
	if _, ok := b.Session(sid); ok {
		t.Fatalf("session %s is listed by node b too", sid)
	}

	// The journal writes behind (sessions.journalDelay): what a node had
	// not written when it died is lost with it. Wait for the session's row
	// and both entries, so the kill tests the adoption, not that window.
	testkit.WaitFor(t, 10*time.Second, "node a's session row and its two entries in PostgreSQL", func() bool {
		row, err := storedSession(t, storeURL, sid)
		return err == nil && row.node == "a" && row.entries == 2
	})
	a.kill()
	select {
	case <-chat.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the socket to the killed node a is still open 5 s after the kill")
	}

	// The same browser reconnects: nginx sends it to b, which answers
	// the session as missing while a's lease lives, then adopts it.
	chat = openChat(t, "chat after the kill", n.WS("/ws/chat"), c.ws(n))
	var resumed struct {
		SessionID string        `json:"session_id"`
		History   []historyLine `json:"history"`
	}
	var lastErr error
	if !testkit.Until(leaseDeadline, func() bool {
		lastErr = chat.call("session.resume", map[string]any{"session_id": sid}, &resumed)
		return lastErr == nil
	}) {
		t.Fatalf("session.resume %s through nginx: not within %v of a's death (a's lease is %v): last answer %v; node b:\n%s", sid, leaseDeadline, 15*time.Second, lastErr, b.logText())
	}
	if resumed.SessionID != sid {
		t.Fatalf("session.resume %s answered session %q", sid, resumed.SessionID)
	}
	want := []historyLine{{"user", "/echo hello"}, {"assistant", "hello"}}
	if !slices.Equal(resumed.History, want) {
		t.Fatalf("history after the adoption: %+v, want %+v", resumed.History, want)
	}
	if _, ok := b.Session(sid); !ok {
		t.Fatalf("session %s resumed through nginx is not on node b", sid)
	}
	rec, ok := b.waitLog(5*time.Second, func(r logRecord) bool { return r.Msg() == "session adopted" && r.Str("sid") == sid })
	if !ok {
		t.Fatalf("node b logged no \"session adopted\" for %s:\n%s", sid, b.logText())
	}
	if rec.Str("from_node") != "a" {
		t.Errorf("node b's adoption record: %s, want from_node=a", rec)
	}

	chat.mustEcho(sid, "again")
	w, ok := b.Worker(sid, "chat")
	if !ok {
		t.Fatalf("node b lists no chat worker for %s after /echo again", sid)
	}
	if !isDescendant(t, w.PID, b.PID()) {
		t.Errorf("the worker %s that answered /echo again is not a child of node b (pid %d)", testkit.Describe(w.PID), b.PID())
	}

	// Node a comes back on its state directory and address: b holds the
	// session under a live lease, so a's Claim leaves it alone.
	a = startNode(t, storeURL, "a", stateA, a.Addr)
	if _, ok := a.Session(sid); ok {
		t.Errorf("node a, started again, took session %s back", sid)
	}
	if _, ok := b.Session(sid); !ok {
		t.Errorf("session %s left node b when node a started again", sid)
	}
	// The browser was re-pinned to b (its cookie names b now), so it
	// stays there; a browser whose cookie names a reaches a again once
	// nginx retries a (after fail_timeout): a answers the session as
	// missing, it adopts nothing b holds.
	probe := probeClient(t, n, "a.0000000000000000")
	testkit.WaitFor(t, 15*time.Second, "nginx sending a browser with an a-cookie to node a again", func() bool {
		return servedBy(t, probe, n, testToken) == "a"
	})
	back := openChat(t, "chat to a started again", n.WS("/ws/chat"), testkit.DialOptions{Token: testToken, Jar: probe.Jar})
	if err := back.call("session.resume", map[string]any{"session_id": sid}, nil); err == nil {
		t.Errorf("node a, started again, resumed session %s that node b holds", sid)
	}
	back.Close()
	if _, ok := a.Session(sid); ok {
		t.Errorf("node a took session %s on a resume while node b holds it", sid)
	}
	if _, ok := a.findLog(func(r logRecord) bool { return r.Msg() == "session adopted" }); ok {
		t.Errorf("node a, started again, adopted a session:\n%s", a.logText())
	}

	// b's socket (opened while a was down) still reaches b: its history,
	// read from the store, holds what b and the dead a wrote and nothing
	// of the a started again.
	chat.mustEcho(sid, "third")
	var h struct {
		Entries []historyLine `json:"entries"`
	}
	chat.mustCall("session.history", map[string]any{"session_id": sid}, &h)
	want = append(want, historyLine{"user", "/echo again"}, historyLine{"assistant", "again"},
		historyLine{"user", "/echo third"}, historyLine{"assistant", "third"})
	if !slices.Equal(h.Entries, want) {
		t.Errorf("history on node b after node a came back: %+v, want %+v", h.Entries, want)
	}
	if _, ok := a.Session(sid); ok {
		t.Errorf("node a lists session %s after b's last command", sid)
	}
	if rec, ok := b.findLog(func(r logRecord) bool {
		return r.Str("sid") == sid && strings.Contains(r.Str("end_reason"), "lease")
	}); ok {
		t.Errorf("node b lost its lease on %s: %s", sid, rec)
	}
	// In the store: b's row under the epoch of its adoption, once b's
	// journal wrote the last entries.
	var row storedRow
	var err error
	if !testkit.Until(10*time.Second, func() bool {
		row, err = storedSession(t, storeURL, sid)
		return err == nil && row.entries == len(want)
	}) || row.node != "b" || row.epoch != 2 {
		t.Errorf("session %s in PostgreSQL after node a came back: %+v (%v), want node b, epoch 2 and %d entries", sid, row, err, len(want))
	}
	chat.Close()
}

// storedRow is what the test reads of a session's row in PostgreSQL.
type storedRow struct {
	node    string
	epoch   int64
	entries int
}

// storedSession reads session sid's holder, epoch and entry count straight
// from the database at url (store/postgres's schema).
func storedSession(t *testing.T, url, sid string) (storedRow, error) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return storedRow{}, err
	}
	defer conn.Close(context.Background())
	var r storedRow
	err = conn.QueryRow(ctx, `SELECT node, epoch, (SELECT count(*) FROM entries WHERE session_id = $1) FROM sessions WHERE id = $1`, sid).Scan(&r.node, &r.epoch, &r.entries)
	return r, err
}

// isDescendant reports whether pid runs under root (its parent chain
// reaches root).
func isDescendant(t *testing.T, pid, root int) bool {
	t.Helper()
	procs, err := testkit.Descendants(root)
	if err != nil {
		t.Fatalf("descendants of %d: %v", root, err)
	}
	for _, p := range procs {
		if p.PID == pid {
			return true
		}
	}
	return false
}
