package main

// Issue 40: agents of the Agent Client Protocol beside the built-in agent,
// in one dashgate started with --llm-url (a model server in this process,
// the built-in agent's) and two --agent lines running this binary as an
// ACP agent (`dashgate-bench acp-agent`, written with the SDK's agent
// side): "bench" answers a prompt at once with three short chunks, like
// the model server; "bulk" with acp-stream-kib chunks of 1 KiB at 1 MiB/s
// (the model server streams the same to a prompt "bulk"). Every prompt goes
// the agent group's way: a fresh socket, session.resume, prompt.submit,
// timed to the first message.delta, then message.complete awaited.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/dashgate/dashgate/internal/testkit"
)

// The ACP agent's reply: ACPBENCH_CHUNKS chunks of ACPBENCH_CHUNK_BYTES
// bytes of text each, one every ACPBENCH_CHUNK_EVERY (a Go duration; 0:
// all at once).
const (
	acpChunksEnv     = "ACPBENCH_CHUNKS"
	acpChunkBytesEnv = "ACPBENCH_CHUNK_BYTES"
	acpChunkEveryEnv = "ACPBENCH_CHUNK_EVERY"
)

// bulkEvery paces the bulk replies, the ACP agent's and the model
// server's alike, at 1 MiB/s: acp-go-sdk's client side (the bridge) closes
// the connection when more than 1024 notifications wait for its handler
// ("notification queue overflow"), and 4,096 chunks sent at once overflow
// it (the turn ends in agent_exited after about 1,450 chunks).
const bulkEvery = time.Millisecond

// filler is n bytes of plain text (letters and spaces: nothing JSON
// escapes).
func filler(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz "
	return strings.Repeat(alphabet, n/len(alphabet)+1)[:n]
}

// benchAgent is `dashgate-bench acp-agent`: an ACP agent (protocol 1, no
// loadSession) that answers every prompt with n agent_message_chunk
// updates of chunk, at once or one every every, then end_turn.
type benchAgent struct {
	ready chan struct{} // closed once conn is set: handlers may run before NewAgentSideConnection returns
	conn  *acp.AgentSideConnection
	chunk string
	n     int
	every time.Duration
	next  atomic.Int64 // session ids handed out
}

// serveACPAgent runs the agent on stdin and stdout until its stdin ends.
func serveACPAgent() error {
	n, c := 3, 6
	for env, v := range map[string]*int{acpChunksEnv: &n, acpChunkBytesEnv: &c} {
		if s := os.Getenv(env); s != "" {
			x, err := strconv.Atoi(s)
			if err != nil || x < 1 {
				return fmt.Errorf("%s=%q: want a count >= 1", env, s)
			}
			*v = x
		}
	}
	every, err := time.ParseDuration(cmp.Or(os.Getenv(acpChunkEveryEnv), "0"))
	if err != nil {
		return fmt.Errorf("%s: %w", acpChunkEveryEnv, err)
	}
	a := &benchAgent{ready: make(chan struct{}), chunk: filler(c), n: n, every: every}
	a.conn = acp.NewAgentSideConnection(a, os.Stdout, os.Stdin)
	close(a.ready)
	<-a.conn.Done()
	return nil
}

func (a *benchAgent) Initialize(context.Context, acp.InitializeRequest) (acp.InitializeResponse, error) {
	return acp.InitializeResponse{
		ProtocolVersion:   acp.ProtocolVersionNumber,
		AgentInfo:         &acp.Implementation{Name: "dashgate-bench", Version: "1"},
		AgentCapabilities: acp.AgentCapabilities{LoadSession: false},
	}, nil
}

func (a *benchAgent) NewSession(context.Context, acp.NewSessionRequest) (acp.NewSessionResponse, error) {
	return acp.NewSessionResponse{SessionId: acp.SessionId(fmt.Sprintf("bench-%d-%d", os.Getpid(), a.next.Add(1)))}, nil
}

func (a *benchAgent) Prompt(ctx context.Context, p acp.PromptRequest) (acp.PromptResponse, error) {
	<-a.ready
	pace := paced(a.every)
	defer pace.Stop()
	for range a.n {
		if err := pace.wait(ctx); err != nil {
			return acp.PromptResponse{StopReason: acp.StopReasonCancelled}, nil
		}
		err := a.conn.SessionUpdate(ctx, acp.SessionNotification{SessionId: p.SessionId, Update: acp.UpdateAgentMessageText(a.chunk)})
		if ctx.Err() != nil {
			return acp.PromptResponse{StopReason: acp.StopReasonCancelled}, nil
		} else if err != nil {
			return acp.PromptResponse{}, err
		}
	}
	return acp.PromptResponse{StopReason: acp.StopReasonEndTurn}, nil
}

