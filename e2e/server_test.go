package e2e_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// testToken is the dashboard (and admin) token of every dashgate the suite starts.
const testToken = "e2e-token-3f9c1a"

// workerGrace is --worker-grace: the promises measured here are "within 1 s
// plus the grace".
const workerGrace = 500 * time.Millisecond

// dashgate is one running `dashgate serve`, owned by one test.
type dashgate struct {
	t        *testing.T
	addr     string // 127.0.0.1:port
	base     string // http://127.0.0.1:port/
	instance string // its DASHGATE_INSTANCE
	logPath  string // its stderr: JSON log records
	cmd      *exec.Cmd
	exited   chan struct{} // closed once cmd.Wait returned
	waitErr  error
	client   *http.Client

	mu   sync.Mutex
	seen map[int]uint64 // children and descendants seen while it ran: pid -> start time

	killed bool // set by kill: the cleanup checks only that its children died with it
}

// startDashgate starts dashgate on 127.0.0.1:0 with a temp state dir and
// the suite's token, waits until it listens, and registers a cleanup that
// stops it with SIGTERM and checks that it exits 0 and leaves no process
// behind. extra flags come last (and win).
func startDashgate(t *testing.T, extra ...string) *dashgate {
	t.Helper()
	clearArtifacts(t)
	dir := t.TempDir()
	d := &dashgate{
		t:       t,
		logPath: filepath.Join(dir, "dashgate.log"),
		exited:  make(chan struct{}),
		client:  &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}},
		seen:    map[int]uint64{},
	}
	addrFile := filepath.Join(dir, "addr")
	args := []string{"serve",
		"--addr", "127.0.0.1:0",
		"--addr-file", addrFile,
		"--state-dir", filepath.Join(dir, "state"),
		"--token", testToken,
		"--worker-grace", workerGrace.String(),
		"--log-format", "json",
		"--log-level", "debug",
		// A known shell without rc files: prompts and output do not depend
		// on the machine's dotfiles.
		"--pty-cmd", "/bin/bash --noprofile --norc",
	}
	args = append(args, extra...)
	logf, err := os.Create(d.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close() // the child has its own copy
	outf, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	defer outf.Close()
	d.cmd = exec.Command(dashgateBin, args...)
	d.cmd.Stdout, d.cmd.Stderr = outf, logf
	d.cmd.Dir = dir
	d.cmd.Env = cleanEnv()
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start dashgate: %v", err)
	}
	own(d.cmd.Process.Pid)
	go func() {
		d.waitErr = d.cmd.Wait()
		disown(d.cmd.Process.Pid)
		close(d.exited)
	}()
	t.Cleanup(d.stop)

	ok := waitUntil(15*time.Second, func() bool {
		select {
		case <-d.exited:
			return true
		default:
		}
		b, err := os.ReadFile(addrFile)
		if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
			return false
		}
		d.addr = strings.TrimSpace(string(b))
		return true
	})
	select {
	case <-d.exited:
		t.Fatalf("dashgate exited at startup (%v); log:\n%s", d.waitErr, d.logText())
	default:
	}
	if !ok {
		t.Fatalf("dashgate wrote no --addr-file within 15s; log:\n%s", d.logText())
	}
	rec, ok := d.waitLog(5*time.Second, func(r logRecord) bool { return r.Msg() == "dashgate listening" })
	if !ok {
		t.Fatalf("no \"dashgate listening\" record; log:\n%s", d.logText())
	}
	// URL and the admin API calls are relative to --base-path.
	basePath := rec.Str("base_path")
	if !strings.HasPrefix(basePath, "/") || !strings.HasSuffix(basePath, "/") {
		t.Fatalf("\"dashgate listening\" has base_path %q, want /.../: %v", basePath, rec)
	}
	d.base = "http://" + d.addr + basePath
	d.instance = rec.Str("instance")
	if d.instance == "" {
		t.Fatalf("\"dashgate listening\" has no instance: %v", rec)
	}
	return d
}

// cleanEnv is the test's environment without DASHGATE_* variables (each
// would set a flag) and without proxies.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "DASHGATE_") || strings.HasSuffix(strings.ToLower(name), "_proxy") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// URL returns the absolute URL of path (relative to the base path).
func (d *dashgate) URL(path string) string { return d.base + strings.TrimPrefix(path, "/") }

// LoginURL is a page URL carrying the token, as printed for people.
func (d *dashgate) LoginURL(path string) string {
	u := d.URL(path)
	if strings.Contains(u, "?") {
		return u + "&token=" + testToken
	}
	return u + "?token=" + testToken
}

// apiWorker and apiSession are the records of /admin/api (PROTOCOL.md §5).
type apiWorker struct {
	PID       int    `json:"pid"`
	Kind      string `json:"kind"`
	SessionID string `json:"session_id"`
	State     string `json:"state"`
	Children  []int  `json:"children"`
}

type apiSession struct {
	SessionID string `json:"session_id"`
	Title     string `json:"title"`
	State     string `json:"state"`
	Viewers   int    `json:"viewers"`
	Running   bool   `json:"running"`
	WorkerPID int    `json:"worker_pid"`
	PTYPID    int    `json:"pty_pid"`
}

