package handlers_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/internal/testkit"
)

// answerShape is a frame of answers reduced to what the specification
// fixes: each answer's id and its result or error code ({"id","result"} or
// {"id","code"}); a batch's answers stay an array. It fails the test on a
// frame that is not JSON-RPC 2.0 answers.
func answerShape(t *testing.T, data []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("frame %s: %v", data, err)
	}
	one := func(v any) any {
		m, ok := v.(map[string]any)
		if !ok || m["jsonrpc"] != "2.0" {
			t.Fatalf("not a JSON-RPC 2.0 answer: %s", data)
		}
		if e, ok := m["error"].(map[string]any); ok {
			return map[string]any{"id": m["id"], "code": e["code"]}
		}
		return map[string]any{"id": m["id"], "result": m["result"]}
	}
	if list, ok := v.([]any); ok {
		out := []any{}
		for _, a := range list {
			out = append(out, one(a))
		}
		return out
	}
	return one(v)
}

// nextAnswer is the shape of the next frame that is neither an event nor
// the reply to a call, the answer to what.
func (cc *chatClient) nextAnswer(what string) any {
	cc.t.Helper()
	ctx, cancel := cc.ctx()
	defer cancel()
	f, err := cc.Next(ctx)
	if err != nil {
		cc.t.Fatalf("%s: no answer: %v", what, err)
	}
	return answerShape(cc.t, f.Data)
}

// probe sends a request after whatever came before it and checks that its
// answer is the next frame: nothing else was answered meanwhile. It holds
// only while the socket runs one request at a time (MaxInflight 1).
func (cc *chatClient) probe(after string) {
	cc.t.Helper()
	id, _ := json.Marshal("after " + after)
	cc.sendRaw(`{"jsonrpc":"2.0","id":` + string(id) + `,"method":"model.list"}`)
	want := map[string]any{"id": "after " + after, "result": map[string]any{"models": []any{}, "default": ""}}
	if got := cc.nextAnswer("the request after " + after); !reflect.DeepEqual(got, want) {
		cc.t.Fatalf("after %s: next frame %v, want the answer of the request sent after it", after, got)
	}
}

