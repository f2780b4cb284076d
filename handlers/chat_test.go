package handlers_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/sessions"
)

func TestChatHappyPath(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	cc := e.chat()
	res := cc.call("session.create", map[string]any{"title": "first"})
	sid := res["session_id"].(string)
	if _, err := time.Parse(time.RFC3339, res["created_at"].(string)); err != nil {
		t.Fatalf("created_at %q: %v", res["created_at"], err)
	}
	if out := cc.call("slash.exec", map[string]any{"session_id": sid, "command": "/echo hi"}); out["output"] != "hi" {
		t.Fatalf("/echo hi = %v", out)
	}
	r := cc.call("prompt.submit", map[string]any{"session_id": sid, "text": "one two three"})
	if r["status"] != "streaming" || r["turn_id"] == "" {
		t.Fatalf("prompt.submit = %v", r)
	}
	done := cc.waitEvent("message.complete", sid)
	p := done["payload"].(map[string]any)
	if p["interrupted"] != false || !strings.Contains(p["text"].(string), "one two three") {
		t.Fatalf("message.complete = %v", done)
	}
	// deltas came before the completion, with seq from 1 and increasing; a
	// gap is allowed where the writer merged the deltas of a socket that was
	// behind (docs/PROTOCOL.md, issue 43), so the first may be past 1.
	var deltas strings.Builder
	var numbered []map[string]any // [0] is gateway.ready, seq 0; session.changed is not numbered either
	for _, ev := range cc.events()[1:] {
		if ev["type"] != "session.changed" {
			numbered = append(numbered, ev)
		}
	}
	last := 0.0
	for i, ev := range numbered {
		seq, _ := ev["seq"].(float64)
		if seq <= last {
			t.Fatalf("event %d seq %v after %v: %v", i, ev["seq"], last, cc.events())
		}
		last = seq
		if ev["type"] == "message.delta" {
			deltas.WriteString(ev["payload"].(map[string]any)["text"].(string))
		}
	}
	if deltas.String() != p["text"] {
		t.Fatalf("deltas %q != final %q", deltas.String(), p["text"])
	}
	if n := len(numbered); n == 0 || numbered[n-1]["type"] != "message.complete" {
		t.Fatalf("the completion is not the last numbered event: %v", cc.events())
	}
	list := cc.call("session.list", nil)["sessions"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["title"] != "first" || list[0].(map[string]any)["viewers"] != float64(1) {
		t.Fatalf("session.list = %v", list)
	}
	if r := cc.call("session.close", map[string]any{"session_id": sid}); r["closed"] != true {
		t.Fatalf("close = %v", r)
	}
	if r := cc.call("session.close", map[string]any{"session_id": sid}); r["closed"] != false {
		t.Fatalf("second close = %v", r)
	}
	recs := e.logs.Records("session closed")
	if len(recs) != 1 || recs[0]["end_reason"] != "client_close" || recs[0]["sid"] != sid {
		t.Fatalf("session closed records = %v", recs)
	}
}

// TestChatBadInput is the bad-input matrix of the chat gateway: every bad
// frame gets its exact error while a second session on the same socket keeps
// working.
func TestChatBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	cc := e.chat()
	good := cc.create()
	closed := cc.create()
	cc.call("session.close", map[string]any{"session_id": closed})
	long := "/" + strings.Repeat("x", handlers.MaxCommand)
	tests := []struct {
		name  string
		frame string
		code  int
		id    any // nil: the reply's id is null
	}{
		{"malformed json", `{"jsonrpc":"2.0",`, -32700, nil},
		{"not an object", `"str"`, -32600, nil},
		{"no jsonrpc", `{"id":1,"method":"session.list"}`, -32600, float64(1)},
		{"id null", `{"jsonrpc":"2.0","id":null,"method":"session.list"}`, -32600, nil},
		{"id of a wrong type", `{"jsonrpc":"2.0","id":{},"method":"session.list"}`, -32600, nil},
		{"unknown method", `{"jsonrpc":"2.0","id":"u","method":"session.explode"}`, -32601, "u"},
		{"params not an object", `{"jsonrpc":"2.0","id":2,"method":"session.create","params":[1]}`, -32602, float64(2)},
		{"wrong type", `{"jsonrpc":"2.0","id":3,"method":"session.create","params":{"title":5}}`, -32602, float64(3)},
		{"missing session_id", `{"jsonrpc":"2.0","id":4,"method":"slash.exec","params":{"command":"/echo"}}`, -32602, float64(4)},
		{"empty command", `{"jsonrpc":"2.0","id":5,"method":"slash.exec","params":{"session_id":"` + good + `","command":""}}`, -32602, float64(5)},
		{"command without slash", `{"jsonrpc":"2.0","id":6,"method":"slash.exec","params":{"session_id":"` + good + `","command":"echo"}}`, -32602, float64(6)},
		{"command over 4 KiB", `{"jsonrpc":"2.0","id":7,"method":"slash.exec","params":{"session_id":"` + good + `","command":"` + long + `"}}`, -32602, float64(7)},
		{"title over 200", `{"jsonrpc":"2.0","id":8,"method":"session.create","params":{"title":"` + strings.Repeat("é", 201) + `"}}`, -32602, float64(8)},
		{"empty prompt", `{"jsonrpc":"2.0","id":9,"method":"prompt.submit","params":{"session_id":"` + good + `","text":" "}}`, -32602, float64(9)},
		{"unknown session", `{"jsonrpc":"2.0","id":10,"method":"slash.exec","params":{"session_id":"nope","command":"/echo"}}`, 4001, float64(10)},
		{"resume of a closed session", `{"jsonrpc":"2.0","id":11,"method":"session.resume","params":{"session_id":"` + closed + `"}}`, 4001, float64(11)},
		{"worker error reply", `{"jsonrpc":"2.0","id":12,"method":"slash.exec","params":{"session_id":"` + good + `","command":"/nosuch"}}`, 5004, float64(12)},
	}
	for _, tt := range tests {
		cc.sendRaw(tt.frame)
		var m map[string]any
		for {
			m = cc.next()
			if _, ok := m["id"]; ok {
				break
			}
		}
		if errCode(m) != tt.code {
			t.Fatalf("%s: reply %v, want code %d", tt.name, m, tt.code)
		}
		if m["id"] != tt.id {
			t.Fatalf("%s: reply id %v, want %v", tt.name, m["id"], tt.id)
		}
		// the other session keeps working after every bad frame
		if out := cc.call("slash.exec", map[string]any{"session_id": good, "command": "/echo ok"}); out["output"] != "ok" {
			t.Fatalf("%s: good session broke: %v", tt.name, out)
		}
	}
	if e.mgr.Count() != 1 {
		t.Fatalf("%d children, want the good session's worker only", e.mgr.Count())
	}
}