func (d *dashgate) getJSON(path string, v any) error {
	req, err := http.NewRequest(http.MethodGet, d.URL(path), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	res, err := d.client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", path, res.Status, body)
	}
	return json.Unmarshal(body, v)
}

// Workers lists dashgate's workers and remembers every pid it names, for
// the leak check at the end.
func (d *dashgate) Workers() []apiWorker {
	d.t.Helper()
	var r struct {
		Workers []apiWorker `json:"workers"`
	}
	if err := d.getJSON("admin/api/workers", &r); err != nil {
		d.t.Fatalf("list workers: %v", err)
	}
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
	p, ok := readProc(pid)
	if !ok {
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
func (d *dashgate) stop() {
	t := d.t
	defer func() {
		d.client.CloseIdleConnections()
		if t.Failed() {
			if b, err := os.ReadFile(d.logPath); err == nil {
				writeArtifact(t, "dashgate.log", b)
			}
		}
	}()
	if d.killed {
		d.checkKilled() // killed on purpose by the test: no clean stop to check
		return
	}
	select {
	case <-d.exited:
		t.Errorf("dashgate exited before the end of the test: %v", d.waitErr)
		return
	default:
	}
	var api struct {
		Workers []apiWorker `json:"workers"`
	}
	if err := d.getJSON("admin/api/workers", &api); err == nil {
		for _, w := range api.Workers {
			d.remember(w.PID)
			for _, c := range w.Children {
				d.remember(c)
			}
		}
	}
	for _, p := range descendants(d.cmd.Process.Pid) {
		d.remember(p.PID)
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(20 * time.Second):
		t.Errorf("dashgate did not exit within 20s of SIGTERM; killing it")
		d.cmd.Process.Kill()
		<-d.exited
	}
	if code := d.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("dashgate exited with %v after SIGTERM, want exit code 0", d.waitErr)
	}
	if _, ok := d.findLog(func(r logRecord) bool { return r.Msg() == "dashgate stopped" }); !ok {
		t.Errorf("no \"dashgate stopped\" record after SIGTERM")
	}
	for _, r := range d.records() {
		if r.Str("level") == "ERROR" {
			t.Errorf("dashgate logged an ERROR (STYLE.md: only when something was lost): %s", r.raw)
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
			leaked = append(leaked, fmt.Sprintf("%d (%s)", pid, cmdline(pid)))
		}
	}
	for _, p := range withEnv("DASHGATE_INSTANCE=" + d.instance) {
		if _, known := seen[p.PID]; !known {
			leaked = append(leaked, fmt.Sprintf("%d (%s)", p.PID, cmdline(p.PID)))
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
		for _, p := range withEnv("DASHGATE_INSTANCE=" + d.instance) {
			syscall.Kill(p.PID, syscall.SIGKILL)
		}
	}
	if left := reapOrphans(5 * time.Second); len(left) > 0 {
		t.Errorf("processes reparented to the test process still running: %v", left)
	}
}

// logRecord is one JSON line of dashgate's log.
type logRecord struct {
	m   map[string]any
	raw string
}

func (r logRecord) Msg() string { return r.Str("msg") }

func (r logRecord) Str(key string) string {
	s, _ := r.m[key].(string)
	return s
}

func (r logRecord) Int(key string) (int, bool) {
	f, ok := r.m[key].(float64)
	return int(f), ok
}

func (r logRecord) String() string { return r.raw }

// records parses the log written so far. A last line still being written
// is skipped.
func (d *dashgate) records() []logRecord {
	f, err := os.Open(d.logPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []logRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, logRecord{m: m, raw: sc.Text()})
		}
	}
	return out
}

func (d *dashgate) findLog(match func(logRecord) bool) (logRecord, bool) {
	for _, r := range d.records() {
		if match(r) {
			return r, true
		}
	}
	return logRecord{}, false
}

// waitLog polls the log until a record matches or timeout passes.
func (d *dashgate) waitLog(timeout time.Duration, match func(logRecord) bool) (logRecord, bool) {
	return d.waitLogSince(0, timeout, match)
}

// logMark is the number of records logged so far, for waitLogSince.
func (d *dashgate) logMark() int { return len(d.records()) }

// waitLogSince is waitLog among the records after the first mark ones.
func (d *dashgate) waitLogSince(mark int, timeout time.Duration, match func(logRecord) bool) (logRecord, bool) {
	var rec logRecord
	ok := waitUntil(timeout, func() bool {
		all := d.records()
		if mark > len(all) {
			return false
		}
		for _, r := range all[mark:] {
			if match(r) {
				rec = r
				return true
			}
		}
		return false
	})
	return rec, ok
}

// logText is the log so far, for failure messages (the last 60 lines).
func (d *dashgate) logText() string {
	b, _ := os.ReadFile(d.logPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 60 {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-60)}, lines[len(lines)-60:]...)
	}
	return strings.Join(lines, "\n")
}

// gone waits up to timeout for the process (pid, start) to be gone (reaped,
// so no /proc entry: dashgate promises it waits for its children) and
// reports whether it was.
func gone(pid int, start uint64, timeout time.Duration) bool {
	return waitUntil(timeout, func() bool { return !present(pid, start) })
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

var errTimeout = errors.New("timed out")
