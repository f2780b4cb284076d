package acpbridge_test

import (
	"testing"
)

// TestSystemPromptFirstBlock: ACP has no system prompt: the user's goes
// as the first text block of the first prompt of a conversation the
// agent starts afresh (the test agent echoes its prompt's first block),
// and of no other: not the next prompt, not a conversation the agent
// loaded; a first slash command goes without it and the prompt after it
// carries it; a conversation the agent could not load, and so began
// again, gets it again. The user's text follows it, in a block of its
// own.
func TestSystemPromptFirstBlock(t *testing.T) {
	t.Parallel()
	const system = "Answer in French."
	output := func(b *bridgeProc, id int, method string, params map[string]any) string {
		t.Helper()
		params["system"] = system
		b.send(id, method, params)
		r := b.reply(id, turnWait)
		if !r.ok() {
			t.Fatalf("%s %v: %v", method, params, r)
		}
		return r.result().str("output")
	}
	b := startBridge(t, testAgentCmd(""))
	if got := output(b, 1, "prompt", map[string]any{"text": "hi", "turn_id": "t1", "agent_session_id": ""}); got != "echo: "+system {
		t.Fatalf("the first prompt's first block: %q; want the system prompt", got)
	}
	sid := b.events(1, "agent_session")[0].str("agent_session_id")
	if got := output(b, 2, "prompt", map[string]any{"text": "hi", "turn_id": "t2", "agent_session_id": sid}); got != "echo: hi" {
		t.Fatalf("the second prompt's first block: %q; want its text", got)
	}

	loaded := startBridge(t, testAgentCmd(""))
	if got := output(loaded, 1, "prompt", map[string]any{"text": "hi", "turn_id": "t3", "agent_session_id": sid}); got != "echo: hi" {
		t.Fatalf("the first prompt of a loaded conversation: %q; want its text", got)
	}

	slash := startBridge(t, testAgentCmd(""))
	if got := output(slash, 1, "slash", map[string]any{"command": "/review all", "agent_session_id": ""}); got != "echo: /review all" {
		t.Fatalf("a first slash command: %q; want the command alone", got)
	}
	if got := output(slash, 2, "prompt", map[string]any{"text": "hi", "turn_id": "t4", "agent_session_id": ""}); got != "echo: "+system {
		t.Fatalf("the prompt after a first slash command: %q; want the system prompt first", got)
	}

	// The test agent's "blocks" turn says what each block held: the
	// system prompt's, then the user's.
	blocks := startBridge(t, testAgentCmd(""))
	blocks.send(1, "prompt", map[string]any{"text": "hi", "turn_id": "t6", "agent_session_id": "", "system": "blocks"})
	if got := blocks.reply(1, turnWait).result().str("output"); got != "text(blocks) | text(hi)" {
		t.Fatalf("the first prompt's blocks: %q; want the system prompt's, then the user's", got)
	}

	again := startBridge(t, testAgentCmd("noload"))
	if got := output(again, 1, "prompt", map[string]any{"text": "hi", "turn_id": "t5", "agent_session_id": sid}); got != "echo: "+system {
		t.Fatalf("a conversation the agent could not load: %q; want the system prompt first", got)
	}
}