func TestChatBusyAndInterrupt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	cc := e.chat()
	sid := cc.create()
	cc.call("prompt.submit", map[string]any{"session_id": sid, "text": strings.Repeat("word ", 200)})
	if m := cc.callRaw("prompt.submit", map[string]any{"session_id": sid, "text": "again"}); errCode(m) != 4009 {
		t.Fatalf("second prompt = %v, want 4009", m)
	}
	if r := cc.call("session.interrupt", map[string]any{"session_id": sid}); r["status"] != "interrupted" {
		t.Fatalf("interrupt = %v", r)
	}
	done := cc.waitEvent("message.complete", sid)
	if done["payload"].(map[string]any)["interrupted"] != true {
		t.Fatalf("message.complete = %v", done)
	}
	if r := cc.call("session.interrupt", map[string]any{"session_id": sid}); r["status"] != "idle" {
		t.Fatalf("interrupt when idle = %v", r)
	}
}

func TestChatOversizedAndBinaryFrames(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	for _, tt := range []struct {
		name string
		typ  websocket.MessageType
		data []byte
		code websocket.StatusCode
	}{
		{"oversized", websocket.MessageText, []byte(`{"x":"` + strings.Repeat("a", 1<<20) + `"}`), websocket.StatusMessageTooBig},
		{"binary", websocket.MessageBinary, []byte{1, 2, 3}, websocket.StatusUnsupportedData},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cc := e.chat()
			cc.Write(context.Background(), tt.typ, tt.data)
			select {
			case <-cc.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("socket not closed")
			}
			err := cc.Err()
			if websocket.CloseStatus(err) != tt.code {
				t.Fatalf("closed with %v, want %d", err, tt.code)
			}
		})
	}
}

