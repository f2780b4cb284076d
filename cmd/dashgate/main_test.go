package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
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

	"github.com/coder/websocket"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/dashgate/dashgate/workers"
	"github.com/dashgate/dashgate/workers/builtin"
)

// mainEnv makes the test binary run Main with its arguments: it is then
// dashgate itself (and, with "worker", its built-in worker), built with the
// test's flags (-race included).
const mainEnv = "DASHGATE_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		if len(os.Args) > 1 && os.Args[1] == stubbornWorker {
			// The built-in worker without its own ways to die with
			// dashgate (parent watchdog, exit on stdin EOF, SIGHUP): only
			// Pdeathsig, or a signal, ends it.
			signal.Ignore(syscall.SIGHUP)
			builtin.Run(context.Background(), os.Stdin, os.Stdout, os.Stderr)
			for {
				unix.Pause() // until a signal ends the process (pause(2))
			}
		}
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	// Orphans of a killed dashgate come back to the test process (pid 1 of
	// this box is a VM agent, not an init that reaps); the tests reap them
	// by pid, never with wait(-1), which would steal the instances' statuses.
	if err := workers.EnableSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, "EnableSubreaper:", err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m) // no ignores: every socket and client is closed by the tests
}

const testToken = "test-token-0123456789"

// stubbornWorker, as the first argument, makes the test binary a worker
// that only Pdeathsig (or a signal) ends.
const stubbornWorker = "stubborn-worker"

// ---------------------------------------------------------------------------
// Instances.

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.b.Bytes()...)
}

type instance struct {
	t       *testing.T
	name    string
	cmd     *exec.Cmd
	started time.Time
	addr    string
	id      string // DASHGATE_INSTANCE of its children
	log     *syncBuffer
	exited  chan struct{}
	waitErr error
}

// startInstance runs dashgate on 127.0.0.1:0 with stateDir and waits until it
// listens. The cleanup SIGKILLs it if the test did not end it.
func startInstance(t *testing.T, name, stateDir string, extra ...string) *instance {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	addrFile := filepath.Join(t.TempDir(), "addr")
	in := &instance{t: t, name: name, log: &syncBuffer{}, exited: make(chan struct{})}
	in.cmd = exec.Command(self,
		"--addr", "127.0.0.1:0", "--addr-file", addrFile, "--token", testToken,
		"--state-dir", stateDir, "--worker-grace", "300ms", "--log-format", "json",
		"--pty-cmd", "/bin/bash --norc --noprofile -i",
		// the workers are this binary too; GORACE: no 1 s sleep at exit
		"--pass-env", mainEnv+",GORACE")
	in.cmd.Args = append(in.cmd.Args, extra...)
	in.cmd.Env = append(os.Environ(), mainEnv+"=1", "GORACE=atexit_sleep_ms=0", "SHELL=/bin/bash")
	in.cmd.Stderr = in.log
	in.started = time.Now()
	if err := in.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { in.waitErr = in.cmd.Wait(); close(in.exited) }()
	t.Cleanup(func() {
		if !in.hasExited() {
			in.cmd.Process.Kill()
		}
		<-in.exited
		// a safety net for a failing test: nothing of the instance stays
		for pid := range instanceProcs(in.id) {
			unix.Kill(pid, unix.SIGKILL)
			waitFor(t, 5*time.Second, "cleanup", func() bool { return goneReaped(pid) })
		}
	})
	waitFor(t, 30*time.Second, name+" writes its address", func() bool {
		if in.hasExited() {
			t.Fatalf("%s exited at start: %v\n%s", name, in.waitErr, in.log.Bytes())
		}
		b, err := os.ReadFile(addrFile)
		if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
			return false
		}
		in.addr = strings.TrimSpace(string(b))
		// the address file is written just before this record
		return len(in.records("dashgate listening")) == 1
	})
	in.id, _ = in.records("dashgate listening")[0]["instance"].(string)
	if in.id == "" {
		t.Fatalf("%s: no instance id in its listening record", name)
	}
	return in
}

func (in *instance) hasExited() bool {
	select {
	case <-in.exited:
		return true
	default:
		return false
	}
}

