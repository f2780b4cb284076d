package agent_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/workers/agent"
)

func TestMain(m *testing.M) {
	testkit.VerifyNoLeaks(m) // no ignores of its own
}

// deadline bounds every wait of these tests; none asserts a duration.
const deadline = 10 * time.Second

const apiKey = "sk-test-4f9c1d2e-do-not-print"

// ---------------------------------------------------------------------------
// A fake OpenAI-compatible server replaying canned SSE streams.

func chunk(text string) string {
	b, _ := json.Marshal(text)
	return `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":` + string(b) + `},"finish_reason":null}]}` + "\n\n"
}

const usageChunk = `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":2,"total_tokens":13}}` + "\n\n"

const done = "data: [DONE]\n\n"

func toolChunk(delta string) string {
	return `data: {"id":"c2","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[` + delta + `]},"finish_reason":null}]}` + "\n\n"
}

// received is one chat completion request the fake server got.
type received struct {
	Auth string
	Org  string
	Body struct {
		Model         string            `json:"model"`
		Stream        bool              `json:"stream"`
		StreamOptions map[string]any    `json:"stream_options"`
		Messages      []json.RawMessage `json:"messages"`
		Tools         []json.RawMessage `json:"tools"`
	}
}

type message struct {
	Role       string `json:"role"`
	Content    string `json:"content"`
	ToolCallID string `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

func (r received) messages(t *testing.T) []message {
	t.Helper()
	var out []message
	for _, raw := range r.Body.Messages {
		var m message
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("message %s: %v", raw, err)
		}
		out = append(out, m)
	}
	return out
}

// fakeLLM answers /chat/completions with respond(n, w, r) for the n-th
// request (from 0) and /models with one model.
type fakeLLM struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []received
}

func newFakeLLM(t *testing.T, respond func(n int, w http.ResponseWriter, r *http.Request)) *fakeLLM {
	t.Helper()
	f := &fakeLLM{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"object":"list","data":[{"id":"listed-model","object":"model","created":1,"owned_by":"x"}]}`)
		case "/v1/chat/completions":
			var rec received
			rec.Auth = r.Header.Get("Authorization")
			rec.Org = r.Header.Get("OpenAI-Organization")
			if err := json.NewDecoder(r.Body).Decode(&rec.Body); err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			f.mu.Lock()
			n := len(f.reqs)
			f.reqs = append(f.reqs, rec)
			f.mu.Unlock()
			respond(n, w, r)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeLLM) requests() []received {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]received(nil), f.reqs...)
}

func (f *fakeLLM) url() string { return f.URL + "/v1" }

// sse writes body as an event stream, flushing after each event.
func sse(w http.ResponseWriter, events ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, e := range events {
		io.WriteString(w, e)
		w.(http.Flusher).Flush()
	}
}

func replay(events ...string) func(int, http.ResponseWriter, *http.Request) {
	return func(_ int, w http.ResponseWriter, _ *http.Request) { sse(w, events...) }
}

// ---------------------------------------------------------------------------
// Driving Run over pipes, like a gateway.

type line struct {
	ID         json.RawMessage `json:"id"`
	OK         *bool           `json:"ok"`
	Result     map[string]any  `json:"result"`
	Error      string          `json:"error"`
	Failure    string          `json:"failure"`
	RetryAfter int             `json:"retry_after"`
	Event      string          `json:"event"`
	Text       string          `json:"text"`
	RequestID  string          `json:"request_id"`
	Tool       string          `json:"tool"`
	Command    string          `json:"command"`
	ToolID     string          `json:"tool_id"`
	ExitCode   *int            `json:"exit_code"`
	Output     string          `json:"output"`
	Truncated  bool            `json:"truncated"`
}

// answerApproval waits for the worker's next approval event and answers
// it with choice, as request 2.
func (w *worker) answerApproval(choice string) {
	got := w.until(isEvent("approval"))
	w.send(2, "approval", map[string]any{"request_id": got[len(got)-1].RequestID, "choice": choice, "by": "v"})
}

type worker struct {
	t      *testing.T
	in     *io.PipeWriter
	lines  chan line
	stderr *testkit.SyncBuffer
	exited chan struct{} // closed when Run returned
	code   int
}

