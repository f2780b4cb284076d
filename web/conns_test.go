package web_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/web"
)

// goingAway is a WebSocket endpoint that, like handlers.Chat, closes with
// 1001 when the server shuts down (its request context ends) and
// otherwise reads until the peer goes. Non-upgrade requests say so on
// entered, then wait on hold.
func goingAway(hold <-chan struct{}, entered chan<- struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "" {
			entered <- struct{}{}
			<-hold
			return
		}
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		closed := make(chan struct{})
		stop := context.AfterFunc(r.Context(), func() {
			defer close(closed)
			c.Close(websocket.StatusGoingAway, "server shutting down")
		})
		for {
			if _, _, err := c.Read(context.Background()); err != nil {
				break
			}
		}
		if !stop() {
			<-closed
		}
		c.CloseNow()
	}
}

// running is a web.Run serving on a loopback port.
type running struct {
	addr    string
	logs    *syncBuf
	entered chan struct{} // a request to a non-upgrade endpoint came in
	stop    func()        // shuts the server down; returns once Run has
}

func runServer(t *testing.T, cfg web.Config, shutdownTimeout time.Duration) *running {
	t.Helper()
	logs := &syncBuf{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.Log, cfg.Token = log, "secret-token"
	hold, entered := make(chan struct{}), make(chan struct{}, 64)
	s, err := web.New(cfg, web.Handlers{Chat: goingAway(hold, entered), Terminal: goingAway(hold, entered), Admin: &handlers.Admin{}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- web.Run(ctx, ln, s, shutdownTimeout, log) }()
	r := &running{addr: ln.Addr().String(), logs: logs, entered: entered}
	var stopped bool
	r.stop = func() {
		if stopped {
			return
		}
		stopped = true
		close(hold)
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(r.stop)
	return r
}

// keepAlive is a raw client connection that sends one request at a time.
type keepAlive struct {
	net.Conn
	br *bufio.Reader
}

func dialKeepAlive(t *testing.T, addr string) *keepAlive {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &keepAlive{Conn: c, br: bufio.NewReader(c)}
}

// get sends GET path (keep-alive) and returns the response's status, or an
// error when the server closed the connection.
func (k *keepAlive) get(path string) (int, error) {
	if _, err := fmt.Fprintf(k, "GET %s HTTP/1.1\r\nHost: test\r\n\r\n", path); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(k.br, nil)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestIdleConnectionClosed: a keep-alive connection that sent one request
// and then idles is closed by the server after --http-idle-timeout.
func TestIdleConnectionClosed(t *testing.T) {
	t.Parallel()
	srv := runServer(t, web.Config{IdleTimeout: 200 * time.Millisecond}, 5*time.Second)
	c := dialKeepAlive(t, srv.addr)
	if code, err := c.get("/healthz"); err != nil || code != 200 {
		t.Fatalf("/healthz: %d %v", code, err)
	}
	// The deadline only bounds a failing test: the server closes first.
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := c.br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("idle connection: read %v, %v; want EOF (closed by the server)", n, err)
	}
}

// TestHTTPConnCap: connections opened beyond --max-http-conns close the
// ones idle the longest, so a normal client still gets /healthz and a chat
// socket.
func TestHTTPConnCap(t *testing.T) {
	t.Parallel()
	const max = 4
	srv := runServer(t, web.Config{MaxHTTPConns: max}, 5*time.Second)
	var idle []*keepAlive
	for i := range 3 * max {
		c := dialKeepAlive(t, srv.addr)
		if code, err := c.get("/healthz"); err != nil || code != 200 {
			t.Fatalf("idle client %d: %d %v", i, code, err)
		}
		idle = append(idle, c)
	}
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://" + srv.addr + "/healthz")
	if err != nil {
		t.Fatalf("a normal client's /healthz: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("a normal client's /healthz: %d", resp.StatusCode)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+srv.addr+"/ws/chat", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer secret-token"}}})
	if err != nil {
		t.Fatalf("a chat socket beyond the cap: %v", err)
	}
	defer ws.CloseNow()
	open := 0
	for _, c := range idle {
		if _, err := c.get("/healthz"); err == nil {
			open++
		}
	}
	if open > max-1 { // the normal client's connection is one of max
		t.Fatalf("%d of %d idle connections still open, want at most %d", open, len(idle), max-1)
	}
	if _, err := idle[len(idle)-1].get("/healthz"); err != nil {
		t.Fatalf("the newest idle connection was closed (%v): the longest idle ones go first", err)
	}
}

// TestHTTPConnCapBusy: with --max-http-conns requests in flight and none
// idle, a connection beyond the cap gets 503 and a WARN says so.
func TestHTTPConnCapBusy(t *testing.T) {
	t.Parallel()
	const max = 4
	srv := runServer(t, web.Config{MaxHTTPConns: max}, 5*time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	busy := make([]*keepAlive, max)
	for i := range busy {
		busy[i] = dialKeepAlive(t, srv.addr)
		fmt.Fprintf(busy[i], "GET /ws/pty HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer secret-token\r\n\r\n")
	}
	for range max {
		select {
		case <-srv.entered:
		case <-ctx.Done():
			t.Fatal("the busy requests never reached their handler")
		}
	}
	extra := dialKeepAlive(t, srv.addr)
	if code, err := extra.get("/healthz"); err != nil || code != http.StatusServiceUnavailable {
		t.Fatalf("a connection beyond the cap with none idle: %d %v, want 503", code, err)
	}
	if !strings.Contains(srv.logs.String(), "too many open connections") {
		t.Fatalf("no WARN for the 503:\n%s", srv.logs)
	}
}

// TestShutdownClosesSilentPeers: at shutdown a WebSocket whose peer never
// answers the close handshake gets its 1001 close frame, then its
// connection is closed after --ws-close-timeout: it never holds the exit
// (the WebSocket library alone would wait 5 s for the answer).
func TestShutdownClosesSilentPeers(t *testing.T) {
	t.Parallel()
	// The shutdown timeout is below the library's 5 s: without the bound,
	// the handler is still running when it ends.
	srv := runServer(t, web.Config{CloseTimeout: 100 * time.Millisecond}, 3*time.Second)
	c := dialKeepAlive(t, srv.addr)
	fmt.Fprintf(c, "GET /ws/chat HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer secret-token\r\n"+
		"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	srv.stop() // the peer reads nothing and answers nothing meanwhile
	if logs := srv.logs.String(); strings.Contains(logs, "requests still running at the shutdown timeout") {
		t.Fatalf("shutdown waited for a silent peer:\n%s", logs)
	}
	if logs := srv.logs.String(); strings.Contains(logs, "cannot accept connections") {
		t.Fatalf("the listener's close at shutdown was logged as a failing accept:\n%s", logs)
	}
	// What the peer got: the 1001 close frame, then the end of the connection.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	hdr := make([]byte, 4)
	if _, err := io.ReadFull(c.br, hdr); err != nil {
		t.Fatalf("close frame: %v", err)
	}
	if hdr[0] != 0x88 || binary.BigEndian.Uint16(hdr[2:]) != uint16(websocket.StatusGoingAway) {
		t.Fatalf("first frame % x, want a close frame with 1001", hdr)
	}
	io.CopyN(io.Discard, c.br, int64(hdr[1]&0x7f)-2)
	if _, err := c.br.ReadByte(); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("after the close frame: %v, want the connection closed", err)
	}
}

// acceptHelperEnv makes the test binary a server with few descriptors
// (TestAcceptErrorsWarn).
const acceptHelperEnv = "WEB_TEST_ACCEPT_HELPER"

// acceptHelper serves web.Run on a loopback port with RLIMIT_NOFILE just
// above what it has open, printing the address on stdout and logging JSON
// on stderr, until stdin closes.
func acceptHelper() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := web.New(web.Config{Token: "secret-token", Log: log}, web.Handlers{Chat: ok, Terminal: ok, Admin: &handlers.Admin{}})
	if err != nil {
		panic(err)
	}
	fds, _ := os.ReadDir("/proc/self/fd")
	lim := uint64(len(fds) + 4)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: lim, Max: lim}); err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }()
	fmt.Println(ln.Addr())
	web.Run(ctx, ln, s, 5*time.Second, log)
}

// TestAcceptErrorsWarn: a server out of file descriptors says so at WARN,
// once for a burst (it was DEBUG), and serves again once they free up.
func TestAcceptErrorsWarn(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), acceptHelperEnv+"=1")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	logs := &syncBuf{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("helper: %v\n%s", err, logs)
		}
	}()
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	addr = strings.TrimSpace(addr)
	var held []net.Conn
	for range 16 { // more than the helper has descriptors for
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	warned := func() int {
		n := 0
		for _, line := range strings.Split(logs.String(), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["level"] == "WARN" && rec["msg"] == "cannot accept connections" {
				n++
			}
		}
		return n
	}
	testkit.WaitFor(t, 30*time.Second, "a WARN record of the failing accepts", func() bool { return warned() > 0 })
	for _, c := range held {
		c.Close()
	}
	testkit.WaitFor(t, 30*time.Second, "/healthz once descriptors are free", func() bool {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		code, err := (&keepAlive{Conn: c, br: bufio.NewReader(c)}).get("/healthz")
		return err == nil && code == 200
	})
	if n := warned(); n != 1 {
		t.Fatalf("%d WARN records for one burst, want 1 (rate-limited):\n%s", n, logs)
	}
}
