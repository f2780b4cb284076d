package acpbridge_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/workers/acpbridge"
)

// helperEnv makes the test binary the bridge ("bridge": `dashgate acp`'s
// Main on its argv) or the test agent ("agent").
const helperEnv = "DASHGATE_ACPTEST"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
	case "bridge":
		os.Exit(acpbridge.Main(os.Args[1:], "test"))
	default:
		os.Exit(2)
	}
	testkit.VerifyNoLeaks(m,
		// The agents built for the tests are deleted when they end.
		goleak.Cleanup(func(int) { removeBuilt() }),
		// The bridge's spawning goroutine, locked to its thread for the
		// life of the process by design (unit tests that start terminals
		// in this process start it).
		goleak.IgnoreAnyFunction("github.com/dashgate/dashgate/workers/acpbridge.spawnLoop"))
}

// built holds the temporary directories of the agents the tests built
// (testAgent, demoAgent); TestMain deletes them when the tests end.
var built struct {
	mu   sync.Mutex
	dirs []string
}

// buildDir makes a temporary directory for a built agent, deleted by
// removeBuilt.
func buildDir(prefix string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	built.mu.Lock()
	built.dirs = append(built.dirs, dir)
	built.mu.Unlock()
	return dir, nil
}

// removeBuilt deletes the directories of buildDir.
func removeBuilt() {
	built.mu.Lock()
	defer built.mu.Unlock()
	for _, dir := range built.dirs {
		os.RemoveAll(dir)
	}
	built.dirs = nil
}

// testAgent builds internal/testkit/acpagent, the test agent, once.
var testAgent = sync.OnceValues(func() (string, error) {
	dir, err := buildDir("acpbridge-testagent-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "acpagent")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/dashgate/dashgate/internal/testkit/acpagent").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build the test agent: %v\n%s", err, out)
	}
	return bin, nil
})

// testAgentCmd runs the test agent in mode (its ACPTEST_MODE).
func testAgentCmd(mode string) []string {
	bin, err := testAgent()
	if err != nil {
		panic(err) // a build failure of the tree's own program
	}
	return []string{"/usr/bin/env", "ACPTEST_MODE=" + mode, bin}
}

// demoAgent builds the ACP Go SDK's example agent once.
var demoAgent = sync.OnceValues(func() (string, error) {
	dir, err := buildDir("acpbridge-demo-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "agent")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/coder/acp-go-sdk/example/agent").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build the demo agent: %v\n%s", err, out)
	}
	return bin, nil
})

func demoAgentCmd(t *testing.T) []string {
	t.Helper()
	bin, err := demoAgent()
	if err != nil {
		t.Fatal(err)
	}
	return []string{bin}
}

// msg is one line the bridge wrote.
type msg map[string]any

func (m msg) str(k string) string { s, _ := m[k].(string); return s }
func (m msg) id() int             { f, _ := m["id"].(float64); return int(f) }
func (m msg) event() string       { return m.str("event") }
func (m msg) result() msg         { r, _ := m["result"].(map[string]any); return r }
func (m msg) isReply() bool       { _, ok := m["ok"]; return ok }
func (m msg) ok() bool            { b, _ := m["ok"].(bool); return b }

// bridgeProc is a running `dashgate acp` (the test binary as the bridge),
// driven over its stdin and stdout as dashgate drives a worker.
type bridgeProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan msg
	stderr *syncBuffer
	exited chan struct{}
	// hold, when not nil, keeps the reader from reading the bridge's
	// stdout until it is closed (startBridgeHeld).
	hold chan struct{}

	mu   sync.Mutex
	seen []msg
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startBridge starts the bridge for agent argv with extra environment.
// Cleanup kills it (and its group's leftovers) and waits.
func startBridge(t *testing.T, argv []string, env ...string) *bridgeProc {
	t.Helper()
	return startBridgeWith(t, nil, argv, env...)
}

