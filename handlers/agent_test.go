package handlers_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/workers"
)

// TestModelList: model.list answers the model server's list and default,
// none without one, and a failure of the server as 5004 naming it.
func TestModelList(t *testing.T) {
	t.Parallel()
	none := newEnv(t, envOpts{}).chat()
	if r := none.call("model.list", nil); len(r["models"].([]any)) != 0 || r["default"] != "" {
		t.Fatalf("model.list without a model server: %v", r)
	}
	fail := false
	e := newEnv(t, envOpts{chat: func(c *handlers.Chat) {
		c.Models = func(ctx context.Context) ([]string, string, error) {
			if fail {
				return nil, "", &workers.Error{Failure: "model_unreachable", Message: "cannot reach the model server at http://x/v1"}
			}
			return []string{"a", "b"}, "b", nil
		}
	}})
	cc := e.chat()
	if r := cc.call("model.list", nil); len(r["models"].([]any)) != 2 || r["default"] != "b" {
		t.Fatalf("model.list: %v", r)
	}
	fail = true
	r := cc.callRaw("model.list", nil)
	rpc := r["error"].(map[string]any)
	if errCode(r) != handlers.CodeWorkerFailed || rpc["message"] != "cannot reach the model server at http://x/v1" ||
		!strings.Contains(string(rpc["data"].(json.RawMessage)), `"failure":"model_unreachable"`) {
		t.Fatalf("model.list with the server down: %v", r)
	}
}

// TestAgentMethodsBadInput: approval.respond and session.configure check
// their parameters; an unknown approval is not resolved; the model is
// kept with the session.
func TestAgentMethodsBadInput(t *testing.T) {
	t.Parallel()
	cc := newEnv(t, envOpts{}).chat()
	sid := cc.create()
	tests := []struct {
		name   string
		method string
		params map[string]any
		code   int
	}{
		{"bad choice", "approval.respond", map[string]any{"session_id": sid, "request_id": "r", "choice": "sometimes"}, handlers.CodeInvalidParams},
		{"no request_id", "approval.respond", map[string]any{"session_id": sid, "choice": "once"}, handlers.CodeInvalidParams},
		{"unknown session", "approval.respond", map[string]any{"session_id": "nope", "request_id": "r", "choice": "once"}, handlers.CodeNotFound},
		{"model too long", "session.configure", map[string]any{"session_id": sid, "model": strings.Repeat("m", 201)}, handlers.CodeInvalidParams},
		{"configure unknown", "session.configure", map[string]any{"session_id": "nope", "model": "m"}, handlers.CodeNotFound},
	}
	for _, tt := range tests {
		if got := errCode(cc.callRaw(tt.method, tt.params)); got != tt.code {
			t.Errorf("%s: code %d, want %d", tt.name, got, tt.code)
		}
	}
	if r := cc.call("approval.respond", map[string]any{"session_id": sid, "request_id": "r", "choice": "once"}); r["resolved"] != false {
		t.Fatalf("an unknown approval: %v", r)
	}
	cc.call("session.configure", map[string]any{"session_id": sid, "model": "qwen3:8b"})
	if r := cc.call("session.resume", map[string]any{"session_id": sid}); r["model"] != "qwen3:8b" || len(r["pending_approvals"].([]any)) != 0 {
		t.Fatalf("resume after configure: %v", r)
	}
}

// TestProtocolFailureInWords: a worker that breaks the protocol (here a
// stdout line over its limit) fails the call with a sentence a person
// reads; the protocol's words are in data.detail.
func TestProtocolFailureInWords(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{reg: func(c *sessions.Config) {
		sp := c.Spawner.(sessions.ProcSpawner)
		sp.WorkerCmd = []string{"/bin/sh", "-c", `read -r req; head -c 1100000 /dev/zero | tr '\0' a; echo; read -r req`}
		c.Spawner = sp
	}})
	cc := e.chat()
	sid := cc.create()
	r := cc.callRaw("slash.exec", map[string]any{"session_id": sid, "command": "/echo hi"})
	rpc, _ := r["error"].(map[string]any)
	var data struct {
		Failure string `json:"failure"`
		Detail  string `json:"detail"`
	}
	raw, _ := rpc["data"].(json.RawMessage)
	json.Unmarshal(raw, &data)
	if errCode(r) != handlers.CodeWorkerFailed || rpc["message"] != "the worker sent something dashgate cannot read, so it was stopped; try again" ||
		data.Failure != "protocol" || data.Detail != "worker protocol: stdout line over 1048576 bytes" {
		t.Fatalf("a worker's over-long line: %v, data %s", r, raw)
	}
}