// TestSocketCloseClosesWorker: the browser goes, the worker goes at once,
// even mid-turn, with one INFO record; resuming on a new socket spawns a
// new worker.
func TestSocketCloseClosesWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	cc := e.chat()
	sid := cc.create()
	cc.call("slash.exec", map[string]any{"session_id": sid, "command": "/echo hi"})
	pid := e.mgr.Procs()[0].PID()
	cc.call("prompt.submit", map[string]any{"session_id": sid, "text": strings.Repeat("word ", 500)})
	cc.waitEvent("message.delta", sid) // the worker is mid-turn
	cc.Close()

	testkit.WaitFor(t, 2*time.Second, "worker reaped", func() bool { return testkit.Gone(pid) && e.mgr.Count() == 0 })
	testkit.WaitFor(t, time.Second, "worker record", func() bool { return len(e.workerRecords(pid)) == 1 })
	rec := e.workerRecords(pid)[0]
	if rec["reason"] != "detach" || rec["sid"] != sid || rec["level"] != "INFO" || rec["kind"] != "chat" {
		t.Fatalf("worker closed record = %v", rec)
	}
	for _, k := range []string{"escalation", "duration_ms"} {
		if _, ok := rec[k]; !ok {
			t.Fatalf("record lacks %s: %v", k, rec)
		}
	}

	cc2 := e.chat()
	res := cc2.call("session.resume", map[string]any{"session_id": sid})
	hist := res["history"].([]any)
	if res["state"] != "attached" || len(hist) != 4 || hist[1].(map[string]any)["text"] != "hi" || hist[3].(map[string]any)["interrupted"] != true {
		t.Fatalf("resume = %v", res)
	}
	cc2.call("slash.exec", map[string]any{"session_id": sid, "command": "/echo again"})
	if p := e.mgr.Procs(); len(p) != 1 || p[0].PID() == pid {
		t.Fatalf("after resume: procs %v, old pid %d", p, pid)
	}
}

func TestCloseOnDisconnect(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	cc := e.chat()
	sid := cc.call("session.create", map[string]any{"close_on_disconnect": true})["session_id"].(string)
	cc.Close()
	testkit.WaitFor(t, 2*time.Second, "session closed", func() bool { return len(e.logs.Records("session closed")) == 1 })
	if r := e.logs.Records("session closed")[0]; r["end_reason"] != "close_on_disconnect" || r["sid"] != sid {
		t.Fatalf("record = %v", r)
	}
}

func TestSlowConsumerDisconnected(t *testing.T) {
	t.Parallel()
	// A queue of 1,024 frames gives the fast viewer slack on a loaded
	// machine (with 256 it was itself cut once in CI, its reader starved
	// by the box's load); the replies (40 x 60 KB, some 2,400 frames) are
	// still far more than the queue plus the socket buffers of the slow one.
	// A write timeout far beyond the test's: the slow socket must be cut
	// by its queue's overflow, never by a blocked write's timeout (on a
	// loaded machine 5 s of blocked write came first).
	e := newEnv(t, envOpts{chat: func(c *handlers.Chat) { c.SendQueue = 1024 }, sock: handlers.SocketConfig{WriteTimeout: 2 * time.Minute}})
	fast := e.chat()
	var sids []string
	for range 40 {
		sids = append(sids, fast.create())
	}
	// The slow viewer views the same sessions but never reads, with a tiny
	// receive buffer so the server's writes back up.
	ctx := t.Context()
	dialer := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2048) })
	}}
	client := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
	slow, _, err := websocket.Dial(ctx, e.url+"/ws/chat", &websocket.DialOptions{HTTPClient: client})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.CloseNow()
	for i, sid := range sids {
		req := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session.resume","params":{"session_id":%q}}`, i, sid)
		slow.Write(ctx, websocket.MessageText, []byte(req))
	}
	testkit.WaitFor(t, 5*time.Second, "the slow viewer on every session", func() bool { in, _ := e.reg.Get(sessions.Principal{}, sids[len(sids)-1]); return in.Viewers == 2 })
	// Every session streams a long reply: the slow viewer's queue overflows
	// and it is cut, while the fast one gets every event.
	word := strings.Repeat("x", 1000)
	for _, sid := range sids {
		fast.call("prompt.submit", map[string]any{"session_id": sid, "text": strings.Repeat(word+" ", 60)})
	}
	testkit.WaitFor(t, 20*time.Second, "slow viewer dropped", func() bool { in, _ := e.reg.Get(sessions.Principal{}, sids[0]); return in.Viewers == 1 })
	// dropped as a slow consumer (its queue overflowed), not after a write
	// timeout during which its blocked queue would stall every session
	testkit.WaitFor(t, 5*time.Second, "the slow socket closed as a slow consumer", func() bool {
		for _, r := range e.logs.Records("socket closed") {
			if strings.Contains(fmt.Sprint(r["err"]), "slow consumer") && r["reason"] == "write_timeout" {
				return true
			}
		}
		return false
	})
	for _, sid := range sids {
		done := fast.waitEvent("message.complete", sid)
		if done["payload"].(map[string]any)["interrupted"] != false {
			t.Fatalf("turn interrupted by the slow viewer: %v", done)
		}
	}
}