// startBridgeHeld is startBridge with nothing of the bridge's stdout read
// until release is called: its pipe fills, as a busy dashgate's does.
func startBridgeHeld(t *testing.T, argv []string, env ...string) (b *bridgeProc, release func()) {
	t.Helper()
	hold := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release)
	return startBridgeWith(t, hold, argv, env...), release
}

func startBridgeWith(t *testing.T, hold chan struct{}, argv []string, env ...string) *bridgeProc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b := &bridgeProc{t: t, lines: make(chan msg, 1024), stderr: &syncBuffer{}, exited: make(chan struct{}), hold: hold}
	b.cmd = exec.Command(self, append([]string{"--"}, argv...)...)
	b.cmd.Env = append(append(os.Environ(), helperEnv+"=bridge", "HOME="+t.TempDir()), env...)
	b.cmd.Stderr = b.stderr
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	b.stdin, _ = b.cmd.StdinPipe()
	out, _ := b.cmd.StdoutPipe()
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		if b.hold != nil {
			<-b.hold
		}
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20) // dashgate's bound: a longer line fails the test
		for sc.Scan() {
			var m msg
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				m = msg{"bad_line": sc.Text()}
			}
			b.lines <- m
		}
		if sc.Err() != nil {
			b.lines <- msg{"bad_line": sc.Err().Error()}
		}
		close(b.lines)
	}()
	go func() {
		b.cmd.Wait()
		close(b.exited)
	}()
	t.Cleanup(func() {
		b.stdin.Close()
		select {
		case <-b.exited:
		case <-time.After(15 * time.Second):
			b.cmd.Process.Kill()
			<-b.exited
			t.Errorf("the bridge did not exit within 15s of stdin's end")
		}
		if t.Failed() {
			t.Logf("bridge stderr:\n%s", b.stderr.String())
		}
	})
	return b
}

func (b *bridgeProc) send(id int, method string, params any) {
	b.t.Helper()
	line, _ := json.Marshal(map[string]any{"id": id, "method": method, "params": params})
	if _, err := b.stdin.Write(append(line, '\n')); err != nil {
		b.t.Fatalf("write %s: %v", method, err)
	}
}

// until reads lines until one matches, within d, and returns it; every
// line read is kept (all).
func (b *bridgeProc) until(d time.Duration, what string, match func(msg) bool) msg {
	b.t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case m, ok := <-b.lines:
			if !ok {
				b.t.Fatalf("%s: the bridge's stdout ended; seen %v", what, b.all())
			}
			if _, bad := m["bad_line"]; bad {
				b.t.Fatalf("the bridge wrote a line dashgate cannot read: %.200v", m["bad_line"])
			}
			b.mu.Lock()
			b.seen = append(b.seen, m)
			b.mu.Unlock()
			if match(m) {
				return m
			}
		case <-timer.C:
			b.t.Fatalf("%s: not within %s; seen %v", what, d, b.all())
		}
	}
}

func (b *bridgeProc) all() []msg {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]msg(nil), b.seen...)
}

// reply waits for the reply of request id.
func (b *bridgeProc) reply(id int, d time.Duration) msg {
	b.t.Helper()
	match := func(m msg) bool { return m.isReply() && m.id() == id }
	// There is one reply per request: it may have come while another
	// line was awaited (a prompt's reply before its approval's: CI saw
	// TestApprovalChoices wait 30 s for a reply it had read).
	for _, m := range b.all() {
		if match(m) {
			return m
		}
	}
	return b.until(d, fmt.Sprintf("reply %d", id), match)
}

// events are the events of request id seen so far, named name ("" all).
func (b *bridgeProc) events(id int, name string) []msg {
	var out []msg
	for _, m := range b.all() {
		if m.id() == id && m.event() != "" && (name == "" || m.event() == name) {
			out = append(out, m)
		}
	}
	return out
}

