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
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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

func runServer(t testing.TB, cfg web.Config, shutdownTimeout time.Duration) *running {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return runServerOn(t, ln, cfg, shutdownTimeout)
}

// runServerOn is runServer on a listener of the caller's, which Run owns.
func runServerOn(t testing.TB, ln net.Listener, cfg web.Config, shutdownTimeout time.Duration) *running {
	t.Helper()
	logs := &syncBuf{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.Log, cfg.Token = log, "secret-token"
	hold, entered := make(chan struct{}), make(chan struct{}, 64)
	s, err := web.New(cfg, web.Handlers{Chat: goingAway(hold, entered), Terminal: goingAway(hold, entered), Admin: &handlers.Admin{}})
	if err != nil {
		ln.Close()
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

// flood is a client that holds n connections open and sends nothing on
// them, opening another each time the server closes one, as an attacker
// would (issue 38, "connections nobody can exhaust").
type flood struct {
	opened   atomic.Int64 // connections it opened
	dialErrs atomic.Int64
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// startFlood starts a flood of n connections to addr; the test's cleanup
// ends it and waits for its goroutines.
func startFlood(t testing.TB, network, addr string, n int) *flood {
	ctx, cancel := context.WithCancel(context.Background())
	f := &flood{cancel: cancel}
	var d net.Dialer
	for range n {
		f.wg.Go(func() {
			buf := make([]byte, 1)
			for ctx.Err() == nil {
				c, err := d.DialContext(ctx, network, addr)
				if err != nil {
					f.dialErrs.Add(1)
					continue
				}
				f.opened.Add(1)
				stop := context.AfterFunc(ctx, func() { c.Close() })
				c.Read(buf) // until the server closes it
				stop()
				c.Close()
			}
		})
	}
	t.Cleanup(f.stop)
	return f
}

func (f *flood) stop() {
	f.cancel()
	f.wg.Wait()
}

// TestSilentConnectionsFlood: while one client holds 300 connections that
// send nothing (more than --max-http-conns), re-opening each one the
// server closes, /healthz, an authenticated page and a chat socket are
// still served, each on a new connection, every time.
func TestSilentConnectionsFlood(t *testing.T) {
	// Not parallel: the flood takes the machine's CPUs while it runs.
	for _, tc := range []struct {
		name string
		cfg  web.Config
	}{
		{"defaults", web.Config{MaxHTTPConns: 256}},
		{"cap alone", web.Config{MaxHTTPConns: 256, MaxPendingPerPeer: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := runServer(t, tc.cfg, 5*time.Second)
			f := startFlood(t, "tcp", srv.addr, 300)
			testkit.WaitFor(t, 30*time.Second, "the flood's 300 connections and 300 more re-opened",
				func() bool { return f.opened.Load() >= 600 })
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			defer client.CloseIdleConnections()
			before := f.opened.Load()
			for i := range 20 {
				for _, req := range []struct{ path, auth string }{{"/healthz", ""}, {"/", "Bearer secret-token"}} {
					r, _ := http.NewRequestWithContext(ctx, "GET", "http://"+srv.addr+req.path, nil)
					if req.auth != "" {
						r.Header.Set("Authorization", req.auth)
					}
					resp, err := client.Do(r)
					if err != nil {
						t.Fatalf("request %d to %s during the flood: %v", i, req.path, err)
					}
					resp.Body.Close()
					if resp.StatusCode != 200 {
						t.Fatalf("request %d to %s during the flood: %d", i, req.path, resp.StatusCode)
					}
				}
			}
			ws, _, err := websocket.Dial(ctx, "ws://"+srv.addr+"/ws/chat", &websocket.DialOptions{
				HTTPHeader: http.Header{"Authorization": {"Bearer secret-token"}}})
			if err != nil {
				t.Fatalf("a chat socket during the flood: %v", err)
			}
			ws.CloseNow()
			if f.opened.Load() == before {
				t.Fatal("the flood re-opened nothing while the requests ran: it was not under way")
			}
			if !strings.Contains(srv.logs.String(), `"msg":"connections that sent no request closed"`) {
				t.Fatalf("no WARN for the closed silent connections:\n%.4000s", srv.logs)
			}
			t.Logf("the flood opened %d connections (%d dial errors)", f.opened.Load(), f.dialErrs.Load())
		})
	}
}

// logRecords are the JSON records in logs with that message.
func logRecords(logs, msg string) []map[string]any {
	var recs []map[string]any
	for _, line := range strings.Split(logs, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			recs = append(recs, rec)
		}
	}
	return recs
}

// dialRaw is dialKeepAlive over any network, from a local address when
// local is not nil.
func dialRaw(t *testing.T, network, addr string, local net.Addr) *keepAlive {
	t.Helper()
	c, err := (&net.Dialer{LocalAddr: local}).Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &keepAlive{Conn: c, br: bufio.NewReader(c)}
}

// closedByServer fails the test unless the server closes c (without a
// response) within d; d bounds a failing test only.
func closedByServer(t *testing.T, c *keepAlive, d time.Duration, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	if n, err := c.br.ReadByte(); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("%s: read %v, %v; want it closed by the server", what, n, err)
	}
}

// TestPendingPerPeerBudget: one connection more than --max-pending-per-peer
// that has not sent its request closes the peer's oldest such connection;
// a connection whose handler runs, an idle one and the younger pending
// ones stay. All of 127.0.0.0/8 is one peer, and a Unix socket's peer is
// its uid.
func TestPendingPerPeerBudget(t *testing.T) {
	t.Parallel()
	const budget = 3
	loop := func(i int) net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(i))} }
	for _, tc := range []struct {
		name    string
		network string
		from    func(i int) net.Addr // the local address of the i-th silent connection
		peer    string
	}{
		{"one address", "tcp", func(int) net.Addr { return nil }, "127.0.0.0/8"},
		{"across 127/8", "tcp", func(i int) net.Addr { return loop(2 + i) }, "127.0.0.0/8"},
		{"unix socket", "unix", func(int) net.Addr { return nil }, fmt.Sprintf("uid:%d", os.Getuid())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ln, err := net.Listen(tc.network, map[string]string{"tcp": "127.0.0.1:0", "unix": t.TempDir() + "/s"}[tc.network])
			if err != nil {
				t.Fatal(err)
			}
			// The header timeout never closes a connection within the test.
			srv := runServerOn(t, ln, web.Config{MaxPendingPerPeer: budget, HeaderTimeout: time.Hour}, 5*time.Second)
			busy := dialRaw(t, tc.network, srv.addr, nil)
			fmt.Fprintf(busy, "GET /ws/pty HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer secret-token\r\n\r\n")
			testkit.Recv(t, 20*time.Second, "the busy request in its handler", srv.entered)
			idle := dialRaw(t, tc.network, srv.addr, nil)
			if code, err := idle.get("/healthz"); err != nil || code != 200 {
				t.Fatalf("/healthz: %d %v", code, err)
			}
			// Silent connections, accepted in the order they are dialled (the
			// listen queue is FIFO), one more each time the poll finds none
			// closed: a connection is safe from the budget for a grace
			// after it came, so the one that closes the oldest comes later.
			var silent []*keepAlive
			var closed []chan struct{} // closed when the server closed silent[i]
			var answered []chan byte   // the first byte the server sent on silent[i]
			dial := func() {
				i := len(silent)
				c := dialRaw(t, tc.network, srv.addr, tc.from(i%200))
				done, got := make(chan struct{}), make(chan byte, 1)
				go func() { // c's only reader; ends when c is closed or answered
					if b, err := c.br.ReadByte(); err != nil {
						close(done)
					} else {
						got <- b
					}
				}()
				silent, closed, answered = append(silent, c), append(closed, done), append(answered, got)
			}
			isClosed := func(i int) bool {
				select {
				case <-closed[i]:
					return true
				default:
					return false
				}
			}
			for range budget {
				dial()
			}
			testkit.WaitFor(t, 20*time.Second, "the oldest silent connection closed", func() bool {
				if isClosed(0) {
					return true
				}
				dial()
				return false
			})
			// Closed: the oldest ones, never a newer before an older, and
			// at most as many as took the peer over its budget.
			n := 0
			for n < len(silent) && isClosed(n) {
				n++
			}
			if n > len(silent)-budget {
				t.Fatalf("%d of %d silent connections closed, want at most %d", n, len(silent), len(silent)-budget)
			}
			for i := n; i < len(silent); i++ {
				if isClosed(i) {
					t.Fatalf("silent connection %d closed before %d: the oldest go first", i, n)
				}
			}
			for i := n; i < len(silent); i++ {
				fmt.Fprintf(silent[i], "GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
				select {
				case b := <-answered[i]:
					if b != 'H' {
						t.Fatalf("silent connection %d answered %q", i, b)
					}
				case <-closed[i]:
					t.Fatalf("silent connection %d closed by the server, want it answered", i)
				case <-time.After(20 * time.Second): // bounds a failing test only
					t.Fatalf("silent connection %d: no answer", i)
				}
			}
			if code, err := idle.get("/healthz"); err != nil || code != 200 {
				t.Fatalf("the idle connection after the silent ones were closed: %d %v", code, err)
			}
			recs := logRecords(srv.logs.String(), "connections that sent no request closed")
			if len(recs) != 1 || recs[0]["level"] != "WARN" || recs[0]["reason"] != "pending_over_peer_budget" ||
				recs[0]["peer"] != tc.peer || recs[0]["closed"] != 1.0 || recs[0]["max_pending_per_peer"] != float64(budget) {
				t.Fatalf("records %v, want one WARN (one per interval) of a connection from %s over the budget", recs, tc.peer)
			}
			srv.stop() // the busy request's handler returns and answers
			busy.SetReadDeadline(time.Now().Add(20 * time.Second))
			if resp, err := http.ReadResponse(busy.br, nil); err != nil || resp.StatusCode != 200 {
				t.Fatalf("the busy request (its handler ran while the silent ones came): %v %v", resp, err)
			}
		})
	}
}