// pacer lets a chunk go at once when it has no ticker, else at its tick
// (a model's rate, emulated: not a wait for an event).
type pacer struct{ *time.Ticker }

func paced(every time.Duration) pacer {
	if every <= 0 {
		return pacer{}
	}
	return pacer{time.NewTicker(every)}
}

func (p pacer) wait(ctx context.Context) error {
	if p.Ticker == nil {
		return ctx.Err()
	}
	select {
	case <-p.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p pacer) Stop() {
	if p.Ticker != nil {
		p.Ticker.Stop()
	}
}

// Cancel has nothing to stop: a prompt is answered at once (the SDK
// cancels the prompt's context itself).
func (a *benchAgent) Cancel(context.Context, acp.CancelNotification) error { return nil }

func (a *benchAgent) Authenticate(context.Context, acp.AuthenticateRequest) (acp.AuthenticateResponse, error) {
	return acp.AuthenticateResponse{}, nil
}

func (a *benchAgent) CloseSession(context.Context, acp.CloseSessionRequest) (acp.CloseSessionResponse, error) {
	return acp.CloseSessionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionClose)
}

func (a *benchAgent) ListSessions(context.Context, acp.ListSessionsRequest) (acp.ListSessionsResponse, error) {
	return acp.ListSessionsResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionList)
}

func (a *benchAgent) ResumeSession(context.Context, acp.ResumeSessionRequest) (acp.ResumeSessionResponse, error) {
	return acp.ResumeSessionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionResume)
}

func (a *benchAgent) SetSessionConfigOption(context.Context, acp.SetSessionConfigOptionRequest) (acp.SetSessionConfigOptionResponse, error) {
	return acp.SetSessionConfigOptionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionSetConfigOption)
}

func (a *benchAgent) SetSessionMode(context.Context, acp.SetSessionModeRequest) (acp.SetSessionModeResponse, error) {
	return acp.SetSessionModeResponse{}, nil
}

