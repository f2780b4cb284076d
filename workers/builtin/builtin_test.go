package builtin_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/workers/builtin"
)

const (
	helperEnv  = "DASHGATE_TEST_HELPER" // "builtin" or "middle"; empty: run the tests
	pidFileEnv = "DASHGATE_TEST_PIDFILE"
)

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
	case "builtin":
		os.Exit(builtin.Main())
	case "middle":
		os.Exit(middle())
	default:
		os.Exit(2)
	}
	// Orphaned workers of the watchdog test come back to the test process,
	// which waits for them (pid 1 of this box does not reap).
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "subreaper:", err)
		os.Exit(1)
	}
	testkit.VerifyNoLeaks(m) // no ignores of its own
}

// middle starts the built-in worker as its child, telling it that middle is
// its parent, with stdin on fd 3 (a pipe the test keeps open, so no EOF
// comes) and stderr on fd 4; it writes the worker's pid and exits, leaving
// the worker orphaned.
func middle() int {
	self, _ := os.Executable()
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), helperEnv+"=builtin", "DASHGATE_PARENT_PID="+strconv.Itoa(os.Getpid()))
	cmd.Stdin = os.NewFile(3, "stdin")
	cmd.Stderr = os.NewFile(4, "stderr")
	if err := cmd.Start(); err != nil {
		return 3
	}
	path := os.Getenv(pidFileEnv)
	if err := os.WriteFile(path+".tmp", []byte(strconv.Itoa(cmd.Process.Pid)), 0o600); err != nil {
		return 4
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return 5
	}
	return 0
}

// ---------------------------------------------------------------------------
// Driving Run over pipes.

type line struct {
	ID     json.RawMessage `json:"id"`
	OK     *bool           `json:"ok"`
	Result map[string]any  `json:"result"`
	Error  string          `json:"error"`
	Event  string          `json:"event"`
	Text   string          `json:"text"`
	raw    string
}

type rig struct {
	t      *testing.T
	in     *io.PipeWriter
	lines  chan line
	code   chan int
	cancel context.CancelFunc
	errOut *testkit.SyncBuffer
}

// startRun runs builtin.Run on pipes. Cleanup closes stdin, cancels the
// context and waits for Run and the reader to return.
func startRun(t *testing.T) *rig {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	r := &rig{t: t, in: inW, lines: make(chan line, 1000), code: make(chan int, 1), cancel: cancel, errOut: &testkit.SyncBuffer{}}
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			var l line
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				l.Error = "NOT JSON: " + sc.Text()
			}
			l.raw = sc.Text()
			r.lines <- l
		}
	}()
	go func() { r.code <- builtin.Run(ctx, inR, outW, r.errOut) }()
	t.Cleanup(func() {
		inW.Close()
		cancel()
		select {
		case code := <-r.code:
			r.code <- code
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return after stdin EOF")
		}
		// in-flight handlers may still write; let them, then end the reader
		outW.Close()
		<-readerDone
	})
	return r
}

func (r *rig) send(v any) {
	r.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.in.Write(append(b, '\n')); err != nil {
		r.t.Fatalf("write request: %v", err)
	}
}

