package acpbridge

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/dashgate/dashgate/workers/jsonl"
)

// client is the bridge as the ACP client the agent talks to: the methods
// the connection calls for the agent's requests and notifications. It
// serves only what initialize advertises: fs read and write, terminals,
// permissions and session updates.
type client struct{ b *bridge }

var _ acp.Client = (*client)(nil)

// SessionUpdate routes an update to the running call; between calls only
// the agent's commands are kept (for the next call and /help). During
// session/load the replayed history is dropped: dashgate has it.
func (c *client) SessionUpdate(_ context.Context, n acp.SessionNotification) error {
	b := c.b
	b.mu.Lock()
	if u := n.Update.AvailableCommandsUpdate; u != nil {
		b.commands = commandsJSON(u.AvailableCommands)
		t := b.turn
		b.cmdsDirty = t == nil
		cmds := b.commands
		b.mu.Unlock()
		if t != nil {
			b.event(t, "commands", map[string]any{"commands": cmds})
		}
		return nil
	}
	t, replaying := b.turn, b.replaying
	b.mu.Unlock()
	if t == nil || replaying {
		return nil
	}
	b.apply(t, n.Update)
	return nil
}

// permission is an agent's session/request_permission waiting for
// dashgate's `approval`.
type permission struct {
	turn    *turn
	options []acp.PermissionOption
	answer  chan acp.RequestPermissionOutcome // buffered: one answer
}

var cancelledOutcome = acp.RequestPermissionOutcome{Cancelled: &acp.RequestPermissionOutcomeCancelled{}}

// RequestPermission emits an approval event in the running call and waits
// for dashgate's answer, the call's cancel or end, the agent's cancel of
// the request, or the bridge's end (these answer cancelled). Outside a
// call it answers cancelled at once: nobody could answer.
func (c *client) RequestPermission(ctx context.Context, p acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	b := c.b
	perm := &permission{options: p.Options, answer: make(chan acp.RequestPermissionOutcome, 1)}
	id := "p" + strconv.FormatInt(b.seq.Add(1), 10)
	b.mu.Lock()
	perm.turn = b.turn
	if perm.turn != nil {
		b.perms[id] = perm
	}
	b.mu.Unlock()
	if perm.turn == nil {
		return acp.RequestPermissionResponse{Outcome: cancelledOutcome}, nil
	}
	defer func() {
		b.mu.Lock()
		delete(b.perms, id)
		b.mu.Unlock()
	}()
	perm.turn.waitTool(string(p.ToolCall.ToolCallId), 250*time.Millisecond, ctx.Done())
	b.event(perm.turn, "approval", map[string]any{
		"request_id": id, "tool": b.toolName(perm.turn, p.ToolCall),
		"command": b.toolLine(perm.turn, p.ToolCall), "options": optionsJSON(p.Options),
	})
	select {
	case o := <-perm.answer:
		return acp.RequestPermissionResponse{Outcome: o}, nil
	case <-ctx.Done():
	case <-b.closing:
	}
	return acp.RequestPermissionResponse{Outcome: cancelledOutcome}, nil
}

// cancelPermissions answers every request of t still waiting cancelled.
func (b *bridge) cancelPermissions(t *turn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, p := range b.perms {
		if p.turn == t {
			delete(b.perms, id)
			p.answer <- cancelledOutcome
		}
	}
}

// approve answers dashgate's `approval` request: option_id picks that
// option; else choice once, always, deny or deny_always picks the first
// option of kind allow_once, allow_always, reject_once or reject_always,
// or of the nearest kind the agent offers.
func (b *bridge) approve(req jsonl.Request) {
	var p struct {
		RequestID string `json:"request_id"`
		Choice    string `json:"choice"`
		By        string `json:"by"`
		OptionID  string `json:"option_id"`
	}
	if err := json.Unmarshal(req.Params, &p); err != nil {
		b.srv.Fail(req.ID, "bad approval params: "+err.Error())
		return
	}
	b.mu.Lock()
	perm := b.perms[p.RequestID]
	if perm == nil {
		b.mu.Unlock()
		b.srv.Fail(req.ID, "no pending approval "+strconv.Quote(p.RequestID))
		return
	}
	opt, err := pickOption(perm.options, p.Choice, p.OptionID)
	if err != nil {
		b.mu.Unlock()
		b.srv.Fail(req.ID, err.Error())
		return
	}
	delete(b.perms, p.RequestID)
	perm.answer <- acp.RequestPermissionOutcome{Selected: &acp.RequestPermissionOutcomeSelected{OptionId: opt}}
	b.mu.Unlock()
	b.srv.Reply(req.ID, map[string]any{"option_id": string(opt)})
}

