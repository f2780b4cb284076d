package handlers

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/coder/websocket"
)

// TestTerminalKeystrokeNoAllocation: a keystroke typed into a raw terminal
// and its echo cost the gateway no allocation (issue 43): the input frame
// is read into the socket's one buffer, not a buffer a frame, and the
// echo is written under the socket's one write timer, not a time.AfterFunc
// a frame (three allocations). The client reads into a buffer of its own
// and types a key it made once, so what is counted is the gateway's.
func TestTerminalKeystrokeNoAllocation(t *testing.T) {
	url := ptyServer(t, rawCat(""))
	c, cancel := dialPTY(t, url)
	defer cancel()
	defer c.CloseNow()
	ctx := context.Background()
	buf := make([]byte, 64)
	// read reads one message into buf.
	read := func() []byte {
		_, r, err := c.Reader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			k, err := r.Read(buf[n:])
			n += k
			if errors.Is(err, io.EOF) {
				return buf[:n]
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	for string(read()) != "R" { // the terminal is raw and cat about to read
	}
	key := []byte{'k'}
	n := testing.AllocsPerRun(200, func() {
		if err := c.Write(ctx, websocket.MessageBinary, key); err != nil {
			t.Fatal(err)
		}
		if p := read(); len(p) != 1 || p[0] != 'k' {
			t.Fatalf("typed k, got %q", p)
		}
	})
	if n != 0 {
		t.Fatalf("a keystroke and its echo: %v allocations, want 0", n)
	}
}