// TestSessionsPerSocketCap: a socket at its cap gets 4029 naming the real
// limit; a session closed by the socket or reaped elsewhere (the admin
// page) frees its slot.
func TestSessionsPerSocketCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{reg: func(c *sessions.Config) { c.MaxViewed = 2 }})
	cc := e.chat()
	first := cc.create()
	second := cc.create()
	m := cc.callRaw("session.create", map[string]any{})
	if errCode(m) != 4029 || !strings.Contains(fmt.Sprint(m), "(2)") {
		t.Fatalf("third session on one socket: %v, want 4029 naming the limit 2", m)
	}
	// closing one frees its slot
	cc.call("session.close", map[string]any{"session_id": first})
	third := cc.create()
	// so does a reap elsewhere, which the socket never hears of but in an event
	for _, sid := range []string{second, third} {
		if closed, err := e.reg.Close(sessions.Principal{}, sid, sessions.EndAdminReap); !closed || err != nil {
			t.Fatalf("admin reap: %v %v", closed, err)
		}
	}
	cc.create()
	cc.create()
}

// TestSessionDetach: a socket that stops viewing one of its sessions (the
// dashboard switching sessions) detaches it, closing its worker, while its
// other sessions keep theirs.
func TestSessionDetach(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	cc := e.chat()
	left, kept := cc.create(), cc.create()
	cc.call("slash.exec", map[string]any{"session_id": left, "command": "/echo a"})
	leftPID := e.mgr.Procs()[0].PID()
	cc.call("slash.exec", map[string]any{"session_id": kept, "command": "/echo b"})
	if r := cc.call("session.detach", map[string]any{"session_id": left}); r["detached"] != true {
		t.Fatalf("session.detach = %v", r)
	}
	testkit.WaitFor(t, 2*time.Second, "the left session's worker gone", func() bool { return testkit.Gone(leftPID) && e.mgr.Count() == 1 })
	if in, _ := e.reg.Get(sessions.Principal{}, left); in.State != "detached" || in.Viewers != 0 {
		t.Fatalf("left session: %+v", in)
	}
	if in, _ := e.reg.Get(sessions.Principal{}, kept); in.State != "attached" || in.WorkerPID == 0 {
		t.Fatalf("kept session: %+v", in)
	}
	if r := cc.call("session.detach", map[string]any{"session_id": left}); r["detached"] != false {
		t.Fatalf("second session.detach = %v", r)
	}
	if m := cc.callRaw("session.detach", map[string]any{"session_id": "nope"}); errCode(m) != 4001 {
		t.Fatalf("detach of an unknown session: %v", m)
	}
	// resuming it again on the same socket works
	cc.call("session.resume", map[string]any{"session_id": left})
	cc.call("slash.exec", map[string]any{"session_id": left, "command": "/echo c"})
}

// TestGatewayReadyLineLimits: gateway.ready says the longest prompt and
// command the gateway takes, and they are the ones it enforces: one byte
// more answers -32602, exactly that many is taken. The page refuses a
// longer line before it sends it (e2e TestLongLineRefusedBeforeSending).
func TestGatewayReadyLineLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	cc := e.chat()
	ready, _ := cc.WaitEvent(t.Context(), "gateway.ready", "")
	p, _ := ready["payload"].(map[string]any)
	maxPrompt, _ := p["max_prompt_bytes"].(float64)
	maxCommand, _ := p["max_command_bytes"].(float64)
	if maxPrompt <= 0 || maxCommand <= 0 {
		t.Fatalf("gateway.ready %v: want max_prompt_bytes and max_command_bytes", p)
	}
	sid := cc.create()
	over := map[string]any{"session_id": sid, "text": strings.Repeat("é", int(maxPrompt)/2) + "x"}
	if m := cc.callRaw("prompt.submit", over); errCode(m) != -32602 {
		t.Errorf("a prompt of max_prompt_bytes+1 bytes: %v, want -32602", m)
	}
	cmd := "/echo " + strings.Repeat("y", int(maxCommand)-len("/echo "))
	if out := cc.call("slash.exec", map[string]any{"session_id": sid, "command": cmd}); out["output"] != cmd[len("/echo "):] {
		t.Errorf("a command of max_command_bytes bytes: %v", out)
	}
	if m := cc.callRaw("slash.exec", map[string]any{"session_id": sid, "command": cmd + "y"}); errCode(m) != -32602 {
		t.Errorf("a command of max_command_bytes+1 bytes: %v, want -32602", m)
	}
}
