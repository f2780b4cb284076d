package testkit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"
	"golang.org/x/sys/unix"
)

// sseEvent is one server-sent event of a streamed answer.
type sseEvent struct {
	Name string
	Data map[string]any
}

// readSSE reads every event of an event stream until EOF.
func readSSE(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.Name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.Data); err != nil {
				t.Fatalf("data of event %q: %v", cur.Name, err)
			}
		case line == "":
			out = append(out, cur)
			cur = sseEvent{}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func postJSON(t *testing.T, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// TestAnthropicStandIn checks the stand-in's answers without an agent: the
// event sequence of a streamed text answer and of a tool_use, the
// non-streaming message, count_tokens, an unknown path, and what it
// records.
func TestAnthropicStandIn(t *testing.T) {
	t.Parallel()
	const reply = "héllo, wörld"
	a := StartAnthropicT(t, AnthropicOptions{Reply: reply, Pieces: 4, ToolCommand: "echo hi"})
	if !strings.HasPrefix(a.URL, "http://127.0.0.1:") {
		t.Fatalf("URL %q, want http://127.0.0.1:<port>", a.URL)
	}
	textReq := `{"model":"claude-x","stream":true,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"},` +
		`{"role":"user","content":[{"type":"text","text":"<system-reminder>note</system-reminder>"},{"type":"text","text":"hello"}]}]}`

	t.Run("stream text", func(t *testing.T) {
		resp := postJSON(t, a.URL+"/v1/messages?beta=true", textReq)
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
			t.Fatalf("status %d, Content-Type %q", resp.StatusCode, ct)
		}
		evs := readSSE(t, resp.Body)
		var names []string
		var text strings.Builder
		for _, e := range evs {
			names = append(names, e.Name)
			if e.Data["type"] != e.Name {
				t.Errorf("event %q carries type %v", e.Name, e.Data["type"])
			}
			if d, ok := e.Data["delta"].(map[string]any); ok && d["type"] == "text_delta" {
				text.WriteString(d["text"].(string))
			}
		}
		want := []string{"message_start", "content_block_start", "ping", "content_block_delta", "content_block_delta",
			"content_block_delta", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
		if !slices.Equal(names, want) {
			t.Errorf("events %v, want %v", names, want)
		}
		if text.String() != reply {
			t.Errorf("text deltas join to %q, want %q", text.String(), reply)
		}
		md := evs[len(evs)-2].Data
		if md["delta"].(map[string]any)["stop_reason"] != "end_turn" || md["usage"].(map[string]any)["output_tokens"] == nil {
			t.Errorf("message_delta %v: want stop_reason end_turn and usage", md)
		}
		if m := evs[0].Data["message"].(map[string]any); m["model"] != "claude-x" {
			t.Errorf("message_start model %v, want claude-x", m["model"])
		}
	})
	t.Run("stream tool_use", func(t *testing.T) {
		resp := postJSON(t, a.URL+"/v1/messages", `{"model":"m","stream":true,"tools":[{"name":"Read"},{"name":"Bash"}],"messages":[{"role":"user","content":"run it"}]}`)
		evs := readSSE(t, resp.Body)
		start := evs[1].Data["content_block"].(map[string]any)
		if start["type"] != "tool_use" || start["name"] != "Bash" {
			t.Fatalf("content_block_start %v, want a tool_use of Bash", start)
		}
		delta := evs[2].Data["delta"].(map[string]any)
		var in map[string]string
		if err := json.Unmarshal([]byte(delta["partial_json"].(string)), &in); err != nil || in["command"] != "echo hi" {
			t.Fatalf("input_json_delta %v (%v), want command echo hi", delta, err)
		}
		if sr := evs[len(evs)-2].Data["delta"].(map[string]any)["stop_reason"]; sr != "tool_use" {
			t.Errorf("stop_reason %v, want tool_use", sr)
		}
		// Once the tool_result is back, the answer is the text.
		resp = postJSON(t, a.URL+"/v1/messages", `{"model":"m","tools":[{"name":"Bash"}],"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":"hi"}]}]}`)
		var m struct {
			Content    []map[string]any
			StopReason string `json:"stop_reason"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		if m.StopReason != "end_turn" || len(m.Content) != 1 || m.Content[0]["text"] != reply {
			t.Errorf("answer to the tool_result %+v, want the reply text", m)
		}
	})
	t.Run("json", func(t *testing.T) {
		resp := postJSON(t, a.URL+"/v1/messages", strings.Replace(textReq, `"stream":true`, `"stream":false`, 1))
		var m struct {
			Type, Role, Model string
			Content           []map[string]any
			StopReason        string `json:"stop_reason"`
			Usage             map[string]int
		}
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		if m.Type != "message" || m.Role != "assistant" || m.StopReason != "end_turn" || len(m.Content) != 1 ||
			m.Content[0]["type"] != "text" || m.Content[0]["text"] != reply || m.Usage["output_tokens"] == 0 {
			t.Errorf("message %+v", m)
		}
	})
	t.Run("count_tokens", func(t *testing.T) {
		resp := postJSON(t, a.URL+"/v1/messages/count_tokens", textReq)
		var c struct {
			InputTokens int `json:"input_tokens"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || c.InputTokens == 0 {
			t.Errorf("count_tokens: %+v, %v", c, err)
		}
	})
	t.Run("connectivity check", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodHead, a.URL+"/", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("HEAD /: status %d, want 200", resp.StatusCode)
		}
	})
	t.Run("unknown", func(t *testing.T) {
		resp, err := http.Get(a.URL + "/api/hello")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("status %d, want 404", resp.StatusCode)
		}
	})

	if u := a.Unknown(); !slices.Equal(u, []string{"GET /api/hello"}) {
		t.Errorf("Unknown() = %v", u)
	}
	msgs := a.Messages()
	if len(msgs) != 4 {
		t.Fatalf("%d messages recorded, want 4: %+v", len(msgs), msgs)
	}
	first := msgs[0]
	if first.Model != "claude-x" || !first.Stream || first.UserText != "hello" || first.Query != "beta=true" || first.Answer != "text" {
		t.Errorf("first message recorded as %+v", first)
	}
	if msgs[1].Answer != "tool_use" || !slices.Equal(msgs[1].Tools, []string{"Read", "Bash"}) || !msgs[2].ToolResult || msgs[2].Answer != "text" {
		t.Errorf("tool messages recorded as %+v, %+v", msgs[1], msgs[2])
	}
}