// records returns the JSON log records with msg.
func (in *instance) records(msg string) []map[string]any {
	var out []map[string]any
	for line := range bytes.Lines(in.log.Bytes()) {
		var rec map[string]any
		if json.Unmarshal(line, &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

var httpClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}

type workerRow struct {
	PID       int    `json:"pid"`
	Kind      string `json:"kind"`
	SessionID string `json:"session_id"`
	Children  []int  `json:"children"`
}

// workers reads GET /admin/api/workers.
func (in *instance) workers() []workerRow {
	in.t.Helper()
	req, _ := http.NewRequest("GET", "http://"+in.addr+"/admin/api/workers", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := httpClient.Do(req)
	if err != nil {
		in.t.Fatalf("%s: /admin/api/workers: %v", in.name, err)
	}
	defer resp.Body.Close()
	var body struct{ Workers []workerRow }
	if resp.StatusCode != 200 {
		in.t.Fatalf("%s: /admin/api/workers: %s", in.name, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		in.t.Fatal(err)
	}
	return body.Workers
}

func (in *instance) worker(kind, sid string) workerRow {
	in.t.Helper()
	for _, w := range in.workers() {
		if w.Kind == kind && w.SessionID == sid {
			return w
		}
	}
	in.t.Fatalf("%s: no %s worker for session %s in %+v", in.name, kind, sid, in.workers())
	return workerRow{}
}

// stop sends SIGTERM and waits for the exit.
func (in *instance) stop() {
	in.t.Helper()
	if err := in.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		in.t.Fatalf("SIGTERM %s: %v", in.name, err)
	}
	select {
	case <-in.exited:
	case <-time.After(30 * time.Second):
		in.t.Fatalf("%s did not exit after SIGTERM", in.name)
	}
}

// ---------------------------------------------------------------------------
// Clients.

func wsDial(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + testToken}},
	})
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	return c
}

// rpc is a chat socket: a reader goroutine hands responses to their callers
// and drops events (reading all the time also answers pings).
type rpc struct {
	t      *testing.T
	c      *websocket.Conn
	mu     sync.Mutex
	nextID int
	wait   map[int]chan json.RawMessage
	done   chan struct{}
}

func dialChat(t *testing.T, in *instance) *rpc {
	r := &rpc{t: t, c: wsDial(t, "ws://"+in.addr+"/ws/chat"), wait: map[int]chan json.RawMessage{}, done: make(chan struct{})}
	r.c.SetReadLimit(1 << 20)
	go func() {
		defer close(r.done)
		for {
			_, b, err := r.c.Read(context.Background())
			if err != nil {
				return
			}
			var msg struct {
				ID *int `json:"id"`
			}
			if json.Unmarshal(b, &msg) != nil || msg.ID == nil {
				continue // an event
			}
			r.mu.Lock()
			ch := r.wait[*msg.ID]
			r.mu.Unlock()
			if ch != nil {
				ch <- b
			}
		}
	}()
	t.Cleanup(r.close)
	return r
}

func (r *rpc) close() {
	r.c.CloseNow()
	<-r.done
}

// call sends a request and returns its result (failing on an error reply).
func (r *rpc) call(method string, params any) map[string]any {
	r.t.Helper()
	r.mu.Lock()
	r.nextID++
	id := r.nextID
	ch := make(chan json.RawMessage, 1)
	r.wait[id] = ch
	r.mu.Unlock()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := r.c.Write(ctx, websocket.MessageText, b); err != nil {
		r.t.Fatalf("%s: write: %v", method, err)
	}
	select {
	case raw := <-ch:
		var resp struct {
			Result map[string]any
			Error  *struct {
				Code    int
				Message string
			}
		}
		if err := json.Unmarshal(raw, &resp); err != nil {
			r.t.Fatalf("%s: %s: %v", method, raw, err)
		}
		if resp.Error != nil {
			r.t.Fatalf("%s: error %d %s", method, resp.Error.Code, resp.Error.Message)
		}
		return resp.Result
	case <-ctx.Done():
		r.t.Fatalf("%s: no response", method)
		return nil
	}
}

// session creates a session and makes it spawn its worker with /echo.
func (r *rpc) session() string {
	r.t.Helper()
	sid, _ := r.call("session.create", map[string]any{})["session_id"].(string)
	if sid == "" {
		r.t.Fatalf("session.create gave no session_id")
	}
	if out := r.call("slash.exec", map[string]any{"session_id": sid, "command": "/echo hi"})["output"]; out != "hi" {
		r.t.Fatalf("/echo hi gave %v", out)
	}
	return sid
}

