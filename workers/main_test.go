package workers

// Shared test scaffolding: TestMain, the helper programs (the test binary
// re-executed behind DASHGATE_TEST_HELPER), log capture and polling helpers.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/workers/builtin"
)

// Environment of the helper programs.
const (
	helperEnv     = "DASHGATE_TEST_HELPER"      // the mode; empty: run the tests
	pidFileEnv    = "DASHGATE_TEST_PIDFILE"     // linger: write own pid here once ready
	ignoreTermEnv = "DASHGATE_TEST_IGNORE_TERM" // "1": ignore SIGTERM
	setpgidEnv    = "DASHGATE_TEST_SETPGID"     // linger, "1": leave the parent's process group
	exitCodeEnv   = "DASHGATE_TEST_EXIT_CODE"   // exit: the code
)

// testGrace is the Manager grace of the tests: long enough for a helper to
// die of SIGTERM, short enough to keep escalation tests quick.
const testGrace = 300 * time.Millisecond

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	// pid 1 of this box is not an init that reaps (it is a VM agent), so
	// orphans must come back to the test process, where RunReaper and
	// Proc.tree reap them.
	if err := EnableSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, "EnableSubreaper:", err)
		os.Exit(1)
	}
	// RunReaper's signal.Notify goroutines need no ignore: goleak's
	// defaults ignore os/signal.loop and signal_recv.
	testkit.VerifyNoLeaks(m)
}

// ---------------------------------------------------------------------------
// Helper programs.

func runHelper(mode string) int {
	if os.Getenv(ignoreTermEnv) == "1" {
		signal.Ignore(syscall.SIGTERM)
	}
	switch mode {
	case "proto": // a JSON-lines worker whose methods are test behaviours
		return protoHelper(true)
	case "ignore-term": // proto, SIGTERM ignored, and stdin EOF ignored too
		signal.Ignore(syscall.SIGTERM)
		return protoHelper(false)
	case "builtin":
		return builtin.Main()
	case "linger": // a grandchild: leave the group if asked, say ready, stay
		if os.Getenv(setpgidEnv) == "1" {
			if err := syscall.Setpgid(0, 0); err != nil {
				return 10
			}
		}
		if err := writePidFile(os.Getenv(pidFileEnv)); err != nil {
			return 11
		}
		blockForever()
	case "instance": // a dashgate in small, to be killed: see instanceHelper
		return instanceHelper()
	case "as-account": // starts a child as another account, to be killed: see accountHelper
		return accountHelper()
	case "exit": // exits by itself at once, without any request
		code, _ := strconv.Atoi(os.Getenv(exitCodeEnv))
		return code
	}
	fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
	return 2
}

// blockForever parks a helper until a signal ends it. A thread blocked in
// pause(2) keeps Go's deadlock detector quiet (a bare select{} would not).
func blockForever() {
	for {
		unix.Pause()
	}
}