// descendants are the live processes below the bridge.
func (b *bridgeProc) descendants() []testkit.Proc {
	b.t.Helper()
	ps, err := testkit.Descendants(b.cmd.Process.Pid)
	if err != nil {
		b.t.Fatal(err)
	}
	var out []testkit.Proc
	for _, p := range ps {
		if !p.Exiting() {
			out = append(out, p)
		}
	}
	return out
}

// waitNoDescendants fails unless the bridge has no live process below it
// within d (but the test agent, when agentStays).
func (b *bridgeProc) waitNoDescendants(d time.Duration, agentStays bool) {
	b.t.Helper()
	var left []testkit.Proc
	if !testkit.Until(d, func() bool {
		left = left[:0]
		for _, p := range b.descendants() {
			if !agentStays || p.Comm != "acpagent" { // the test agent's program
				left = append(left, p)
			}
		}
		return len(left) == 0
	}) {
		b.t.Fatalf("processes left below the bridge: %v", left)
	}
}

// waitGone fails unless every process of ps is gone within d (a pid reused
// by another process counts as gone).
func waitGone(t *testing.T, ps []testkit.Proc, d time.Duration) {
	t.Helper()
	for _, p := range ps {
		if !testkit.Until(d, func() bool {
			q, err := testkit.ReadProc(p.PID)
			return err != nil || q.Start != p.Start || q.Exiting()
		}) {
			t.Errorf("process %s outlived the bridge", testkit.Describe(p.PID))
		}
	}
}

func deltaText(evs []msg) string {
	var s strings.Builder
	for _, e := range evs {
		s.WriteString(e.str("text"))
	}
	return s.String()
}

const turnWait = 30 * time.Second

// TestDemoAgentTurn drives a whole turn of the SDK's demo agent: text, a
// tool that completes, then a permission the viewer answers once; the
// turn ends complete.
func TestDemoAgentTurn(t *testing.T) {
	t.Parallel()
	b := startBridge(t, demoAgentCmd(t))
	b.send(1, "prompt", map[string]any{"text": "hi", "turn_id": "t1", "history": []any{}, "agent_session_id": ""})
	ap := b.until(turnWait, "approval", func(m msg) bool { return m.event() == "approval" })
	if ap.str("tool") != "Modifying critical configuration file" ||
		ap.str("command") != "Modifying critical configuration file (/home/user/project/config.json)" {
		t.Errorf("approval = %v", ap)
	}
	opts, _ := json.Marshal(ap["options"])
	if string(opts) != `[{"kind":"allow_once","name":"Allow this change","option_id":"allow"},{"kind":"reject_once","name":"Skip this change","option_id":"reject"}]` {
		t.Errorf("approval options = %s", opts)
	}
	b.send(2, "approval", map[string]any{"request_id": ap.str("request_id"), "choice": "once", "by": "viewer"})
	if r := b.reply(2, turnWait); !r.ok() || r.result().str("option_id") != "allow" {
		t.Errorf("approval reply = %v", r)
	}
	r := b.reply(1, turnWait)
	res := r.result()
	if !r.ok() || res.str("status") != "complete" || res.str("stop_reason") != "end_turn" {
		t.Fatalf("prompt reply = %v", r)
	}
	deltas := deltaText(b.events(1, "delta"))
	if !strings.HasPrefix(deltas, "ACP Go Example Agent") || !strings.HasSuffix(deltas, "The changes have been applied.") || deltas != res.str("output") {
		t.Errorf("deltas %q, output %q", deltas, res.str("output"))
	}
	sess := b.events(1, "agent_session")
	if len(sess) != 1 || sess[0].str("agent_session_id") == "" || sess[0]["loaded"] != false || sess[0]["notice"] != nil {
		t.Errorf("agent_session = %v", sess)
	}
	var names []string
	for _, e := range b.events(1, "") {
		if strings.HasPrefix(e.event(), "tool_") || e.event() == "approval" {
			names = append(names, e.event()+":"+e.str("tool_id")+e.str("status"))
		}
	}
	want := "tool_start:call_1pending tool_update:call_1completed tool_complete:call_1completed " +
		"tool_start:call_2pending approval: tool_update:call_2completed tool_complete:call_2completed"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("tool events\n got %s\nwant %s", got, want)
	}
	tc := b.events(1, "tool_complete")[0]
	if tc.str("output") != "# My Project\n\nThis is a sample project..." || tc["exit_code"] != 0.0 || tc["truncated"] != false {
		t.Errorf("tool_complete = %v", tc)
	}
	ts := b.events(1, "tool_start")[0]
	if ts.str("name") != "Reading project files" || ts.str("kind") != "read" || fmt.Sprint(ts["locations"]) != "[map[path:/project/README.md]]" {
		t.Errorf("tool_start = %v", ts)
	}
}