func start(t *testing.T, cfg agent.Config) *worker {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	w := &worker{t: t, in: inW, lines: make(chan line, 100), stderr: &testkit.SyncBuffer{}, exited: make(chan struct{})}
	go func() {
		w.code = agent.Run(t.Context(), cfg, inR, outW, w.stderr)
		outW.Close()
		close(w.exited)
	}()
	go func() {
		defer close(w.lines)
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l line
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Errorf("worker wrote a bad line %q: %v", sc.Bytes(), err)
				continue
			}
			w.lines <- l
		}
	}()
	t.Cleanup(func() {
		inW.Close() // stdin EOF
		select {
		case <-w.exited:
		case <-time.After(deadline):
			t.Error("worker did not exit on stdin EOF")
		}
		for range w.lines {
		}
	})
	return w
}

func (w *worker) send(id int, method string, params any) {
	w.t.Helper()
	b, _ := json.Marshal(map[string]any{"id": id, "method": method, "params": params})
	if _, err := w.in.Write(append(b, '\n')); err != nil {
		w.t.Fatalf("write request: %v", err)
	}
}

func (w *worker) next() line {
	w.t.Helper()
	select {
	case l, ok := <-w.lines:
		if !ok {
			w.t.Fatal("worker output closed")
		}
		return l
	case <-time.After(deadline):
		w.t.Fatal("no line from the worker before the deadline")
	}
	return line{}
}

// until reads lines until one satisfies stop, and returns them all.
func (w *worker) until(stop func(line) bool) []line {
	w.t.Helper()
	var got []line
	for {
		l := w.next()
		got = append(got, l)
		if stop(l) {
			return got
		}
	}
}

// reply reads lines until the reply to id and returns that reply.
func (w *worker) reply(id int) line {
	w.t.Helper()
	got := w.until(isReply(id))
	return got[len(got)-1]
}

func isReply(id int) func(line) bool {
	return func(l line) bool { return l.OK != nil && string(l.ID) == fmt.Sprint(id) }
}

func isEvent(name string) func(line) bool {
	return func(l line) bool { return l.Event == name }
}

func deltas(ls []line) string {
	var b strings.Builder
	for _, l := range ls {
		if l.Event == "delta" {
			b.WriteString(l.Text)
		}
	}
	return b.String()
}

func cfgFor(f *fakeLLM) agent.Config {
	return agent.Config{LLMURL: f.url(), Model: "env-model", APIKey: apiKey}
}

// ---------------------------------------------------------------------------

func TestStreams(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		events  []string
		deltas  string
		status  string // ok:true replies
		failure string // ok:false replies
		errHas  string
		usage   bool
	}{
		{name: "plain", events: []string{chunk("Hel"), chunk("lo"), usageChunk, done},
			deltas: "Hello", status: "complete", usage: true},
		{name: "ping comments", events: []string{": ping\n\n", chunk("Hel"), strings.Repeat(": ping\n\n", 200), chunk("lo"), ": ping\n\n", usageChunk, done},
			deltas: "Hello", status: "complete", usage: true},
		{name: "no DONE", events: []string{chunk("Hel"), chunk("lo")},
			deltas: "Hello", status: "incomplete"},
		{name: "openai error", events: []string{chunk("Hel"), `data: {"error":{"message":"boom","type":"server_error"}}` + "\n\n"},
			deltas: "Hel", failure: "model_error", errHas: "boom"},
		{name: "llama.cpp error line", events: []string{chunk("Hel"), `error: {"code":500,"message":"llama boom","type":"server_error"}` + "\n\n"},
			deltas: "Hel", failure: "model_error", errHas: "llama boom"},
		{name: "llama.cpp data error", events: []string{chunk("Hel"), `data: {"error":{"code":500,"message":"llama data boom","type":"server_error"}}` + "\n\n"},
			deltas: "Hel", failure: "model_error", errHas: "llama data boom"},
		{name: "malformed chunk", events: []string{chunk("Hel"), "data: {not json\n\n", chunk("lo"), done},
			deltas: "Hel", failure: "model_error", errHas: "malformed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeLLM(t, func(n int, w http.ResponseWriter, r *http.Request) {
				if n == 0 {
					sse(w, tc.events...)
					return
				}
				sse(w, chunk("again"), done)
			})
			w := start(t, cfgFor(f))
			w.send(1, "prompt", map[string]any{"text": "hi", "turn_id": "t1"})
			got := w.until(isReply(1))
			if d := deltas(got); d != tc.deltas {
				t.Errorf("deltas %q, want %q", d, tc.deltas)
			}
			r := got[len(got)-1]
			if tc.failure != "" {
				if *r.OK || r.Failure != tc.failure || !strings.Contains(r.Error, tc.errHas) {
					t.Fatalf("reply %+v, want failure %s with %q", r, tc.failure, tc.errHas)
				}
			} else {
				if !*r.OK || r.Result["status"] != tc.status || r.Result["output"] != tc.deltas || r.Result["interrupted"] != false {
					t.Fatalf("reply %+v, want status %s output %q", r, tc.status, tc.deltas)
				}
				u, _ := r.Result["usage"].(map[string]any)
				if tc.usage != (u != nil) || (u != nil && (u["input_tokens"] != 11.0 || u["output_tokens"] != 2.0)) {
					t.Errorf("usage %v, want it: %v", r.Result["usage"], tc.usage)
				}
			}
			// The worker survives and answers the next prompt.
			w.send(2, "prompt", map[string]any{"text": "again"})
			if r := w.reply(2); !*r.OK || r.Result["output"] != "again" {
				t.Errorf("second prompt: reply %+v", r)
			}
		})
	}
}

