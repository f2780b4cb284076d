package testkit

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EnvInstance is the variable dashgate sets to its instance id in the
// environment of every child (workers.EnvInstance; the kit imports no
// dashgate package so that every package's tests can import it).
const EnvInstance = "DASHGATE_INSTANCE"

// Options say how Start runs dashgate.
type Options struct {
	Bin string // the dashgate binary: Build's, or a test binary that runs dashgate's Main
	Dir string // an existing directory (the caller removes it) for the address file, the log, stdout and the state dir

	// Args are flags after the defaults (--addr 127.0.0.1:0, --addr-file,
	// --state-dir <Dir>/state, --log-format json, and the token as
	// DASHGATE_TOKEN appended to Env): they come last
	// and win. With Exact, Args is the whole argument list and only
	// --addr-file is appended (the caller then gives the token another
	// way, e.g. DASHGATE_TOKEN in Env, and asks for JSON logs itself).
	Args  []string
	Exact bool
	// Sub is a subcommand put before every flag ("serve"); "": none.
	Sub string

	Env     []string // the child's environment; nil: CleanEnv()
	WorkDir string   // the child's working directory; "": Dir
	Token   string   // the dashboard and admin token; "": a random one
	// SysProcAttr of the child (e.g. Setpgid); nil: none. Its Pdeathsig
	// is SIGTERM unless set here: the child ends with the test binary
	// (forkthread.go).
	SysProcAttr *syscall.SysProcAttr
}

// CleanEnv is the caller's environment without DASHGATE_* variables (each
// would set a flag of dashgate) and without proxy settings.
func CleanEnv() []string {
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

// Instance is one running dashgate, a child of the caller. The kit waits
// for it: Exited is closed once it was reaped.
type Instance struct {
	Addr    string    // host:port it listens on
	Base    string    // http://host:port/base-path/
	Token   string    // dashboard and admin token
	ID      string    // its instance id: EnvInstance of its children
	Dir     string    // Options.Dir
	Log     LogFile   // its stderr: JSON log records
	Started time.Time // when it was started

	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	api     *http.Client
	secrets []string  // the tokens it was given (Options.Secrets)
	checked sync.Once // CheckNoSecrets reports once
}

// Start runs dashgate as o says, waits until it listens (its --addr-file
// and its "dashgate listening" record), and returns it. ctx bounds the
// start only. On an error the child is killed and reaped.
func Start(ctx context.Context, o Options) (*Instance, error) {
	if o.Bin == "" || o.Dir == "" {
		return nil, errors.New("testkit.Start: Bin and Dir are required")
	}
	if o.Token == "" {
		var b [16]byte
		rand.Read(b[:])
		o.Token = hex.EncodeToString(b[:])
	}
	addrFile := filepath.Join(o.Dir, "addr")
	var args []string
	if o.Sub != "" {
		args = append(args, o.Sub)
	}
	if !o.Exact {
		args = []string{"--addr", "127.0.0.1:0", "--state-dir", filepath.Join(o.Dir, "state"), "--log-format", "json"}
	}
	args = append(append(args, o.Args...), "--addr-file", addrFile)
	if o.Env == nil {
		o.Env = CleanEnv()
	}
	if !o.Exact {
		// The token travels in the environment, as the README says to pass
		// secrets: argv is every local account's to read (and --unix-users
		// refuses a token there). A --token in Args still wins.
		o.Env = append(slices.Clip(o.Env), "DASHGATE_TOKEN="+o.Token)
	}
	secrets := o.Secrets()
	logPath := filepath.Join(o.Dir, "dashgate.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own copy
	outf, err := os.Create(filepath.Join(o.Dir, "stdout"))
	if err != nil {
		return nil, err
	}
	defer outf.Close()

	in := &Instance{
		Token: o.Token, Dir: o.Dir, Log: LogFile{Path: logPath}, secrets: secrets,
		exited: make(chan struct{}),
		api:    &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}},
	}
	in.cmd = exec.Command(o.Bin, args...)
	in.cmd.Stdout, in.cmd.Stderr = outf, logf
	in.cmd.Dir = o.Dir
	if o.WorkDir != "" {
		in.cmd.Dir = o.WorkDir
	}
	in.cmd.Env = o.Env
	in.cmd.SysProcAttr = o.SysProcAttr
	in.Started = time.Now()
	if err := startTied(in.cmd, syscall.SIGTERM); err != nil {
		return nil, fmt.Errorf("start %s: %w", o.Bin, err)
	}
	pid := in.cmd.Process.Pid
	Own(pid)
	go func() {
		in.waitErr = in.cmd.Wait()
		Disown(pid)
		close(in.exited)
	}()

	var rec Record
	err = PollErr(ctx, func() (bool, error) {
		select {
		case <-in.exited:
			return false, fmt.Errorf("dashgate exited at start: %v", in.waitErr)
		default:
		}
		if in.Addr == "" {
			b, err := os.ReadFile(addrFile)
			if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
				return false, nil
			}
			in.Addr = strings.TrimSpace(string(b))
		}
		// the address file is written just before this record
		recs := in.Log.Records("dashgate listening")
		if len(recs) == 0 {
			return false, nil
		}
		rec = recs[0]
		return true, nil
	})
	if err == nil {
		in.ID = rec.Str("instance")
		base := rec.Str("base_path")
		if in.ID == "" || !strings.HasPrefix(base, "/") || !strings.HasSuffix(base, "/") {
			err = fmt.Errorf("\"dashgate listening\" without instance or a /.../ base_path: %v", rec)
		}
		in.Base = "http://" + in.Addr + base
	}
	if err != nil {
		in.Kill()
		return nil, fmt.Errorf("start dashgate: %w; log:\n%s", err, in.Log.Tail(40))
	}
	return in, nil
}