// TestDemoAgentDeny answers the demo agent's permission with deny: it
// takes its reject option and skips the change.
func TestDemoAgentDeny(t *testing.T) {
	t.Parallel()
	b := startBridge(t, demoAgentCmd(t))
	b.send(1, "prompt", map[string]any{"text": "hi", "turn_id": "t1"})
	ap := b.until(turnWait, "approval", func(m msg) bool { return m.event() == "approval" })
	b.send(2, "approval", map[string]any{"request_id": ap.str("request_id"), "choice": "deny", "by": "viewer"})
	if r := b.reply(2, turnWait); r.result().str("option_id") != "reject" {
		t.Errorf("approval reply = %v", r)
	}
	r := b.reply(1, turnWait)
	if out := r.result().str("output"); r.result().str("status") != "complete" || !strings.HasSuffix(out, "I'll skip the configuration update.") {
		t.Errorf("prompt reply = %v", r)
	}
}

// TestDemoAgentCancel cancels a turn mid-stream: session/cancel reaches
// the agent, the reply is interrupted with what streamed.
func TestDemoAgentCancel(t *testing.T) {
	t.Parallel()
	b := startBridge(t, demoAgentCmd(t))
	b.send(1, "prompt", map[string]any{"text": "hi", "turn_id": "t1"})
	b.until(turnWait, "first delta", func(m msg) bool { return m.event() == "delta" })
	b.send(2, "cancel", map[string]any{"id": 1})
	r := b.reply(1, turnWait)
	res := r.result()
	if !r.ok() || res.str("status") != "interrupted" || res.str("stop_reason") != "cancelled" ||
		!strings.HasPrefix(res.str("output"), "ACP Go Example Agent") || strings.Contains(res.str("output"), "Perfect!") {
		t.Errorf("prompt reply = %v", r)
	}
	// The agent took the cancel as the end of its turn: a next prompt runs.
	b.send(3, "prompt", map[string]any{"text": "again", "turn_id": "t2"})
	b.until(turnWait, "a delta of the next turn", func(m msg) bool { return m.event() == "delta" && m.id() == 3 })
}

// TestCancelAnswersPermission cancels a turn that waits for an approval:
// the agent's permission request is answered cancelled.
func TestCancelAnswersPermission(t *testing.T) {
	t.Parallel()
	b := startBridge(t, testAgentCmd(""))
	b.send(1, "prompt", map[string]any{"text": "perm", "turn_id": "t1"})
	ap := b.until(turnWait, "approval", func(m msg) bool { return m.event() == "approval" })
	b.send(2, "cancel", map[string]any{"id": 1})
	r := b.reply(1, turnWait)
	if r.result().str("status") != "interrupted" || r.result().str("output") != "permission cancelled" {
		t.Errorf("prompt reply = %v", r)
	}
	b.send(3, "approval", map[string]any{"request_id": ap.str("request_id"), "choice": "once"})
	if r := b.reply(3, turnWait); r.ok() {
		t.Errorf("a cancelled approval was answered: %v", r)
	}
}