func TestRequestCarriesModelHistoryAndKey(t *testing.T) {
	t.Parallel()
	f := newFakeLLM(t, replay(chunk("ok"), done))
	cfg := cfgFor(f)
	cfg.SystemPrompt = "be brief"
	w := start(t, cfg)
	history := []map[string]string{
		{"role": "user", "kind": "prompt", "text": "first question"},
		{"role": "assistant", "kind": "reply", "text": "first answer"},
		{"role": "tool", "kind": "tool_call", "text": "ls"},
		{"role": "tool", "kind": "tool_result", "text": "a.txt"},
		{"role": "system", "kind": "error", "text": "worker crashed"},
		{"role": "user", "kind": "slash", "text": "/time"},
		{"role": "assistant", "kind": "slash_output", "text": "noon"},
	}
	w.send(1, "prompt", map[string]any{"text": "second question", "turn_id": "t2", "history": history, "model": "param-model"})
	w.until(isReply(1))
	w.send(2, "prompt", map[string]any{"text": "third"})
	w.until(isReply(2))

	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	r := reqs[0]
	if r.Auth != "Bearer "+apiKey {
		t.Errorf("Authorization %q", r.Auth)
	}
	if r.Body.Model != "param-model" || !r.Body.Stream || r.Body.StreamOptions["include_usage"] != true {
		t.Errorf("model %q stream %v options %v", r.Body.Model, r.Body.Stream, r.Body.StreamOptions)
	}
	if len(r.Body.Tools) != 0 {
		t.Errorf("tools offered without DASHGATE_AGENT_TOOLS=shell: %s", r.Body.Tools)
	}
	want := []message{
		{Role: "system", Content: "be brief"},
		{Role: "user", Content: "first question"},
		{Role: "assistant", Content: "first answer"},
		{Role: "assistant", Content: "[shell] $ ls\na.txt"},
		{Role: "user", Content: "/time"},
		{Role: "assistant", Content: "noon"},
		{Role: "user", Content: "second question"},
	}
	got := r.messages(t)
	if len(got) != len(want) {
		t.Fatalf("messages %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Role != want[i].Role || got[i].Content != want[i].Content {
			t.Errorf("message %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if reqs[1].Body.Model != "env-model" {
		t.Errorf("without params.model: model %q, want the configured env-model", reqs[1].Body.Model)
	}
}

func TestModelFromServerList(t *testing.T) {
	t.Parallel()
	f := newFakeLLM(t, replay(chunk("ok"), done))
	cfg := cfgFor(f)
	cfg.Model = ""
	w := start(t, cfg)
	w.send(1, "prompt", map[string]any{"text": "hi"})
	if r := w.until(isReply(1)); !*r[len(r)-1].OK {
		t.Fatalf("reply %+v", r[len(r)-1])
	}
	if m := f.requests()[0].Body.Model; m != "listed-model" {
		t.Errorf("model %q, want the first of /models", m)
	}
}

func TestHTTPFailures(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status     int
		header     map[string]string
		failure    string
		err        string
		retryAfter int
	}{
		{status: 401, failure: "model_auth", err: "the model server refused the API key"},
		{status: 403, failure: "model_auth", err: "the model server refused the API key"},
		{status: 404, failure: "model_not_found", err: `the model server does not know model "env-model"`},
		{status: 429, header: map[string]string{"Retry-After": "7"}, failure: "rate_limited", err: "the model server is rate limiting; retry after 7 s", retryAfter: 7},
		{status: 500, failure: "model_error", err: "the model server failed: kaput (HTTP 500)"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			t.Parallel()
			f := newFakeLLM(t, func(n int, w http.ResponseWriter, r *http.Request) {
				if n > 0 {
					sse(w, chunk("fine"), done)
					return
				}
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				io.WriteString(w, `{"error":{"message":"kaput","type":"x","code":null}}`)
			})
			w := start(t, cfgFor(f))
			w.send(1, "prompt", map[string]any{"text": "hi"})
			r := w.reply(1)
			if *r.OK || r.Failure != tc.failure || r.Error != tc.err || r.RetryAfter != tc.retryAfter {
				t.Fatalf("reply %+v, want %s %q retry_after %d", r, tc.failure, tc.err, tc.retryAfter)
			}
			if len(f.requests()) != 1 {
				t.Errorf("%d requests: the worker retried by itself", len(f.requests()))
			}
			w.send(2, "prompt", map[string]any{"text": "again"})
			if got := w.until(isReply(2)); got[len(got)-1].Result["output"] != "fine" {
				t.Errorf("second prompt %+v", got[len(got)-1])
			}
			if strings.Contains(w.stderr.String(), apiKey) {
				t.Errorf("the API key is in stderr: %q", w.stderr.String())
			}
		})
	}
}

