package testkit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The published ACP agents the tests run, installed by scripts/acp-agents.sh.
const (
	// EnvACPPrefix names the npm prefix scripts/acp-agents.sh installed
	// the agents into; unset or "": DefaultACPPrefix.
	EnvACPPrefix = "DASHGATE_ACP_PREFIX"
	// DefaultACPPrefix is scripts/acp-agents.sh's prefix.
	DefaultACPPrefix = "/opt/dashgate-acp"
	// EnvRequireACPAgents turns a missing agent from a skip into a
	// failure: CI sets DASHGATE_REQUIRE_ACP_AGENTS=1 after running
	// scripts/acp-agents.sh.
	EnvRequireACPAgents = "DASHGATE_REQUIRE_ACP_AGENTS"
	// ClaudeAgentACPVersion is the version of
	// @zed-industries/claude-agent-acp the script pins.
	ClaudeAgentACPVersion = "0.23.1"
)

// ClaudeAgentACP returns the path of the entry of
// @zed-industries/claude-agent-acp (<prefix>/node_modules/.bin/claude-agent-acp,
// a `#!/usr/bin/env node` script; node must be on the child's PATH) when
// scripts/acp-agents.sh installed it, runnable by every account. Otherwise
// it skips tb, naming the script, or fails it when
// DASHGATE_REQUIRE_ACP_AGENTS=1.
func ClaudeAgentACP(tb testing.TB) string {
	tb.Helper()
	prefix := os.Getenv(EnvACPPrefix)
	if prefix == "" {
		prefix = DefaultACPPrefix
	}
	bin := filepath.Join(prefix, "node_modules", ".bin", "claude-agent-acp")
	why := ""
	if target, err := filepath.EvalSymlinks(bin); err != nil {
		why = err.Error()
	} else if !runnableByAll(target) {
		why = target + " is not runnable by every account"
	} else if b, err := os.ReadFile(filepath.Join(prefix, "node_modules", "@zed-industries", "claude-agent-acp", "package.json")); err != nil {
		why = err.Error()
	} else {
		var pkg struct{ Version string }
		if json.Unmarshal(b, &pkg); pkg.Version != ClaudeAgentACPVersion {
			why = fmt.Sprintf("version %q installed, want %s", pkg.Version, ClaudeAgentACPVersion)
		}
	}
	if why == "" {
		return bin
	}
	msg := fmt.Sprintf("claude-agent-acp %s not installed (%s); run scripts/acp-agents.sh", ClaudeAgentACPVersion, why)
	if os.Getenv(EnvRequireACPAgents) == "1" {
		tb.Fatalf("%s; %s=1 forbids skipping", msg, EnvRequireACPAgents)
	}
	tb.Skip(msg)
	return ""
}

// DefaultAnthropicReply is the reply of a stand-in started with no
// AnthropicOptions.Reply.
const DefaultAnthropicReply = "Hello from the stand-in model."

// AnthropicOptions configures StartAnthropic; the zero value answers every
// message with DefaultAnthropicReply in 3 text deltas.
type AnthropicOptions struct {
	// Reply is the text of every answer to POST /v1/messages; "":
	// DefaultAnthropicReply.
	Reply string
	// Pieces is how many text_delta events a streamed Reply is cut into
	// (by runes, the last piece takes the rest); 0: 3.
	Pieces int
	// ToolCommand, when not "", turns the answer to a request that offers
	// a tool named "Bash" and whose last user message is no tool_result
	// into a tool_use of Bash with {"command": ToolCommand} (stop_reason
	// tool_use); the answer once the tool_result came back is Reply. A
	// request without the Bash tool (the CLI's side calls: titles,
	// topics) gets Reply. Claude Code asks the ACP client's permission
	// only for a command it does not take as read-only: "touch x" is
	// asked about, "echo x" or "ls" runs at once.
	ToolCommand string
	// Log gets one DEBUG record per request ("anthropic request", with
	// method, path, model, stream, answer) and a WARN record for a path
	// the stand-in does not know ("anthropic unknown path"); nil: none.
	Log *slog.Logger
}

