package main

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

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
