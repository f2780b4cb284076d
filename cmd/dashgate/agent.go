package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/dashgate/dashgate/workers"
)

// agentEnv is the environment that makes `dashgate agent` the chat worker
// (docs/PROTOCOL.md §7, "The agent worker"): its settings and the API key
// go in the worker's environment only, never in argv, never in a log.
func agentEnv(cfg config, key string) ([]string, error) {
	prompt := cfg.SystemPrompt
	if path, ok := strings.CutPrefix(prompt, "@"); ok {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, &startupError{fmt.Errorf("--agent-system-prompt: %w", err)}
		}
		prompt = string(b)
	}
	env := []string{
		"DASHGATE_LLM_URL=" + strings.TrimRight(cfg.LLMURL, "/"),
		"DASHGATE_LLM_MODEL=" + cfg.LLMModel,
		"DASHGATE_AGENT_SYSTEM_PROMPT=" + prompt,
		"DASHGATE_AGENT_TOOLS=" + cfg.AgentTools,
		"DASHGATE_TOOL_TIMEOUT=" + cfg.ToolTimeout.String(),
		"DASHGATE_TOOL_DIR=" + cfg.PTYCwd,
		"DASHGATE_LLM_CONNECT_TIMEOUT=" + cfg.LLMConnectTimeout.String(),
		"DASHGATE_LLM_HEADER_TIMEOUT=" + cfg.LLMHeaderTimeout.String(),
		"DASHGATE_LLM_IMAGE_MODELS=" + cfg.LLMImageModels,
	}
	if key != "" {
		env = append(env, "DASHGATE_LLM_API_KEY="+key)
	}
	return env, nil
}

// modelServer lists the models of the model server for model.list.
type modelServer struct {
	url, key, model string
	client          *http.Client
}

func newModelServer(cfg config, key string) *modelServer {
	return &modelServer{url: strings.TrimRight(cfg.LLMURL, "/"), key: key, model: cfg.LLMModel,
		client: &http.Client{Timeout: 10 * time.Second}}
}

// List returns the ids of GET <url>/models and the default model (--llm-model,
// else the first). Errors are *workers.Error naming why, in words a person
// understands.
func (m *modelServer) List(ctx context.Context) ([]string, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.url+"/models", nil)
	if err != nil {
		return nil, "", err
	}
	if m.key != "" {
		req.Header.Set("Authorization", "Bearer "+m.key)
	}
	res, err := m.client.Do(req)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return nil, "", err
		}
		return nil, "", &workers.Error{Failure: "model_unreachable", Message: "cannot reach the model server at " + m.url}
	}
	defer res.Body.Close()
	switch {
	case res.StatusCode == http.StatusUnauthorized || res.StatusCode == http.StatusForbidden:
		return nil, "", &workers.Error{Failure: "model_auth", Message: "the model server refused the API key"}
	case res.StatusCode != http.StatusOK:
		return nil, "", &workers.Error{Failure: "model_error", Message: fmt.Sprintf("the model server answered %s to /models", res.Status)}
	}
	var body struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, res.Body, 4<<20)).Decode(&body); err != nil {
		return nil, "", &workers.Error{Failure: "model_error", Message: "the model server's /models is not a model list"}
	}
	ids := make([]string, 0, len(body.Data))
	for _, d := range body.Data {
		ids = append(ids, d.ID)
	}
	def := m.model
	if def == "" && len(ids) > 0 {
		def = ids[0]
	}
	return ids, def, nil
}