// AnthropicRequest is one request the stand-in received, as recorded.
type AnthropicRequest struct {
	Method string
	Path   string // without the query: "/v1/messages"
	Query  string // raw query: "beta=true"
	// The fields below are read from a JSON body of POST /v1/messages
	// or /v1/messages/count_tokens; zero otherwise.
	Model  string
	Stream bool
	// UserText is the text of the last user message: its string content,
	// or its last text block that is not wholly a
	// <system-reminder>...</system-reminder> (Claude Code puts its context
	// notes, and the caveat and output of local commands such as the
	// /model it runs at session start, in blocks before the prompt).
	UserText   string
	ToolResult bool     // the last user message carries a tool_result block
	Tools      []string // names of the tools offered, in order
	// Answer is what the stand-in answered: "text", "tool_use",
	// "count_tokens", "ok" (a known side path) or "unknown" (404).
	Answer string
}

// Anthropic is a stand-in of the Anthropic Messages API
// (https://docs.anthropic.com/en/api/messages) on 127.0.0.1, for tests
// that run a real agent offline: point ANTHROPIC_BASE_URL at URL (Env
// does). POST /v1/messages answers Reply, streamed as the API streams
// (message_start, content_block_start, text_delta pieces,
// content_block_stop, message_delta with stop_reason end_turn and usage,
// message_stop) when the request says "stream": true, else as one JSON
// message; POST /v1/messages/count_tokens answers a token count; HEAD or
// GET / (the CLI's connectivity check) answers 200 {}; every other path is
// recorded and answered 404 with the API's error shape.
//
// The caller owns it and calls Close, which returns once every handler
// returned (httptest.Server.Close). Its methods are safe for concurrent
// use.
type Anthropic struct {
	URL string // "http://127.0.0.1:<port>", no trailing slash
	// APIKey is the fake key Env hands out; the stand-in accepts any.
	APIKey string

	o   AnthropicOptions
	srv *httptest.Server

	mu   sync.Mutex
	reqs []AnthropicRequest
	n    int // message ids
}

// StartAnthropic starts the stand-in on 127.0.0.1 on a free port. The
// error is the listener's.
func StartAnthropic(o AnthropicOptions) (*Anthropic, error) {
	if o.Reply == "" {
		o.Reply = DefaultAnthropicReply
	}
	if o.Pieces <= 0 {
		o.Pieces = 3
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("anthropic stand-in: listen: %w", err)
	}
	a := &Anthropic{o: o, APIKey: "sk-ant-stand-in-" + randomHex()}
	a.srv = &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(a.serve)}}
	a.srv.Start()
	a.URL = a.srv.URL
	return a, nil
}

// StartAnthropicT is StartAnthropic for a test: an error fails tb, and
// Close is registered as a cleanup.
func StartAnthropicT(tb testing.TB, o AnthropicOptions) *Anthropic {
	tb.Helper()
	a, err := StartAnthropic(o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(a.Close)
	return a
}

// Close stops the server; it blocks until every request in flight was
// answered (an agent still connected has its connection closed).
func (a *Anthropic) Close() {
	a.srv.CloseClientConnections()
	a.srv.Close()
}

// Env is the environment that points Claude Code (and
// claude-agent-acp, which runs it) at the stand-in and keeps it off the
// network: ANTHROPIC_BASE_URL, a fake ANTHROPIC_API_KEY,
// DISABLE_TELEMETRY=1 and CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 (no
// telemetry, error reports or update checks; Claude Code 2.1 still
// resolves raw.githubusercontent.com once for its plugin blocklist, which
// fails offline without delaying anything). The caller adds PATH and
// HOME; see docs/acp-agents-offline.md.
func (a *Anthropic) Env() []string {
	return []string{
		"ANTHROPIC_BASE_URL=" + a.URL,
		"ANTHROPIC_API_KEY=" + a.APIKey,
		"DISABLE_TELEMETRY=1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
	}
}

// Requests returns a copy of every request received so far, in arrival
// order.
func (a *Anthropic) Requests() []AnthropicRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]AnthropicRequest(nil), a.reqs...)
}