// TestApprovalChoices maps dashgate's choices (and option_id) to the
// agent's options.
func TestApprovalChoices(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		params map[string]any
		want   string
	}{
		{"once", map[string]any{"choice": "once"}, "chose yes"},
		{"always", map[string]any{"choice": "always"}, "chose yes-always"},
		{"deny", map[string]any{"choice": "deny"}, "chose no"},
		{"deny_always falls back to reject_once", map[string]any{"choice": "deny_always"}, "chose no"},
		{"option_id", map[string]any{"choice": "once", "option_id": "yes-always"}, "chose yes-always"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := startBridge(t, testAgentCmd(""))
			b.send(1, "prompt", map[string]any{"text": "perm", "turn_id": "t1"})
			ap := b.until(turnWait, "approval", func(m msg) bool { return m.event() == "approval" })
			if ap.str("tool") != "Edit file" || ap.str("command") != "Edit file (/tmp/x.go:3)" {
				t.Errorf("approval = %v", ap)
			}
			tc.params["request_id"] = ap.str("request_id")
			b.send(2, "approval", tc.params)
			if r := b.reply(2, turnWait); !r.ok() {
				t.Errorf("approval reply = %v", r)
			}
			if r := b.reply(1, turnWait); r.result().str("output") != tc.want {
				t.Errorf("prompt reply = %v, want output %q", r, tc.want)
			}
		})
	}
}

// TestStdinEOFMidTurn closes the bridge's stdin while a turn runs, with
// an agent that outlives its stdin's end and ignores SIGTERM: the bridge
// escalates to SIGKILL, and nothing it started is left.
func TestStdinEOFMidTurn(t *testing.T) {
	t.Parallel()
	b := startBridge(t, testAgentCmd("stubborn"), acpbridge.EnvCloseWait+"=100ms")
	b.send(1, "prompt", map[string]any{"text": "sleepterm", "turn_id": "t1"})
	b.reply(1, turnWait)
	b.send(2, "prompt", map[string]any{"text": "wait", "turn_id": "t2"})
	b.until(turnWait, "delta", func(m msg) bool { return m.event() == "delta" && m.id() == 2 })
	var below []testkit.Proc // the agent, the terminal's sh and its sleep
	if !testkit.Until(5*time.Second, func() bool { below = b.descendants(); return len(below) >= 3 }) {
		t.Fatalf("want the agent, a shell and its sleep below the bridge, got %v", below)
	}
	b.stdin.Close()
	select {
	case <-b.exited:
	case <-time.After(turnWait):
		t.Fatal("the bridge did not exit after stdin's end")
	}
	waitGone(t, below, 5*time.Second)
	if !strings.Contains(b.stderr.String(), `escalation=sigkill`) {
		t.Errorf("the agent's close did not escalate to SIGKILL: %s", b.stderr.String())
	}
}

// TestBridgeKilled kills the bridge with SIGKILL mid-turn: the agent (which
// would outlive its stdin's end) dies with it (Pdeathsig).
func TestBridgeKilled(t *testing.T) {
	t.Parallel()
	b := startBridge(t, testAgentCmd("stubborn"))
	b.send(1, "prompt", map[string]any{"text": "wait", "turn_id": "t1"})
	b.until(turnWait, "delta", func(m msg) bool { return m.event() == "delta" })
	below := b.descendants()
	if len(below) == 0 {
		t.Fatal("no agent below the bridge")
	}
	b.cmd.Process.Kill()
	<-b.exited
	waitGone(t, below, 5*time.Second)
}

