package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/workers"
	"github.com/dashgate/dashgate/workers/builtin"
)

func TestMain(m *testing.M) {
	if os.Getenv("DASHGATE_TEST_WORKER") == "1" {
		os.Exit(builtin.Main())
	}
	// The spawning goroutine lives as long as the process by design.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction(workers.SpawnThreadFunction))
}

type logBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuf) records(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range bytes.Split(l.buf.Bytes(), []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(line, &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

type env struct {
	hdr  http.Header // sent on every dial
	log  *slog.Logger
	t    *testing.T
	srv  *httptest.Server
	reg  *sessions.Registry
	mgr  *workers.Manager
	logs *logBuf
	url  string
}

type envOpts struct {
	grace   time.Duration
	sock    handlers.SocketConfig
	reg     func(*sessions.Config)
	chat    func(*handlers.Chat)
	ptyCmd  []string
	workers int
	// metrics hooks
	onSessionClose func(sessions.EndReason)
	onWorkerClose  func(workers.CloseResult)
}

// newEnv serves /ws/chat and /ws/pty over a registry of real children: the
// built-in worker (this test binary re-executed) and bash on a real pty.
func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	lb := &logBuf{}
	log := slog.New(slog.NewJSONHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug}))
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
	srv := httptest.NewServer(mux)
	e := &env{log: log, t: t, srv: srv, reg: reg, mgr: mgr, logs: lb, url: "ws" + strings.TrimPrefix(srv.URL, "http")}
	t.Cleanup(func() {
		srv.CloseClientConnections()
		reg.Shutdown(context.Background())
		srv.Close()
		reg.Wait()
		mgr.CloseAll(workers.ReasonShutdown)
		mgr.Wait()
	})
	return e
}

// chatClient is a test client of /ws/chat.
type chatClient struct {
	t      *testing.T
	c      *websocket.Conn
	nextID int
	frames chan map[string]any
	closed chan error
	mu     sync.Mutex
	events []map[string]any
}

func (e *env) chat() *chatClient {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, e.url+"/ws/chat", &websocket.DialOptions{HTTPHeader: e.hdr})
	if err != nil {
		e.t.Fatal(err)
	}
	c.SetReadLimit(8 << 20)
	cc := &chatClient{t: e.t, c: c, frames: make(chan map[string]any, 4096), closed: make(chan error, 1)}
	go func() {
		for {
			_, b, err := c.Read(context.Background())
			if err != nil {
				cc.closed <- err
				close(cc.frames)
				return
			}
			var m map[string]any
			json.Unmarshal(b, &m)
			cc.frames <- m
		}
	}()
	ready := cc.next()
	if p, _ := ready["params"].(map[string]any); p["type"] != "gateway.ready" {
		e.t.Fatalf("first frame = %v", ready)
	}
	e.t.Cleanup(func() { c.CloseNow() })
	return cc
}

func (cc *chatClient) next() map[string]any {
	cc.t.Helper()
	select {
	case m, ok := <-cc.frames:
		if !ok {
			cc.t.Fatalf("socket closed: %v", <-cc.closed)
		}
		if m["method"] == "event" {
			cc.mu.Lock()
			cc.events = append(cc.events, m["params"].(map[string]any))
			cc.mu.Unlock()
		}
		return m
	case <-time.After(10 * time.Second):
		cc.t.Fatal("no frame within 10s")
	}
	return nil
}

func (cc *chatClient) sendRaw(s string) {
	cc.t.Helper()
	if err := cc.c.Write(cc.t.Context(), websocket.MessageText, []byte(s)); err != nil {
		cc.t.Fatal(err)
	}
}

// reply waits for the reply with id, recording events on the way.
func (cc *chatClient) reply(id any) map[string]any {
	cc.t.Helper()
	want, _ := json.Marshal(id)
	for {
		m := cc.next()
		if _, ok := m["id"]; !ok {
			continue
		}
		got, _ := json.Marshal(m["id"])
		if bytes.Equal(got, want) {
			return m
		}
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

func (cc *chatClient) callRaw(method string, params any) map[string]any {
	cc.t.Helper()
	cc.nextID++
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": cc.nextID, "method": method, "params": params})
	cc.sendRaw(string(b))
	return cc.reply(cc.nextID)
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

// waitEvent reads until an event of typ for sid arrives.
func (cc *chatClient) waitEvent(typ, sid string) map[string]any {
	cc.t.Helper()
	cc.mu.Lock()
	for _, ev := range cc.events {
		if ev["type"] == typ && ev["session_id"] == sid {
			cc.mu.Unlock()
			return ev
		}
	}
	cc.mu.Unlock()
	for {
		m := cc.next()
		if m["method"] == "event" {
			p := m["params"].(map[string]any)
			if p["type"] == typ && p["session_id"] == sid {
				return p
			}
		}
	}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		<-tick.C
	}
}

// gone reports whether pid no longer exists (or is a zombie).
func gone(pid int) bool {
	if syscall.Kill(pid, 0) == syscall.ESRCH {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] == 'Z'
}

func (e *env) logger() *slog.Logger { return e.log }

func (e *env) workerRecords(pid int) []map[string]any {
	var out []map[string]any
	for _, r := range e.logs.records("worker closed") {
		if r["worker_pid"] == float64(pid) {
			out = append(out, r)
		}
	}
	return out
}
