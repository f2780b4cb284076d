package main

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
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/workers"
)

// TestModelServerList: the model list, its default, and each failure in
// words with its failure name; the key goes in the Authorization header.
func TestModelServerList(t *testing.T) {
	status := http.StatusOK
	var auth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = r.Header.Get("Authorization")
		if r.URL.Path != "/v1/models" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
		w.Write([]byte(`{"object":"list","data":[{"id":"m1"},{"id":"m2"}]}`))
	}))
	defer srv.Close()
	m := newModelServer(config{LLMURL: srv.URL + "/v1/"}, "sk-test")
	ids, def, err := m.List(t.Context())
	if err != nil || !slices.Equal(ids, []string{"m1", "m2"}) || def != "m1" || auth != "Bearer sk-test" {
		t.Fatalf("List = %v %q %v (auth %q)", ids, def, err, auth)
	}
	m.model = "m2"
	if _, def, _ := m.List(t.Context()); def != "m2" {
		t.Fatalf("default with --llm-model: %q", def)
	}
	for _, tt := range []struct {
		status  int
		failure workers.Failure
	}{{http.StatusUnauthorized, "model_auth"}, {http.StatusInternalServerError, "model_error"}} {
		status = tt.status
		_, _, err := m.List(t.Context())
		var we *workers.Error
		if !errors.As(err, &we) || we.Failure != tt.failure {
			t.Fatalf("status %d: %v, want failure %s", tt.status, err, tt.failure)
		}
	}
	srv.Close()
	_, _, err = m.List(t.Context())
	var we *workers.Error
	if !errors.As(err, &we) || we.Failure != "model_unreachable" || we.Message != "cannot reach the model server at "+srv.URL+"/v1" {
		t.Fatalf("server down: %v", err)
	}
}

// TestAgentEnv: the settings and the key go in the worker's environment;
// the system prompt may come from a file.
func TestAgentEnv(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prompt.txt")
	os.WriteFile(path, []byte("be brief"), 0o600)
	env, err := agentEnv(config{LLMURL: "http://h/v1/", SystemPrompt: "@" + path, AgentTools: "shell",
		LLMConnectTimeout: 3 * time.Second, LLMHeaderTimeout: 40 * time.Second}, "sk-x")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"DASHGATE_LLM_URL=http://h/v1", "DASHGATE_AGENT_SYSTEM_PROMPT=be brief", "DASHGATE_AGENT_TOOLS=shell", "DASHGATE_LLM_API_KEY=sk-x",
		"DASHGATE_LLM_CONNECT_TIMEOUT=3s", "DASHGATE_LLM_HEADER_TIMEOUT=40s"} {
		if !slices.Contains(env, want) {
			t.Fatalf("env lacks %q: %v", want, env)
		}
	}
	if _, err := agentEnv(config{SystemPrompt: "@/nonexistent/prompt"}, ""); err == nil {
		t.Fatal("a missing system prompt file was accepted")
	}
}

// modelScript is an OpenAI-compatible model server answering its n-th
// chat request (from 0) with answer(n, w); got returns the messages of
// every request so far.
func modelScript(t *testing.T, answer func(n int, w http.ResponseWriter)) (url string, got func() [][]map[string]any) {
	var mu sync.Mutex
	var reqs [][]map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Messages []map[string]any `json:"messages"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		n := len(reqs)
		reqs = append(reqs, body.Messages)
		mu.Unlock()
		answer(n, w)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1", func() [][]map[string]any {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(reqs)
	}
}

// sseChunks answers chunks as an event stream ending with [DONE].
func sseChunks(w http.ResponseWriter, chunks ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, c := range chunks {
		fmt.Fprintf(w, "data: %s\n\n", c)
	}
	io.WriteString(w, "data: [DONE]\n\n")
}

func textChunk(s string) string {
	b, _ := json.Marshal(s)
	return `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":` + string(b) + `}}]}`
}

