package handlers_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/sessions"
)

// Issue 42: several terminals per session over the wire (/ws/pty's
// terminal, hello's terminal, terminal.close, session.resume's terminals).

// TestTerminalTabsOverTheWire: two terminal ids of a session are two
// shells (each keeps its own variable), hello names each; session.resume
// lists both; terminal.close ends one (its socket closes 1000 "terminal
// closed", its program is reaped with reason terminal_closed) and leaves
// the other typing.
func TestTerminalTabsOverTheWire(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	cc := e.chat()
	sid := cc.create()
	first := e.pty(url.Values{"session_id": {sid}})
	second := e.pty(url.Values{"session_id": {sid}, "terminal": {"k2"}})
	if got := first.texts[0]["terminal"]; got != sessions.DefaultTerminal {
		t.Fatalf("hello of the first terminal names %v, want %q", got, sessions.DefaultTerminal)
	}
	if got := second.texts[0]["terminal"]; got != "k2" {
		t.Fatalf("hello of terminal k2 names %v", got)
	}
	first.send("MARK=one\n")
	second.send("MARK=two\n")
	first.send("echo mark-$MARK\n")
	second.send("echo mark-$MARK\n")
	first.expect(`[\r\n]mark-one\r\n`, 10*time.Second)
	second.expect(`[\r\n]mark-two\r\n`, 10*time.Second)

	res := cc.call("session.resume", map[string]any{"session_id": sid})
	terms, _ := res["terminals"].([]any)
	if len(terms) != 2 || terms[0].(map[string]any)["terminal"] != "1" || terms[1].(map[string]any)["terminal"] != "k2" {
		t.Fatalf("session.resume's terminals: %v", res["terminals"])
	}
	pid := int(terms[1].(map[string]any)["pid"].(float64))

	if got := cc.call("terminal.close", map[string]any{"session_id": sid, "terminal": "k2"}); got["closed"] != true {
		t.Fatalf("terminal.close: %v", got)
	}
	if err := second.closeErr(); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("the closed terminal's socket ended with %v, want 1000", err)
	}
	if !testkit.Reaped(pid) {
		t.Fatalf("terminal k2 (pid %d) not reaped when terminal.close answered", pid)
	}
	if recs := e.workerRecords(pid); len(recs) != 1 || recs[0]["reason"] != "terminal_closed" {
		t.Fatalf("worker closed records of k2: %v", recs)
	}
	first.send("echo still-$MARK\n")
	first.expect(`[\r\n]still-one\r\n`, 10*time.Second)
	if got := cc.call("terminal.close", map[string]any{"session_id": sid, "terminal": "k2"}); got["closed"] != false {
		t.Fatalf("closing it again: %v, want closed false", got)
	}
	res = cc.call("session.resume", map[string]any{"session_id": sid})
	if terms, _ := res["terminals"].([]any); len(terms) != 1 {
		t.Fatalf("terminals after the close: %v", res["terminals"])
	}
	for _, bad := range []map[string]any{
		{"session_id": sid, "terminal": "No"},
		{"terminal": "k2"},
	} {
		if code := errCode(cc.callRaw("terminal.close", bad)); code != -32602 {
			t.Fatalf("terminal.close %v: code %d, want -32602", bad, code)
		}
	}
	if code := errCode(cc.callRaw("terminal.close", map[string]any{"session_id": "0000000000000000deadbeef", "terminal": "k2"})); code != 4001 {
		t.Fatalf("terminal.close of an unknown session: code %d, want 4001", code)
	}
}

// TestTerminalTabsRefusals: a malformed terminal id, or one without a
// session, is a 400; the ninth terminal of a session a 503 that says why;
// none of them starts a program.
func TestTerminalTabsRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	sid := e.chat().create()
	status := func(q url.Values) (int, string) {
		t.Helper()
		_, resp, err := websocket.Dial(t.Context(), e.url+"/ws/pty?"+q.Encode(), &websocket.DialOptions{HTTPHeader: http.Header(e.hdr)})
		if err == nil || resp == nil {
			t.Fatalf("%v: upgraded (err %v)", q, err)
		}
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, q := range []url.Values{
		{"session_id": {sid}, "terminal": {"UP"}},
		{"session_id": {sid}, "terminal": {strings.Repeat("a", 17)}},
		{"terminal": {"k2"}},
	} {
		if code, body := status(q); code != http.StatusBadRequest {
			t.Fatalf("%v: %d %q, want 400", q, code, body)
		}
	}
	if n := e.mgr.Count(); n != 0 {
		t.Fatalf("refused attaches started %d children", n)
	}
	for i := range sessions.MaxTerminalsPerSession {
		e.pty(url.Values{"session_id": {sid}, "terminal": {"t" + string(rune('a'+i))}})
	}
	code, body := status(url.Values{"session_id": {sid}, "terminal": {"ninth"}})
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "at most 8 terminals") {
		t.Fatalf("the ninth terminal: %d %q, want 503 saying the cap", code, body)
	}
	if n := e.mgr.Count(); n != sessions.MaxTerminalsPerSession {
		t.Fatalf("%d children, want %d", n, sessions.MaxTerminalsPerSession)
	}
}
