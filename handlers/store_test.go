package handlers_test

import (
	"testing"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/store"
)

// storeEnv is an env whose registry keeps conversations in st.
func storeEnv(t *testing.T, st store.Store) *env {
	return newEnv(t, envOpts{reg: func(c *sessions.Config) { c.Store = st; c.DescribeError = handlers.DescribeError }})
}

// TestConversationMethods: a closed conversation is listed with its end
// reason, renamed, paged, found, reopened with its history (the failed
// command and its error included) and deleted, over a real socket.
func TestConversationMethods(t *testing.T) {
	t.Parallel()
	e := storeEnv(t, openStore(t))
	cc := e.chat()
	sid := cc.create()
	cc.call("slash.exec", map[string]any{"session_id": sid, "command": "/echo zebra crossing"})
	if m := cc.callRaw("slash.exec", map[string]any{"session_id": sid, "command": "/nosuchcommand"}); errCode(m) != handlers.CodeWorkerFailed {
		t.Fatalf("/nosuchcommand: %v", m)
	}
	other := cc.create()
	cc.call("session.close", map[string]any{"session_id": sid})

	live := cc.call("session.list", nil)["sessions"].([]any)
	if len(live) != 1 || live[0].(map[string]any)["session_id"] != other {
		t.Fatalf("session.list without include_closed: %v", live)
	}
	res := cc.call("session.list", map[string]any{"include_closed": true})
	all := res["sessions"].([]any)
	if len(all) != 2 || res["more"] != false {
		t.Fatalf("session.list include_closed: %v", res)
	}
	closed := all[1].(map[string]any)
	if closed["session_id"] != sid || closed["state"] != "closed" || closed["end_reason"] != "client_close" || closed["closed_at"] == nil {
		t.Fatalf("the closed session: %v", closed)
	}

	cc.call("session.rename", map[string]any{"session_id": sid, "title": "crossings"})
	hits := cc.call("session.search", map[string]any{"query": "ZEBRA"})["hits"].([]any)
	if len(hits) != 2 { // the command and its output
		t.Fatalf("search hits: %v", hits)
	}
	if h := hits[0].(map[string]any); h["session_id"] != sid || h["title"] != "crossings" || h["seq"] == nil {
		t.Fatalf("hit: %v", h)
	}

	page := cc.call("session.history", map[string]any{"session_id": sid, "limit": 2})
	if es := page["entries"].([]any); len(es) != 2 || page["more"] != true || es[1].(map[string]any)["kind"] != "notice" {
		t.Fatalf("last page: %v", page)
	}
	page = cc.call("session.history", map[string]any{"session_id": sid, "before_seq": 4, "limit": 10})
	if es := page["entries"].([]any); len(es) != 3 || page["more"] != false {
		t.Fatalf("first page: %v", page)
	}

	re := cc.call("session.reopen", map[string]any{"session_id": sid})
	hist := re["history"].([]any)
	want := []string{"slash", "slash_output", "slash", "error", "notice"}
	if re["state"] != "attached" || len(hist) != len(want) {
		t.Fatalf("reopen: %v", re)
	}
	for i, k := range want {
		if hist[i].(map[string]any)["kind"] != k || hist[i].(map[string]any)["seq"] != float64(i+1) {
			t.Fatalf("reopened entry %d: %v", i, hist[i])
		}
	}
	if hist[3].(map[string]any)["code"] != float64(handlers.CodeWorkerFailed) {
		t.Fatalf("the error entry: %v", hist[3])
	}
	if out := cc.call("slash.exec", map[string]any{"session_id": sid, "command": "/echo back"}); out["output"] != "back" {
		t.Fatalf("slash.exec after reopen: %v", out)
	}

	if r := cc.call("session.delete", map[string]any{"session_id": other}); r["deleted"] != true {
		t.Fatalf("delete: %v", r)
	}
	for _, m := range []string{"session.reopen", "session.delete", "session.history"} {
		if r := cc.callRaw(m, map[string]any{"session_id": other}); errCode(r) != handlers.CodeNotFound {
			t.Fatalf("%s of a deleted session: %v", m, r)
		}
	}
}

// TestConversationBadInput: bad parameters get -32602, unknown sessions
// 4001, hostile search queries an answer (never -32603), a failing store
// 5005; the socket and its sessions go on.
func TestConversationBadInput(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	e := storeEnv(t, st)
	cc := e.chat()
	sid := cc.create()
	cc.call("slash.exec", map[string]any{"session_id": sid, "command": "/echo x"})
	tests := []struct {
		name   string
		method string
		params map[string]any
		code   int
	}{
		{"limit zero", "session.history", map[string]any{"session_id": sid, "limit": 0}, handlers.CodeInvalidParams},
		{"limit too big", "session.search", map[string]any{"query": "x", "limit": 5000}, handlers.CodeInvalidParams},
		{"before not a time", "session.list", map[string]any{"include_closed": true, "before": "yesterday"}, handlers.CodeInvalidParams},
		{"before_seq negative", "session.history", map[string]any{"session_id": sid, "before_seq": -1}, handlers.CodeInvalidParams},
		{"title too long", "session.rename", map[string]any{"session_id": sid, "title": string(make([]rune, 201))}, handlers.CodeInvalidParams},
		{"query too long", "session.search", map[string]any{"query": string(make([]byte, 2000))}, handlers.CodeInvalidParams},
		{"no session_id", "session.reopen", map[string]any{}, handlers.CodeInvalidParams},
		{"unknown reopen", "session.reopen", map[string]any{"session_id": "nope"}, handlers.CodeNotFound},
		{"unknown delete", "session.delete", map[string]any{"session_id": "nope"}, handlers.CodeNotFound},
		{"unknown rename", "session.rename", map[string]any{"session_id": "nope", "title": "t"}, handlers.CodeNotFound},
		{"unknown history", "session.history", map[string]any{"session_id": "nope"}, handlers.CodeNotFound},
	}
	for _, q := range []string{`"`, `"unbalanced`, `*`, `a*`, `NEAR(`, `NEAR(x y`, `-`, `-x`, `x OR`, `AND`, `(`, `)`, `''`, "\x00", "\xff\xfe", `^`, `col:x`, ``, `   `} {
		tests = append(tests, struct {
			name   string
			method string
			params map[string]any
			code   int
		}{"query " + q, "session.search", map[string]any{"query": q}, 0})
	}
	for _, tt := range tests {
		if got := errCode(cc.callRaw(tt.method, tt.params)); got != tt.code {
			t.Errorf("%s: code %d, want %d", tt.name, got, tt.code)
		}
	}
	if out := cc.call("slash.exec", map[string]any{"session_id": sid, "command": "/echo still"}); out["output"] != "still" {
		t.Fatalf("the session after bad input: %v", out)
	}

	st.Close() // the store fails under the gateway
	for _, m := range []string{"session.search", "session.list"} {
		if r := cc.callRaw(m, map[string]any{"query": "x", "include_closed": true}); errCode(r) != handlers.CodeStoreFailed {
			t.Fatalf("%s with a failing store: %v", m, r)
		}
	}
	if out := cc.call("slash.exec", map[string]any{"session_id": sid, "command": "/echo on"}); out["output"] != "on" {
		t.Fatalf("chat with a failing store: %v", out)
	}
	if n := len(e.logs.Records("internal error")); n != 0 {
		t.Fatalf("%d internal errors logged", n)
	}
}
