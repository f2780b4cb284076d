package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/sessions"
)

// agentFlags is --agent NAME=COMMAND, repeatable: the Agent Client
// Protocol agents a session may talk to besides the built-in worker
// (issue 40). COMMAND is a shell command line (run by /bin/sh as "exec
// COMMAND", so "env VAR=value program args" and quoting work), started by
// dashgate's bridge (`dashgate acp`) as the session owner's account.
type agentFlags []agentSpec

// agentSpec is one --agent.
type agentSpec struct {
	Name, Command string
}

// agentName is what an agent's name may be: it is shown in the dashboard,
// logged and stored with each session.
var agentName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,31}$`)

func (a *agentFlags) String() string {
	var out []string
	for _, s := range *a {
		out = append(out, s.Name+"="+s.Command)
	}
	return strings.Join(out, "; ")
}

// Set adds one NAME=COMMAND. Errors: a malformed name, the built-in's
// name, a name given twice, an empty command.
func (a *agentFlags) Set(v string) error {
	name, cmd, ok := strings.Cut(v, "=")
	name, cmd = strings.TrimSpace(name), strings.TrimSpace(cmd)
	switch {
	case !ok || cmd == "":
		return fmt.Errorf("want NAME=COMMAND (e.g. claude='npx -y @zed-industries/claude-agent-acp'), got %q", v)
	case !agentName.MatchString(name):
		return fmt.Errorf("agent name %q: lower-case letters, digits, '.', '_' and '-', at most 32", name)
	case name == sessions.BuiltinAgent:
		return fmt.Errorf("agent name %q is the built-in worker's", name)
	case slices.ContainsFunc(*a, func(s agentSpec) bool { return s.Name == name }):
		return fmt.Errorf("agent %q given twice", name)
	}
	*a = append(*a, agentSpec{Name: name, Command: cmd})
	return nil
}

// names lists the agents' names in the order given.
func (a agentFlags) names() []string {
	out := make([]string, len(a))
	for i, s := range a {
		out[i] = s.Name
	}
	return out
}

// checkDefaultAgent is --default-agent's check: "" (the first --agent,
// else the built-in worker), the built-in's name, or an --agent's.
func checkDefaultAgent(def string, agents agentFlags) error {
	if def == "" || def == sessions.BuiltinAgent || slices.Contains(agents.names(), def) {
		return nil
	}
	return fmt.Errorf("--default-agent %q is neither %q nor an --agent", def, sessions.BuiltinAgent)
}

// defaultAgent is the agent a session.create without one gets.
func defaultAgent(def string, agents agentFlags) string {
	switch {
	case def != "":
		return def
	case len(agents) > 0:
		return agents[0].Name
	}
	return sessions.BuiltinAgent
}

// agentCommands is each agent's chat worker: dashgate's bridge (self acp)
// running the agent's command line through /bin/sh.
func agentCommands(self string, agents agentFlags) map[string][]string {
	out := make(map[string][]string, len(agents))
	for _, a := range agents {
		out[a.Name] = []string{self, "acp", "--", "/bin/sh", "-c", "exec " + a.Command}
	}
	return out
}

// agentList is what agent.list answers: the built-in worker first, then
// the --agent ones in their order, def marked.
func agentList(def string, agents agentFlags) []handlers.AgentInfo {
	out := []handlers.AgentInfo{{Name: sessions.BuiltinAgent, Kind: "builtin", Default: def == sessions.BuiltinAgent}}
	for _, a := range agents {
		out = append(out, handlers.AgentInfo{Name: a.Name, Kind: "acp", Default: def == a.Name})
	}
	return out
}
