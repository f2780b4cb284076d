package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"
)

// fakeModel is an OpenAI-compatible server in the tool's process: every
// completion streams three short chunks at once, then [DONE].
func fakeModel() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"object":"list","data":[{"id":"bench"}]}`))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, word := range []string{"first", " second", " third"} {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", word)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
}

// firstDirect times a streaming completion request straight to the model
// server until its first data line.
func firstDirect(ctx context.Context, c *http.Client, url string) (time.Duration, error) {
	t0 := time.Now()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions",
		strings.NewReader(`{"model":"bench","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	res, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			return time.Since(t0), nil
		}
	}
	return 0, fmt.Errorf("no data line: %v", sc.Err())
}

// agent: the built-in agent worker (`dashgate agent`) against a model
// server in this process. Time to the first delta of a prompt through
// dashgate (prompt.submit to the first message.delta, warm worker), beside
// a request straight to the same server until its first data line; and
// the agent worker's RSS. Conversations of turnsPerSession prompts: the
// first of each spawns its worker and is not timed; each later one carries
// the turns before it as its history.
func agent(prompts int) group {
	const turnsPerSession = 10
	srv := fakeModel()
	figs := []*Figure{
		fig(fmt.Sprintf("agent: first delta through dashgate (%d/run) p50", prompts), "ms", ""),
		fig("  the same server directly, first data line p50", "ms", ""),
		fig("  through dashgate minus directly, p50", "ms", "<= 2"),
		fig("agent worker RSS after the prompts", "MiB", ""),
	}
	return group{name: "agent", figs: figs, args: []string{"--llm-url", srv.URL + "/v1", "--llm-model", "bench"},
		run: func(ctx context.Context, t *target, r int) ([]float64, error) {
			hold, err := dialChat(ctx, t) // keeps the sessions attached between prompts
			if err != nil {
				return nil, err
			}
			defer hold.Close()
			direct := &http.Client{Transport: &http.Transport{Proxy: nil}}
			var via, straight []time.Duration
			var sid string
			for i := 0; i < prompts+prompts/(turnsPerSession-1)+1; i++ {
				first := i%turnsPerSession == 0
				if first {
					if sid, err = hold.CreateSession(ctx, "agent"); err != nil {
						return nil, err
					}
				}
				d, err := firstDirect(ctx, direct, srv.URL)
				if err != nil {
					return nil, err
				}
				if !first {
					straight = append(straight, d)
				}
				ch, err := dialChat(ctx, t) // a fresh socket: its first delta is this turn's
				if err != nil {
					return nil, err
				}
				if err := ch.Call(ctx, "session.resume", map[string]string{"session_id": sid}, nil); err != nil {
					ch.Close()
					return nil, err
				}
				t0 := time.Now()
				err = ch.Call(ctx, "prompt.submit", map[string]string{"session_id": sid, "text": "hi"}, nil)
				if err == nil {
					_, err = ch.WaitEvent(ctx, "message.delta", sid)
				}
				if !first {
					via = append(via, time.Since(t0))
				}
				if err == nil {
					_, err = ch.WaitEvent(ctx, "message.complete", sid)
				}
				ch.Close()
				if err != nil {
					return nil, err
				}
			}
			ws, err := t.Workers(ctx)
			if err != nil || len(ws) == 0 {
				return nil, fmt.Errorf("agent workers: %v %v", ws, err)
			}
			v, s := percentile(ms(via), 50), percentile(ms(straight), 50)
			return []float64{v, s, v - s, float64(ws[0].RSSBytes) / (1 << 20)}, nil
		}}
}