// Messages returns the POST /v1/messages requests received so far, in
// arrival order.
func (a *Anthropic) Messages() []AnthropicRequest {
	var out []AnthropicRequest
	for _, r := range a.Requests() {
		if r.Method == http.MethodPost && r.Path == "/v1/messages" {
			out = append(out, r)
		}
	}
	return out
}

// Unknown returns "METHOD /path" of each request answered 404, in arrival
// order.
func (a *Anthropic) Unknown() []string {
	var out []string
	for _, r := range a.Requests() {
		if r.Answer == "unknown" {
			out = append(out, r.Method+" "+r.Path)
		}
	}
	return out
}

// messagesBody is the part of a Messages API request the stand-in reads.
type messagesBody struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Name string `json:"name"`
	} `json:"tools"`
}

// contentBlock is one block of a message's content.
type contentBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// parse fills r's body fields from a Messages API request body.
func (r *AnthropicRequest) parse(body []byte) {
	var m messagesBody
	if json.Unmarshal(body, &m) != nil {
		return
	}
	r.Model, r.Stream = m.Model, m.Stream
	for _, t := range m.Tools {
		r.Tools = append(r.Tools, t.Name)
	}
	for i := len(m.Messages) - 1; i >= 0; i-- {
		msg := m.Messages[i]
		if msg.Role != "user" {
			continue
		}
		var s string
		if json.Unmarshal(msg.Content, &s) == nil {
			r.UserText = s
			return
		}
		var blocks []contentBlock
		json.Unmarshal(msg.Content, &blocks)
		for _, b := range blocks {
			switch {
			case b.Type == "tool_result":
				r.ToolResult = true
			case b.Type == "text" && !isSystemReminder(b.Text):
				r.UserText = b.Text
			}
		}
		return
	}
}

func isSystemReminder(s string) bool {
	s = strings.TrimSpace(s)
	return strings.HasPrefix(s, "<system-reminder>") && strings.HasSuffix(s, "</system-reminder>")
}

func (a *Anthropic) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(req.Body, 64<<20))
	r := AnthropicRequest{Method: req.Method, Path: req.URL.Path, Query: req.URL.RawQuery}
	post := req.Method == http.MethodPost
	switch {
	case post && r.Path == "/v1/messages":
		r.parse(body)
		r.Answer = "text"
		if a.o.ToolCommand != "" && !r.ToolResult && slices.Contains(r.Tools, "Bash") {
			r.Answer = "tool_use"
		}
	case post && r.Path == "/v1/messages/count_tokens":
		r.parse(body)
		r.Answer = "count_tokens"
	case (req.Method == http.MethodHead || req.Method == http.MethodGet) && r.Path == "/":
		// Claude Code's connectivity check of ANTHROPIC_BASE_URL at
		// start-up (HEAD /); any answer will do.
		r.Answer = "ok"
	default:
		r.Answer = "unknown"
	}
	a.mu.Lock()
	a.reqs = append(a.reqs, r)
	a.n++
	id := fmt.Sprintf("msg_standin%04d", a.n)
	a.mu.Unlock()
	a.o.Log.Debug("anthropic request", "method", r.Method, "path", r.Path, "model", r.Model, "stream", r.Stream, "answer", r.Answer)

	switch r.Answer {
	case "ok":
		writeJSON(w, http.StatusOK, map[string]any{})
	case "count_tokens":
		writeJSON(w, http.StatusOK, map[string]any{"input_tokens": tokens(string(body))})
	case "unknown":
		a.o.Log.Warn("anthropic unknown path", "method", r.Method, "path", r.Path, "query", r.Query)
		writeJSON(w, http.StatusNotFound, map[string]any{
			"type":  "error",
			"error": map[string]any{"type": "not_found_error", "message": "the stand-in does not serve " + r.Path},
		})
	default:
		m := a.message(id, r, len(body))
		if r.Stream {
			a.stream(w, m)
		} else {
			writeJSON(w, http.StatusOK, m.json())
		}
	}
}

