package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
)

// testToken is the dashboard (and admin) token of every dashgate the suite starts.
const testToken = "e2e-token-3f9c1a"

// workerGrace is --worker-grace: the promises measured here are "within 1 s
// plus the grace".
const workerGrace = 500 * time.Millisecond

// dashgate is one running `dashgate serve` (a testkit.Instance), owned by
// one test, with the pids of its children seen while it ran.
type dashgate struct {
	*testkit.Instance
	t *testing.T

	mu   sync.Mutex
	seen map[int]uint64 // children and descendants seen while it ran: pid -> start time

	killed bool // set by kill: the cleanup checks only that its children died with it
	// allowErrors are ERROR records (by msg) the test caused on purpose
	// (a full disk); any other ERROR fails the clean stop.
	allowErrors []string
	// secrets are the tokens it was given (dashboard, admin): no record
	// of its log may contain one.
	secrets  []string
	stopOnce sync.Once
}

// startDashgate starts dashgate on 127.0.0.1:0 with a temp state dir and
// the suite's token, waits until it listens, and registers a cleanup that
// stops it with SIGTERM and checks that it exits 0 and leaves no process
// behind. extra flags come last (and win).
func startDashgate(t *testing.T, extra ...string) *dashgate {
	t.Helper()
	return launch(t, testkit.Options{Sub: "serve", Args: append([]string{
		"--worker-grace", workerGrace.String(),
		"--log-level", "debug",
		// A known shell without rc files: prompts and output do not depend
		// on the machine's dotfiles.
		"--pty-cmd", "/bin/bash --noprofile --norc",
	}, extra...)})
}

// launch starts the suite's binary as o says (Bin and Token are filled in,
// Dir when empty) and registers the checking stop as its cleanup.
func launch(t *testing.T, o testkit.Options) *dashgate {
	t.Helper()
	clearArtifacts(t)
	o.Bin, o.Token = dashgateBin, testToken
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	d := &dashgate{t: t, seen: map[int]uint64{}, secrets: secretsOf(o)}
	// Registered first, so it runs after stop: whatever stop found to be
	// wrong, nothing of this dashgate survives the test.
	d.Instance = testkit.StartT(t, o)
	t.Cleanup(d.stop)
	return d
}

// secretsOf lists the tokens o gives dashgate (testkit.Options.Secrets).
func secretsOf(o testkit.Options) []string { return o.Secrets() }

// checkNoSecrets fails the test for every line of the whole log and of
// stdout that carries one of d's tokens (testkit's CheckNoSecrets, which
// the kit's cleanup would run too, without the tokens d was given later).
func (d *dashgate) checkNoSecrets() { d.CheckNoSecrets(d.t, d.secrets...) }

type (
	apiWorker  = testkit.APIWorker
	apiSession = testkit.APISession
)

// getJSON is GetJSON bounded by 10 s (not by the test's context: the
// cleanup calls it too). On a Unix socket it asks over the socket, as
// root: testkit's client dials the TCP address of --addr-file.
func (d *dashgate) getJSON(path string, v any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if d.socket() == "" {
		return d.GetJSON(ctx, path, v)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.socketURL(path), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+d.Token)
	c := &http.Client{Transport: socketTransport(d.socket())}
	defer c.CloseIdleConnections()
	res, err := c.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", path, res.Status, bytes.TrimSpace(body))
	}
	return json.Unmarshal(body, v)
}

// socketHost is the host of the URLs of a dashgate on a Unix socket
// (socketURL): what its clients send as Host (and as Origin's host).
const socketHost = "localhost"

// socket is the Unix socket d listens on (--addr unix:PATH), "" over TCP.
func (d *dashgate) socket() string {
	p, _ := strings.CutPrefix(d.Addr, "unix:")
	if p == d.Addr {
		return ""
	}
	return p
}