// TestLoadSession starts a second bridge with the first's agent session:
// the agent loads it, and what it replays is not forwarded.
func TestLoadSession(t *testing.T) {
	t.Parallel()
	b := startBridge(t, testAgentCmd(""))
	b.send(1, "prompt", map[string]any{"text": "hello", "turn_id": "t1", "agent_session_id": ""})
	b.reply(1, turnWait)
	first := b.events(1, "agent_session")
	if len(first) != 1 || first[0]["loaded"] != false || fmt.Sprint(first[0]["agent"]) != "map[name:testagent version:1.2.3]" {
		t.Fatalf("agent_session = %v", first)
	}
	sid := first[0].str("agent_session_id")

	b2 := startBridge(t, testAgentCmd(""))
	b2.send(1, "prompt", map[string]any{"text": "hello", "turn_id": "t2", "agent_session_id": sid})
	r := b2.reply(1, turnWait)
	if r.result().str("output") != "Hello, world" {
		t.Errorf("reply = %v", r)
	}
	sess := b2.events(1, "agent_session")
	if len(sess) != 1 || sess[0]["loaded"] != true || sess[0].str("agent_session_id") != sid || sess[0]["notice"] != nil {
		t.Errorf("agent_session = %v", sess)
	}
	for _, e := range b2.events(1, "") {
		if line, _ := json.Marshal(e); strings.Contains(string(line), "REPLAYED") {
			t.Errorf("a replayed update was forwarded: %s", line)
		}
	}
}

// TestLoadSessionUnsupported asks an agent without loadSession (the demo
// agent) to load: a new session and the notice.
func TestLoadSessionUnsupported(t *testing.T) {
	t.Parallel()
	b := startBridge(t, testAgentCmd("noload"))
	b.send(1, "prompt", map[string]any{"text": "hello", "turn_id": "t1", "agent_session_id": "s-earlier"})
	b.reply(1, turnWait)
	sess := b.events(1, "agent_session")
	if len(sess) != 1 || sess[0]["loaded"] != false || sess[0].str("agent_session_id") == "s-earlier" ||
		sess[0].str("notice") != "the agent could not load the earlier conversation, so this is a new one" {
		t.Errorf("agent_session = %v", sess)
	}
}

// TestEvents covers the other updates: long text cut into deltas of at
// most 128 KiB (no output then), thoughts and plans, max_tokens, the
// commands (arriving outside a call, given in the next one) and /help.
// TestBurstOfChunks: an agent that streams 1,500 chunks of 1 KiB at once
// while the bridge's reader (dashgate) reads nothing sends them all, and
// its turn ends complete with every byte delivered, in order: the
// bridge's updates do not queue up in the ACP library (whose queue of
// 1,024 notifications ends the connection when full), and the deltas
// queued meanwhile merge.
//
// It needs a bridge built without the race detector (CI runs it so, after
// the suite): instrumented, the bridge decodes the agent's notifications
// slower than the agent writes them, and 1,024 of them wait in the
// library's queue whatever the bridge does with them (the library's own
// limit, which a real agent streaming tokens does not approach).
func TestBurstOfChunks(t *testing.T) {
	if raceDetector {
		t.Skip("the race detector slows the bridge's decoding below the burst's rate: run without -race")
	}
	t.Parallel()
	b, release := startBridgeHeld(t, testAgentCmd(""))
	done := filepath.Join(t.TempDir(), "sent")
	b.send(1, "prompt", map[string]any{"text": "burst 1500 " + done, "turn_id": "t1"})
	// Nothing is read meanwhile: the bridge's stdout fills (64 KiB), as a
	// busy dashgate's pipe does. Written from the library's notification
	// goroutine, the 1,025th update waiting behind it ended the agent.
	if !testkit.Until(turnWait, func() bool { _, err := os.Stat(done); return err == nil }) {
		t.Fatalf("the agent could not send its burst while the bridge's reader waited; bridge stderr:\n%s", b.stderr)
	}
	release()
	r := b.reply(1, turnWait)
	ds := b.events(1, "delta")
	if !r.ok() || r.result().str("status") != "complete" || deltaText(ds) != strings.Repeat(strings.Repeat("x", 1023)+"\n", 1500) {
		t.Fatalf("after a burst of 1,500 chunks: %.300v, %d deltas", r, len(ds))
	}
	for _, d := range ds {
		if len(d.str("text")) > 128<<10 {
			t.Errorf("a delta of %d bytes", len(d.str("text")))
		}
	}
	t.Logf("1,500 chunks came as %d deltas", len(ds))
}