// StartT is Start for a test: o.Dir defaults to a temp dir of tb, the start
// is bounded by 30 s, and an error fails the test. Its cleanup is a safety
// net for a failing test: it kills the instance if it still runs, then
// every process still carrying its instance id, and reaps those that came
// back to the caller. It also fails the test when the instance's whole log
// or its stdout carries one of its tokens (CheckNoSecrets).
func StartT(tb testing.TB, o Options) *Instance {
	tb.Helper()
	if o.Dir == "" {
		o.Dir = tb.TempDir()
	}
	ctx, cancel := context.WithTimeout(tb.Context(), 30*time.Second)
	defer cancel()
	in, err := Start(ctx, o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		in.Kill()
		in.CheckNoSecrets(tb)
		left, _ := in.Procs()
		for _, p := range left {
			syscall.Kill(p.PID, syscall.SIGKILL)
		}
		self := os.Getpid()
		for _, p := range left {
			Until(5*time.Second, func() bool {
				if q, err := ReadProc(p.PID); err == nil && q.Dead() && q.PPID == self {
					ReapChild(p.PID)
				}
				return Gone(p.PID)
			})
		}
		in.removeCgroups(tb)
	})
	return in
}

// removeCgroups removes the cgroup tree of a killed instance (the cgroup
// key of its containment record), as the sweep of its next start would:
// its state dir goes with the test, so no start ever sweeps it, and each
// killed instance left a dashgate-<id> directory with its leaves in the
// machine's cgroup2 root. A tree that is gone (a clean stop, or a later
// instance swept it) is left alone; one that cannot be removed fails the
// test.
func (in *Instance) removeCgroups(tb testing.TB) {
	var dir string
	for _, rec := range in.Log.Records("containment") {
		if d, ok := rec["cgroup"].(string); ok && rec["mode"] == "cgroup" {
			dir = d
		}
	}
	if dir == "" || !strings.Contains(filepath.Base(dir), in.ID) {
		return
	}
	if _, err := os.Stat(dir); err != nil {
		return
	}
	os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0) // whatever is left
	var dirs []string
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	slices.Reverse(dirs) // the leaves first
	for _, d := range dirs {
		if !Until(5*time.Second, func() bool { err := os.Remove(d); return err == nil || errors.Is(err, os.ErrNotExist) }) {
			tb.Errorf("the killed instance's cgroup %s could not be removed", d)
		}
	}
}

// Secrets are the tokens o gives dashgate: Token, and a dashboard or admin
// token passed as a flag (--token, --admin-token) or in Env
// (DASHGATE_TOKEN, DASHGATE_ADMIN_TOKEN).
func (o Options) Secrets() []string {
	out := []string{o.Token}
	for i, a := range o.Args {
		for _, flag := range []string{"--token", "--admin-token"} {
			if v, ok := strings.CutPrefix(a, flag+"="); ok {
				out = append(out, v)
			} else if a == flag && i+1 < len(o.Args) {
				out = append(out, o.Args[i+1])
			}
		}
	}
	for _, kv := range o.Env {
		for _, key := range []string{"DASHGATE_TOKEN", "DASHGATE_ADMIN_TOKEN"} {
			if v, ok := strings.CutPrefix(kv, key+"="); ok {
				out = append(out, v)
			}
		}
	}
	return slices.Compact(slices.DeleteFunc(out, func(s string) bool { return s == "" }))
}

// CheckNoSecrets fails tb for every line of the instance's log, whole (a
// record of any level, in any of its keys or values, or a line that is no
// record at all), and of its stdout that carries one of its tokens
// (Options.Secrets) or of extra (tokens the test gave it another way): a
// token given to dashgate is never written back, not even in the
// "dashgate listening" record or the URL it prints. It checks once; later
// calls do nothing. StartT's cleanup calls it.
func (in *Instance) CheckNoSecrets(tb testing.TB, extra ...string) {
	tb.Helper()
	in.checked.Do(func() {
		secrets := slices.DeleteFunc(append(slices.Clip(in.secrets), extra...), func(s string) bool { return s == "" })
		for _, f := range []struct{ name, path string }{{"the log", in.Log.Path}, {"stdout", filepath.Join(in.Dir, "stdout")}} {
			b, err := os.ReadFile(f.path)
			if err != nil {
				tb.Errorf("read %s for tokens: %v", f.name, err)
				continue
			}
			for n, line := range strings.Split(string(b), "\n") {
				if i := slices.IndexFunc(secrets, func(s string) bool { return strings.Contains(line, s) }); i >= 0 {
					tb.Errorf("%s carries a token (line %d): %s", f.name, n+1, line)
				}
			}
		}
	})
}