func TestConnectionRefused(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String() + "/v1"
	l.Close()
	w := start(t, agent.Config{LLMURL: url, Model: "m", APIKey: apiKey})
	for id := 1; id <= 2; id++ { // it survives and answers again
		w.send(id, "prompt", map[string]any{"text": "hi"})
		r := w.until(isReply(id))[0]
		if *r.OK || r.Failure != "model_unreachable" || r.Error != "cannot reach the model server at "+url {
			t.Fatalf("reply %+v", r)
		}
	}
}

// silentListener accepts connections and never answers on them.
func silentListener(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
		for _, c := range conns {
			c.Close()
		}
	})
	return l
}

// fullListener is a listening socket with a backlog of 0 that never
// accepts, its one queue place taken: the kernel drops the SYN of every
// further connect, which hangs until its own timeout.
func fullListener(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	// Fill the queue: connects succeed (the kernel completes them) until
	// one is dropped.
	for range 8 {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			return addr
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Fatal("the listener's queue never filled")
	return ""
}

// TestModelServerSilent: a server that never connects, or connects and
// never answers, fails the prompt as model_unreachable within the agent's
// own bounds (here short, set by the test), not the gateway's silence
// timeout; the worker answers the next prompt.
func TestModelServerSilent(t *testing.T) {
	t.Parallel()
	accepts := "http://" + silentListener(t).Addr().String() + "/v1"
	full := "http://" + fullListener(t) + "/v1"
	cases := []struct {
		name    string
		cfg     agent.Config
		wantErr string
	}{
		{name: "no headers", cfg: agent.Config{LLMURL: accepts, HeaderTimeout: 200 * time.Millisecond, ConnectTimeout: time.Hour},
			wantErr: "cannot reach the model server at " + accepts + ": no answer within 200ms"},
		{name: "no connect", cfg: agent.Config{LLMURL: full, ConnectTimeout: 200 * time.Millisecond, HeaderTimeout: time.Hour},
			wantErr: "cannot reach the model server at " + full},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.cfg.Model = "m"
			w := start(t, tc.cfg)
			for id := 1; id <= 2; id++ {
				w.send(id, "prompt", map[string]any{"text": "hi"})
				if r := w.reply(id); *r.OK || r.Failure != "model_unreachable" || r.Error != tc.wantErr {
					t.Fatalf("reply %+v, want model_unreachable %q", r, tc.wantErr)
				}
			}
		})
	}
}