// message is one answer of the stand-in, before it is encoded.
type message struct {
	id, model   string
	text        string // a text block; "" when tool
	toolID      string // a tool_use block of Bash when not ""
	toolInput   string // its input, JSON
	stopReason  string
	inputTokens int
}

func (a *Anthropic) message(id string, r AnthropicRequest, bodyLen int) message {
	m := message{id: id, model: r.Model, stopReason: "end_turn", inputTokens: max(1, bodyLen/4)}
	if m.model == "" {
		m.model = "claude-stand-in"
	}
	if r.Answer == "tool_use" {
		in, _ := json.Marshal(map[string]string{"command": a.o.ToolCommand, "description": "Run the stand-in's command"})
		m.toolID, m.toolInput, m.stopReason = "toolu_standin"+id[len("msg_standin"):], string(in), "tool_use"
		return m
	}
	m.text = a.o.Reply
	return m
}

func (m message) outputTokens() int { return max(1, tokens(m.text+m.toolInput)) }

// json is m as a non-streaming answer.
func (m message) json() map[string]any {
	var content []map[string]any
	if m.toolID != "" {
		content = append(content, map[string]any{"type": "tool_use", "id": m.toolID, "name": "Bash", "input": json.RawMessage(m.toolInput)})
	} else {
		content = append(content, map[string]any{"type": "text", "text": m.text})
	}
	return map[string]any{
		"id": m.id, "type": "message", "role": "assistant", "model": m.model,
		"content": content, "stop_reason": m.stopReason, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": m.inputTokens, "output_tokens": m.outputTokens()},
	}
}

// stream writes m as the API streams it (server-sent events), flushing
// after each event.
func (a *Anthropic) stream(w http.ResponseWriter, m message) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("request-id", "req_"+m.id)
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	event := func(typ string, data map[string]any) {
		data["type"] = typ
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	event("message_start", map[string]any{"message": map[string]any{
		"id": m.id, "type": "message", "role": "assistant", "model": m.model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": m.inputTokens, "output_tokens": 1},
	}})
	if m.toolID != "" {
		event("content_block_start", map[string]any{"index": 0, "content_block": map[string]any{
			"type": "tool_use", "id": m.toolID, "name": "Bash", "input": map[string]any{},
		}})
		event("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "input_json_delta", "partial_json": m.toolInput}})
	} else {
		event("content_block_start", map[string]any{"index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
		event("ping", map[string]any{})
		for _, p := range split(m.text, a.o.Pieces) {
			event("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "text_delta", "text": p}})
		}
	}
	event("content_block_stop", map[string]any{"index": 0})
	event("message_delta", map[string]any{
		"delta": map[string]any{"stop_reason": m.stopReason, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": m.outputTokens()},
	})
	event("message_stop", map[string]any{})
}

// split cuts s into at most n pieces of about as many runes each, none
// empty (fewer pieces when s has fewer runes); joined, they are s.
func split(s string, n int) []string {
	rs := []rune(s)
	n = min(n, len(rs))
	out := make([]string, 0, n)
	for i := range n {
		out = append(out, string(rs[i*len(rs)/n:(i+1)*len(rs)/n]))
	}
	return out
}

// tokens is a rough token count: a quarter of the bytes.
func tokens(s string) int { return (len(s) + 3) / 4 }

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	json.NewEncoder(&buf).Encode(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}
