package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"
)

// maxRounds bounds the model calls of one turn (each round after the first
// answers tool calls).
const maxRounds = 8

// FailureKind is the `failure` word of an ok:false prompt reply.
type FailureKind string

const (
	FailUnreachable FailureKind = "model_unreachable"
	FailAuth        FailureKind = "model_auth"
	FailNotFound    FailureKind = "model_not_found"
	FailRateLimited FailureKind = "rate_limited"
	FailModelError  FailureKind = "model_error"
)

// Failure is why a prompt got no answer: Message is one sentence a person
// understands.
type Failure struct {
	Kind       FailureKind
	Message    string
	RetryAfter int // seconds; 0 when the server did not say
}

func (f *Failure) Error() string { return f.Message }

// Prompt statuses (PROTOCOL.md §7).
const (
	statusComplete    = "complete"
	statusInterrupted = "interrupted"
	statusIncomplete  = "incomplete"
)

// turn is what one prompt accumulated over its rounds.
type turn struct {
	out                 strings.Builder
	usage               bool
	inTokens, outTokens int64
}

func (s *server) prompt(ctx context.Context, id json.RawMessage, p promptParams) {
	t := &turn{}
	finish := func(status string) {
		r := map[string]any{"interrupted": status == statusInterrupted, "status": status}
		if t.out.Len() <= maxDelta {
			r["output"] = t.out.String()
		} // else the reply line would outgrow the protocol's: the deltas are the output
		if t.usage {
			r["usage"] = map[string]any{"input_tokens": t.inTokens, "output_tokens": t.outTokens}
		}
		s.Reply(id, r)
	}
	model := p.Model
	if model == "" {
		model = s.cfg.Model
	}
	if model == "" {
		m, err := s.defaultModel(ctx)
		if ctx.Err() != nil {
			finish(statusInterrupted)
			return
		}
		if err != nil {
			s.failWith(id, err)
			return
		}
		model = m
	}
	msgs := s.messages(p)
	msgs[len(msgs)-1] = s.userMessage(ctx, id, model, p)
	for range maxRounds {
		calls, done, err := s.round(ctx, id, model, msgs, t)
		if ctx.Err() != nil {
			finish(statusInterrupted)
			return
		}
		if err != nil {
			s.failWith(id, err)
			return
		}
		if !done {
			finish(statusIncomplete)
			return
		}
		if len(calls) == 0 {
			finish(statusComplete)
			return
		}
		msgs = append(msgs, assistantToolCalls(calls))
		for _, c := range calls {
			result := s.runToolCall(ctx, id, c)
			if ctx.Err() != nil {
				finish(statusInterrupted)
				return
			}
			msgs = append(msgs, openai.ToolMessage(result, c.id))
		}
	}
	s.Logf("request %s: still calling tools after %d rounds, stopping", id, maxRounds)
	finish(statusIncomplete)
}

// messages builds the conversation: the system prompt, the history and
// the new text. Tool entries fold into assistant text ("[shell] $ cmd\n
// output") since the history keeps no tool call ids; errors and notices
// are left out.
func (s *server) messages(p promptParams) []openai.ChatCompletionMessageParamUnion {
	var msgs []openai.ChatCompletionMessageParamUnion
	if sys := systemMessage(s.cfg.SystemPrompt, p.System); sys != "" {
		msgs = append(msgs, openai.SystemMessage(sys))
	}
	var tool strings.Builder // a folded tool call and its result
	flush := func() {
		if tool.Len() > 0 {
			msgs = append(msgs, openai.AssistantMessage(tool.String()))
			tool.Reset()
		}
	}
	for _, e := range p.History {
		switch {
		case e.Role == "tool" && e.Kind == "tool_call":
			flush()
			fmt.Fprintf(&tool, "[shell] $ %s\n", e.Text)
		case e.Role == "tool":
			if tool.Len() == 0 {
				tool.WriteString("[shell]\n")
			}
			tool.WriteString(e.Text)
			flush()
		case e.Role == "user":
			flush()
			msgs = append(msgs, openai.UserMessage(e.Text))
		case e.Role == "assistant":
			flush()
			if e.Text != "" {
				msgs = append(msgs, openai.AssistantMessage(e.Text))
			}
		}
	}
	flush()
	return append(msgs, openai.UserMessage(p.Text))
}