// socketURL is the URL of path (relative to the base path) for a client
// that dials d's Unix socket (socketClient, DialOptions.Socket).
func (d *dashgate) socketURL(path string) string {
	return "http://" + socketHost + strings.TrimPrefix(d.Base, "http://"+d.Addr) + strings.TrimPrefix(path, "/")
}

// socketPath is the request path (base path included) of path on d's
// Unix socket, for a client that builds its own URL (a neighbour's).
func (d *dashgate) socketPath(path string) string {
	return strings.TrimPrefix(d.socketURL(path), "http://"+socketHost)
}

// socketWS is socketURL over ws.
func (d *dashgate) socketWS(path string) string {
	return "ws" + strings.TrimPrefix(d.socketURL(path), "http")
}

// socketTransport dials the Unix socket path for every request.
func socketTransport(path string) *http.Transport {
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	return &http.Transport{Proxy: nil, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return dialer.DialContext(ctx, "unix", path)
	}}
}

// socketClient is clientFrom over the Unix socket path: it follows
// redirects, and its idle connections close with the test.
func socketClient(t *testing.T, path string) *http.Client {
	c := &http.Client{Timeout: 10 * time.Second, Transport: socketTransport(path)}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// Workers lists dashgate's workers and remembers every pid it names, for
// the leak check at the end. Their figures and children are read now
// (?fresh=1), not taken from the admin page's last snapshot.
func (d *dashgate) Workers() []apiWorker {
	d.t.Helper()
	var r struct {
		Workers []apiWorker `json:"workers"`
	}
	if err := d.getJSON("admin/api/workers?fresh=1", &r); err != nil {
		d.t.Fatalf("list workers: %v", err)
	}
	// This node's alone: on a node of a cluster the admin lists the other
	// nodes' workers too, which this node's stop does not end.
	r.Workers = slices.DeleteFunc(r.Workers, func(w apiWorker) bool { return w.Remote })
	for _, w := range r.Workers {
		d.remember(w.PID)
		for _, c := range w.Children {
			d.remember(c)
		}
	}
	return r.Workers
}

// Sessions lists dashgate's live sessions.
func (d *dashgate) Sessions() []apiSession {
	d.t.Helper()
	var r struct {
		Sessions []apiSession `json:"sessions"`
	}
	if err := d.getJSON("admin/api/sessions", &r); err != nil {
		d.t.Fatalf("list sessions: %v", err)
	}
	// This node's alone: on a node of a cluster the admin lists the other
	// nodes' sessions too.
	r.Sessions = slices.DeleteFunc(r.Sessions, func(s apiSession) bool { return s.Remote })
	for _, s := range r.Sessions {
		d.remember(s.WorkerPID)
		d.remember(s.PTYPID)
	}
	return r.Sessions
}

// Session returns the live session sid, if listed.
func (d *dashgate) Session(sid string) (apiSession, bool) {
	for _, s := range d.Sessions() {
		if s.SessionID == sid {
			return s, true
		}
	}
	return apiSession{}, false
}

// Worker returns the worker of kind for session sid, if any.
func (d *dashgate) Worker(sid, kind string) (apiWorker, bool) {
	for _, w := range d.Workers() {
		if w.SessionID == sid && w.Kind == kind {
			return w, true
		}
	}
	return apiWorker{}, false
}

// remember records pid (with its start time) as a child of this dashgate.
func (d *dashgate) remember(pid int) uint64 {
	if pid <= 0 {
		return 0
	}
	p, err := testkit.ReadProc(pid)
	if err != nil {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, known := d.seen[pid]; !known {
		d.seen[pid] = p.Start
	}
	return d.seen[pid]
}

// startTime is the start time recorded for pid (0 when never seen).
func (d *dashgate) startTime(pid int) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.seen[pid]
}

// stop ends dashgate with SIGTERM and checks the promise of a clean stop: it
// exits 0 and no process it started (recorded during the test, the tree
// under it just before the signal, or anything carrying its instance
// marker) is left, alive or as an unreaped zombie. It writes the log into
// the test's artifacts when the test failed.
func (d *dashgate) stop() { d.stopOnce.Do(d.stopAndCheck) }

func (d *dashgate) stopAndCheck() {
	t := d.t
	defer func() {
		if t.Failed() {
			if b, err := os.ReadFile(d.Log.Path); err == nil {
				writeArtifact(t, "dashgate.log", b)
				logRaces(t, "dashgate.log", b)
				logTail(t, "dashgate.log", b, 15)
			}
		}
	}()
	// However it ended (stopped, killed, or gone before the end), its log
	// holds no token; run before the artifact is written (defers run last
	// first), so that this failure is in it too.
	defer d.checkNoSecrets()
	if d.killed {
		d.checkKilled() // killed on purpose by the test: no clean stop to check
		return
	}
	select {
	case <-d.Exited():
		t.Errorf("dashgate exited before the end of the test: %v", d.WaitErr())
		return
	default:
	}
	var api struct {
		Workers []apiWorker `json:"workers"`
	}
	if err := d.getJSON("admin/api/workers?fresh=1", &api); err == nil {
		for _, w := range api.Workers {
			if w.Remote {
				continue // another node's: not this one's to end
			}
			d.remember(w.PID)
			for _, c := range w.Children {
				d.remember(c)
			}
		}
	}
	d.rememberTree()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if code, err := d.Stop(ctx); err != nil {
		t.Error(err)
	} else if code != 0 {
		t.Errorf("dashgate exited with %v after SIGTERM, want exit code 0", d.WaitErr())
	}
	if _, ok := d.findLog(func(r logRecord) bool { return r.Msg() == "dashgate stopped" }); !ok {
		t.Errorf("no \"dashgate stopped\" record after SIGTERM")
	}
	for _, r := range d.Log.Records("") {
		if r.Str("level") == "ERROR" && !slices.Contains(d.allowErrors, r.Msg()) {
			t.Errorf("dashgate logged an ERROR (STYLE.md: only when something was lost): %s", r)
		}
	}

	// Everything was waited for before dashgate exited: nothing may remain,
	// alive or as a zombie reparented to us.
	d.mu.Lock()
	seen := make(map[int]uint64, len(d.seen))
	for pid, start := range d.seen {
		seen[pid] = start
	}
	d.mu.Unlock()
	var leaked []string
	for pid, start := range seen {
		if present(pid, start) {
			leaked = append(leaked, testkit.Describe(pid))
		}
	}
	marked, _ := d.Procs()
	for _, p := range marked {
		if _, known := seen[p.PID]; !known {
			leaked = append(leaked, testkit.Describe(p.PID))
		}
	}
	if len(leaked) > 0 {
		slices.Sort(leaked)
		t.Errorf("processes of dashgate left after it exited: %s", strings.Join(leaked, ", "))
		for pid, start := range seen {
			if alive(pid, start) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		for _, p := range marked {
			syscall.Kill(p.PID, syscall.SIGKILL)
		}
	}
	if left := reapOrphans(5 * time.Second); len(left) > 0 {
		t.Errorf("processes reparented to the test process still running: %v", left)
	}
}

// rememberTree records the processes below dashgate now.
func (d *dashgate) rememberTree() {
	desc, _ := testkit.Descendants(d.PID())
	for _, p := range desc {
		d.remember(p.PID)
	}
}

// logRecord is one JSON line of dashgate's log.
type logRecord = testkit.Record

func (d *dashgate) findLog(match func(logRecord) bool) (logRecord, bool) {
	for _, r := range d.Log.Records("") {
		if match(r) {
			return r, true
		}
	}
	return nil, false
}

// waitLog polls the log until a record matches or timeout passes.
func (d *dashgate) waitLog(timeout time.Duration, match func(logRecord) bool) (logRecord, bool) {
	return d.waitLogSince(0, timeout, match)
}

// logMark is the number of records logged so far, for waitLogSince.
func (d *dashgate) logMark() int { return d.Log.Mark() }

// waitLogSince is waitLog among the records after the first mark ones.
func (d *dashgate) waitLogSince(mark int, timeout time.Duration, match func(logRecord) bool) (logRecord, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rec, err := d.Log.WaitRecord(ctx, mark, match)
	return rec, err == nil
}

// logText is the log so far, for failure messages (the last 60 lines).
func (d *dashgate) logText() string { return d.Log.Tail(60) }

// present reports whether (pid, start) still has a /proc entry (alive or an
// unreaped zombie); a reused pid is someone else.
func present(pid int, start uint64) bool {
	p, err := testkit.ReadProc(pid)
	return err == nil && p.Start == start
}

// alive reports whether (pid, start) still exists and has not exited.
func alive(pid int, start uint64) bool {
	p, err := testkit.ReadProc(pid)
	return err == nil && p.Start == start && !p.Dead()
}

// gone waits up to timeout for the process (pid, start) to be gone (reaped,
// so no /proc entry: dashgate promises it waits for its children) and
// reports whether it was.
func gone(pid int, start uint64, timeout time.Duration) bool {
	return testkit.Until(timeout, func() bool { return !present(pid, start) })
}

func artifactPath(t *testing.T) string {
	name := regexp.MustCompile(`[^A-Za-z0-9_.-]+`).ReplaceAllString(t.Name(), "_")
	return filepath.Join("artifacts", name)
}

// clearArtifacts removes what an earlier run of this test (and its
// subtests) left in e2e/artifacts, so that what is there is this run's.
func clearArtifacts(t *testing.T) {
	old, _ := filepath.Glob(artifactPath(t) + "*")
	for _, p := range old {
		os.RemoveAll(p)
	}
}

// artifactDir is e2e/artifacts/<TestName>/, created on first use.
func artifactDir(t *testing.T) string {
	dir, err := filepath.Abs(artifactPath(t))
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		t.Logf("artifacts: %v", err)
		return ""
	}
	return dir
}

// writeArtifact saves b as a failure artifact of t and logs its path.
func writeArtifact(t *testing.T, name string, b []byte) {
	dir := artifactDir(t)
	if dir == "" {
		return
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Logf("artifact %s: %v", p, err)
		return
	}
	t.Logf("artifact: %s", p)
}

// logRaces puts every race detector report in a log (from its "WARNING:
// DATA RACE" to the line of "=" that ends it, 200 lines in all at most) into
// the test's output: the tail of logTail holds only a report's last
// lines, and CI keeps the output, not the artifacts.
func logRaces(t *testing.T, name string, b []byte) {
	var report []string
	in := false
	for l := range strings.Lines(string(b)) {
		l = strings.TrimSuffix(l, "\n")
		switch {
		case strings.Contains(l, "WARNING: DATA RACE"):
			in = true
			report = append(report, "==================", l)
		case in && strings.HasPrefix(l, "=================="):
			in = false
			report = append(report, l)
		case in && len(report) < 200:
			report = append(report, l)
		}
	}
	if len(report) > 0 {
		t.Logf("%s holds a race detector report:\n%s", name, strings.Join(report, "\n"))
	}
}

// logTail puts the last n records of a JSON log above DEBUG into the
// test's output (each cut at 300 bytes): CI keeps the output, not the
// artifacts.
func logTail(t *testing.T, name string, b []byte, n int) {
	var lines []string
	for l := range strings.Lines(string(b)) {
		if strings.Contains(l, `"level":"DEBUG"`) {
			continue
		}
		l = strings.TrimSuffix(l, "\n")
		if len(l) > 300 {
			l = l[:300] + "…"
		}
		lines = append(lines, l)
	}
	lines = lines[max(0, len(lines)-n):]
	t.Logf("the end of %s (above DEBUG):\n%s", name, strings.Join(lines, "\n"))
}

var errTimeout = errors.New("timed out")
