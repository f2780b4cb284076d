package main

// The reference relays of the keys group: what a keystroke's round trip
// costs through a WebSocket relay that does nothing but relay, measured in
// the same run as dashgate. Each is this binary re-executed
// (`dashgate-bench relay go|raw`), a process of its own as dashgate is,
// serving /ws/pty: /bin/sh on a pty per connection, a {"type":"hello"}
// text frame, then pty output as binary frames and binary frames as input.
//
//   - go: coder/websocket (as dashgate) with one goroutine each way, no
//     ring, no backpressure, no sessions.
//   - raw: no Go scheduler on the path: one locked thread blocks in
//     poll(2) on the socket and the pty and relays with raw read/write
//     (frames parsed by hand; only what the bench sends).
//
// They are bounds, not products: nothing else is kept (no limits, no
// close handshake, no offsets).

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/dashgate/dashgate/internal/testkit"
)

var hello = []byte(`{"type":"hello"}`)

// serveRelay runs the relay kind ("go" or "raw") on 127.0.0.1:0, prints
// "listening <addr>" on stdout, and serves until stdin closes (the tool
// holds it open; it dies with the tool).
func serveRelay(kind string, stdout io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "listening %s\n", ln.Addr())
	go func() { io.Copy(io.Discard, os.Stdin); os.Exit(0) }()
	switch kind {
	case "go":
		return http.Serve(ln, http.HandlerFunc(goRelay))
	case "raw":
		for {
			c, err := ln.Accept()
			if err != nil {
				return err
			}
			go rawRelay(c.(*net.TCPConn))
		}
	}
	return fmt.Errorf("unknown relay %q (go or raw)", kind)
}

func startShell() (*exec.Cmd, *os.File, error) {
	cmd := exec.Command("/bin/sh")
	cmd.Env = testkit.CleanEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Pdeathsig: syscall.SIGKILL}
	f, err := pty.StartWithAttrs(cmd, &pty.Winsize{Cols: 80, Rows: 24}, cmd.SysProcAttr)
	return cmd, f, err
}

func goRelay(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	cmd, f, err := startShell()
	if err != nil {
		return
	}
	defer func() { cmd.Process.Kill(); f.Close(); cmd.Wait() }()
	ctx := context.Background()
	if c.Write(ctx, websocket.MessageText, hello) != nil {
		return
	}
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := f.Read(buf)
			if err != nil || c.Write(ctx, websocket.MessageBinary, buf[:n]) != nil {
				c.CloseNow()
				return
			}
		}
	}()
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			return
		}
		f.Write(b)
	}
}

func rawRelay(c *net.TCPConn) {
	defer c.Close()
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return
	}
	key := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	resp := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " +
		base64.StdEncoding.EncodeToString(key[:]) + "\r\n\r\n" + string([]byte{0x81, byte(len(hello))}) + string(hello)
	if _, err := io.WriteString(c, resp); err != nil {
		return
	}
	sock, err := c.File() // a blocking duplicate
	if err != nil {
		return
	}
	defer sock.Close()
	cmd, f, err := startShell()
	if err != nil {
		return
	}
	defer func() { cmd.Process.Kill(); f.Close(); cmd.Wait() }()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	sfd, pfd := int(sock.Fd()), int(f.Fd()) // Fd makes both blocking
	in, out := make([]byte, 64<<10), make([]byte, 64<<10)
	var pending []byte
	fds := []unix.PollFd{{Fd: int32(sfd), Events: unix.POLLIN}, {Fd: int32(pfd), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); errors.Is(err, unix.EINTR) {
			continue
		} else if err != nil {
			return
		}
		if fds[0].Revents != 0 {
			n, err := unix.Read(sfd, in)
			if n <= 0 || err != nil {
				return
			}
			pending = append(pending, in[:n]...)
			for {
				payload, rest, op, ok := clientFrame(pending)
				if !ok {
					break
				}
				if op == 8 {
					return
				}
				unix.Write(pfd, payload)
				pending = rest
			}
		}
		if fds[1].Revents != 0 {
			n, err := unix.Read(pfd, out[4:])
			if n <= 0 || err != nil {
				return
			}
			h := out[:4]
			if n < 126 {
				h = out[2:4]
				h[0], h[1] = 0x82, byte(n)
			} else {
				h[0], h[1], h[2], h[3] = 0x82, 126, byte(n>>8), byte(n)
			}
			unix.Write(sfd, out[4-len(h):4+n])
		}
	}
}

// clientFrame takes one masked client frame of at most 65535 bytes off b:
// its unmasked payload (in place), the rest, and the opcode; ok false when
// b holds no whole frame yet.
func clientFrame(b []byte) (payload, rest []byte, op byte, ok bool) {
	if len(b) < 6 {
		return nil, b, 0, false
	}
	n, at := int(b[1]&0x7f), 2
	if n == 126 {
		n, at = int(b[2])<<8|int(b[3]), 4
	}
	if len(b) < at+4+n {
		return nil, b, 0, false
	}
	mask, p := b[at:at+4], b[at+4:at+4+n]
	for i := range p {
		p[i] ^= mask[i%4]
	}
	return p, b[at+4+n:], b[0] & 0xf, true
}

// relay is a reference relay this tool started.
type relay struct {
	kind string
	url  string // ws://.../ws/pty
	cmd  *exec.Cmd
	in   io.WriteCloser
}

// startRelay starts `dashgate-bench relay kind`; stop ends it.
func startRelay(ctx context.Context, kind string) (*relay, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self, "relay", kind)
	in, out, err := startPiped(cmd)
	if err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		in.Close()
		cmd.Wait()
		return nil, fmt.Errorf("relay %s: %q %v", kind, line, err)
	}
	return &relay{kind: kind, url: "ws://" + addr + "/ws/pty", cmd: cmd, in: in}, nil
}

func (r *relay) stop() {
	r.in.Close()
	done := make(chan struct{})
	go func() { r.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// startPiped starts cmd, one of the tool's own helper processes, in a
// process group of its own that dies with the tool (Pdeathsig), its
// stderr the tool's, and returns its stdin and stdout; the caller closes
// stdin and waits for cmd.
func startPiped(cmd *exec.Cmd) (io.WriteCloser, io.ReadCloser, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	return in, out, nil
}
