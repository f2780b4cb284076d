package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// target is a dashgate the figures talk to: one this tool started (pid
// known, its /proc readable) or one given by --url (pid known only with --pid).
type target struct {
	base  *url.URL // http://host:port/base/
	token string
	pid   int // 0: not local; RSS, fds and zombies come from /metrics and /admin
	proc  *dashgate

	api *http.Client // no keep-alive: leaves no server-side connection behind
}

func newTarget(base *url.URL, token string, pid int) *target {
	if !strings.HasSuffix(base.Path, "/") {
		base.Path += "/"
	}
	return &target{
		base: base, token: token, pid: pid,
		api: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second},
	}
}

// url returns the address of path (relative to the base path) with scheme
// http or ws.
func (t *target) url(scheme, path string) string {
	u := *t.base
	if scheme == "ws" {
		u.Scheme = map[string]string{"http": "ws", "https": "wss"}[t.base.Scheme]
	}
	rel, _ := url.Parse(path)
	return u.ResolveReference(rel).String()
}

func (t *target) authHeader() http.Header {
	return http.Header{"Authorization": {"Bearer " + t.token}}
}

// get fetches path and decodes its JSON body into v (when v is not nil).
func (t *target) get(ctx context.Context, c *http.Client, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, "GET", t.url("http", path), nil)
	if err != nil {
		return err
	}
	req.Header = t.authHeader()
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, bytes.TrimSpace(b))
	}
	if v == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: decode: %w", path, err)
	}
	return nil
}

type workerRow struct {
	PID       int    `json:"pid"`
	Kind      string `json:"kind"`
	SessionID string `json:"session_id"`
	State     string `json:"state"`
	RSSBytes  uint64 `json:"rss_bytes"`
}

type sessionRow struct {
	SessionID string `json:"session_id"`
	State     string `json:"state"`
	Viewers   int    `json:"viewers"`
	WorkerPID int    `json:"worker_pid"`
	PTYPID    int    `json:"pty_pid"`
}

func (t *target) workers(ctx context.Context) ([]workerRow, error) {
	var body struct {
		Workers []workerRow `json:"workers"`
	}
	err := t.get(ctx, t.api, "admin/api/workers", &body)
	return body.Workers, err
}

func (t *target) sessions(ctx context.Context) ([]sessionRow, error) {
	var body struct {
		Sessions []sessionRow `json:"sessions"`
	}
	err := t.get(ctx, t.api, "admin/api/sessions", &body)
	return body.Sessions, err
}

// metrics reads /metrics and returns the unlabelled samples plus the
// labelled ones under their full name (`name{labels}`).
func (t *target) metrics(ctx context.Context) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", t.url("http", "metrics"), nil)
	if err != nil {
		return nil, err
	}
	req.Header = t.authHeader()
	resp, err := t.api.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// rss is dashgate's resident set size in bytes.
func (t *target) rss(ctx context.Context) (float64, error) {
	if t.pid > 0 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", t.pid))
		if err != nil {
			return 0, err
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			return 0, fmt.Errorf("short /proc/%d/statm", t.pid)
		}
		pages, err := strconv.ParseFloat(f[1], 64)
		return pages * float64(os.Getpagesize()), err
	}
	m, err := t.metrics(ctx)
	if err != nil {
		return 0, err
	}
	v, ok := m["process_resident_memory_bytes"]
	if !ok {
		return 0, errors.New("/metrics has no process_resident_memory_bytes")
	}
	return v, nil
}

// snapshot is what a leak check compares.
type snapshot struct {
	Workers    int `json:"workers"`    // listed by /admin/api/workers
	Zombies    int `json:"zombies"`    // zombie children of dashgate
	FDs        int `json:"fds"`        // dashgate's open fds
	Goroutines int `json:"goroutines"` // go_goroutines of /metrics
}

