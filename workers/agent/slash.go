package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// agentHelp is /help's answer: the commands the agent worker answers
// itself, without the model server (PROTOCOL.md §4: a slash command's
// output is plain text).
const agentHelp = `commands (answered here, without the model):
  /help          this list
  /model         the model a prompt of this session goes to
  /tools         the tools the model may use, and their bounds
  /echo TEXT     answer TEXT
  /time          the worker's clock (RFC 3339)
anything else is a prompt for the model`

// slash answers a slash command: its output, or an error whose text the
// viewer is shown (an unknown command names /help). model is the
// session's configured model ("" for the default), as a prompt carries it.
func (s *server) slash(ctx context.Context, command, model string) (string, error) {
	name, arg, _ := strings.Cut(strings.TrimSpace(command), " ")
	arg = strings.TrimSpace(arg)
	switch name {
	case "/help":
		return agentHelp, nil
	case "/echo":
		return arg, nil
	case "/time":
		return time.Now().Format(time.RFC3339Nano), nil
	case "/model":
		if model == "" {
			model = s.cfg.Model
		}
		if model != "" {
			return "model " + model, nil
		}
		m, f := s.defaultModel(ctx)
		if f != nil {
			return "", fmt.Errorf("the model server's default model: %s", f.Message)
		}
		return "model " + m + " (the server's first)", nil
	case "/tools":
		if !s.cfg.ShellTool {
			return "no tools: the model answers in text only", nil
		}
		return fmt.Sprintf("shell: runs a command with /bin/sh -c once a viewer approves it; at most %v each, output capped at %d bytes", s.cfg.ToolTimeout, maxToolOutput), nil
	default:
		return "", fmt.Errorf("unknown command %s (try /help)", name)
	}
}

// handleSlash is the "slash" request: {"command": "/help", "model": ""}.
func (s *server) handleSlash(ctx context.Context, id json.RawMessage, params json.RawMessage) {
	var p struct {
		Command string `json:"command"`
		Model   string `json:"model"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		s.Fail(id, "bad slash params: "+err.Error())
		return
	}
	out, err := s.slash(ctx, p.Command, p.Model)
	if err != nil {
		s.Fail(id, err.Error())
		return
	}
	s.Reply(id, map[string]any{"output": out})
}