// dialTerminal attaches a terminal to sid and types line into it; a reader
// goroutine drains the output.
func dialTerminal(t *testing.T, in *instance, sid, line string) {
	t.Helper()
	c := wsDial(t, "ws://"+in.addr+"/ws/pty?session_id="+sid)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if _, _, err := c.Read(context.Background()); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { c.CloseNow(); <-done })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageBinary, []byte(line+"\n")); err != nil {
		t.Fatalf("type into the terminal: %v", err)
	}
}

// ---------------------------------------------------------------------------
// Processes.

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("%s: not within %v", what, d)
		case <-tick.C:
		}
	}
}

type procInfo struct {
	pid, ppid int
	state     byte
	comm      string
}

func readProc(pid int) (procInfo, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	i, j := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if i < 0 || j < i {
		return procInfo{}, false
	}
	f := bytes.Fields(b[j+1:])
	if len(f) < 2 {
		return procInfo{}, false
	}
	ppid, _ := strconv.Atoi(string(f[1]))
	return procInfo{pid: pid, ppid: ppid, state: f[0][0], comm: string(b[i+1 : j])}, true
}

// goneReaped reports whether pid has ended; a zombie child of the test
// process (an orphan that came back to it) is reaped on the way, by pid.
func goneReaped(pid int) bool {
	p, ok := readProc(pid)
	if !ok {
		return errors.Is(unix.Kill(pid, 0), unix.ESRCH)
	}
	if p.state != 'Z' && p.state != 'X' {
		return false
	}
	if p.ppid == os.Getpid() {
		var ws unix.WaitStatus
		unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	}
	return true
}

// instanceProcs lists the live processes whose environment carries
// DASHGATE_INSTANCE=id.
func instanceProcs(id string) map[int]procInfo {
	out := map[int]procInfo{}
	ents, _ := os.ReadDir("/proc")
	want := []byte(workers.EnvInstance + "=" + id)
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !slices.ContainsFunc(bytes.Split(env, []byte{0}), func(kv []byte) bool { return bytes.Equal(kv, want) }) {
			continue
		}
		if p, ok := readProc(pid); ok && p.state != 'Z' && p.state != 'X' {
			out[pid] = p
		}
	}
	return out
}

// myDescendants lists the live descendants of the test process.
func myDescendants() []int {
	ents, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(pid); ok {
			children[p.ppid] = append(children[p.ppid], pid)
		}
	}
	var out []int
	stack := []int{os.Getpid()}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, c := range children[n] {
			out = append(out, c)
			stack = append(stack, c)
		}
	}
	return out
}

// ---------------------------------------------------------------------------