// systemMessage is the text of a request's one system message: the
// operator's prompt (--agent-system-prompt), then the user's (settings),
// a blank line apart; "" when neither is set.
func systemMessage(operator, user string) string {
	switch {
	case operator == "":
		return user
	case user == "":
		return operator
	}
	return operator + "\n\n" + user
}

type toolCall struct {
	id, name string
	args     strings.Builder
}

func assistantToolCalls(calls []*toolCall) openai.ChatCompletionMessageParamUnion {
	var tc []openai.ChatCompletionMessageToolCallUnionParam
	for _, c := range calls {
		tc = append(tc, openai.ChatCompletionMessageToolCallUnionParam{
			OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
				ID:       c.id,
				Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.name, Arguments: c.args.String()},
			},
		})
	}
	return openai.ChatCompletionMessageParamUnion{OfAssistant: &openai.ChatCompletionAssistantMessageParam{ToolCalls: tc}}
}

var shellTool = openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
	Name:        "shell",
	Description: param.NewOpt("Run a shell command in the working directory"),
	Parameters: shared.FunctionParameters{
		"type": "object",
		"properties": map[string]any{
			"command": map[string]any{"type": "string", "description": "the command, run with /bin/sh -c"},
		},
		"required": []string{"command"},
	},
})

// round streams one chat completion: deltas go out as they arrive and into
// t. It returns the tool calls the model made, whether the stream ended
// with [DONE], and a Failure.
func (s *server) round(ctx context.Context, id json.RawMessage, model string, msgs []openai.ChatCompletionMessageParamUnion, t *turn) ([]*toolCall, bool, *Failure) {
	params := openai.ChatCompletionNewParams{
		Model:         model,
		Messages:      msgs,
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	if s.cfg.ShellTool {
		params.Tools = []openai.ChatCompletionToolUnionParam{shellTool}
	}
	w := &sseWatch{}
	st := s.chat.NewStreaming(ctx, params, option.WithMiddleware(w.middleware))
	defer st.Close()
	var calls []*toolCall
	byIndex := map[int64]*toolCall{}
	for st.Next() {
		ch := st.Current()
		if ch.JSON.Usage.Valid() {
			t.usage = true
			t.inTokens += ch.Usage.PromptTokens
			t.outTokens += ch.Usage.CompletionTokens
		}
		for _, c := range ch.Choices {
			s.delta(id, t, c.Delta.Content)
			for _, tc := range c.Delta.ToolCalls {
				call := byIndex[tc.Index]
				if call == nil {
					call = &toolCall{}
					byIndex[tc.Index] = call
					calls = append(calls, call)
				}
				if tc.ID != "" {
					call.id = tc.ID
				}
				if tc.Function.Name != "" {
					call.name = tc.Function.Name
				}
				call.args.WriteString(tc.Function.Arguments)
			}
		}
	}
	err := st.Err()
	if ctx.Err() != nil {
		return calls, false, nil
	}
	if msg, ok := w.errorMessage(); ok {
		return nil, false, modelError(msg)
	}
	if err != nil {
		return nil, false, s.classify(err, model)
	}
	if b := w.jsonAnswer(); b != nil {
		return s.completion(id, t, b)
	}
	return calls, w.sawDone(), nil
}

// completion takes the answer of a server that ignored "stream": one
// chat.completion object is the whole answer, as complete as a stream
// that ended with [DONE] (or an error object, as in a stream).
func (s *server) completion(id json.RawMessage, t *turn, body []byte) ([]*toolCall, bool, *Failure) {
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && len(e.Error) > 0 && string(e.Error) != "null" {
		return nil, false, modelError(errorText(e.Error))
	}
	var cc openai.ChatCompletion
	if err := json.Unmarshal(body, &cc); err != nil {
		return nil, false, &Failure{Kind: FailModelError, Message: "the model server sent a malformed response: " + err.Error()}
	}
	if cc.JSON.Usage.Valid() {
		t.usage = true
		t.inTokens += cc.Usage.PromptTokens
		t.outTokens += cc.Usage.CompletionTokens
	}
	var calls []*toolCall
	if len(cc.Choices) > 0 {
		m := cc.Choices[0].Message
		s.delta(id, t, m.Content)
		for _, tc := range m.ToolCalls {
			call := &toolCall{id: tc.ID, name: tc.Function.Name}
			call.args.WriteString(tc.Function.Arguments)
			calls = append(calls, call)
		}
	}
	return calls, true, nil
}

// maxDelta bounds the text of one delta event, bytes: escaped as JSON (at
// most 6 bytes a byte) it stays well inside the protocol's 1 MiB line,
// whatever one chunk of the model server holds.
const maxDelta = 128 << 10

// delta adds text to t and streams it in delta events of at most maxDelta
// bytes each, cut between UTF-8 characters.
func (s *server) delta(id json.RawMessage, t *turn, text string) {
	t.out.WriteString(text)
	for text != "" {
		n := len(text)
		if n > maxDelta {
			n = maxDelta
			for n > maxDelta-utf8.UTFMax && !utf8.RuneStart(text[n]) {
				n--
			}
		}
		s.Event(id, "delta", map[string]any{"text": text[:n]})
		text = text[n:]
	}
}

func modelError(msg string) *Failure {
	msg = strings.TrimSpace(msg)
	if msg == "" {
		msg = "no message"
	}
	return &Failure{Kind: FailModelError, Message: "the model server failed: " + strings.TrimSuffix(msg, ".")}
}

// classify turns a request's error into a Failure.
func (s *server) classify(err error, model string) *Failure {
	var api *openai.Error
	if errors.As(err, &api) {
		msg := api.Message
		if msg == "" {
			msg = http.StatusText(api.StatusCode)
		}
		switch {
		case api.StatusCode == http.StatusUnauthorized || api.StatusCode == http.StatusForbidden:
			return &Failure{Kind: FailAuth, Message: "the model server refused the API key"}
		case api.StatusCode == http.StatusNotFound || api.Code == "model_not_found":
			return &Failure{Kind: FailNotFound, Message: fmt.Sprintf("the model server does not know model %q", model)}
		case api.StatusCode == http.StatusTooManyRequests:
			f := &Failure{Kind: FailRateLimited, Message: "the model server is rate limiting; retry later"}
			if api.Response != nil {
				if n := retryAfter(api.Response.Header.Get("Retry-After"), time.Now()); n > 0 {
					f.RetryAfter = n
					f.Message = fmt.Sprintf("the model server is rate limiting; retry after %d s", n)
				}
			}
			return f
		default:
			return modelError(fmt.Sprintf("%s (HTTP %d)", msg, api.StatusCode))
		}
	}
	var opErr *net.OpError
	var dnsErr *net.DNSError
	var netErr net.Error
	switch {
	case errors.As(err, &dnsErr) || errors.As(err, &opErr): // refused, or no connect within ConnectTimeout
		return &Failure{Kind: FailUnreachable, Message: "cannot reach the model server at " + redact(s.cfg.LLMURL)}
	case errors.As(err, &netErr) && netErr.Timeout(): // connected, no headers within HeaderTimeout
		return &Failure{Kind: FailUnreachable, Message: fmt.Sprintf("cannot reach the model server at %s: no answer within %s",
			redact(s.cfg.LLMURL), s.cfg.HeaderTimeout)}
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	if errors.As(err, &syn) || errors.As(err, &typ) {
		return &Failure{Kind: FailModelError, Message: "the model server sent a malformed response: " + err.Error()}
	}
	return modelError(err.Error())
}

// retryAfter reads a Retry-After header (seconds or an HTTP date) as whole
// seconds, 0 when absent or past.
func retryAfter(h string, now time.Time) int {
	if h == "" {
		return 0
	}
	if n, err := strconv.Atoi(strings.TrimSpace(h)); err == nil && n > 0 {
		return n
	}
	if t, err := http.ParseTime(h); err == nil && t.After(now) {
		return int(t.Sub(now).Round(time.Second) / time.Second)
	}
	return 0
}

// defaultModel asks the server for its models once and keeps the first id.
func (s *server) defaultModel(ctx context.Context) (string, *Failure) {
	s.mu.Lock()
	m := s.model
	s.mu.Unlock()
	if m != "" {
		return m, nil
	}
	page, err := s.models.List(ctx)
	if err != nil {
		return "", s.classify(err, "(default)")
	}
	if len(page.Data) == 0 || page.Data[0].ID == "" {
		return "", &Failure{Kind: FailNotFound, Message: "the model server lists no models and none was configured"}
	}
	s.mu.Lock()
	s.model = page.Data[0].ID
	s.mu.Unlock()
	return page.Data[0].ID, nil
}

// sseWatch reads the raw SSE lines of a streamed response as the library
// consumes them, for the two things the library does not tell: whether
// `data: [DONE]` came, and llama.cpp's `error: {...}` line (also the
// `data: {"error":...}` dialects, for their plain message).
//
// A JSON answer (Content-Type application/json: the server ignored
// "stream") is read whole here instead, for server.completion, and the
// library gets an empty stream.
type sseWatch struct {
	mu     sync.Mutex
	done   bool
	errMsg string
	hasErr bool
	part   []byte // an unfinished line

	json []byte // a JSON answer, read whole
}

func (w *sseWatch) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	res, err := next(req)
	if err != nil || res == nil || res.Body == nil || res.StatusCode >= 300 {
		return res, err
	}
	if mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type")); mt != "application/json" {
		res.Body = &watchedBody{ReadCloser: res.Body, w: w}
		return res, nil
	}
	b, err := io.ReadAll(io.LimitReader(res.Body, maxLine+1))
	res.Body.Close()
	res.Body = http.NoBody
	switch {
	case err != nil:
		return nil, err
	case len(b) > maxLine:
		return nil, fmt.Errorf("a JSON answer over %d bytes", maxLine)
	}
	w.mu.Lock()
	w.json = b
	w.mu.Unlock()
	return res, nil
}