// choiceKinds are the option kinds a choice takes, best first.
var choiceKinds = map[string][]acp.PermissionOptionKind{
	"once":        {acp.PermissionOptionKindAllowOnce, acp.PermissionOptionKindAllowAlways},
	"always":      {acp.PermissionOptionKindAllowAlways, acp.PermissionOptionKindAllowOnce},
	"deny":        {acp.PermissionOptionKindRejectOnce, acp.PermissionOptionKindRejectAlways},
	"deny_always": {acp.PermissionOptionKindRejectAlways, acp.PermissionOptionKindRejectOnce},
}

func pickOption(opts []acp.PermissionOption, choice, optionID string) (acp.PermissionOptionId, error) {
	if optionID != "" {
		for _, o := range opts {
			if string(o.OptionId) == optionID {
				return o.OptionId, nil
			}
		}
		return "", fmt.Errorf("the agent offered no option %q", optionID)
	}
	kinds, ok := choiceKinds[choice]
	if !ok {
		return "", fmt.Errorf("unknown choice %q (once, always, deny or deny_always)", choice)
	}
	for _, k := range kinds {
		for _, o := range opts {
			if o.Kind == k {
				return o.OptionId, nil
			}
		}
	}
	return "", fmt.Errorf("the agent offered no option for %q", choice)
}

func optionsJSON(opts []acp.PermissionOption) []map[string]any {
	out := make([]map[string]any, 0, len(opts))
	for _, o := range opts {
		out = append(out, map[string]any{"option_id": string(o.OptionId), "name": o.Name, "kind": string(o.Kind)})
	}
	return out
}

// toolName is the approval's tool: the call's title, else its kind, else
// what the turn knows of it.
func (b *bridge) toolName(t *turn, u acp.ToolCallUpdate) string {
	title, kind, _ := b.known(t, u)
	if title != "" {
		return title
	}
	return kind
}

// toolLine is the approval's command, one line: the title and the
// locations.
func (b *bridge) toolLine(t *turn, u acp.ToolCallUpdate) string {
	title, kind, where := b.known(t, u)
	s := title
	if s == "" {
		s = kind
	}
	var locs []string
	for _, l := range where {
		if l.Line != nil {
			locs = append(locs, fmt.Sprintf("%s:%d", l.Path, *l.Line))
		} else {
			locs = append(locs, l.Path)
		}
	}
	if len(locs) > 0 {
		s += " (" + strings.Join(locs, ", ") + ")"
	}
	return strings.Join(strings.Fields(s), " ")
}

// known is what the request and the turn say of a tool call: its title,
// kind and locations (the request's fields win).
func (b *bridge) known(t *turn, u acp.ToolCallUpdate) (title, kind string, where []acp.ToolCallLocation) {
	t.mu.Lock()
	if st := t.tools[string(u.ToolCallId)]; st != nil {
		title, kind, where = st.title, st.kind, st.locations
	}
	t.mu.Unlock()
	if u.Locations != nil {
		where = u.Locations
	}
	if u.Title != nil && *u.Title != "" {
		title = *u.Title
	}
	if u.Kind != nil {
		kind = string(*u.Kind)
	}
	return title, kind, where
}

func (c *client) ReadTextFile(_ context.Context, p acp.ReadTextFileRequest) (acp.ReadTextFileResponse, error) {
	return readTextFile(p)
}

func (c *client) WriteTextFile(_ context.Context, p acp.WriteTextFileRequest) (acp.WriteTextFileResponse, error) {
	return writeTextFile(p)
}

func (c *client) CreateTerminal(_ context.Context, p acp.CreateTerminalRequest) (acp.CreateTerminalResponse, error) {
	id, err := c.b.terms.create(p)
	return acp.CreateTerminalResponse{TerminalId: id}, err
}

func (c *client) TerminalOutput(_ context.Context, p acp.TerminalOutputRequest) (acp.TerminalOutputResponse, error) {
	t, err := c.b.terms.get(p.TerminalId)
	if err != nil {
		return acp.TerminalOutputResponse{}, err
	}
	return t.output(), nil
}

func (c *client) WaitForTerminalExit(ctx context.Context, p acp.WaitForTerminalExitRequest) (acp.WaitForTerminalExitResponse, error) {
	t, err := c.b.terms.get(p.TerminalId)
	if err != nil {
		return acp.WaitForTerminalExitResponse{}, err
	}
	return t.wait(ctx)
}

func (c *client) KillTerminal(_ context.Context, p acp.KillTerminalRequest) (acp.KillTerminalResponse, error) {
	t, err := c.b.terms.get(p.TerminalId)
	if err != nil {
		return acp.KillTerminalResponse{}, err
	}
	t.kill()
	return acp.KillTerminalResponse{}, nil
}

func (c *client) ReleaseTerminal(_ context.Context, p acp.ReleaseTerminalRequest) (acp.ReleaseTerminalResponse, error) {
	return acp.ReleaseTerminalResponse{}, c.b.terms.release(p.TerminalId)
}
