package acpbridge

import (
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	acp "github.com/coder/acp-go-sdk"
)

// turn is one call (a prompt or a slash command) the agent's updates
// belong to: the id its events carry, the text so far and its tools.
type turn struct {
	id     []byte // the request id, raw JSON
	deltas bool   // stream the text as delta events (a slash command does not)

	mu        sync.Mutex
	text      strings.Builder
	tools     map[string]*toolState // by ACP toolCallId
	toolAdded chan struct{}         // closed (and replaced) when a tool call is added
}

func newTurn(id []byte, deltas bool) *turn {
	return &turn{id: id, deltas: deltas, tools: map[string]*toolState{}, toolAdded: make(chan struct{})}
}

// addTool records a tool call and wakes waitTool.
func (t *turn) addTool(id string, st *toolState) {
	t.mu.Lock()
	t.tools[id] = st
	close(t.toolAdded)
	t.toolAdded = make(chan struct{})
	t.mu.Unlock()
}

// waitTool waits until the turn knows tool call id, at most d or until
// done closes. The agent sends a tool_call notification before its
// permission request, but the connection handles requests at once and
// notifications in a queue: waiting keeps tool_start before approval.
func (t *turn) waitTool(id string, d time.Duration, done <-chan struct{}) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		t.mu.Lock()
		_, ok := t.tools[id]
		added := t.toolAdded
		t.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-added:
		case <-timer.C:
			return
		case <-done:
			return
		}
	}
}

// toolState is what the bridge knows of one tool call.
type toolState struct {
	title, kind string
	status      acp.ToolCallStatus
	content     []acp.ToolCallContent
	locations   []acp.ToolCallLocation
	start       time.Time
	done        bool // tool_complete was emitted
}

func (t *turn) output() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.text.String()
}

// apply turns one session/update into the events of t (PROTOCOL.md, "The
// ACP bridge"). It runs on the connection's notification goroutine, one
// update at a time, in the agent's order.
func (b *bridge) apply(t *turn, u acp.SessionUpdate) {
	switch {
	case u.AgentMessageChunk != nil:
		if c := u.AgentMessageChunk.Content.Text; c != nil && c.Text != "" {
			t.mu.Lock()
			t.text.WriteString(c.Text)
			t.mu.Unlock()
			if t.deltas {
				for _, piece := range splitUTF8(c.Text, maxDelta) {
					b.out.pushText(t.id, "delta", piece)
				}
			}
		}
	case u.AgentThoughtChunk != nil:
		if c := u.AgentThoughtChunk.Content.Text; c != nil && c.Text != "" {
			for _, piece := range splitUTF8(c.Text, maxDelta) {
				b.out.pushText(t.id, "thought", piece)
			}
		}
	case u.ToolCall != nil:
		c := u.ToolCall
		st := &toolState{title: c.Title, kind: string(c.Kind), status: c.Status, content: c.Content, locations: c.Locations, start: time.Now()}
		if st.status == "" {
			st.status = acp.ToolCallStatusPending
		}
		b.event(t, "tool_start", map[string]any{
			"tool_id": string(c.ToolCallId), "name": c.Title, "command": c.Title,
			"kind": string(c.Kind), "status": string(st.status),
			"locations": locationsJSON(c.Locations), "content": b.contentJSON(c.Content),
		})
		t.addTool(string(c.ToolCallId), st)
		b.maybeComplete(t, string(c.ToolCallId), st)
	case u.ToolCallUpdate != nil:
		c := u.ToolCallUpdate
		id := string(c.ToolCallId)
		t.mu.Lock()
		st := t.tools[id]
		if st == nil { // an update of a call we never saw start
			st = &toolState{status: acp.ToolCallStatusPending, start: time.Now()}
			t.tools[id] = st
		}
		ev := map[string]any{"tool_id": id}
		if c.Status != nil {
			st.status = *c.Status
		}
		ev["status"] = string(st.status)
		if c.Title != nil {
			st.title = *c.Title
			ev["title"] = *c.Title
		}
		if c.Kind != nil {
			st.kind = string(*c.Kind)
		}
		if c.Content != nil {
			st.content = c.Content // ACP: the update replaces the collection
		}
		if c.Locations != nil {
			st.locations = c.Locations
		}
		t.mu.Unlock()
		if c.Content != nil {
			ev["content"] = b.contentJSON(c.Content)
		}
		if c.Locations != nil {
			ev["locations"] = locationsJSON(c.Locations)
		}
		b.event(t, "tool_update", ev)
		b.maybeComplete(t, id, st)
	case u.Plan != nil:
		entries := make([]map[string]any, 0, len(u.Plan.Entries))
		for _, e := range u.Plan.Entries {
			entries = append(entries, map[string]any{"content": e.Content, "priority": string(e.Priority), "status": string(e.Status)})
		}
		b.event(t, "plan", map[string]any{"entries": entries})
	}
	// user_message_chunk, modes, config options, session info, usage: no
	// event (dashgate has the user's text; the rest has no place yet).
}