// A crashed dashgate leaves nothing for long: its workers die with it
// (Pdeathsig), the next start on the same state dir sweeps what its
// terminal started, and a second live instance is left alone.
func TestCrashRecovery(t *testing.T) {
	stateDir := t.TempDir()

	// Instance A: two chat sessions with workers, and a terminal on the
	// first that starts grandchildren of every escape shape.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A's workers cannot die of the built-in worker's watchdog or of stdin
	// EOF, so their end within a second is Pdeathsig's doing.
	a := startInstance(t, "A", stateDir, "--worker-cmd", self+" "+stubbornWorker)
	ca := dialChat(t, a)
	sid1, sid2 := ca.session(), ca.session()
	// disown: bash, when the hangup reaches it before Pdeathsig's SIGKILL,
	// sends SIGHUP to its jobs; disowned jobs are the ones that leak.
	dialTerminal(t, a, sid1,
		`sleep 300 & setsid sleep 301 & setsid -w sleep 302 & (nohup sleep 303 >/dev/null 2>&1 &); disown -a`)
	// Wait until the tree is settled: four sleeps, the one setsid that
	// waits (-w), and no short-lived fork (the subshell, the forking
	// setsid) left. The admin API lists the terminal's descendants and
	// session members: they are among the leftovers.
	var leftovers map[int]procInfo
	var w1, w2, pty workerRow
	waitFor(t, 20*time.Second, "the terminal's sleeps run, settled", func() bool {
		leftovers = map[int]procInfo{}
		count := map[string]int{}
		for pid, p := range instanceProcs(a.id) {
			count[p.comm]++
			if p.comm == "sleep" || p.comm == "setsid" {
				leftovers[pid] = p
			}
		}
		if count["sleep"] != 4 || count["setsid"] != 1 {
			return false
		}
		w1, w2, pty = a.worker("chat", sid1), a.worker("chat", sid2), a.worker("pty", sid1)
		// every leftover: sleep 300, setsid -w and its sleep (by parent),
		// sleep 303 (in the terminal's session) and sleep 301 (its own
		// session, claimed by the marker it carries)
		if len(pty.Children) != len(leftovers) {
			return false
		}
		for _, c := range pty.Children {
			if _, ok := leftovers[c]; !ok {
				return false
			}
		}
		return true
	})
	direct := []int{w1.PID, w2.PID, pty.PID}
	t.Logf("A: workers %v, leftovers %v", direct, slices.Sorted(maps.Keys(leftovers)))

	// Instance B: a live neighbour on the same state dir, with its own worker.
	b := startInstance(t, "B", stateDir)
	cb := dialChat(t, b)
	sid3 := cb.session()
	wb := b.worker("chat", sid3)

	// SIGKILL A: its direct children die with it.
	killed := time.Now()
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-a.exited
	for _, pid := range direct {
		waitFor(t, time.Until(killed.Add(time.Second)), fmt.Sprintf("A's child %d gone (Pdeathsig)", pid), func() bool { return goneReaped(pid) })
	}
	for pid, p := range leftovers {
		if goneReaped(pid) {
			t.Fatalf("%s %d died with A: nothing left for the sweep to prove", p.comm, pid)
		}
	}

	// Instance C on the same state dir sweeps A's leftovers at start.
	c := startInstance(t, "C", stateDir)
	for pid := range leftovers {
		if p, ok := readProc(pid); ok && p.state != 'Z' && p.state != 'X' {
			t.Errorf("leftover %s %d still alive once C listens", p.comm, pid)
		}
	}
	for pid := range leftovers {
		waitFor(t, time.Until(c.started.Add(time.Second)), fmt.Sprintf("leftover %d gone", pid), func() bool { return goneReaped(pid) })
	}
	swept := map[int]bool{}
	for _, rec := range c.records("worker closed") {
		if rec["reason"] != "startup_sweep" || rec["level"] != "INFO" || rec["instance"] != a.id {
			t.Errorf("C logged %v", rec)
			continue
		}
		pid, _ := rec["worker_pid"].(float64)
		swept[int(pid)] = true
	}
	for pid, p := range leftovers {
		if !swept[pid] {
			t.Errorf("no startup_sweep record for %s %d", p.comm, pid)
		}
	}
	if recs := c.records("startup sweep done"); len(recs) != 1 || recs[0]["dead_instances"] != float64(1) {
		t.Errorf("C's sweep summary: %v", recs)
	}
	if n := len(b.records("startup sweep done")); n != 0 {
		t.Errorf("B swept at start (%d records) though A was alive", n)
	}

	// B and its worker were left alone.
	if goneReaped(wb.PID) {
		t.Fatalf("B's worker %d was ended", wb.PID)
	}
	if out := cb.call("slash.exec", map[string]any{"session_id": sid3, "command": "/echo still"})["output"]; out != "still" {
		t.Errorf("B's session answered %v", out)
	}
	if now := b.worker("chat", sid3); now.PID != wb.PID {
		t.Errorf("B's worker changed from %d to %d", wb.PID, now.PID)
	}

	// A clean SIGTERM: each exits 0 and leaves no child.
	cc := dialChat(t, c)
	sid4 := cc.session()
	wc := c.worker("chat", sid4)
	for _, in := range []*instance{b, c} {
		in.stop()
		if code := in.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("%s exited %d after SIGTERM (%v)\n%s", in.name, code, in.waitErr, in.log.Bytes())
		}
		if left := instanceProcs(in.id); len(left) != 0 {
			t.Errorf("%s left processes %v", in.name, left)
		}
	}
	for _, pid := range []int{wb.PID, wc.PID} {
		if !goneReaped(pid) {
			t.Errorf("worker %d outlived its instance", pid)
		}
	}
	waitFor(t, 5*time.Second, "no descendant left", func() bool {
		for _, pid := range myDescendants() {
			if !goneReaped(pid) {
				return false
			}
		}
		return len(myDescendants()) == 0
	})
}