// TestJSONAnswer: a server that ignores "stream" and answers one
// chat.completion object gives a complete reply: its content as deltas,
// its usage, and its tool calls run as a stream's would.
func TestJSONAnswer(t *testing.T) {
	t.Parallel()
	completion := func(message string) string {
		return `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":` + message +
			`,"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}`
	}
	answers := []string{
		completion(`{"role":"assistant","content":"Let me look. ","tool_calls":[{"id":"call_9","type":"function","function":{"name":"shell","arguments":"{\"command\":\"echo hi\"}"}}]}`),
		completion(`{"role":"assistant","content":"It says hi."}`),
	}
	f := newFakeLLM(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		io.WriteString(w, answers[n])
	})
	w := start(t, toolCfg(f, t.TempDir()))
	w.send(1, "prompt", map[string]any{"text": "look"})
	got := w.until(isEvent("approval"))
	w.send(2, "approval", map[string]any{"request_id": got[len(got)-1].RequestID, "choice": "once", "by": "v"})
	got = append(got, w.until(isReply(1))...)
	r := got[len(got)-1]
	if d := deltas(got); d != "Let me look. It says hi." || !*r.OK || r.Result["status"] != "complete" || r.Result["output"] != d {
		t.Fatalf("deltas %q, reply %+v", d, r)
	}
	if u, _ := r.Result["usage"].(map[string]any); u["input_tokens"] != 10.0 || u["output_tokens"] != 6.0 {
		t.Errorf("usage %v, want both answers summed", r.Result["usage"])
	}
	var ran bool
	for _, l := range got {
		ran = ran || (l.Event == "tool_complete" && l.Output == "hi\n")
	}
	if !ran {
		t.Errorf("the tool call of the JSON answer did not run: %+v", got)
	}
	if m := f.requests()[1].messages(t); len(m) != 3 || m[2].Role != "tool" || m[2].ToolCallID != "call_9" {
		t.Errorf("second request messages %+v", m)
	}
}

// TestLargeDelta: one chunk far over the protocol's line limit reaches
// the gateway as deltas that each fit a line, cut between characters,
// and the reply line fits too.
func TestLargeDelta(t *testing.T) {
	t.Parallel()
	big := "a" + strings.Repeat("é€𝄞", 200<<10) // 9 bytes a repeat: cuts would fall inside characters
	f := newFakeLLM(t, replay(chunk(big), done))
	w := start(t, cfgFor(f))
	w.send(1, "prompt", map[string]any{"text": "hi"})
	got := w.until(isReply(1)) // the test's reader fails on a line over 1 MiB
	n := 0
	for _, l := range got {
		if l.Event == "delta" {
			n++
			if !utf8.ValidString(l.Text) {
				t.Fatalf("delta %d is cut inside a character", n)
			}
		}
	}
	r := got[len(got)-1]
	if d := deltas(got); d != big || n < 2 || !*r.OK || r.Result["status"] != "complete" {
		t.Fatalf("%d deltas of %d bytes (want %d), reply ok %v status %v", n, len(d), len(big), *r.OK, r.Result["status"])
	}
}

func TestKeyNeverInStderr(t *testing.T) {
	t.Parallel()
	f := newFakeLLM(t, replay(chunk("ok"), done))
	cfg := cfgFor(f)
	cfg.LLMURL = strings.Replace(f.url(), "http://", "http://user:"+apiKey+"@", 1)
	w := start(t, cfg)
	w.in.Write([]byte("not json " + apiKey + "\n"))
	w.send(1, "prompt", map[string]any{"text": "hi"})
	w.until(isReply(1))
	w.in.Close()
	<-w.exited
	if s := w.stderr.String(); strings.Contains(s, apiKey) || !strings.Contains(s, "ready") {
		t.Errorf("stderr %q: want the ready line and no key", s)
	}
}

// slowLLM streams one chunk and then holds the request until the client
// goes away, closing cancelled when it saw that.
func slowLLM(t *testing.T) (*fakeLLM, chan struct{}) {
	cancelled := make(chan struct{})
	f := newFakeLLM(t, func(n int, w http.ResponseWriter, r *http.Request) {
		sse(w, chunk("Hel"))
		select {
		case <-r.Context().Done():
			close(cancelled)
		case <-time.After(deadline):
		}
	})
	return f, cancelled
}

func TestCancelAbortsRequest(t *testing.T) {
	t.Parallel()
	f, cancelled := slowLLM(t)
	w := start(t, cfgFor(f))
	w.send(1, "prompt", map[string]any{"text": "hi"})
	if l := w.next(); l.Event != "delta" || l.Text != "Hel" {
		t.Fatalf("first line %+v, want the delta at once", l)
	}
	w.send(2, "cancel", map[string]any{"id": 1})
	got := w.until(func(l line) bool { return isReply(1)(l) })
	r := got[len(got)-1]
	if !*r.OK || r.Result["output"] != "Hel" || r.Result["interrupted"] != true || r.Result["status"] != "interrupted" {
		t.Fatalf("reply %+v", r)
	}
	select {
	case <-cancelled:
	case <-time.After(deadline):
		t.Fatal("the server never saw the request cancelled")
	}
}