// maybeComplete emits tool_complete once, when the call's status is
// completed or failed: exit_code 0 or 1, output the text of its content
// (a terminal's output for a terminal item), at most 64 KiB.
func (b *bridge) maybeComplete(t *turn, id string, st *toolState) {
	t.mu.Lock()
	if st.done || (st.status != acp.ToolCallStatusCompleted && st.status != acp.ToolCallStatusFailed) {
		t.mu.Unlock()
		return
	}
	st.done = true
	status, content, took := st.status, st.content, time.Since(st.start)
	t.mu.Unlock()
	var text []string
	for _, c := range content {
		switch {
		case c.Content != nil && c.Content.Content.Text != nil:
			text = append(text, c.Content.Content.Text.Text)
		case c.Terminal != nil:
			text = append(text, b.terms.textOf(c.Terminal.TerminalId))
		}
	}
	out, truncated := cutText(strings.Join(text, "\n"), maxToolText)
	code := 0
	if status == acp.ToolCallStatusFailed {
		code = 1
	}
	b.out.push(t.id, "tool_complete", map[string]any{
		"tool_id": id, "exit_code": code, "output": out, "truncated": truncated,
		"status": string(status), "duration_ms": took.Milliseconds(),
	})
}

// contentJSON is a tool's content as events carry it: text, diff and
// terminal items, each text at most 64 KiB (truncated true when cut).
func (b *bridge) contentJSON(content []acp.ToolCallContent) []map[string]any {
	out := make([]map[string]any, 0, len(content))
	for _, c := range content {
		switch {
		case c.Content != nil:
			if tb := c.Content.Content.Text; tb != nil {
				s, cut := cutText(tb.Text, maxToolText)
				item := map[string]any{"type": "text", "text": s}
				if cut {
					item["truncated"] = true
				}
				out = append(out, item)
			}
		case c.Diff != nil:
			old := ""
			if c.Diff.OldText != nil {
				old = *c.Diff.OldText
			}
			o, cut1 := cutText(old, maxToolText)
			n, cut2 := cutText(c.Diff.NewText, maxToolText)
			item := map[string]any{"type": "diff", "path": c.Diff.Path, "old_text": o, "new_text": n}
			if cut1 || cut2 {
				item["truncated"] = true
			}
			out = append(out, item)
		case c.Terminal != nil:
			out = append(out, map[string]any{"type": "terminal", "terminal_id": c.Terminal.TerminalId})
		}
	}
	return out
}

func locationsJSON(locs []acp.ToolCallLocation) []map[string]any {
	out := make([]map[string]any, 0, len(locs))
	for _, l := range locs {
		m := map[string]any{"path": l.Path}
		if l.Line != nil {
			m["line"] = *l.Line
		}
		out = append(out, m)
	}
	return out
}

// commandsJSON is an available_commands_update as the commands event
// carries it.
func commandsJSON(cmds []acp.AvailableCommand) []map[string]any {
	out := make([]map[string]any, 0, len(cmds))
	for _, c := range cmds {
		hint := ""
		if c.Input != nil && c.Input.Unstructured != nil {
			hint = c.Input.Unstructured.Hint
		}
		out = append(out, map[string]any{"name": c.Name, "description": c.Description, "hint": hint})
	}
	return out
}

// splitUTF8 cuts s into pieces of at most n bytes between characters.
func splitUTF8(s string, n int) []string {
	var out []string
	for len(s) > n {
		i := n
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		if i == 0 {
			i = n // no boundary within n bytes: not UTF-8, cut anywhere
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return append(out, s)
}

// cutText is s cut to at most n bytes at a character boundary, and whether
// it was cut.
func cutText(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	return splitUTF8(s, n)[0], true
}