// acpProbeClient is the ACP client side of the probe: it records the text
// of every agent_message_chunk and every permission request, rejects each
// (reject_once, else cancelled), and refuses file and terminal requests.
type acpProbeClient struct {
	mu          sync.Mutex
	chunks      []string
	permissions []acp.RequestPermissionRequest
}

func (c *acpProbeClient) text() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.chunks, "")
}

func (c *acpProbeClient) SessionUpdate(_ context.Context, n acp.SessionNotification) error {
	if ch := n.Update.AgentMessageChunk; ch != nil && ch.Content.Text != nil {
		c.mu.Lock()
		c.chunks = append(c.chunks, ch.Content.Text.Text)
		c.mu.Unlock()
	}
	return nil
}

func (c *acpProbeClient) RequestPermission(_ context.Context, p acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	c.mu.Lock()
	c.permissions = append(c.permissions, p)
	c.mu.Unlock()
	for _, o := range p.Options {
		if o.Kind == acp.PermissionOptionKindRejectOnce {
			return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{Selected: &acp.RequestPermissionOutcomeSelected{OptionId: o.OptionId}}}, nil
		}
	}
	return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{Cancelled: &acp.RequestPermissionOutcomeCancelled{}}}, nil
}

var errProbeRefuses = errors.New("the probe client serves no files or terminals")

func (c *acpProbeClient) ReadTextFile(context.Context, acp.ReadTextFileRequest) (acp.ReadTextFileResponse, error) {
	return acp.ReadTextFileResponse{}, errProbeRefuses
}
func (c *acpProbeClient) WriteTextFile(context.Context, acp.WriteTextFileRequest) (acp.WriteTextFileResponse, error) {
	return acp.WriteTextFileResponse{}, errProbeRefuses
}
func (c *acpProbeClient) CreateTerminal(context.Context, acp.CreateTerminalRequest) (acp.CreateTerminalResponse, error) {
	return acp.CreateTerminalResponse{}, errProbeRefuses
}
func (c *acpProbeClient) KillTerminal(context.Context, acp.KillTerminalRequest) (acp.KillTerminalResponse, error) {
	return acp.KillTerminalResponse{}, errProbeRefuses
}
func (c *acpProbeClient) TerminalOutput(context.Context, acp.TerminalOutputRequest) (acp.TerminalOutputResponse, error) {
	return acp.TerminalOutputResponse{}, errProbeRefuses
}
func (c *acpProbeClient) ReleaseTerminal(context.Context, acp.ReleaseTerminalRequest) (acp.ReleaseTerminalResponse, error) {
	return acp.ReleaseTerminalResponse{}, errProbeRefuses
}
func (c *acpProbeClient) WaitForTerminalExit(context.Context, acp.WaitForTerminalExitRequest) (acp.WaitForTerminalExitResponse, error) {
	return acp.WaitForTerminalExitResponse{}, errProbeRefuses
}