func TestStdinEOFCancels(t *testing.T) {
	t.Parallel()
	f, cancelled := slowLLM(t)
	w := start(t, cfgFor(f))
	w.send(1, "prompt", map[string]any{"text": "hi"})
	w.next()
	w.in.Close()
	select {
	case <-w.exited:
	case <-time.After(deadline):
		t.Fatal("Run did not return on stdin EOF")
	}
	select {
	case <-cancelled:
	case <-time.After(deadline):
		t.Fatal("the server never saw the request cancelled")
	}
}

// toolLLM asks for `shell {"command": cmd}` (its arguments in 3 pieces) on
// the first request, and answers "done" on the next.
func toolLLM(t *testing.T, cmd string) *fakeLLM {
	args, _ := json.Marshal(map[string]string{"command": cmd})
	a := string(args)
	p1, p2, p3 := a[:5], a[5:len(a)-4], a[len(a)-4:]
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	return newFakeLLM(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 0 {
			sse(w,
				chunk("Let me look. "),
				toolChunk(`{"index":0,"id":"call_1","type":"function","function":{"name":"shell","arguments":`+q(p1)+`}}`),
				": ping\n\n",
				toolChunk(`{"index":0,"function":{"arguments":`+q(p2)+`}}`),
				toolChunk(`{"index":0,"function":{"arguments":`+q(p3)+`}}`),
				usageChunk, done)
			return
		}
		sse(w, chunk("done"), usageChunk, done)
	})
}

func toolCfg(f *fakeLLM, dir string) agent.Config {
	cfg := cfgFor(f)
	cfg.ShellTool = true
	cfg.ToolDir = dir
	return cfg
}

func TestToolApproved(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f := toolLLM(t, "echo hi > file; echo out; echo err >&2")
	w := start(t, toolCfg(f, dir))
	w.send(1, "prompt", map[string]any{"text": "make a file"})
	got := w.until(isEvent("approval"))
	a := got[len(got)-1]
	if a.Tool != "shell" || a.Command != "echo hi > file; echo out; echo err >&2" || a.RequestID == "" {
		t.Fatalf("approval %+v", a)
	}
	if _, err := os.Stat(filepath.Join(dir, "file")); err == nil {
		t.Fatal("the command ran before its approval")
	}
	w.send(2, "approval", map[string]any{"request_id": "nope", "choice": "once", "by": "v"})
	if r := w.reply(2); *r.OK {
		t.Errorf("unknown request_id answered ok: %+v", r)
	}
	w.send(3, "approval", map[string]any{"request_id": a.RequestID, "choice": "once", "by": "viewer-1"})
	got = w.until(isReply(1))
	var start, complete *line
	var ok3 bool
	for i := range got {
		switch {
		case got[i].Event == "tool_start":
			start = &got[i]
		case got[i].Event == "tool_complete":
			complete = &got[i]
		case isReply(3)(got[i]):
			ok3 = *got[i].OK
		}
	}
	if !ok3 {
		t.Error("the approval request was not answered ok")
	}
	if start == nil || complete == nil || start.ToolID == "" || start.ToolID != complete.ToolID || start.Command != a.Command {
		t.Fatalf("tool events start %+v complete %+v", start, complete)
	}
	if *complete.ExitCode != 0 || complete.Output != "out\nerr\n" || complete.Truncated {
		t.Errorf("tool_complete %+v", complete)
	}
	b, err := os.ReadFile(filepath.Join(dir, "file"))
	if err != nil || string(b) != "hi\n" {
		t.Fatalf("file: %q, %v", b, err)
	}
	r := got[len(got)-1]
	if r.Result["output"] != "Let me look. done" || r.Result["status"] != "complete" {
		t.Errorf("reply %+v", r)
	}
	if u := r.Result["usage"].(map[string]any); u["input_tokens"] != 22.0 {
		t.Errorf("usage %v: want both rounds summed", u)
	}
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	if len(reqs[0].Body.Tools) != 1 || !strings.Contains(string(reqs[0].Body.Tools[0]), `"shell"`) {
		t.Errorf("tools %s", reqs[0].Body.Tools)
	}
	msgs := reqs[1].messages(t)
	if len(msgs) != 3 {
		t.Fatalf("second request messages %+v", msgs)
	}
	asst, tool := msgs[1], msgs[2]
	if asst.Role != "assistant" || len(asst.ToolCalls) != 1 || asst.ToolCalls[0].ID != "call_1" ||
		asst.ToolCalls[0].Function.Name != "shell" || asst.ToolCalls[0].Function.Arguments != `{"command":"echo hi \u003e file; echo out; echo err \u003e\u00262"}` {
		t.Errorf("assistant message %+v", asst)
	}
	if tool.Role != "tool" || tool.ToolCallID != "call_1" || !strings.Contains(tool.Content, "exit code 0") || !strings.Contains(tool.Content, "out\nerr") {
		t.Errorf("tool message %+v", tool)
	}
}