// TestHTTPConnCapPendingFirst: a newcomer beyond --max-http-conns closes
// the oldest connection that sent no request before the one idle the
// longest, and is served.
func TestHTTPConnCapPendingFirst(t *testing.T) {
	t.Parallel()
	srv := runServer(t, web.Config{MaxHTTPConns: 3, HeaderTimeout: time.Hour}, 5*time.Second)
	idle := dialKeepAlive(t, srv.addr)
	if code, err := idle.get("/healthz"); err != nil || code != 200 {
		t.Fatalf("/healthz: %d %v", code, err)
	}
	p0, _ := dialKeepAlive(t, srv.addr), dialKeepAlive(t, srv.addr)
	newcomer := dialKeepAlive(t, srv.addr)
	if code, err := newcomer.get("/healthz"); err != nil || code != 200 {
		t.Fatalf("the newcomer beyond the cap: %d %v, want 200", code, err)
	}
	if code, err := idle.get("/healthz"); err != nil || code != 200 {
		t.Fatalf("the idle connection after the newcomer came: %d %v, want it kept", code, err)
	}
	closedByServer(t, p0, 20*time.Second, "the oldest silent connection")
	recs := logRecords(srv.logs.String(), "connections that sent no request closed")
	if len(recs) != 1 || recs[0]["reason"] != "pending_at_cap" || recs[0]["max_http_conns"] != 3.0 {
		t.Fatalf("records %v, want one WARN of a pending connection closed at the cap", recs)
	}
}

// BenchmarkHealthzSilentConns measures /healthz on a new connection each
// time, with no silent connections and with a flood of 300 held (see
// TestSilentConnectionsFlood), at the defaults of --max-http-conns and
// --max-pending-per-peer. Run: go test -run '^$' -bench HealthzSilent
// -benchtime 1000x ./web/
func BenchmarkHealthzSilentConns(b *testing.B) {
	for _, n := range []int{0, 300} {
		b.Run(fmt.Sprintf("silent=%d", n), func(b *testing.B) {
			srv := runServer(b, web.Config{MaxHTTPConns: 256}, 5*time.Second)
			if n > 0 {
				f := startFlood(b, "tcp", srv.addr, n)
				testkit.WaitFor(b, 30*time.Second, "the flood", func() bool { return f.opened.Load() >= int64(2*n) })
			}
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
			defer client.CloseIdleConnections()
			var lat []time.Duration
			failed := 0
			for b.Loop() {
				start := time.Now()
				resp, err := client.Get("http://" + srv.addr + "/healthz")
				if err == nil {
					resp.Body.Close()
				}
				if err != nil || resp.StatusCode != 200 {
					failed++
					continue
				}
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			}
			b.ReportMetric(float64(failed), "failed")
		})
	}
}