func TestEvents(t *testing.T) {
	t.Parallel()
	b := startBridge(t, testAgentCmd(""))
	b.send(1, "prompt", map[string]any{"text": "big 300000", "turn_id": "t1"})
	r := b.reply(1, turnWait)
	if _, has := r.result()["output"]; has || r.result().str("status") != "complete" {
		t.Errorf("a 300 kB reply carries output: %.200v", r)
	}
	ds := b.events(1, "delta")
	if len(ds) != 3 || deltaText(ds) != strings.Repeat("é", 150000) {
		t.Errorf("%d deltas", len(ds))
	}
	for _, d := range ds {
		if len(d.str("text")) > 128<<10 {
			t.Errorf("a delta of %d bytes", len(d.str("text")))
		}
	}

	b.send(2, "prompt", map[string]any{"text": "plan", "turn_id": "t2"})
	b.reply(2, turnWait)
	if th := b.events(2, "thought"); len(th) != 1 || th[0].str("text") != "thinking" {
		t.Errorf("thought = %v", th)
	}
	if p := b.events(2, "plan"); len(p) != 1 || fmt.Sprint(p[0]["entries"]) != "[map[content:step one priority:high status:pending]]" {
		t.Errorf("plan = %v", p)
	}
	cmds := append(b.events(1, "commands"), b.events(2, "commands")...)
	if len(cmds) != 1 || fmt.Sprint(cmds[0]["commands"]) != "[map[description:review the changes hint:what to review name:review]]" {
		t.Errorf("commands = %v", cmds)
	}

	b.send(3, "prompt", map[string]any{"text": "maxtokens", "turn_id": "t3"})
	if r := b.reply(3, turnWait).result(); r.str("status") != "complete" || r.str("stop_reason") != "max_tokens" {
		t.Errorf("max_tokens reply = %v", r)
	}

	b.send(4, "slash", map[string]any{"command": "/help"})
	if out := b.reply(4, turnWait).result().str("output"); !strings.Contains(out, "/review <what to review> — review the changes") {
		t.Errorf("/help = %q", out)
	}
	b.send(5, "slash", map[string]any{"command": "/review all"})
	if r := b.reply(5, turnWait); r.result().str("output") != "echo: /review all" || len(b.events(5, "delta")) != 0 {
		t.Errorf("/review = %v", r)
	}
}

// TestTerminalAndFS serves an agent's terminals and file reads and writes.
func TestTerminalAndFS(t *testing.T) {
	t.Parallel()
	b := startBridge(t, testAgentCmd(""))
	b.send(1, "prompt", map[string]any{"text": "terminal", "turn_id": "t1"})
	r := b.reply(1, turnWait)
	if want := `exit=3 output="out\nerr\nhi there\n" exitStatus=3 release=<nil> after=true`; r.result().str("output") != want {
		t.Errorf("terminal turn = %q\nwant %q", r.result().str("output"), want)
	}
	tc := b.events(1, "tool_complete")
	if len(tc) != 1 || tc[0]["exit_code"] != 1.0 || tc[0].str("output") != "out\nerr\nhi there\n" || tc[0].str("status") != "failed" {
		t.Errorf("tool_complete = %v", tc)
	}
	if ts := b.events(1, "tool_start"); len(ts) != 1 || fmt.Sprint(ts[0]["content"]) != "[map[terminal_id:term-1 type:terminal]]" {
		t.Errorf("tool_start = %v", ts)
	}
	b.waitNoDescendants(5*time.Second, true)

	b.send(2, "prompt", map[string]any{"text": "truncate", "turn_id": "t2"})
	if out := b.reply(2, turnWait).result().str("output"); out != `output="bbbb" truncated=true` {
		t.Errorf("truncate turn = %q", out)
	}

	dir := t.TempDir()
	b.send(3, "prompt", map[string]any{"text": "fs " + dir, "turn_id": "t3"})
	out := b.reply(3, turnWait).result().str("output")
	if !strings.HasPrefix(out, `read "two\n" err=false; relative: `) || !strings.Contains(out, "path must be absolute") {
		t.Errorf("fs turn = %q", out)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "sub", "file.txt")); string(got) != "one\ntwo\nthree\n" {
		t.Errorf("the file holds %q", got)
	}
}