// PID is the instance's process id.
func (in *Instance) PID() int { return in.cmd.Process.Pid }

// URL is the address of path, relative to the base path, over http.
func (in *Instance) URL(path string) string { return in.Base + strings.TrimPrefix(path, "/") }

// WSURL is URL over ws (for /ws/chat, /ws/pty).
func (in *Instance) WSURL(path string) string { return "ws" + strings.TrimPrefix(in.URL(path), "http") }

// LoginURL is a page URL carrying the token, as dashgate prints it.
func (in *Instance) LoginURL(path string) string {
	u := in.URL(path)
	if strings.Contains(u, "?") {
		return u + "&token=" + in.Token
	}
	return u + "?token=" + in.Token
}

// Exited is closed once the instance exited and was reaped.
func (in *Instance) Exited() <-chan struct{} { return in.exited }

// WaitErr is exec.Cmd.Wait's error (nil for exit status 0); read it after
// Exited is closed.
func (in *Instance) WaitErr() error {
	<-in.exited
	return in.waitErr
}

// ExitCode is the exit status, -1 when a signal ended it or before it
// exited.
func (in *Instance) ExitCode() int {
	select {
	case <-in.exited:
		return in.cmd.ProcessState.ExitCode()
	default:
		return -1
	}
}

// Stop sends SIGTERM and waits for the exit; it returns the exit code. When
// ctx ends first it kills the instance and returns an error.
func (in *Instance) Stop(ctx context.Context) (int, error) {
	if err := in.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return -1, fmt.Errorf("SIGTERM dashgate: %w", err)
	}
	select {
	case <-in.exited:
		return in.ExitCode(), nil
	case <-ctx.Done():
		in.Kill()
		return -1, fmt.Errorf("dashgate did not exit after SIGTERM (%w); killed", ctx.Err())
	}
}

// Kill sends SIGKILL, as a crash would, and waits until it was reaped. A
// no-op once it exited.
func (in *Instance) Kill() {
	select {
	case <-in.exited:
		return
	default:
	}
	in.cmd.Process.Kill()
	<-in.exited
}

// Procs lists the live processes carrying the instance's id (its children
// and what they started; not the instance itself).
func (in *Instance) Procs() ([]Proc, error) { return WithEnv(EnvInstance + "=" + in.ID) }

// GetJSON GETs path (relative to the base path) with the token and decodes
// the JSON body into v; a status other than 200 is an error.
func (in *Instance) GetJSON(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, in.URL(path), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+in.Token)
	res, err := in.api.Do(req)
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
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

// APIWorker is a row of /admin/api/workers (PROTOCOL.md §5).
type APIWorker struct {
	PID       int    `json:"pid"`
	Kind      string `json:"kind"` // "chat" or "pty"
	SessionID string `json:"session_id"`
	State     string `json:"state"`
	RSSBytes  uint64 `json:"rss_bytes"`
	Children  []int  `json:"children"` // its descendants and group members (its cgroup's members in cgroup mode)
	Cgroup    string `json:"cgroup"`   // its cgroup directory; "" in the fallback
	Remote    bool   `json:"remote"`   // another node's worker (Workers leaves those out)
}

// APISession is a row of /admin/api/sessions (PROTOCOL.md §5).
type APISession struct {
	SessionID string `json:"session_id"`
	Title     string `json:"title"`
	State     string `json:"state"`
	Viewers   int    `json:"viewers"`
	Running   bool   `json:"running"`
	WorkerPID int    `json:"worker_pid"` // 0: none
	PTYPID    int    `json:"pty_pid"`    // 0: none
	Node      string `json:"node"`       // on a node of a cluster: the node holding it
	Remote    bool   `json:"remote"`     // another node's session (Sessions leaves those out)
	Agent     string `json:"agent"`      // the --agent it talks to; "" the built-in worker
}

// Workers reads /admin/api/workers: this instance's workers (on a node of
// a cluster, the other nodes' rows are left out).
func (in *Instance) Workers(ctx context.Context) ([]APIWorker, error) {
	var r struct {
		Workers []APIWorker `json:"workers"`
	}
	err := in.GetJSON(ctx, "admin/api/workers", &r)
	return slices.DeleteFunc(r.Workers, func(w APIWorker) bool { return w.Remote }), err
}

// Sessions reads /admin/api/sessions: this instance's sessions (on a node
// of a cluster, the other nodes' rows are left out).
func (in *Instance) Sessions(ctx context.Context) ([]APISession, error) {
	var r struct {
		Sessions []APISession `json:"sessions"`
	}
	err := in.GetJSON(ctx, "admin/api/sessions", &r)
	return slices.DeleteFunc(r.Sessions, func(s APISession) bool { return s.Remote }), err
}