// TestRPCSpecExamples: the examples of §7 of the JSON-RPC 2.0
// specification, answered as it says: a notification and a batch of
// notifications by nothing, a batch by one array of answers (an invalid
// element by -32600 with id null in its place), invalid JSON by one -32700
// and an empty batch by one -32600, never an array. Its subtract, sum and
// get_data become session.rename and model.list; foobar, update and the
// rest stay methods that do not exist.
func TestRPCSpecExamples(t *testing.T) {
	t.Parallel()
	// One request at a time: every answer is the frame after its request.
	e := newEnv(t, envOpts{chat: func(c *handlers.Chat) { c.MaxInflight = 1 }})
	cc := e.chat()
	sid := cc.create()
	notify := `{"jsonrpc":"2.0","method":"notify_hello","params":[7]}`
	tests := []struct {
		name  string
		frame string
		want  string // "": no answer
	}{
		{"call with named params", `{"jsonrpc":"2.0","method":"session.rename","params":{"session_id":"SID","title":"subtract"},"id":3}`,
			`{"id":3,"result":{"renamed":true,"title":"subtract"}}`},
		{"call with positional params", `{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":1}`, `{"id":1,"code":-32602}`},
		{"notification", `{"jsonrpc":"2.0","method":"update","params":[1,2,3,4,5]}`, ``},
		{"notification without params", `{"jsonrpc":"2.0","method":"foobar"}`, ``},
		{"non-existent method", `{"jsonrpc":"2.0","method":"foobar","id":"1"}`, `{"id":"1","code":-32601}`},
		{"invalid JSON", `{"jsonrpc":"2.0","method":"foobar, "params":"bar", "baz]`, `{"id":null,"code":-32700}`},
		{"invalid Request object", `{"jsonrpc":"2.0","method":1,"params":"bar"}`, `{"id":null,"code":-32600}`},
		{"batch, invalid JSON", `[{"jsonrpc":"2.0","method":"sum","params":[1,2,4],"id":"1"},{"jsonrpc":"2.0","method"]`, `{"id":null,"code":-32700}`},
		{"empty array", `[]`, `{"id":null,"code":-32600}`},
		{"invalid batch of one", `[1]`, `[{"id":null,"code":-32600}]`},
		{"invalid batch", `[1,2,3]`, `[{"id":null,"code":-32600},{"id":null,"code":-32600},{"id":null,"code":-32600}]`},
		{"batch", `[
			{"jsonrpc":"2.0","method":"session.rename","params":{"session_id":"SID","title":"sum"},"id":"1"},
			{"jsonrpc":"2.0","method":"notify_hello","params":[7]},
			{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":"2"},
			{"foo":"boo"},
			{"jsonrpc":"2.0","method":"foo.get","params":{"name":"myself"},"id":"5"},
			{"jsonrpc":"2.0","method":"model.list","id":"9"}
		]`, `[{"id":"1","result":{"renamed":true,"title":"sum"}},{"id":"2","code":-32602},{"id":null,"code":-32600},
			{"id":"5","code":-32601},{"id":"9","result":{"models":[],"default":""}}]`},
		{"notification of a method that exists", `{"jsonrpc":"2.0","method":"session.rename","params":{"session_id":"SID","title":"x"}}`, ``},
		{"batch of notifications", `[{"jsonrpc":"2.0","method":"notify_sum","params":[1,2,4]},{"jsonrpc":"2.0","method":"notify_hello","params":[7]}]`, ``},
		{"batch of MaxBatch", "[" + strings.Repeat(notify+",", handlers.MaxBatch-1) + notify + "]", ``},
		{"batch over MaxBatch", "[" + strings.Repeat(notify+",", handlers.MaxBatch) + notify + "]", `{"id":null,"code":-32600}`},
	}
	for _, tt := range tests {
		cc.sendRaw(strings.ReplaceAll(tt.frame, "SID", sid))
		if tt.want != "" {
			var want any
			if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
				t.Fatal(err)
			}
			if got := cc.nextAnswer(tt.name); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: answer %v, want %v", tt.name, got, want)
			}
		}
		cc.probe(tt.name)
	}
	// The notification of session.rename, after the batch's, was not run.
	if list := cc.call("session.list", nil)["sessions"].([]any); list[0].(map[string]any)["title"] != "sum" {
		t.Fatalf("session.list = %v, want the title of the batch's rename", list)
	}
}

// TestRPCNotificationRunsNothing: a notification of slash.exec,
// prompt.submit or session.create is not run: no worker starts, no
// history is written, no session is made, nothing answers; each is logged
// once at DEBUG.
func TestRPCNotificationRunsNothing(t *testing.T) {
	t.Parallel()
	// One request at a time: a notification that ran would be done, worker
	// and history included, before the probe's answer.
	e := newEnv(t, envOpts{chat: func(c *handlers.Chat) { c.MaxInflight = 1 }})
	cc := e.chat()
	sid := cc.create()
	cc.sendRaw(`{"jsonrpc":"2.0","method":"slash.exec","params":{"session_id":"` + sid + `","command":"/echo hi"}}`)
	cc.sendRaw(`{"jsonrpc":"2.0","method":"prompt.submit","params":{"session_id":"` + sid + `","text":"hello"}}`)
	cc.sendRaw(`[{"jsonrpc":"2.0","method":"session.create","params":{"title":"n"}}]`)
	cc.probe("the notifications")
	if n := e.mgr.Count(); n != 0 {
		t.Fatalf("%d workers after notifications, want none", n)
	}
	if h := cc.call("session.history", map[string]any{"session_id": sid}); len(h["entries"].([]any)) != 0 {
		t.Fatalf("history after notifications = %v, want none", h)
	}
	if list := cc.call("session.list", nil)["sessions"].([]any); len(list) != 1 {
		t.Fatalf("session.list = %v, want the one session created by a request", list)
	}
	var methods []any
	for _, r := range e.logs.Records("notification dropped") {
		if r["level"] != "DEBUG" {
			t.Fatalf("record %v, want DEBUG", r)
		}
		methods = append(methods, r["method"])
	}
	if want := []any{"slash.exec", "prompt.submit", "session.create"}; !reflect.DeepEqual(methods, want) {
		t.Fatalf("notification dropped records for %v, want %v", methods, want)
	}
}

// rawChat is a /ws/chat socket whose frames, events included, are read
// in the order they came.
type rawChat struct {
	*testkit.Conn
	t *testing.T
}