func (r *rig) sendRaw(s string) {
	r.t.Helper()
	if _, err := io.WriteString(r.in, s); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

func (r *rig) next() line {
	r.t.Helper()
	select {
	case l := <-r.lines:
		return l
	case <-time.After(10 * time.Second):
		r.t.Fatalf("no line from the worker")
		return line{}
	}
}

func slash(id int, command string) map[string]any {
	return map[string]any{"id": id, "method": "slash", "params": map[string]string{"command": command}}
}

func (r *rig) exitCode() int {
	r.t.Helper()
	select {
	case code := <-r.code:
		r.code <- code
		return code
	case <-time.After(10 * time.Second):
		r.t.Fatalf("Run did not return")
		return -1
	}
}

// ---------------------------------------------------------------------------

func TestSlashCommands(t *testing.T) {
	t.Parallel()
	tests := []struct {
		command string
		ok      bool
		check   func(out string) bool
	}{
		{"/help", true, func(out string) bool {
			for _, c := range []string{"/help", "/echo", "/time", "/sleep", "/sysinfo", "/exit"} {
				if !strings.Contains(out, c) {
					return false
				}
			}
			return true
		}},
		{"/echo hi there", true, func(out string) bool { return out == "hi there" }},
		{"  /echo   padded  ", true, func(out string) bool { return out == "padded" }},
		{"/echo", true, func(out string) bool { return out == "" }},
		{"/time", true, func(out string) bool {
			at, err := time.Parse(time.RFC3339Nano, out)
			return err == nil && time.Since(at).Abs() < time.Hour
		}},
		{"/sleep 0.01", true, func(out string) bool { return out == "slept 0.01s" }},
		{"/sleep", false, func(e string) bool { return strings.Contains(e, "usage: /sleep") }},
		{"/sleep -1", false, func(e string) bool { return strings.Contains(e, "usage: /sleep") }},
		{"/sleep 3601", false, func(e string) bool { return strings.Contains(e, "usage: /sleep") }},
		{"/sysinfo", true, func(out string) bool {
			return strings.Contains(out, "cpus: ") && strings.Contains(out, fmt.Sprintf("worker: pid %d, ppid %d", os.Getpid(), os.Getppid()))
		}},
		{"/nope", false, func(e string) bool { return strings.Contains(e, "unknown command /nope") }},
	}
	for _, tt := range tests {
		t.Run(tt.command, func(t *testing.T) {
			t.Parallel()
			r := startRun(t)
			r.send(slash(7, tt.command))
			l := r.next()
			if string(l.ID) != "7" || l.OK == nil || *l.OK != tt.ok || l.Event != "" {
				t.Fatalf("reply %s: want id 7, ok %v", l.raw, tt.ok)
			}
			got := l.Error
			if tt.ok {
				got, _ = l.Result["output"].(string)
			}
			if !tt.check(got) {
				t.Errorf("%s gave %q", tt.command, got)
			}
		})
	}
}

// A prompt streams its words as delta events, all before the reply, which
// holds the whole text.
func TestPromptStreams(t *testing.T) {
	t.Parallel()
	r := startRun(t)
	r.send(map[string]any{"id": "p1", "method": "prompt", "params": map[string]string{"text": "one two  three", "turn_id": "t1"}})
	var deltas []string
	for {
		l := r.next()
		if string(l.ID) != `"p1"` {
			t.Fatalf("line %s: want id \"p1\" (ids are echoed as sent)", l.raw)
		}
		if l.Event == "delta" {
			deltas = append(deltas, l.Text)
			continue
		}
		if l.OK == nil || !*l.OK {
			t.Fatalf("reply %s", l.raw)
		}
		if out := l.Result["output"]; out != "(echo agent) one two three" {
			t.Errorf("output %q", out)
		}
		if _, ok := l.Result["interrupted"]; ok {
			t.Errorf("a finished prompt says interrupted: %s", l.raw)
		}
		break
	}
	if got := strings.Join(deltas, "|"); got != "(echo agent)| one| two| three" {
		t.Errorf("deltas %q", got)
	}
}

// A multi-line prompt comes back with its line breaks (Markdown stays
// Markdown), on a line of its own after "(echo agent)".
func TestPromptKeepsLineBreaks(t *testing.T) {
	t.Parallel()
	r := startRun(t)
	r.send(map[string]any{"id": "p1", "method": "prompt", "params": map[string]string{"text": "# Title\n\n- one\n```go\n    x := 1\n```", "turn_id": "t1"}})
	for {
		l := r.next()
		if l.Event == "delta" {
			continue
		}
		if out := l.Result["output"]; out != "(echo agent)\n\n# Title\n\n- one\n```go\n    x := 1\n```" {
			t.Errorf("output %q", out)
		}
		return
	}
}

// cancel stops a running /sleep or prompt; both answer at once.
func TestCancel(t *testing.T) {
	t.Parallel()
	t.Run("sleep", func(t *testing.T) {
		t.Parallel()
		r := startRun(t)
		r.send(slash(1, "/sleep 60"))
		// the sleep is registered before the next line is read, so a
		// cancel sent after it always finds it
		r.send(map[string]any{"id": -1, "method": "cancel", "params": map[string]any{"id": 1}})
		got := map[string]line{}
		for range 2 {
			l := r.next()
			got[string(l.ID)] = l
		}
		if c := got["-1"]; c.OK == nil || !*c.OK || c.Result["cancelled"] != true {
			t.Errorf("cancel reply %s, want cancelled:true", c.raw)
		}
		if s := got["1"]; s.OK == nil || *s.OK || s.Error != "sleep cancelled" {
			t.Errorf("sleep reply %s, want ok:false sleep cancelled", s.raw)
		}
	})
	t.Run("prompt", func(t *testing.T) {
		t.Parallel()
		r := startRun(t)
		r.send(map[string]any{"id": 2, "method": "prompt", "params": map[string]string{"text": strings.Repeat("word ", 500)}})
		if l := r.next(); l.Event != "delta" {
			t.Fatalf("first line %s, want a delta", l.raw)
		}
		r.send(map[string]any{"id": -2, "method": "cancel", "params": map[string]any{"id": 2}})
		var reply, cancelReply line
		for reply.OK == nil || cancelReply.OK == nil {
			l := r.next()
			switch {
			case string(l.ID) == "-2":
				cancelReply = l
			case l.Event == "delta":
			default:
				reply = l
			}
		}
		if cancelReply.Result["cancelled"] != true {
			t.Errorf("cancel reply %s", cancelReply.raw)
		}
		out, _ := reply.Result["output"].(string)
		if !*reply.OK || reply.Result["interrupted"] != true || !strings.HasPrefix(out, "(echo agent)") || strings.Count(out, "word") >= 500 {
			t.Errorf("prompt reply %.200s: want ok, interrupted, partial output", reply.raw)
		}
	})
	t.Run("unknown id", func(t *testing.T) {
		t.Parallel()
		r := startRun(t)
		r.send(map[string]any{"id": -9, "method": "cancel", "params": map[string]any{"id": 9}})
		if l := r.next(); l.Result["cancelled"] != false {
			t.Errorf("cancel of nothing: %s, want cancelled:false", l.raw)
		}
	})
}

// Requests run concurrently: a quick one is answered while a slow one runs.
func TestConcurrentRequests(t *testing.T) {
	t.Parallel()
	r := startRun(t)
	r.send(slash(1, "/sleep 60"))
	r.send(slash(2, "/echo quick"))
	if l := r.next(); string(l.ID) != "2" || l.Result["output"] != "quick" {
		t.Fatalf("first reply %s, want the /echo", l.raw)
	}
}

func TestUnknownMethodAndBadLines(t *testing.T) {
	t.Parallel()
	r := startRun(t)
	r.sendRaw("not json\n")
	r.sendRaw(`{"method":"slash","params":{"command":"/echo no id"}}` + "\n")
	r.send(map[string]any{"id": 3, "method": "frobnicate"})
	l := r.next()
	if string(l.ID) != "3" || l.OK == nil || *l.OK || l.Error != `unknown method "frobnicate"` {
		t.Errorf("reply %s, want ok:false unknown method", l.raw)
	}
	if n := strings.Count(r.errOut.String(), "bad request line"); n != 2 {
		t.Errorf("stderr %q: want 2 bad request lines", r.errOut.String())
	}
	r.send(slash(4, "/echo still here"))
	if l := r.next(); l.Result["output"] != "still here" {
		t.Errorf("after bad lines: %s", l.raw)
	}
}

func TestStdinEOFExitsZero(t *testing.T) {
	t.Parallel()
	r := startRun(t)
	r.send(slash(1, "/echo x"))
	r.next()
	r.in.Close()
	if code := r.exitCode(); code != 0 {
		t.Errorf("exit code %d on stdin EOF, want 0", code)
	}
}

// /exit CODE makes Run return CODE at once, without a reply.
func TestExitCommand(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		command string
		code    int
	}{{"/exit 3", 3}, {"/exit", 1}, {"/exit zero", 1}, {"/exit 0", 0}} {
		t.Run(tt.command, func(t *testing.T) {
			t.Parallel()
			r := startRun(t)
			r.send(slash(1, tt.command))
			if code := r.exitCode(); code != tt.code {
				t.Errorf("exit code %d, want %d", code, tt.code)
			}
			select { // Run has returned, and with it every request it started
			case l := <-r.lines:
				t.Errorf("/exit answered: %s", l.raw)
			default:
			}
		})
	}
}