func writePidFile(path string) error {
	if path == "" {
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

type helperReq struct {
	ID     int64           `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// protoHelper answers requests per PROTOCOL.md §4; each method is a
// behaviour a test needs. exitOnEOF false makes it stay after stdin EOF.
func protoHelper(exitOnEOF bool) int {
	self, _ := os.Executable()
	out := bufio.NewWriter(os.Stdout)
	var outMu sync.Mutex
	write := func(s string) {
		outMu.Lock()
		defer outMu.Unlock()
		out.WriteString(s)
		out.Flush()
	}
	reply := func(id int64, result any) {
		b, _ := json.Marshal(map[string]any{"id": id, "ok": true, "result": result})
		write(string(b) + "\n")
	}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var req helperReq
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			fmt.Fprintln(os.Stderr, "helper: bad line", sc.Text())
			continue
		}
		switch req.Method {
		case "ping":
			reply(req.ID, map[string]any{"pid": os.Getpid()})
		case "hang", "cancel":
			// never answered
		case "stray":
			// first a reply to the id the next call will get, and one to an id
			// nobody used, then the real reply
			b, _ := json.Marshal(map[string]any{"id": req.ID + 1, "ok": true, "result": map[string]any{"stray": true}})
			write(string(b) + "\n")
			b, _ = json.Marshal(map[string]any{"id": 987654, "ok": true, "result": map[string]any{"stray": true}})
			write(string(b) + "\n")
			reply(req.ID, map[string]any{"pid": os.Getpid()})
		case "endless": // a line that never ends: 4 MiB without a newline, then silence
			write(strings.Repeat("x", 4<<20))
		case "bigline":
			line := bytes.Repeat([]byte{'x'}, 10<<20)
			write(string(append(line, '\n')))
		case "garbage":
			write("this is not a protocol line\n")
		case "closeout":
			os.Stdout.Close() // and stay alive
		case "noise":
			var p struct{ Lines, Size int }
			json.Unmarshal(req.Params, &p)
			w := bufio.NewWriter(os.Stderr)
			for i := range p.Lines {
				l := fmt.Sprintf("line %03d ", i)
				if pad := p.Size - len(l); pad > 0 {
					l += strings.Repeat("e", pad)
				}
				w.WriteString(l + "\n")
			}
			w.Flush()
			reply(req.ID, map[string]any{"lines": p.Lines})
		case "fail":
			b, _ := json.Marshal(map[string]any{"id": req.ID, "ok": false, "error": "failed on purpose"})
			write(string(b) + "\n")
		case "fail-word": // an ok:false naming its own failure, after two events
			for _, ev := range []map[string]any{
				{"id": req.ID, "event": "delta", "text": "so far"},
				{"id": req.ID, "event": "approval", "request_id": "r1", "command": "ls"},
			} {
				b, _ := json.Marshal(ev)
				write(string(b) + "\n")
			}
			b, _ := json.Marshal(map[string]any{"id": req.ID, "ok": false, "error": "the model server is rate limiting", "failure": "rate_limited", "retry_after": 7})
			write(string(b) + "\n")
		case "crash":
			var p struct{ Code int }
			json.Unmarshal(req.Params, &p)
			os.Exit(p.Code)
		case "spawn-tree":
			var p struct{ Dir string }
			json.Unmarshal(req.Params, &p)
			if err := spawnTree(self, p.Dir); err != nil {
				fmt.Fprintln(os.Stderr, "spawn-tree:", err)
				os.Exit(3)
			}
			reply(req.ID, map[string]any{})
		case "orphan":
			var p struct {
				PidFile    string `json:"pid_file"`
				KeepMarker bool   `json:"keep_marker"`
			}
			json.Unmarshal(req.Params, &p)
			env := lingerEnv(p.PidFile, false)
			if !p.KeepMarker {
				env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, EnvWorkerID+"=") })
			}
			cmd := exec.Command("/usr/bin/setsid", self)
			cmd.Env = env
			if err := cmd.Start(); err != nil {
				os.Exit(3)
			}
			go cmd.Wait()
			reply(req.ID, map[string]any{})
		default:
			b, _ := json.Marshal(map[string]any{"id": req.ID, "ok": false, "error": "unknown method " + req.Method})
			write(string(b) + "\n")
		}
	}
	if !exitOnEOF {
		blockForever()
	}
	return 0
}

// lingerEnv is the helper's environment (markers included) for a linger
// grandchild that ignores SIGTERM.
func lingerEnv(pidFile string, setpgid bool) []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, helperEnv+"=") || strings.HasPrefix(kv, pidFileEnv+"=") ||
			strings.HasPrefix(kv, setpgidEnv+"=") || strings.HasPrefix(kv, ignoreTermEnv+"=")
	})
	env = append(env, helperEnv+"=linger", pidFileEnv+"="+pidFile, ignoreTermEnv+"=1")
	if setpgid {
		env = append(env, setpgidEnv+"=1")
	}
	return env
}

// spawnTree starts three grandchildren that ignore SIGTERM: one in the
// worker's process group, one in a new session (setsid(1)), and one
// double-forked under nohup(1) that also leaves the group, so only the
// DASHGATE_WORKER_ID marker ties it to the worker once it is orphaned.
func spawnTree(self, dir string) error {
	group := exec.Command(self)
	group.Env = lingerEnv(filepath.Join(dir, "group"), false)
	sess := exec.Command("/usr/bin/setsid", self)
	sess.Env = lingerEnv(filepath.Join(dir, "setsid"), false)
	nohup := exec.Command("/bin/sh", "-c", `nohup "$0" >/dev/null 2>&1 &`, self)
	nohup.Env = lingerEnv(filepath.Join(dir, "nohup"), true)
	for _, c := range []*exec.Cmd{group, sess, nohup} {
		if err := c.Start(); err != nil {
			return err
		}
	}
	go group.Wait()
	go sess.Wait()
	return nohup.Wait() // sh returns at once; its child is orphaned
}

// ---------------------------------------------------------------------------
// Test-side helpers.

func helperPath(t testing.TB) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// helperSpec is a Spec running the test binary in mode, with extra env.
func helperSpec(t testing.TB, mode string, env ...string) Spec {
	return Spec{
		SessionID: "s-" + strings.ReplaceAll(t.Name(), "/", "-"),
		Path:      helperPath(t),
		Env:       append(append(helperEnviron(), helperEnv+"="+mode), env...),
	}
}

// helperEnviron is the test's environment for a helper. Under -race a
// program sleeps 1 s at exit by default (GORACE atexit_sleep_ms), which
// would turn every exit on stdin EOF into a SIGTERM: turn it off unless
// the caller set GORACE.
func helperEnviron() []string {
	env := os.Environ()
	if os.Getenv("GORACE") == "" {
		env = append(env, "GORACE=atexit_sleep_ms=0")
	}
	return env
}

// waitVanished waits until each pid is gone and reaped.
func waitVanished(t testing.TB, d time.Duration, pids ...int) {
	t.Helper()
	for _, pid := range pids {
		testkit.WaitFor(t, d, fmt.Sprintf("pid %d gone and reaped", pid), func() bool { return testkit.Reaped(pid) })
	}
}

// myDescendants lists the pids below the test process.
func myDescendants(t testing.TB) []int {
	t.Helper()
	procs, err := testkit.Descendants(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, p := range procs {
		out = append(out, p.PID)
	}
	slices.Sort(out)
	return out
}

// startReaper runs m.RunReaper until the test ends. Tests that use it do not
// call t.Parallel: a Manager's reaper reaps every zombie child of the test
// process that this Manager does not own, and could steal the exit status
// of another test's child.
func startReaper(t testing.TB, m *Manager) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.RunReaper(ctx, 20*time.Millisecond) }()
	// A last pass once it stopped: a child the test killed in its cleanup
	// (killOnCleanup leaves a zombie to its parent, the worker) comes back
	// to the test process when the worker's Close ends the worker, and its
	// SIGCHLD can meet a reaper already told to stop (seen as a zombie in
	// TestChurnLeavesNothing after TestEveryDescendantListed, once /proc
	// scans got faster and Close returned sooner).
	t.Cleanup(func() { cancel(); <-done; m.reapZombieOrphans(true) })
}

// newTestManager returns a Manager logging JSON into the returned buffer;
// the test's cleanup closes every child and joins the Manager's goroutines.
func newTestManager(t testing.TB, cfg Config) (*Manager, *testkit.LogBuffer) {
	t.Helper()
	var lb *testkit.LogBuffer
	cfg.Log, lb = testkit.NewLogger()
	if cfg.Grace == 0 {
		cfg.Grace = testGrace
	}
	if cfg.Instance == "" {
		cfg.Instance = "test-" + newMarker()
	}
	m := NewManager(cfg)
	t.Cleanup(func() {
		m.CloseAll(ReasonShutdown)
		m.Wait()
	})
	return m, lb
}

// startWorker starts a chat worker and registers a cleanup that closes it.
func startWorker(t testing.TB, m *Manager, spec Spec) *Worker {
	t.Helper()
	w, err := m.StartWorker(spec)
	if err != nil {
		t.Fatalf("StartWorker: %v", err)
	}
	t.Cleanup(func() { w.Close(ReasonShutdown) })
	return w
}

// call is Worker.Call with a bounded context.
func callW(t testing.TB, w *Worker, method string, params any) (json.RawMessage, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return w.Call(ctx, method, params, nil)
}

// ping calls the proto helper's ping and returns the pid it reports.
func ping(t testing.TB, w *Worker) int {
	t.Helper()
	raw, err := callW(t, w, "ping", nil)
	if err != nil {
		t.Fatalf("ping: %v", err)
	}
	var res struct{ PID int }
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("ping result %s: %v", raw, err)
	}
	return res.PID
}

// readPidFile waits for a pid file written by a linger helper.
func readPidFile(t testing.TB, path string) int {
	t.Helper()
	var pid int
	testkit.WaitFor(t, 30*time.Second, "pid file "+filepath.Base(path), func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(string(b))
		return err == nil
	})
	return pid
}

// startChild starts cmd, a child of the test process, through Start: a
// Manager's close in a parallel test would otherwise take a plain fork,
// between its fork and its exec, for that worker's escapee (it holds a
// copy of the worker's pipes) and SIGKILL it, and the orphan reaper would
// take its exit status. It returns a channel closed once cmd was waited
// for; a cleanup SIGKILLs cmd's process and waits for that.
func startChild(t testing.TB, cmd *exec.Cmd) <-chan struct{} {
	t.Helper()
	wait, err := Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	reaped := make(chan struct{})
	go func() { wait(); close(reaped) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-reaped })
	return reaped
}

// killOnCleanup SIGKILLs pid at the end of the test if it still runs (a
// safety net for failing tests; the reaper or tree reaps it).
func killOnCleanup(t testing.TB, pid int) {
	t.Cleanup(func() {
		if !testkit.Gone(pid) {
			unix.Kill(pid, unix.SIGKILL)
		}
		// A grandchild orphaned to the test process (a subreaper) is
		// reaped here: its zombie would otherwise be the next test's leak
		// (a zombie that left its worker's group and session no longer
		// shows the worker's marker, so the worker's Close cannot claim it).
		testkit.Until(5*time.Second, func() bool {
			p, err := testkit.ReadProc(pid)
			if err != nil || p.PPID != os.Getpid() {
				return true // gone, or another process's child to reap
			}
			testkit.ReapChild(pid)
			return testkit.Reaped(pid)
		})
	})
}

// workerErr asserts err is a *Error with failure f and returns it.
func workerErr(t testing.TB, err error, f Failure) *Error {
	t.Helper()
	var we *Error
	if !errors.As(err, &we) {
		t.Fatalf("error %v (%T) is not a *workers.Error", err, err)
	}
	if we.Failure != f {
		t.Fatalf("failure %q (%v), want %q", we.Failure, we, f)
	}
	return we
}