type watchedBody struct {
	io.ReadCloser
	w *sseWatch
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.w.feed(p[:n])
	return n, err
}

func (w *sseWatch) feed(p []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.part = append(w.part, p...)
	for {
		i := bytes.IndexByte(w.part, '\n')
		if i < 0 {
			break
		}
		w.line(bytes.TrimRight(w.part[:i], "\r"))
		w.part = w.part[i+1:]
	}
	if len(w.part) > 1<<20 {
		w.part = nil // a line this long is no marker
	}
}

func (w *sseWatch) line(l []byte) {
	field, value, ok := bytes.Cut(l, []byte(":"))
	if !ok || len(field) == 0 {
		return // a blank line or a `: comment`
	}
	value = bytes.TrimPrefix(value, []byte(" "))
	switch string(field) {
	case "data":
		if bytes.Equal(bytes.TrimSpace(value), []byte("[DONE]")) {
			w.done = true
			return
		}
		var v struct {
			Error json.RawMessage `json:"error"`
		}
		if bytes.Contains(value, []byte(`"error"`)) && json.Unmarshal(value, &v) == nil && len(v.Error) > 0 && string(v.Error) != "null" {
			w.setError(v.Error)
		}
	case "error":
		w.setError(value)
	}
}

// setError keeps the first error's message.
func (w *sseWatch) setError(raw []byte) {
	if w.hasErr {
		return
	}
	w.hasErr = true
	w.errMsg = errorText(raw)
}

// errorText is the message of an error object: {"message"}, a JSON
// string or the raw text.
func errorText(raw []byte) string {
	var obj struct {
		Message string `json:"message"`
	}
	var str string
	switch {
	case json.Unmarshal(raw, &obj) == nil && obj.Message != "":
		return obj.Message
	case json.Unmarshal(raw, &str) == nil:
		return str
	}
	return string(raw)
}

func (w *sseWatch) sawDone() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.done
}

func (w *sseWatch) jsonAnswer() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.json
}

func (w *sseWatch) errorMessage() (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.errMsg, w.hasErr
}