// TestTerminalCap refuses a terminal over the cap with a clear error.
func TestTerminalCap(t *testing.T) {
	t.Parallel()
	b := startBridge(t, testAgentCmd(""))
	b.send(1, "prompt", map[string]any{"text": fmt.Sprintf("terminals %d", acpbridge.MaxTerminals+1), "turn_id": "t1"})
	if out := b.reply(1, turnWait).result().str("output"); !strings.Contains(out, "too many terminals: 16 are open") {
		t.Errorf("output = %q", out)
	}
	if n := len(b.descendants()); n != 1+2*acpbridge.MaxTerminals && n != 1+acpbridge.MaxTerminals {
		t.Logf("%d processes below the bridge", n)
	}
}

// TestHostileAgents: agents that cannot start, never answer, speak another
// version, print no JSON or die mid-turn. Each fails the prompt with a
// clear error and its failure word, and leaves no process.
func TestHostileAgents(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		argv    []string
		text    string
		failure string
		errHas  []string
	}{
		{"missing program", []string{"/nonexistent/agent"}, "hello", "agent_start",
			[]string{`cannot start the agent "/nonexistent/agent": no such file or directory`}},
		{"never answers", []string{"/bin/sh", "-c", "exec sleep 1000"}, "hello", "agent_timeout",
			[]string{"the agent did not answer initialize within 300ms"}},
		{"version 2", testAgentCmd("v2"), "hello", "agent_version",
			[]string{"the agent speaks ACP protocol version 2, and dashgate acp speaks version 1 only"}},
		{"not JSON", []string{"/bin/sh", "-c", "echo Welcome to the agent; exec sleep 1000"}, "hello", "agent_timeout",
			[]string{"did not answer initialize", `it wrote something that is not ACP on stdout: "Welcome to the agent"`}},
		{"not JSON then exits", []string{"/bin/sh", "-c", "echo usage: agent --acp >&2; exit 64"}, "hello", "agent_exited",
			[]string{"the agent exited (exit status 64) during initialize", "its last words on stderr: usage: agent --acp"}},
		{"dies mid-turn", testAgentCmd(""), "die", "agent_exited",
			[]string{"the agent exited (exit status 3) during session/prompt", "panic: the test agent fell over"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// 300 ms where the test waits for it to pass; a generous one
			// where the agent answers (a loaded machine once took longer
			// than 300 ms to start the test agent).
			wait := "10s"
			if tc.failure == "agent_timeout" {
				wait = "300ms"
			}
			b := startBridge(t, tc.argv, acpbridge.EnvInitTimeout+"="+wait)
			b.send(1, "prompt", map[string]any{"text": tc.text, "turn_id": "t1"})
			r := b.reply(1, turnWait)
			if r.ok() || r.str("failure") != tc.failure {
				t.Fatalf("reply = %v, want failure %s", r, tc.failure)
			}
			for _, s := range tc.errHas {
				if !strings.Contains(r.str("error"), s) {
					t.Errorf("error %q lacks %q", r.str("error"), s)
				}
			}
			b.waitNoDescendants(5*time.Second, false)
			if tc.name == "dies mid-turn" {
				// A next prompt starts the agent again.
				b.send(2, "prompt", map[string]any{"text": "hello", "turn_id": "t2"})
				if r := b.reply(2, turnWait); r.result().str("output") != "Hello, world" {
					t.Errorf("the prompt after the death = %v", r)
				}
			}
		})
	}
}