// acpAgent is one run of claude-agent-acp as a test account, spoken to
// over its stdin and stdout.
type acpAgent struct {
	cmd    *exec.Cmd
	marker string // "KEY=VALUE" in the environment of the agent and its children
	stdin  *os.File
	conn   *acp.ClientSideConnection
	client *acpProbeClient
	stderr *SyncBuffer
	waited chan struct{} // closed once cmd.Wait returned
}

// startClaudeAgentACP starts bin as acct, in acct.Home, in its own process
// group, with only PATH, HOME, the stand-in's Env and a marker in its
// environment. Its cleanup SIGKILLs the group and every process carrying
// the marker, and waits for the agent.
func startClaudeAgentACP(t *testing.T, bin string, acct UnixAccount, a *Anthropic) *acpAgent {
	t.Helper()
	ag := &acpAgent{marker: "DASHGATE_ACP_PROBE=" + randomHex(), client: &acpProbeClient{}, stderr: &SyncBuffer{}, waited: make(chan struct{})}
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	env := append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + acct.Home, ag.marker}, a.Env()...)
	ag.cmd = exec.Command(bin)
	ag.cmd.Env, ag.cmd.Dir = env, acct.Home
	ag.cmd.Stdin, ag.cmd.Stdout, ag.cmd.Stderr = inR, outW, ag.stderr
	ag.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: acct.UID, Gid: acct.GID, Groups: []uint32{}}}
	err = ag.cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		t.Fatalf("start %s: %v", bin, err)
	}
	Own(ag.cmd.Process.Pid)
	go func() { ag.cmd.Wait(); Disown(ag.cmd.Process.Pid); close(ag.waited) }()
	ag.stdin = inW
	ag.conn = acp.NewClientSideConnection(ag.client, inW, outR)
	ag.conn.SetLogger(slog.New(slog.DiscardHandler))
	t.Cleanup(func() {
		unix.Kill(-ag.cmd.Process.Pid, unix.SIGKILL)
		if left, _ := WithEnv(ag.marker); len(left) > 0 {
			for _, p := range left {
				unix.Kill(p.PID, unix.SIGKILL)
			}
		}
		inW.Close()
		Recv(t, 10*time.Second, "agent reaped", ag.waited)
		// The connection's reader ends at EOF of the agent's stdout,
		// once every holder of the pipe is gone.
		Recv(t, 10*time.Second, "ACP connection closed", ag.conn.Done())
		outR.Close()
		if t.Failed() {
			t.Logf("agent stderr:\n%s", ag.stderr.String())
		}
	})
	return ag
}

// TestAnthropicClaudeAgentACP runs the published claude-agent-acp
// (scripts/acp-agents.sh) offline against the stand-in, as a test account
// with its own HOME: initialize, session/new, a streamed session/prompt
// whose agent_message_chunk text must be the stand-in's reply with
// stopReason end_turn; then, its stdin closed, the agent's whole process
// tree must be gone.
func TestAnthropicClaudeAgentACP(t *testing.T) {
	t.Parallel()
	bin := ClaudeAgentACP(t)
	acct := UnixUser(t, "acp")
	const reply = "Stand-in says: hello back."
	log, logs := NewLogger()
	a := StartAnthropicT(t, AnthropicOptions{Reply: reply, Log: log})
	ag := startClaudeAgentACP(t, bin, acct, a)
	defer func() {
		if t.Failed() {
			t.Logf("stand-in requests: %+v\nstand-in log:\n%s", a.Requests(), logs.String())
		}
	}()

	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	init, err := ag.conn.Initialize(ctx, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber})
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	if init.ProtocolVersion != acp.ProtocolVersionNumber {
		t.Errorf("agent speaks protocol %d, want %d", init.ProtocolVersion, acp.ProtocolVersionNumber)
	}
	sess, err := ag.conn.NewSession(ctx, acp.NewSessionRequest{Cwd: acct.Home, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatalf("session/new: %v", err)
	}
	resp, err := ag.conn.Prompt(ctx, acp.PromptRequest{SessionId: sess.SessionId, Prompt: []acp.ContentBlock{acp.TextBlock("hello")}})
	if err != nil {
		t.Fatalf("session/prompt: %v", err)
	}
	if resp.StopReason != acp.StopReasonEndTurn {
		t.Errorf("stopReason %q, want %q", resp.StopReason, acp.StopReasonEndTurn)
	}
	// The SDK hands every notification that came before the response to
	// SessionUpdate before Prompt returns.
	if got := ag.client.text(); got != reply {
		t.Errorf("agent_message_chunk text %q, want the stand-in's reply %q", got, reply)
	}
	if !slices.ContainsFunc(a.Messages(), func(r AnthropicRequest) bool { return r.UserText == "hello" && r.Stream }) {
		t.Errorf("no streamed request to the stand-in carried the prompt \"hello\"")
	}
	if u := a.Unknown(); len(u) > 0 {
		t.Logf("paths the stand-in does not serve: %v", u)
	}

	// claude-agent-acp 0.23.1 does not exit at EOF of its stdin once a
	// session is open (its index.js keeps stdin resumed, and the Claude
	// Code child it runs per session keeps node's event loop alive; still
	// running 30 s later): a host closes stdin, then SIGTERMs the agent's
	// top process. That alone must end the whole tree: the CLI child
	// exits at EOF of its own stdin, whose writer was node.
	tree, _ := WithEnv(ag.marker)
	var ds []string
	for _, p := range tree {
		ds = append(ds, fmt.Sprintf("%s pgid %d", Describe(p.PID), p.PGID))
	}
	t.Logf("agent processes: %s", strings.Join(ds, "; "))
	pid := ag.cmd.Process.Pid // and its process group
	ag.stdin.Close()
	if err := unix.Kill(pid, unix.SIGTERM); err != nil {
		t.Fatalf("SIGTERM the agent: %v", err)
	}
	Recv(t, 30*time.Second, "agent exit after SIGTERM", ag.waited)
	WaitFor(t, 10*time.Second, "no process left with the agent's marker", func() bool {
		left, _ := WithEnv(ag.marker)
		return len(left) == 0
	})
	WaitFor(t, 10*time.Second, "the agent's process group gone", func() bool {
		return errors.Is(unix.Kill(-pid, 0), unix.ESRCH)
	})
	if ws, ok := ag.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("agent ended with %v, want killed by SIGTERM", ag.cmd.ProcessState)
	}
}

