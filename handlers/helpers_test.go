package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/workers"
	"github.com/dashgate/dashgate/workers/builtin"
)

func TestMain(m *testing.M) {
	switch os.Getenv("DASHGATE_TEST_WORKER") {
	case "1":
		os.Exit(builtin.Main())
	case "deltas": // BenchmarkDeltaPath's worker
		os.Exit(handlers.DeltaWorkerMain())
	}
	testkit.VerifyNoLeaks(m)
}

type env struct {
	hdr  http.Header // sent on every dial
	log  *slog.Logger
	t    *testing.T
	srv  *httptest.Server
	reg  *sessions.Registry
	mgr  *workers.Manager
	logs *testkit.LogBuffer
	url  string
}

type envOpts struct {
	grace   time.Duration
	sock    handlers.SocketConfig
	reg     func(*sessions.Config)
	chat    func(*handlers.Chat)
	ptyCmd  []string
	workers int
	base    context.Context // the server's base context (http.Server.BaseContext), when set
	// listen, when set, wraps the server's listener (to watch its
	// connections)
	listen func(net.Listener) net.Listener
	// metrics hooks
	onSessionClose func(sessions.EndReason)
	onWorkerClose  func(workers.CloseResult)
}

// newEnv serves /ws/chat and /ws/pty over a registry of real children: the
// built-in worker (this test binary re-executed) and bash on a real pty.
func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	log, lb := testkit.NewLogger()
	if o.grace == 0 {
		o.grace = 300 * time.Millisecond
	}
	if o.ptyCmd == nil {
		o.ptyCmd = []string{"/bin/bash", "--norc", "--noprofile"}
	}
	if o.sock.WriteTimeout == 0 {
		o.sock.WriteTimeout = 5 * time.Second
	}
	mgr := workers.NewManager(workers.Config{Grace: o.grace, Log: log, Instance: "handlers-test", MaxWorkers: o.workers, OnClose: o.onWorkerClose})
	cfg := sessions.Config{
		Spawner: sessions.ProcSpawner{
			Manager: mgr, WorkerCmd: []string{os.Args[0]}, PTYCmd: o.ptyCmd,
			Env: []string{"DASHGATE_TEST_WORKER=1", "PATH=" + os.Getenv("PATH"), "PS1=$ ", "HOME=" + t.TempDir()},
		},
		Log: log, PTYKeepalive: time.Minute, OnSessionClose: o.onSessionClose,
	}
	if o.reg != nil {
		o.reg(&cfg)
	}
	reg := sessions.New(cfg)
	chat := &handlers.Chat{Registry: reg, Log: log, Version: "test", Socket: o.sock}
	if o.chat != nil {
		o.chat(chat)
	}
	mux := http.NewServeMux()
	mux.Handle("/ws/chat", chat)
	mux.Handle("/ws/pty", &handlers.Terminal{Registry: reg, Log: log, Socket: o.sock})
	srv := httptest.NewUnstartedServer(mux)
	if o.base != nil {
		srv.Config.BaseContext = func(net.Listener) context.Context { return o.base }
	}
	if o.listen != nil {
		srv.Listener = o.listen(srv.Listener)
	}
	srv.Start()
	e := &env{log: log, t: t, srv: srv, reg: reg, mgr: mgr, logs: lb, url: "ws" + strings.TrimPrefix(srv.URL, "http")}
	t.Cleanup(func() {
		srv.CloseClientConnections()
		reg.Shutdown(context.Background())
		srv.Close()
		reg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		reg.FlushStore(ctx)
		cancel()
		mgr.CloseAll(workers.ReasonShutdown)
		mgr.Wait()
	})
	return e
}

// chatClient is a test's /ws/chat client: a testkit.Chat whose calls fail
// the test, with replies and events as decoded maps.
type chatClient struct {
	*testkit.Chat
	t *testing.T
}