// bulkModel is the agent group's model server (small, to which it hands
// every other request), except that a conversation whose last message is
// "bulk" gets kib chunks of 1 KiB, one every bulkEvery.
func bulkModel(kib int) (srv, small *httptest.Server) {
	small = fakeModel()
	chunk, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]string{"content": filler(1024)}}}})
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct {
				Content any `json:"content"`
			} `json:"messages"`
		}
		if r.URL.Path != "/v1/chat/completions" || json.NewDecoder(r.Body).Decode(&req) != nil ||
			len(req.Messages) == 0 || req.Messages[len(req.Messages)-1].Content != "bulk" {
			small.Config.Handler.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		pace := paced(bulkEvery)
		defer pace.Stop()
		for range kib {
			if pace.wait(r.Context()) != nil {
				return
			}
			fmt.Fprintf(w, "data: %s\n\n", chunk)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	return srv, small
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// The agents of the group's dashgate: the built-in one, and this binary's.
const (
	builtinAgent = "dashgate"
	acpAgent     = "bench"
	acpBulkAgent = "bulk"
)

// acp: the ACP agent beside the built-in agent, see the top of the
// file. Per run, conversations of turnsPerSession prompts, one of each
// agent at once, their prompts alternating (the order swapped every
// turn): the first prompt of each (the worker's spawn) is the start-up
// figure, the others the warm one; after the first conversation's first
// turn, the RSS of each worker tree; then one bulk turn of each (after a
// turn that spawns its worker), with the CPU time of dashgate and of the
// worker tree over it.
func (b *bench) acp(prompts, kib int) group {
	const turnsPerSession = 10
	srv, small := bulkModel(kib)
	figs := []*Figure{
		fig(fmt.Sprintf("acp: first delta through dashgate, ACP agent, warm (%d/run) p50", prompts), "ms", ""),
		fig("  the built-in agent (--llm-url), the same dashgate, p50", "ms", ""),
		fig("  ACP minus built-in, p50", "ms", ""),
		fig("acp: a new session's first prompt → first delta, ACP (bridge + agent spawn) p50", "ms", ""),
		fig("  the built-in agent (dashgate agent spawn) p50", "ms", ""),
		fig(fmt.Sprintf("acp: dashgate CPU per streamed KiB, ACP agent (%d KiB in 1 KiB chunks, 1 MiB/s)", kib), "µs/KiB", ""),
		fig("  the ACP worker tree (bridge + agent)", "µs/KiB", ""),
		fig("  message.delta events of that reply, ACP", "deltas", ""),
		fig("  dashgate CPU per KiB, built-in agent", "µs/KiB", ""),
		fig("  the built-in worker (dashgate agent)", "µs/KiB", ""),
		fig("  message.delta events of that reply, built-in", "deltas", ""),
		fig("acp: idle ACP session's bridge + agent RSS after one turn", "MiB", ""),
		fig("  the built-in agent worker RSS after one turn", "MiB", ""),
	}
	g := group{name: "acp", figs: figs, done: func() { srv.Close(); small.Close() }}
	self, err := os.Executable()
	if err != nil {
		g.run = func(context.Context, *target, int) ([]float64, error) { return nil, err }
		return g
	}
	cmd := shellQuote(self) + " acp-agent"
	g.args = []string{"--llm-url", srv.URL + "/v1", "--llm-model", "bench",
		"--agent", acpAgent + "=" + cmd,
		"--agent", fmt.Sprintf("%s=env %s=%d %s=1024 %s=%s %s", acpBulkAgent, acpChunksEnv, kib, acpChunkBytesEnv, acpChunkEveryEnv, bulkEvery, cmd)}
	g.run = func(ctx context.Context, t *target, r int) ([]float64, error) {
		hold, err := dialChat(ctx, t) // keeps the sessions attached between prompts
		if err != nil {
			return nil, err
		}
		defer hold.Close()
		kinds := []string{builtinAgent, acpAgent}
		warm, cold := map[string][]time.Duration{}, map[string][]time.Duration{}
		rss := map[string]float64{}
		for s := 0; s*(turnsPerSession-1) < prompts; s++ {
			sids := map[string]string{}
			for _, k := range kinds {
				if sids[k], err = createWith(ctx, hold, k); err != nil {
					return nil, err
				}
			}
			for turn := range turnsPerSession {
				for i := range kinds {
					k := kinds[(i+turn+r)%2]
					d, _, err := prompt(ctx, t, sids[k], "hi", 0, nil)
					if err != nil {
						return nil, fmt.Errorf("%s: %w", k, err)
					}
					if turn == 0 {
						cold[k] = append(cold[k], d)
					} else {
						warm[k] = append(warm[k], d)
					}
				}
				if s == 0 && turn == 0 {
					for _, k := range kinds {
						if rss[k], err = treeRSS(ctx, t, sids[k]); err != nil {
							return nil, err
						}
					}
				}
			}
			for _, k := range kinds {
				if err := hold.Call(ctx, "session.close", map[string]string{"session_id": sids[k]}, nil); err != nil {
					return nil, err
				}
			}
		}
		cpu := map[string][3]float64{}
		for i := range 2 {
			k := []string{acpBulkAgent, builtinAgent}[(i+r)%2]
			if cpu[k], err = streamCPU(ctx, t, hold, k, kib); err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
		}
		p50 := func(ds []time.Duration) float64 { return percentile(ms(ds), 50) }
		wa, wb := p50(warm[acpAgent]), p50(warm[builtinAgent])
		return []float64{wa, wb, wa - wb, p50(cold[acpAgent]), p50(cold[builtinAgent]),
			cpu[acpBulkAgent][0], cpu[acpBulkAgent][1], cpu[acpBulkAgent][2], cpu[builtinAgent][0], cpu[builtinAgent][1], cpu[builtinAgent][2],
			rss[acpAgent] / (1 << 20), rss[builtinAgent] / (1 << 20)}, nil
	}
	return g
}

// createWith creates a session talking to agent.
func createWith(ctx context.Context, ch *testkit.Chat, agent string) (string, error) {
	var res struct {
		SessionID string `json:"session_id"`
	}
	if err := ch.Call(ctx, "session.create", map[string]string{"title": "acp", "agent": agent}, &res); err != nil {
		return "", err
	} else if res.SessionID == "" {
		return "", errors.New("session.create: no session_id")
	}
	return res.SessionID, nil
}

// prompt sends text to sid on a fresh socket (after session.resume),
// waits for message.complete and returns the time from prompt.submit to
// the first message.delta and the number of message.delta events; with
// want > 0, the reply must be want bytes. before, when not nil, runs
// after session.resume, just before prompt.submit.
func prompt(ctx context.Context, t *target, sid, text string, want int, before func()) (first time.Duration, deltas int, err error) {
	ch, err := dialChat(ctx, t)
	if err != nil {
		return 0, 0, err
	}
	defer ch.Close()
	if err := ch.Call(ctx, "session.resume", map[string]string{"session_id": sid}, nil); err != nil {
		return 0, 0, err
	}
	if before != nil {
		before()
	}
	t0 := time.Now()
	if err := ch.Call(ctx, "prompt.submit", map[string]string{"session_id": sid, "text": text}, nil); err != nil {
		return 0, 0, err
	}
	if _, err := ch.WaitEvent(ctx, "message.delta", sid); err != nil {
		return 0, 0, err
	}
	first = time.Since(t0)
	ev, err := ch.WaitEvent(ctx, "message.complete", sid)
	if err != nil {
		return 0, 0, err
	}
	p := ev.Payload()
	if p == nil {
		p = ev
	}
	if reply, _ := p["text"].(string); want > 0 && len(reply) != want {
		return 0, 0, fmt.Errorf("reply of %d bytes, want %d (interrupted %v)", len(reply), want, p["interrupted"])
	}
	for _, e := range ch.Events() {
		if e.Type() == "message.delta" && e.SessionID() == sid {
			deltas++
		}
	}
	return first, deltas, nil
}

// workerTree is the pids of sid's chat worker and its descendants.
func workerTree(ctx context.Context, t *target, sid string) ([]int, error) {
	ws, err := t.Workers(ctx)
	if err != nil {
		return nil, err
	}
	for _, w := range ws {
		if w.SessionID == sid && w.Kind == "chat" {
			pids := append([]int{w.PID}, w.Children...)
			slices.Sort(pids)
			return slices.Compact(pids), nil
		}
	}
	return nil, fmt.Errorf("no chat worker of session %s in %+v", sid, ws)
}

// treeRSS is the median of 5 samples, 100 ms apart, of the summed RSS of
// sid's worker tree (its bridge and agent for an ACP session).
func treeRSS(ctx context.Context, t *target, sid string) (float64, error) {
	pids, err := workerTree(ctx, t, sid)
	if err != nil {
		return 0, err
	}
	var xs []float64
	err = every(ctx, 100*time.Millisecond, time.Minute, func() (bool, error) {
		sum := 0.0
		for _, pid := range pids {
			u, err := testkit.ReadUsage(pid)
			if err != nil {
				return false, fmt.Errorf("rss of %d: %w", pid, err)
			}
			sum += float64(u.RSSBytes)
		}
		xs = append(xs, sum)
		return len(xs) >= 5, nil
	})
	return percentile(xs, 50), err
}

// streamCPU opens a session of agent, spawns its worker with one prompt
// (a bulk reply from the ACP agent, a short one from the built-in agent's
// model server: its history is sent with the next prompt), then streams
// one reply of kib KiB and returns the CPU time of dashgate and of the
// worker tree over that turn, in µs per KiB, and the number of
// message.delta events it came in.
func streamCPU(ctx context.Context, t *target, hold *testkit.Chat, agent string, kib int) ([3]float64, error) {
	var out [3]float64
	sid, err := createWith(ctx, hold, agent)
	if err != nil {
		return out, err
	}
	first := "bulk"
	if agent == builtinAgent {
		first = "hi"
	}
	if _, _, err := prompt(ctx, t, sid, first, 0, nil); err != nil {
		return out, err
	}
	pids, err := workerTree(ctx, t, sid)
	if err != nil {
		return out, err
	}
	treeCPU := func() (d time.Duration) {
		for _, pid := range pids {
			d += procCPU(pid)
		}
		return d
	}
	var gw0, tree0 time.Duration
	_, deltas, err := prompt(ctx, t, sid, "bulk", kib<<10, func() { gw0, tree0 = procCPU(t.PID()), treeCPU() })
	if err != nil {
		return out, err
	}
	gw, tree := procCPU(t.PID())-gw0, treeCPU()-tree0
	if err := hold.Call(ctx, "session.close", map[string]string{"session_id": sid}, nil); err != nil {
		return out, err
	}
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(kib) }
	return [3]float64{us(gw), us(tree), float64(deltas)}, nil
}