// Run "serves requests until EOF": when it returns, the requests it
// started are finished too (STYLE.md: the code that says go also waits for
// it), so nothing it started writes to out afterwards or outlives it.
func TestRunReturnsOnlyAfterItsRequests(t *testing.T) {
	// Not parallel: it checks the goroutines of the whole process.
	ignore := goleak.IgnoreCurrent()
	r := startRun(t)
	r.send(slash(1, "/sleep 60"))
	r.send(slash(2, "/echo ready"))
	r.next() // the /sleep runs
	r.in.Close()
	if code := r.exitCode(); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	// Only the test's own pipe reader may remain.
	if err := goleak.Find(ignore, goleak.IgnoreAnyFunction("bufio.(*Scanner).Scan")); err != nil {
		t.Errorf("goroutines left running after Run returned:\n%v", err)
	}
}

// ---------------------------------------------------------------------------
// The process: builtin.Main's parent watchdog (docs/failure-classes.md #9, #10).

// A worker whose DASHGATE_PARENT_PID is not its parent exits before doing
// anything else.
func TestMainParentMismatchExits(t *testing.T) {
	t.Parallel()
	self, _ := os.Executable()
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), helperEnv+"=builtin", "DASHGATE_PARENT_PID=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdin = strings.NewReader(`{"id":1,"method":"slash","params":{"command":"/echo hi"}}` + "\n")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("exit code %d (%v), want 1", code, err)
	}
	if stdout.Len() != 0 {
		t.Errorf("it answered %q before checking its parent", stdout.String())
	}
	if !strings.Contains(stderr.String(), "parent is gone") {
		t.Errorf("stderr %q", stderr.String())
	}
}