func (t *target) snapshot(ctx context.Context) (snapshot, error) {
	var s snapshot
	ws, err := t.workers(ctx)
	if err != nil {
		return s, err
	}
	s.Workers = len(ws)
	m, err := t.metrics(ctx)
	if err != nil {
		return s, err
	}
	s.Goroutines = int(m["go_goroutines"])
	if t.pid > 0 {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", t.pid))
		if err != nil {
			return s, err
		}
		s.FDs = len(ents)
		s.Zombies = len(zombieChildren(t.pid))
		return s, nil
	}
	s.FDs = int(m["process_open_fds"])
	var un struct {
		Unowned []struct {
			State string `json:"state"`
		} `json:"unowned"`
	}
	if err := t.get(ctx, t.api, "admin/api/unowned", &un); err != nil {
		return s, err
	}
	for _, u := range un.Unowned {
		if u.State == "Z" {
			s.Zombies++
		}
	}
	return s, nil
}

// settle polls until the snapshot is within the tolerances of base (no
// worker, no zombie, fds <= base+fdTol, goroutines <= base+grTol) or the
// deadline passes, and returns the last snapshot.
func (t *target) settle(ctx context.Context, base snapshot, fdTol, grTol int, d time.Duration) (snapshot, error) {
	var last snapshot
	err := poll(ctx, d, 20*time.Millisecond, func() (bool, error) {
		s, err := t.snapshot(ctx)
		if err != nil {
			return false, err
		}
		last = s
		return s.Workers == 0 && s.Zombies == 0 && s.FDs <= base.FDs+fdTol && s.Goroutines <= base.Goroutines+grTol, nil
	})
	if errors.Is(err, errPollTimeout) {
		err = nil // the caller reports what is left
	}
	return last, err
}

var errPollTimeout = errors.New("timed out")

// poll calls cond every interval until it holds, fails, or d passes
// (errPollTimeout).
func poll(ctx context.Context, d, interval time.Duration, cond func() (bool, error)) error {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return errPollTimeout
		case <-tick.C:
		}
	}
}

// zombieChildren lists the zombie children of pid, from /proc.
func zombieChildren(pid int) []int {
	var out []int
	for _, st := range listProcs() {
		if st.ppid == pid && (st.state == 'Z' || st.state == 'X') {
			out = append(out, st.pid)
		}
	}
	return out
}

type procStat struct {
	pid, ppid int
	state     byte
}

func listProcs() []procStat {
	names, _ := filepath.Glob("/proc/[0-9]*")
	out := make([]procStat, 0, len(names))
	for _, n := range names {
		b, err := os.ReadFile(n + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			continue
		}
		f := bytes.Fields(b[i+2:])
		if len(f) < 2 {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(n))
		ppid, _ := strconv.Atoi(string(f[1]))
		out = append(out, procStat{pid: pid, ppid: ppid, state: f[0][0]})
	}
	return out
}

// procsWithEnv lists the live processes whose initial environment holds kv.
func procsWithEnv(kv string) []int {
	want := []byte(kv)
	var out []int
	for _, st := range listProcs() {
		if st.state == 'Z' || st.pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", st.pid))
		if err != nil {
			continue
		}
		for e := range bytes.SplitSeq(b, []byte{0}) {
			if bytes.Equal(e, want) {
				out = append(out, st.pid)
				break
			}
		}
	}
	return out
}

// gone reports whether pid no longer exists (reaped: kill(pid, 0) is ESRCH).
func gone(pid int) bool { return unix.Kill(pid, 0) == unix.ESRCH }

// ---------------------------------------------------------------------------
// A dashgate this tool runs.

type dashgate struct {
	name     string
	cmd      *exec.Cmd
	dir      string
	logPath  string
	instance string
	exited   chan struct{}
	waitErr  error
}

