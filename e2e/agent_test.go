package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
)

// modelServer is an OpenAI-compatible server in the test process: each
// /v1/chat/completions request is answered by the next script, and every
// request is recorded.
type modelServer struct {
	*httptest.Server
	mu        sync.Mutex
	scripts   []func(w http.ResponseWriter, r *http.Request)
	requests  []chatRequest
	cancelled chan struct{} // a value each time a request's context ended before its script did
}

type chatRequest struct {
	Auth     string
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
	} `json:"messages"`
}

func newModelServer(t *testing.T) *modelServer {
	m := &modelServer{cancelled: make(chan struct{}, 16)}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"object":"list","data":[{"id":"fake-1","object":"model"},{"id":"fake-2","object":"model"}]}`))
			return
		case "/v1/chat/completions":
		default:
			http.NotFound(w, r)
			return
		}
		var req chatRequest
		body, _ := io.ReadAll(r.Body)
		json.Unmarshal(body, &req)
		req.Auth = r.Header.Get("Authorization")
		m.mu.Lock()
		m.requests = append(m.requests, req)
		var script func(http.ResponseWriter, *http.Request)
		if len(m.scripts) > 0 {
			script, m.scripts = m.scripts[0], m.scripts[1:]
		}
		m.mu.Unlock()
		if script == nil {
			http.Error(w, `{"error":{"message":"no script left"}}`, http.StatusInternalServerError)
			return
		}
		script(w, r)
	}))
	t.Cleanup(m.Close)
	return m
}

func (m *modelServer) then(scripts ...func(http.ResponseWriter, *http.Request)) {
	m.mu.Lock()
	m.scripts = append(m.scripts, scripts...)
	m.mu.Unlock()
}

func (m *modelServer) got() []chatRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]chatRequest(nil), m.requests...)
}

// sse writes chunks as server-sent events, flushing each.
func sse(w http.ResponseWriter, chunks ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, c := range chunks {
		fmt.Fprintf(w, "data: %s\n\n", c)
		w.(http.Flusher).Flush()
	}
}

func textChunk(s string) string {
	b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": s}}}})
	return string(b)
}

// reply streams text as a few chunks and ends the stream.
func reply(text string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		var chunks []string
		for _, word := range strings.SplitAfter(text, " ") {
			chunks = append(chunks, textChunk(word))
		}
		sse(w, append(chunks, `{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}`, "[DONE]")...)
	}
}

// toolCall streams a tool call of shell whose arguments come in pieces.
func toolCall(command string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		args, _ := json.Marshal(map[string]string{"command": command})
		a := string(args)
		third := len(a) / 3
		piece := func(i int, s string, first bool) string {
			call := map[string]any{"index": 0, "function": map[string]any{"arguments": s}}
			if first {
				call["id"], call["type"] = "call_1", "function"
				call["function"].(map[string]any)["name"] = "shell"
			}
			b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"tool_calls": []any{call}}}}})
			return string(b)
		}
		sse(w, piece(0, a[:third], true), piece(0, a[third:2*third], false), piece(0, a[2*third:], false),
			`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`, "[DONE]")
	}
}

// slow streams a word every 20 ms until the client goes, and says so.
func (m *modelServer) slow(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	for i := 0; ; i++ {
		select {
		case <-r.Context().Done():
			m.cancelled <- struct{}{}
			return
		case <-time.After(20 * time.Millisecond):
		}
		fmt.Fprintf(w, "data: %s\n\n", textChunk(fmt.Sprintf("w%d ", i)))
		w.(http.Flusher).Flush()
	}
}

const agentKey = "sk-e2e-secret-7f3a"

// startAgent starts dashgate with the agent on m, tools on, in dir.
func startAgent(t *testing.T, m *modelServer, dir string, extra ...string) *dashgate {
	t.Helper()
	return launch(t, testkit.Options{Sub: "serve", Env: append(testkit.CleanEnv(), "E2E_MODEL_KEY="+agentKey), Args: append([]string{
		"--worker-grace", workerGrace.String(), "--log-level", "debug", "--pty-cmd", "/bin/bash --noprofile --norc",
		"--llm-url", m.URL + "/v1", "--llm-api-key-env", "E2E_MODEL_KEY", "--agent-tools", "shell", "--pty-cwd", dir,
	}, extra...)})
}

// TestAgentConversation: a streamed answer through the agent, with usage;
// the key reaches the model server and never the worker's argv or the
// log; the model list; after a detach the new worker sends the earlier
// turns and the session's model.
func TestAgentConversation(t *testing.T) {
	t.Parallel()
	m := newModelServer(t)
	d := startAgent(t, m, t.TempDir())
	c := d.chat(t)
	sid := newSession(t, c, "agent")

	var models struct {
		Models  []string `json:"models"`
		Default string   `json:"default"`
	}
	c.mustCall("model.list", nil, &models)
	if len(models.Models) != 2 || models.Default != "fake-1" {
		t.Fatalf("model.list: %+v", models)
	}
	m.then(reply("Hello from the model."))
	c.mustCall("prompt.submit", map[string]any{"session_id": sid, "text": "hi"}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	ev, err := c.WaitEvent(ctx, "message.complete", sid)
	if err != nil {
		t.Fatal(err)
	}
	p := ev.Payload()
	if p["text"] != "Hello from the model." || p["status"] != "complete" || p["usage"] == nil {
		t.Fatalf("message.complete: %v; events %v", p, c.Events())
	}
	w := d.Workers()
	if len(w) != 1 {
		t.Fatalf("workers: %+v", w)
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", w[0].PID))
	if strings.Contains(string(cmdline), agentKey) || !strings.Contains(string(cmdline), "agent") {
		t.Fatalf("worker argv: %q", cmdline)
	}
	if req := m.got()[0]; req.Auth != "Bearer "+agentKey || req.Model != "fake-1" {
		t.Fatalf("the model server got auth %q model %q", req.Auth, req.Model)
	}

	// A new socket after the old one went: a new worker, the conversation
	// goes on.
	c.mustCall("session.configure", map[string]any{"session_id": sid, "model": "fake-2"}, nil)
	c.Close()
	testkit.WaitFor(t, 10*time.Second, "the worker closed", func() bool { return len(d.Workers()) == 0 })
	c2 := d.chat(t)
	c2.mustCall("session.resume", map[string]any{"session_id": sid}, nil)
	m.then(reply("Second answer."))
	c2.mustCall("prompt.submit", map[string]any{"session_id": sid, "text": "and again"}, nil)
	if _, err := c2.WaitEvent(ctx, "message.complete", sid); err != nil {
		t.Fatal(err)
	}
	req := m.got()[1]
	var roles []string
	for _, msg := range req.Messages {
		roles = append(roles, fmt.Sprintf("%s:%v", msg.Role, msg.Content))
	}
	joined := strings.Join(roles, "|")
	if req.Model != "fake-2" || !strings.Contains(joined, "user:hi|assistant:Hello from the model.|user:and again") {
		t.Fatalf("the new worker sent model %q, messages %s", req.Model, joined)
	}
	b, _ := os.ReadFile(d.Log.Path)
	if strings.Contains(string(b), agentKey) {
		t.Fatal("the API key is in dashgate's log")
	}
}

// TestAgentInterruptCancelsModelRequest: session.interrupt aborts the
// request to the model server; the reply keeps what streamed, interrupted.
func TestAgentInterruptCancelsModelRequest(t *testing.T) {
	t.Parallel()
	m := newModelServer(t)
	d := startAgent(t, m, t.TempDir())
	c := d.chat(t)
	sid := newSession(t, c, "")
	m.then(m.slow)
	c.mustCall("prompt.submit", map[string]any{"session_id": sid, "text": "go on"}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	if _, err := c.WaitEvent(ctx, "message.delta", sid); err != nil {
		t.Fatal(err)
	}
	c.mustCall("session.interrupt", map[string]any{"session_id": sid}, nil)
	select {
	case <-m.cancelled:
	case <-ctx.Done():
		t.Fatal("the model server never saw the request cancelled")
	}
	ev, err := c.WaitEvent(ctx, "message.complete", sid)
	if err != nil {
		t.Fatal(err)
	}
	if p := ev.Payload(); p["interrupted"] != true || !strings.HasPrefix(p["text"].(string), "w0") {
		t.Fatalf("message.complete: %v", p)
	}
}

// TestAgentToolTreeEndsWithSession: an approved command that leaves
// background jobs (one in its own session) runs once, and its environment
// holds no API key; closing the tab ends the worker and every process the
// tool left, with the worker's one INFO record.
func TestAgentToolTreeEndsWithSession(t *testing.T) {
	t.Parallel()
	m := newModelServer(t)
	dir := t.TempDir()
	d := startAgent(t, m, dir)
	c := d.chat(t)
	sid := newSession(t, c, "")
	m.then(toolCall("echo ran >> ran.txt; env > env.txt; sleep 600 & setsid sleep 601 & echo started"), reply("Started them."))
	c.mustCall("prompt.submit", map[string]any{"session_id": sid, "text": "start jobs"}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ev, err := c.WaitEvent(ctx, "approval.request", sid)
	if err != nil {
		t.Fatal(err)
	}
	rid := ev.Payload()["request_id"]
	var res struct {
		Resolved bool `json:"resolved"`
	}
	c.mustCall("approval.respond", map[string]any{"session_id": sid, "request_id": rid, "choice": "once"}, &res)
	if !res.Resolved {
		t.Fatal("the approval was not resolved")
	}
	c.mustCall("approval.respond", map[string]any{"session_id": sid, "request_id": rid, "choice": "once"}, &res)
	if res.Resolved {
		t.Fatal("a second answer resolved it again")
	}
	if _, err := c.WaitEvent(ctx, "message.complete", sid); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "ran.txt")); string(b) != "ran\n" {
		t.Fatalf("ran.txt = %q, want one run", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "env.txt")); len(b) == 0 || strings.Contains(string(b), agentKey) {
		t.Fatalf("the tool's environment (it must not hold the API key): %q", b)
	}
	if reqs := m.got(); len(reqs) != 2 || !strings.Contains(fmt.Sprint(reqs[1].Messages), "started") {
		t.Fatalf("the tool result did not reach the model: %+v", reqs)
	}
	w := d.Workers()
	if len(w) != 1 {
		t.Fatalf("workers: %+v", w)
	}
	var sleepers []int
	testkit.WaitFor(t, 5*time.Second, "the background jobs", func() bool {
		sleepers = sleepers[:0]
		procs, _ := d.Procs()
		for _, p := range procs {
			if cl, _ := testkit.Cmdline(p.PID); strings.HasPrefix(cl, "sleep 60") {
				sleepers = append(sleepers, p.PID)
			}
		}
		return len(sleepers) == 2
	})
	for _, pid := range sleepers {
		d.remember(pid)
	}
	c.Close() // the tab goes
	for _, pid := range sleepers {
		testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("sleep %d gone", pid), func() bool { return testkit.Gone(pid) })
	}
	rec, ok := d.waitLog(5*time.Second, func(r logRecord) bool { return r.Msg() == "worker closed" && r["worker_pid"] == float64(w[0].PID) })
	if !ok || rec["descendants"].(float64) < 2 || rec.Str("reason") != "detach" {
		t.Fatalf("worker closed record: %v %v", rec, ok)
	}
	if n := len(d.Log.Records("worker closed")); n != 1 {
		t.Fatalf("%d worker closed records, want the worker's one (its tool's jobs are its descendants)", n)
	}
}

// TestAgentErrorsAreWords: a model server that refuses the key, or is
// gone, gives 5004-style errors a person understands, as an error event and
// a history entry; the next prompt works.
func TestAgentErrorsAreWords(t *testing.T) {
	t.Parallel()
	m := newModelServer(t)
	d := startAgent(t, m, t.TempDir())
	c := d.chat(t)
	sid := newSession(t, c, "")
	m.then(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`))
	}, reply("fine now"))
	c.mustCall("prompt.submit", map[string]any{"session_id": sid, "text": "hi"}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	ev, err := c.WaitEvent(ctx, "error", sid)
	if err != nil {
		t.Fatal(err)
	}
	if msg := ev.Payload()["message"].(string); !strings.Contains(msg, "refused the API key") {
		t.Fatalf("error event: %q", msg)
	}
	c.mustCall("prompt.submit", map[string]any{"session_id": sid, "text": "again"}, nil)
	testkit.WaitFor(t, 15*time.Second, "the second reply", func() bool {
		for _, e := range c.Events() {
			if e.Type() == "message.complete" && e.Payload()["text"] == "fine now" {
				return true
			}
		}
		return false
	})
	var r resumed
	c.mustCall("session.resume", map[string]any{"session_id": sid}, &r)
	var kinds []string
	for _, e := range r.History {
		kinds = append(kinds, e.Kind)
	}
	// A turn that failed before any text is its error alone: no empty
	// reply beside it (issue 27, defect 8).
	if strings.Join(kinds, ",") != "prompt,error,prompt,reply" {
		t.Fatalf("history kinds: %v", kinds)
	}
	var rpc *testkit.RPCError
	m.Close()
	if err := c.call("model.list", nil, nil); !errors.As(err, &rpc) || rpc.Code != 5004 || !strings.Contains(rpc.Message, "cannot reach the model server") {
		t.Fatalf("model.list with the server gone: %v", err)
	}
}