// With its parent right, the process serves and exits 0 on stdin EOF.
func TestMainServesAndExitsOnEOF(t *testing.T) {
	t.Parallel()
	self, _ := os.Executable()
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), helperEnv+"=builtin", "DASHGATE_PARENT_PID="+strconv.Itoa(os.Getpid()))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	io.WriteString(stdin, `{"id":1,"method":"slash","params":{"command":"/echo hi"}}`+"\n")
	got, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || got != `{"id":1,"ok":true,"result":{"output":"hi"}}`+"\n" {
		t.Fatalf("reply %q %v", got, err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit on stdin EOF: %v, want status 0", err)
	}
}

// A worker whose parent dies is reparented; the watchdog sees the parent
// pid change and exits, though its stdin stays open.
func TestMainExitsWhenReparented(t *testing.T) {
	t.Parallel()
	self, _ := os.Executable()
	dir := t.TempDir()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer inW.Close() // held open: no EOF reaches the worker
	errFile, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer errFile.Close()
	pidFile := filepath.Join(dir, "pid")
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), helperEnv+"=middle", pidFileEnv+"="+pidFile)
	cmd.ExtraFiles = []*os.File{inR, errFile}
	if err := cmd.Run(); err != nil {
		t.Fatalf("middle: %v", err)
	}
	inR.Close()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(string(b))
	t.Cleanup(func() { unix.Kill(pid, unix.SIGKILL) })

	// The orphan is the test's child now (subreaper): wait for it.
	done := make(chan syscall.WaitStatus, 1)
	go func() {
		var ws syscall.WaitStatus
		for {
			_, err := syscall.Wait4(pid, &ws, 0, nil)
			if err != syscall.EINTR {
				break
			}
		}
		done <- ws
	}()
	select {
	case ws := <-done:
		if !ws.Exited() || ws.ExitStatus() != 1 {
			t.Errorf("worker ended with %v, want exit 1", ws)
		}
	case <-time.After(10 * time.Second):
		unix.Kill(pid, unix.SIGKILL)
		<-done
		t.Fatalf("the orphaned worker did not exit")
	}
	if b, _ := os.ReadFile(errFile.Name()); !strings.Contains(string(b), "parent is gone") {
		t.Errorf("stderr %q", b)
	}
}
