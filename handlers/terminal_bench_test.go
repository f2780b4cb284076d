package handlers

// Benchmarks of the terminal hot path: pty output through /ws/pty to a Go
// client, against a plain pty read loop in the same process (the ratio is
// the throughput figure of cmd/dashgate-bench), and one keystroke's round
// trip. Profile with
//
//	go test -run '^$' -bench Terminal -cpuprofile cpu.out ./handlers/

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/creack/pty"

	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/workers"
)

// rawCat makes the terminal raw (no echo, no output processing), prints
// "R" and runs cat on src, so bytes pass as is.
func rawCat(src string) []string {
	return []string{"/bin/sh", "-c", "stty raw -echo; printf R; exec cat " + src}
}

// ptyServer serves /ws/pty over a registry whose terminals run cmd.
func ptyServer(b testing.TB, cmd []string, opts ...func(*sessions.Config)) (url string) {
	b.Helper()
	mgr := workers.NewManager(workers.Config{Grace: 300 * time.Millisecond, Instance: "bench"})
	cfg := sessions.Config{
		Spawner: sessions.ProcSpawner{Manager: mgr, PTYCmd: cmd, Env: []string{"PATH=" + os.Getenv("PATH")}},
	}
	for _, o := range opts {
		o(&cfg)
	}
	reg := sessions.New(cfg)
	srv := httptest.NewServer(&Terminal{Registry: reg, Socket: SocketConfig{WriteTimeout: 10 * time.Second}})
	b.Cleanup(func() {
		srv.CloseClientConnections()
		reg.Shutdown(context.Background())
		srv.Close()
		reg.Wait()
		mgr.CloseAll(workers.ReasonShutdown)
		mgr.Wait()
	})
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws/pty"
}

func dialPTY(b testing.TB, url string) (*websocket.Conn, context.CancelFunc) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		b.Fatal(err)
	}
	c.SetReadLimit(1 << 20)
	if typ, _, err := c.Read(ctx); err != nil || typ != websocket.MessageText { // hello
		b.Fatalf("hello: %v %v", typ, err)
	}
	return c, cancel
}

// BenchmarkTerminalThroughput reads b.N × 32 KiB of `cat /dev/zero` through
// the terminal handler.
func BenchmarkTerminalThroughput(b *testing.B) {
	url := ptyServer(b, rawCat("/dev/zero"))
	c, cancel := dialPTY(b, url)
	defer cancel()
	defer c.CloseNow()
	const chunk = sessions.MaxFrame
	buf := make([]byte, 64<<10)
	want := int64(b.N) * chunk
	b.SetBytes(chunk)
	b.ResetTimer()
	var got, frames int64
	for got < want {
		typ, r, err := c.Reader(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if typ != websocket.MessageBinary {
			continue
		}
		for {
			n, err := r.Read(buf)
			got += int64(n)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		frames++
	}
	b.StopTimer()
	b.ReportMetric(float64(got)/float64(frames), "B/frame")
}

// BenchmarkPlainPTY is the baseline: the same program on a pty of its own,
// read by a plain loop.
func BenchmarkPlainPTY(b *testing.B) {
	cmd := exec.Command(rawCat("/dev/zero")[0], rawCat("/dev/zero")[1:]...)
	f, err := pty.Start(cmd)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); f.Close(); cmd.Wait() }()
	const chunk = sessions.MaxFrame
	buf := make([]byte, chunk)
	want := int64(b.N) * chunk
	b.SetBytes(chunk)
	b.ResetTimer()
	var got, reads int64
	for got < want {
		n, err := f.Read(buf)
		if err != nil {
			b.Fatal(err)
		}
		got += int64(n)
		reads++
	}
	b.StopTimer()
	b.ReportMetric(float64(got)/float64(reads), "B/read")
}

// BenchmarkTerminalKeystroke types one byte into `cat` on a raw terminal
// and waits for it to come back.
func BenchmarkTerminalKeystroke(b *testing.B) {
	url := ptyServer(b, rawCat(""))
	c, cancel := dialPTY(b, url)
	defer cancel()
	defer c.CloseNow()
	ctx := context.Background()
	// "R" says the terminal is raw and cat about to read.
	for {
		_, p, err := c.Read(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if string(p) == "R" {
			break
		}
	}
	b.ResetTimer()
	for i := range b.N {
		k := []byte{'a' + byte(i%26)}
		if err := c.Write(ctx, websocket.MessageBinary, k); err != nil {
			b.Fatal(err)
		}
		_, p, err := c.Read(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if len(p) != 1 || p[0] != k[0] {
			b.Fatalf("sent %q, got %q", k, p)
		}
	}
}

var _ http.Handler = (*Terminal)(nil)

// BenchmarkTerminalConnect is the connect → first output byte figure of
// cmd/dashgate-bench in one process: a WebSocket dial of /ws/pty (a new
// session running /bin/sh) until the first binary frame, then the socket
// closed, in sequence: cold (a terminal started per request, as without
// --pty-spare) and with spares. Trace it with -trace to see where the time
// goes (regions "attach terminal", "spawn pty", "wait for spare"; `go tool
// trace -d=parsed` lists them).
func BenchmarkTerminalConnect(b *testing.B) {
	for _, spare := range []bool{false, true} {
		b.Run(map[bool]string{false: "cold", true: "spare"}[spare], func(b *testing.B) {
			benchConnect(b, ptyServer(b, []string{"/bin/sh"}, func(c *sessions.Config) { c.PTYSpare = spare }))
		})
	}
}

func benchConnect(b *testing.B, url string) {
	ctx := context.Background()
	for range b.N {
		c, _, err := websocket.Dial(ctx, url, nil)
		if err != nil {
			b.Fatal(err)
		}
		for {
			typ, p, err := c.Read(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if typ == websocket.MessageBinary && len(p) > 0 {
				break
			}
		}
		c.Close(websocket.StatusNormalClosure, "")
	}
}

// BenchmarkPlainPTYStart is its baseline: /bin/sh started on a pty of the
// benchmark's own until its first output byte, then killed and waited for.
func BenchmarkPlainPTYStart(b *testing.B) {
	buf := make([]byte, 32<<10)
	for range b.N {
		cmd := exec.Command("/bin/sh")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		f, err := pty.Start(cmd)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := f.Read(buf); err != nil {
			b.Fatal(err)
		}
		cmd.Process.Kill()
		f.Close()
		cmd.Wait()
	}
}