// TestDeniedRunReachesModel: a command the viewer denied is part of the
// conversation the next prompt sends the model server, as a tool call
// that did not run and why (dashgate, its agent worker and the command
// all real; the model server records what it gets).
func TestDeniedRunReachesModel(t *testing.T) {
	url, got := modelScript(t, func(n int, w http.ResponseWriter) {
		switch n {
		case 0:
			sseChunks(w, `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[`+
				`{"index":0,"id":"call_1","type":"function","function":{"name":"shell","arguments":"{\"command\":\"touch denied\"}"}}]}}]}`)
		case 1:
			sseChunks(w, textChunk("I will not run it."))
		default:
			sseChunks(w, textChunk("Understood."))
		}
	})
	dir := t.TempDir()
	in := startInstance(t, "agent", t.TempDir(), "--llm-url", url, "--llm-model", "m", "--agent-tools", "shell", "--pty-cwd", dir)
	c := dialChat(t, in)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	sid, err := c.CreateSession(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Call(ctx, "prompt.submit", map[string]any{"session_id": sid, "text": "make a file"}, nil); err != nil {
		t.Fatal(err)
	}
	ev, err := c.WaitEvent(ctx, "approval.request", sid)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Call(ctx, "approval.respond", map[string]any{"session_id": sid, "request_id": ev.Payload()["request_id"], "choice": "deny"}, nil); err != nil {
		t.Fatal(err)
	}
	completes := func() int {
		n := 0
		for _, e := range c.Events() {
			if e.Type() == "message.complete" {
				n++
			}
		}
		return n
	}
	testkit.WaitFor(t, 30*time.Second, "the first reply", func() bool { return completes() == 1 })
	if err := c.Call(ctx, "prompt.submit", map[string]any{"session_id": sid, "text": "why not?"}, nil); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "the second reply", func() bool { return completes() == 2 })
	reqs := got()
	if len(reqs) != 3 {
		t.Fatalf("%d model requests, want 3", len(reqs))
	}
	var contents []string
	for _, m := range reqs[2] {
		contents = append(contents, fmt.Sprintf("%v: %v", m["role"], m["content"]))
	}
	want := []string{"user: make a file", "assistant: [shell] $ touch denied\nnot run: the user denied it", "assistant: I will not run it.", "user: why not?"}
	if !slices.Equal(contents, want) {
		t.Fatalf("the next prompt's messages %q, want %q", contents, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "denied")); err == nil {
		t.Fatal("the denied command ran")
	}
}

// TestRetryAfterInData: a rate-limited prompt's error event carries the
// server's retry delay in its data, as error 5004 does, and so does its
// history entry.
func TestRetryAfterInData(t *testing.T) {
	url, _ := modelScript(t, func(n int, w http.ResponseWriter) {
		w.Header().Set("Retry-After", "7")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"error":{"message":"slow down","type":"rate_limit"}}`)
	})
	in := startInstance(t, "agent", t.TempDir(), "--llm-url", url, "--llm-model", "m")
	c := dialChat(t, in)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	sid, err := c.CreateSession(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Call(ctx, "prompt.submit", map[string]any{"session_id": sid, "text": "hi"}, nil); err != nil {
		t.Fatal(err)
	}
	ev, err := c.WaitEvent(ctx, "error", sid)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := ev.Payload()["data"].(map[string]any); d["retry_after"] != 7.0 || d["failure"] != "rate_limited" {
		t.Fatalf("error event %v: want data.retry_after 7, data.failure rate_limited", ev.Payload())
	}
	var res struct {
		History []struct {
			Kind string         `json:"kind"`
			Data map[string]any `json:"data"`
		} `json:"history"`
	}
	if err := c.Call(ctx, "session.resume", map[string]any{"session_id": sid}, &res); err != nil {
		t.Fatal(err)
	}
	var data []map[string]any
	for _, e := range res.History {
		if e.Kind == "error" {
			data = append(data, e.Data)
		}
	}
	if len(data) != 1 || data[0]["retry_after"] != 7.0 {
		t.Fatalf("error entries' data %v, want retry_after 7", data)
	}
}
