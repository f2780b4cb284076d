// Package agent is dashgate's LLM worker (`dashgate agent`): a JSON-lines
// program per PROTOCOL.md §4 and §7 ("The agent worker") that answers
// prompts with any OpenAI-compatible /v1/chat/completions server, streaming
// each content delta as it arrives, and, when DASHGATE_AGENT_TOOLS=shell,
// runs shell commands the model asks for once a viewer approved them. Like
// the built-in worker it imports nothing of the project.
//
// Ownership: Run owns every goroutine it starts and returns only once each
// request has answered (stdin EOF cancels them first). A prompt owns its
// HTTP request (cancelling the prompt's context aborts it at once: the
// server sees the connection close) and its tool processes: each runs as
// `/bin/sh -c` in its own process group, a child of the worker, and the
// whole group is killed when the command ends, times out or the prompt is
// cancelled; the prompt waits for it before it answers.
//
// The API key lives only in Config.APIKey and the Authorization header;
// diagnostics pass through a writer that masks it. The client is built from
// Config alone (not openai.NewClient, which would also read OPENAI_API_KEY,
// OPENAI_ORG_ID, OPENAI_CUSTOM_HEADERS... from the environment).
//
// # The client library
//
// github.com/openai/openai-go/v3 (v3.98.0) was chosen over
// github.com/sashabaranov/go-openai (v1.43.0) after running both against
// the same canned SSE streams:
//
//   - Many `: ping` comment lines between two chunks (200 here, as a slow
//     llama.cpp or a proxy sends while the prompt is processed): go-openai
//     counts every comment and blank line as an "empty message" and gives
//     up with ErrTooManyEmptyStreamMessages after 300 (the text so far is
//     "Hel" of "Hello"); openai-go skips comments.
//   - A few `: ping` lines, plain deltas + usage + [DONE], the OpenAI
//     dialect `data: {"error":{...}}` and llama.cpp's
//     `data: {"error":{"code":500,...}}`: both fine.
//   - llama.cpp's older `error: {"code":500,"message":...}` line: BOTH
//     ignore it and report a clean end of stream.
//   - A stream cut before `data: [DONE]`: BOTH report a clean end, the
//     same as a complete answer.
//   - A malformed chunk: both return the JSON syntax error.
//   - 401/404/429/500 with a JSON error body: both expose the status; with
//     openai-go the Retry-After header is reachable through Error.Response
//     (its retries are turned off: MaxRetries(0), the gateway decides).
//
// The two cases both libraries miss are handled by sseWatch: a
// request middleware wraps the response body and reads the raw SSE lines as
// they pass to the library, noting `data: [DONE]` and either error dialect.
// A stream that ended without [DONE] is answered ok with status
// "incomplete"; an error line becomes failure model_error with the
// server's message.
package agent
