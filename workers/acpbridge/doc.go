// Package acpbridge is `dashgate acp -- <agent> [args...]`: a chat worker
// (PROTOCOL.md §4 and §7, spoken on its stdin and stdout with
// workers/jsonl) that hosts any Agent Client Protocol agent
// (agentclientprotocol.com: Claude Code through claude-agent-acp, Codex,
// Gemini CLI, goose...). It starts the agent as its child and speaks ACP,
// protocol version 1 only, to it with github.com/coder/acp-go-sdk. Like the
// other workers it imports nothing of dashgate but workers/jsonl.
//
// dashgate starts the bridge as the session owner's Unix account, so the
// agent, the terminals it asks for and the files it reads and writes
// through the bridge all run with that user's credentials: the bridge
// checks nothing the kernel checks already.
//
// # Ownership
//
// Run owns everything it starts and returns only once it is gone:
//   - The agent process (agentProc) is started lazily by the first prompt
//     (or slash command), in a process group of its own, with Pdeathsig
//     SIGKILL armed from one OS thread that lives as long as the process
//     (spawnLoop), so it dies with the bridge even on kill -9. A prompt
//     that finds it dead, or whose start failed, starts a new one.
//     Run's end closes its stdin, waits Config.CloseWait for it to exit,
//     then SIGTERMs its group, and SIGKILLs it a second later; it returns
//     once the agent is reaped.
//   - Terminals (terminal/create) are children of the bridge in groups of
//     their own, with Pdeathsig too; terminal/release and Run's end kill
//     their groups, and Run waits for each to be reaped.
//   - A prompt owns its turn: the events it writes carry its request id.
//     A cancel of it sends session/cancel and answers the agent's pending
//     permission requests `cancelled`; it then waits for the agent's
//     answer (dashgate's interrupt grace bounds that: it closes the worker).
//
// # Blocking
//
// Requests run concurrently (jsonl), prompts one at a time: a second prompt
// waits for the first. An agent's session/request_permission blocks until
// dashgate answers the `approval` request naming it, its turn is cancelled
// or the bridge closes.
package acpbridge