func TestToolDenied(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f := toolLLM(t, "echo hi > file")
	w := start(t, toolCfg(f, dir))
	w.send(1, "prompt", map[string]any{"text": "make a file"})
	w.answerApproval("deny")
	got := w.until(isReply(1))
	for _, l := range got {
		if l.Event == "tool_start" || l.Event == "tool_complete" {
			t.Errorf("a denied tool ran: %+v", l)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "file")); err == nil {
		t.Error("the denied command ran")
	}
	if r := got[len(got)-1]; r.Result["output"] != "Let me look. done" {
		t.Errorf("reply %+v", r)
	}
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	if m := reqs[1].messages(t); len(m) != 3 || m[2].Role != "tool" || m[2].Content != "the user denied this command" {
		t.Errorf("second request messages %+v", m)
	}
}

func TestCancelWhileAwaitingApproval(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f := toolLLM(t, "echo hi > file")
	w := start(t, toolCfg(f, dir))
	w.send(1, "prompt", map[string]any{"text": "make a file"})
	got := w.until(isEvent("approval"))
	reqID := got[len(got)-1].RequestID
	w.send(2, "cancel", map[string]any{"id": 1})
	got = w.until(isReply(1))
	if r := got[len(got)-1]; r.Result["status"] != "interrupted" || r.Result["output"] != "Let me look. " {
		t.Fatalf("reply %+v", r)
	}
	// A late approval finds nothing pending and nothing runs.
	w.send(3, "approval", map[string]any{"request_id": reqID, "choice": "once", "by": "v"})
	if r := w.reply(3); *r.OK {
		t.Errorf("late approval answered ok: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(dir, "file")); err == nil {
		t.Error("the command of a cancelled prompt ran")
	}
	if n := len(f.requests()); n != 1 {
		t.Errorf("%d requests after the cancel, want 1", n)
	}
}

func TestToolTimeoutKillsGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A background process of the command writes its pid; it must die with
	// the group when the time limit kills the command.
	f := toolLLM(t, "sh -c 'echo $$ > bg.pid; exec sleep 30' & while [ ! -s bg.pid ]; do :; done; echo started; sleep 30")
	cfg := toolCfg(f, dir)
	cfg.ToolTimeout = 300 * time.Millisecond
	w := start(t, cfg)
	w.send(1, "prompt", map[string]any{"text": "wait"})
	w.answerApproval("once")
	got := w.until(isEvent("tool_complete"))
	c := got[len(got)-1]
	if *c.ExitCode != -1 || c.Output != "started\n" {
		t.Errorf("tool_complete %+v", c)
	}
	w.until(isReply(1))
	m := f.requests()[1].messages(t)
	if !strings.Contains(m[2].Content, "time limit") {
		t.Errorf("tool result %q", m[2].Content)
	}
	b, err := os.ReadFile(filepath.Join(dir, "bg.pid"))
	if err != nil {
		t.Fatal(err)
	}
	waitGone(t, strings.TrimSpace(string(b)))
}

// waitGone polls until process pid is gone or a zombie (its parent, the
// killed shell, is gone and pid 1 of a container may not reap).
func waitGone(t *testing.T, pid string) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	end := time.After(deadline)
	for {
		b, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			return
		}
		if _, rest, ok := strings.Cut(string(b), ") "); ok && strings.HasPrefix(rest, "Z") {
			return
		}
		select {
		case <-tick.C:
		case <-end:
			t.Fatalf("process %s of the tool's group outlived it", pid)
		}
	}
}

