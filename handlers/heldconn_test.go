package handlers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestQueuedFramesOneWrite: a chat socket's writer that finds frames
// queued behind the one it writes sends them all with one write(2), each
// its own WebSocket message, in order (BENCHMARKS.md, issue 28).
func TestQueuedFramesOneWrite(t *testing.T) {
	t.Parallel()
	c, client := heldSocket(t, 0)

	var frames [][]byte
	for i := range 5 {
		frames = append(frames, fmt.Appendf(nil, `{"frame":%d,"text":"%s"}`, i, strings.Repeat("x", i*1000)))
	}
	for _, f := range frames[1:] {
		c.out <- f
	}
	c.held.mu.Lock()
	before := c.held.writes
	c.held.mu.Unlock()
	if err := c.writeQueued(frames[0]); err != nil {
		t.Fatal(err)
	}
	c.held.mu.Lock()
	writes := c.held.writes - before
	c.held.mu.Unlock()
	if writes != 1 || len(c.out) != 0 {
		t.Errorf("5 frames took %d writes (%d left queued), want 1", writes, len(c.out))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	for i, want := range frames {
		typ, b, err := client.Read(ctx)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if typ != websocket.MessageText || string(b) != string(want) {
			t.Fatalf("message %d: %v %.40q, want %.40q", i, typ, b, want)
		}
	}
}