func (e *env) chat() *chatClient {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), 5*time.Second)
	defer cancel()
	c, _, err := testkit.DialChat(ctx, e.url+"/ws/chat", testkit.DialOptions{Header: e.hdr, ReadLimit: 8 << 20})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Drop(false) })
	return &chatClient{Chat: c, t: e.t}
}

func (cc *chatClient) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

// next takes the next frame that is neither an event nor the reply to a
// call (a reply to sendRaw), decoded.
func (cc *chatClient) next() map[string]any {
	cc.t.Helper()
	ctx, cancel := cc.ctx()
	defer cancel()
	f, err := cc.Next(ctx)
	if err != nil {
		cc.t.Fatalf("no frame: %v", err)
	}
	var m map[string]any
	json.Unmarshal(f.Data, &m)
	return m
}

func (cc *chatClient) sendRaw(s string) {
	cc.t.Helper()
	if err := cc.Write(cc.t.Context(), websocket.MessageText, []byte(s)); err != nil {
		cc.t.Fatal(err)
	}
}

// call sends a request and returns its result, or fails on an error reply.
func (cc *chatClient) call(method string, params any) map[string]any {
	cc.t.Helper()
	m := cc.callRaw(method, params)
	if m["error"] != nil {
		cc.t.Fatalf("%s: error %v", method, m["error"])
	}
	return m["result"].(map[string]any)
}

// callRaw sends a request and returns its reply as {"result": ...} or
// {"error": {"code", "message", "data"}}.
func (cc *chatClient) callRaw(method string, params any) map[string]any {
	cc.t.Helper()
	ctx, cancel := cc.ctx()
	defer cancel()
	var res map[string]any
	err := cc.Call(ctx, method, params, &res)
	var rpc *testkit.RPCError
	switch {
	case errors.As(err, &rpc):
		return map[string]any{"error": map[string]any{"code": float64(rpc.Code), "message": rpc.Message, "data": rpc.Data}}
	case err != nil:
		cc.t.Fatal(err)
	}
	return map[string]any{"result": res}
}

// errCode returns the error code of a reply (0 when it succeeded).
func errCode(m map[string]any) int {
	e, _ := m["error"].(map[string]any)
	if e == nil {
		return 0
	}
	return int(e["code"].(float64))
}

func (cc *chatClient) create() string {
	cc.t.Helper()
	return cc.call("session.create", map[string]any{})["session_id"].(string)
}

// events returns every event so far, decoded.
func (cc *chatClient) events() []map[string]any {
	var out []map[string]any
	for _, ev := range cc.Events() {
		out = append(out, ev)
	}
	return out
}

// waitEvent returns the first event of typ for sid, received or to come.
func (cc *chatClient) waitEvent(typ, sid string) map[string]any {
	cc.t.Helper()
	ctx, cancel := cc.ctx()
	defer cancel()
	ev, err := cc.WaitEvent(ctx, typ, sid)
	if err != nil {
		cc.t.Fatalf("event %s of %s: %v", typ, sid, err)
	}
	return ev
}

func (e *env) logger() *slog.Logger { return e.log }

func (e *env) workerRecords(pid int) []map[string]any {
	var out []map[string]any
	for _, r := range e.logs.Records("worker closed") {
		if r["worker_pid"] == float64(pid) {
			out = append(out, r)
		}
	}
	return out
}

// startOrphan starts `sleep secs` in a session of its own through a shell
// that exits at once, so that the sleep is reparented to this process (the
// subreaper) and no worker owns it; it returns the sleep's pid. The shell
// runs through workers.Output, as the gateway's own helpers do: another
// test's worker close (in parallel in this process) would take a plain
// fork for its worker's escapee, and its orphan reaper the shell's exit
// status.
func startOrphan(t *testing.T, secs int) int {
	t.Helper()
	out, err := workers.Output(exec.Command("/bin/sh", "-c", fmt.Sprintf("setsid sleep %d </dev/null >/dev/null 2>&1 & echo $!", secs)))
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("pid %q: %v", out, err)
	}
	return orphan
}