func TestCancelKillsRunningTool(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f := toolLLM(t, "sh -c 'echo $$ > bg.pid.tmp; mv bg.pid.tmp bg.pid; exec sleep 30' & sleep 30")
	w := start(t, toolCfg(f, dir))
	w.send(1, "prompt", map[string]any{"text": "wait"})
	w.answerApproval("once")
	w.until(isEvent("tool_start"))
	pid := waitFile(t, filepath.Join(dir, "bg.pid"))
	w.send(3, "cancel", map[string]any{"id": 1})
	got := w.until(isReply(1))
	if r := got[len(got)-1]; r.Result["status"] != "interrupted" || r.Result["interrupted"] != true {
		t.Fatalf("reply %+v", r)
	}
	waitGone(t, pid)
	if n := len(f.requests()); n != 1 {
		t.Errorf("%d requests: the turn went on after its cancel", n)
	}
}

// waitFile polls until path exists and returns its trimmed content.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	end := time.After(deadline)
	for {
		if b, err := os.ReadFile(path); err == nil {
			return strings.TrimSpace(string(b))
		}
		select {
		case <-tick.C:
		case <-end:
			t.Fatalf("%s never appeared", path)
		}
	}
}

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		env     map[string]string
		want    agent.Config
		wantErr string
	}{
		{name: "all", env: map[string]string{
			"DASHGATE_LLM_URL": "http://h:8080/v1/", "DASHGATE_LLM_MODEL": "m", "DASHGATE_LLM_API_KEY": "k",
			"DASHGATE_AGENT_SYSTEM_PROMPT": "sys", "DASHGATE_AGENT_TOOLS": "shell",
			"DASHGATE_TOOL_TIMEOUT": "5s", "DASHGATE_TOOL_DIR": "/tmp",
			"DASHGATE_LLM_CONNECT_TIMEOUT": "2s", "DASHGATE_LLM_HEADER_TIMEOUT": "3s",
			"DASHGATE_LLM_IMAGE_MODELS": " gpt-4o* ,, *vision*",
		}, want: agent.Config{LLMURL: "http://h:8080/v1", Model: "m", APIKey: "k", SystemPrompt: "sys",
			ShellTool: true, ToolTimeout: 5 * time.Second, ToolDir: "/tmp", ConnectTimeout: 2 * time.Second, HeaderTimeout: 3 * time.Second,
			ImageModels: []string{"gpt-4o*", "*vision*"}}},
		{name: "url only", env: map[string]string{"DASHGATE_LLM_URL": "https://h/v1"}, want: agent.Config{LLMURL: "https://h/v1"}},
		{name: "no url", env: map[string]string{}, wantErr: "DASHGATE_LLM_URL is not set"},
		{name: "bad tools", env: map[string]string{"DASHGATE_LLM_URL": "http://h/v1", "DASHGATE_AGENT_TOOLS": "all"}, wantErr: "want shell or nothing"},
		{name: "bad timeout", env: map[string]string{"DASHGATE_LLM_URL": "http://h/v1", "DASHGATE_TOOL_TIMEOUT": "soon"}, wantErr: "positive Go duration"},
		{name: "bad header timeout", env: map[string]string{"DASHGATE_LLM_URL": "http://h/v1", "DASHGATE_LLM_HEADER_TIMEOUT": "0s"}, wantErr: "DASHGATE_LLM_HEADER_TIMEOUT=\"0s\": want a positive Go duration"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := agent.ConfigFromEnv(func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestIgnoresOpenAIEnvironment: the library's own OPENAI_* variables do not
// reach the requests (not parallel: it sets the environment).
func TestIgnoresOpenAIEnvironment(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-ambient")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	t.Setenv("OPENAI_ORG_ID", "org-ambient")
	f := newFakeLLM(t, replay(chunk("ok"), done))
	w := start(t, cfgFor(f))
	w.send(1, "prompt", map[string]any{"text": "hi"})
	if r := w.reply(1); !*r.OK {
		t.Fatalf("reply %+v", r)
	}
	if r := f.requests()[0]; r.Auth != "Bearer "+apiKey || r.Org != "" {
		t.Errorf("Authorization %q, OpenAI-Organization %q", r.Auth, r.Org)
	}
}