// startDashgate runs bin on 127.0.0.1:0 with a temp state dir and a random
// token, waits for its --addr-file, and returns its target.
func startDashgate(ctx context.Context, bin, parent, name string, extra ...string) (*target, error) {
	dir, err := os.MkdirTemp(parent, name+"-")
	if err != nil {
		return nil, err
	}
	var tok [16]byte
	rand.Read(tok[:])
	token := hex.EncodeToString(tok[:])
	addrFile := filepath.Join(dir, "addr")
	logPath := filepath.Join(dir, "dashgate.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own copy
	args := []string{
		"--addr", "127.0.0.1:0", "--addr-file", addrFile, "--token", token,
		"--state-dir", filepath.Join(dir, "state"), "--log-format", "json",
		"--max-conns-per-ip", "0", "--pty-cmd", "/bin/sh",
	}
	d := &dashgate{name: name, dir: dir, logPath: logPath, exited: make(chan struct{})}
	d.cmd = exec.Command(bin, append(args, extra...)...)
	d.cmd.Stdout = logf // the login line
	d.cmd.Stderr = logf
	d.cmd.Env = os.Environ()
	// Its own process group: a Ctrl-C on the tool's terminal reaches the
	// tool only, which then stops dashgate with one SIGTERM. Pdeathsig:
	// dashgate (and so its children) die with the tool.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() { d.waitErr = d.cmd.Wait(); close(d.exited) }()

	var addr string
	err = poll(ctx, 30*time.Second, 5*time.Millisecond, func() (bool, error) {
		select {
		case <-d.exited:
			return false, fmt.Errorf("dashgate exited at start: %v\n%s", d.waitErr, tail(logPath, 2048))
		default:
		}
		b, err := os.ReadFile(addrFile)
		if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
			return false, nil
		}
		addr = strings.TrimSpace(string(b))
		return true, nil
	})
	if err != nil {
		d.kill()
		return nil, fmt.Errorf("wait for dashgate's address: %w", err)
	}
	// The instance id marks every child (DASHGATE_INSTANCE); the record is
	// logged right after the address file is written.
	err = poll(ctx, 10*time.Second, 5*time.Millisecond, func() (bool, error) {
		for _, rec := range logRecords(logPath) {
			if rec["msg"] == "dashgate listening" {
				d.instance, _ = rec["instance"].(string)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		d.kill()
		return nil, fmt.Errorf("wait for dashgate's listening record: %w", err)
	}
	t := newTarget(&url.URL{Scheme: "http", Host: addr, Path: "/"}, token, d.cmd.Process.Pid)
	t.proc = d
	return t, nil
}

func (d *dashgate) kill() {
	d.cmd.Process.Kill()
	<-d.exited
}

// stop sends SIGTERM, waits for the exit, and checks: exit status 0, no
// process of the instance left, no ERROR record in the log. It returns the
// problems found and the number of WARN records.
func (d *dashgate) stop(timeout time.Duration) (warns int, problems []error) {
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		problems = append(problems, fmt.Errorf("%s: SIGTERM: %w", d.name, err))
	}
	select {
	case <-d.exited:
	case <-time.After(timeout):
		problems = append(problems, fmt.Errorf("%s: no exit %v after SIGTERM; killed", d.name, timeout))
		d.kill()
	}
	if d.waitErr != nil {
		problems = append(problems, fmt.Errorf("%s: exit after SIGTERM: %v (want status 0)", d.name, d.waitErr))
	}
	if d.instance != "" {
		left := procsWithEnv("DASHGATE_INSTANCE=" + d.instance)
		for _, pid := range left {
			unix.Kill(pid, unix.SIGKILL)
		}
		if len(left) > 0 {
			problems = append(problems, fmt.Errorf("%s: %d processes of the instance outlived dashgate: %v", d.name, len(left), left))
		}
	}
	for _, rec := range logRecords(d.logPath) {
		switch rec["level"] {
		case "ERROR":
			problems = append(problems, fmt.Errorf("%s: ERROR log record: %v", d.name, compact(rec)))
		case "WARN":
			warns++
		}
	}
	return warns, problems
}

func compact(rec map[string]any) string {
	b, _ := json.Marshal(rec)
	return string(b)
}

// logRecords parses the JSON records of a dashgate log.
func logRecords(path string) []map[string]any {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) == nil {
			out = append(out, rec)
		}
	}
	return out
}

func tail(path string, n int64) string {
	b, _ := os.ReadFile(path)
	if int64(len(b)) > n {
		b = b[int64(len(b))-n:]
	}
	return string(b)
}

// drain reads and closes a response body and returns its size.
func drain(resp *http.Response) (int64, error) {
	defer resp.Body.Close()
	return io.Copy(io.Discard, resp.Body)
}