func (e *env) rawChat() *rawChat {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), 5*time.Second)
	defer cancel()
	c, _, err := testkit.Dial(ctx, e.url+"/ws/chat", testkit.DialOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Drop(false) })
	return &rawChat{Conn: c, t: e.t}
}

// next is the next frame, decoded.
func (rc *rawChat) next() any {
	rc.t.Helper()
	ctx, cancel := context.WithTimeout(rc.t.Context(), 20*time.Second)
	defer cancel()
	f, err := rc.Next(ctx)
	if err != nil {
		rc.t.Fatalf("no frame: %v", err)
	}
	var v any
	if err := json.Unmarshal(f.Data, &v); err != nil {
		rc.t.Fatalf("frame %s: %v", f.Data, err)
	}
	return v
}

// TestRPCBatchAnswerPrecedesTurn: a prompt.submit in a batch answers with
// the batch, once its other calls are done (here a /sleep of the same
// session), and its turn's events come after that answer, as they come
// after a single prompt.submit's.
func TestRPCBatchAnswerPrecedesTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	rc := e.rawChat()
	if err := rc.Write(t.Context(), websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":"c","method":"session.create"}`)); err != nil {
		t.Fatal(err)
	}
	var sid string
	for sid == "" {
		if m, _ := rc.next().(map[string]any); m["id"] == "c" {
			sid = m["result"].(map[string]any)["session_id"].(string)
		}
	}
	batch := `[{"jsonrpc":"2.0","id":"p","method":"prompt.submit","params":{"session_id":"SID","text":"one two"}},
		{"jsonrpc":"2.0","id":"s","method":"slash.exec","params":{"session_id":"SID","command":"/sleep 1"}}]`
	if err := rc.Write(t.Context(), websocket.MessageText, []byte(strings.ReplaceAll(batch, "SID", sid))); err != nil {
		t.Fatal(err)
	}
	var answers []any
	for answers == nil {
		switch f := rc.next().(type) {
		case []any:
			answers = f
		case map[string]any:
			if p, _ := f["params"].(map[string]any); p["session_id"] == sid && strings.HasPrefix(p["type"].(string), "message.") {
				t.Fatalf("turn event %v before the batch's answer", f)
			}
		}
	}
	if len(answers) != 2 {
		t.Fatalf("batch answers %v, want 2", answers)
	}
	p, s := answers[0].(map[string]any)["result"].(map[string]any), answers[1].(map[string]any)["result"].(map[string]any)
	if p["status"] != "streaming" || p["turn_id"] == "" || s["output"] != "slept 1s" {
		t.Fatalf("batch answers %v", answers)
	}
	for {
		f, _ := rc.next().(map[string]any)
		if pa, _ := f["params"].(map[string]any); pa["session_id"] == sid && pa["type"] == "message.complete" {
			if pl := pa["payload"].(map[string]any); pl["turn_id"] != p["turn_id"] || pl["text"] == "" {
				t.Fatalf("message.complete %v, want turn %v's", f, p["turn_id"])
			}
			return
		}
	}
}

// TestRPCBatchDoesNotHoldSocket: a batch whose call runs long does not
// hold the socket's other requests: one sent after it is answered
// meanwhile (here the session.interrupt that ends the long call), and the
// batch answers once all its calls are done.
func TestRPCBatchDoesNotHoldSocket(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	cc := e.chat()
	sid := cc.create()
	cc.sendRaw(`[{"jsonrpc":"2.0","id":"s","method":"slash.exec","params":{"session_id":"` + sid + `","command":"/sleep 60"}},
		{"jsonrpc":"2.0","id":"m","method":"model.list"}]`)
	testkit.WaitFor(t, 10*time.Second, "session.interrupt, sent after the batch, stops its /sleep", func() bool {
		return cc.call("session.interrupt", map[string]any{"session_id": sid})["status"] == "interrupted"
	})
	want := []any{map[string]any{"id": "s", "code": float64(handlers.CodeWorkerFailed)},
		map[string]any{"id": "m", "result": map[string]any{"models": []any{}, "default": ""}}}
	if got := cc.nextAnswer("the batch"); !reflect.DeepEqual(got, want) {
		t.Fatalf("batch answer %v, want %v", got, want)
	}
}