// TestAnthropicClaudeAgentACPPermission: with ToolCommand, the stand-in's
// tool_use of Bash reaches the client as one session/request_permission
// naming the command; the client rejects it, the command does not run, the
// refusal goes back to the model as a tool_result and the turn ends with
// the stand-in's reply.
func TestAnthropicClaudeAgentACPPermission(t *testing.T) {
	t.Parallel()
	bin := ClaudeAgentACP(t)
	acct := UnixUser(t, "acpperm")
	// Not a read-only command: Claude Code runs those (echo, ls) without
	// asking.
	const command = "touch dashgate-stand-in"
	a := StartAnthropicT(t, AnthropicOptions{ToolCommand: command})
	ag := startClaudeAgentACP(t, bin, acct, a)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	if _, err := ag.conn.Initialize(ctx, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}); err != nil {
		t.Fatalf("initialize: %v", err)
	}
	sess, err := ag.conn.NewSession(ctx, acp.NewSessionRequest{Cwd: acct.Home, McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatalf("session/new: %v", err)
	}
	resp, err := ag.conn.Prompt(ctx, acp.PromptRequest{SessionId: sess.SessionId, Prompt: []acp.ContentBlock{acp.TextBlock("run it")}})
	if err != nil {
		t.Fatalf("session/prompt: %v", err)
	}
	if resp.StopReason != acp.StopReasonEndTurn || ag.client.text() != DefaultAnthropicReply {
		t.Errorf("turn ended %q with text %q, want %q with %q", resp.StopReason, ag.client.text(), acp.StopReasonEndTurn, DefaultAnthropicReply)
	}
	ag.client.mu.Lock()
	perms := slices.Clone(ag.client.permissions)
	ag.client.mu.Unlock()
	if len(perms) != 1 {
		t.Fatalf("%d permission requests, want 1: %+v", len(perms), perms)
	}
	tc := perms[0].ToolCall
	if tc.Title == nil || *tc.Title != command || tc.Kind == nil || *tc.Kind != acp.ToolKindExecute {
		b, _ := json.Marshal(tc)
		t.Errorf("permission asked for %s, want an execute of %q", b, command)
	}
	if _, err := os.Stat(acct.Home + "/dashgate-stand-in"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the rejected command ran: stat its file: %v", err)
	}
	msgs := a.Messages()
	if !slices.ContainsFunc(msgs, func(r AnthropicRequest) bool { return r.Answer == "tool_use" }) ||
		!slices.ContainsFunc(msgs, func(r AnthropicRequest) bool { return r.ToolResult && r.Answer == "text" }) {
		t.Errorf("the stand-in saw %+v, want a tool_use answered, then a tool_result", msgs)
	}
}
