package sessions

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dashgate/dashgate/workers"
)

// TestTerminalDirectOutput: with a direct writer set, output that comes
// while Next waits caught up goes out through the writer, a small one (a
// command's echo, its short answer) and bulk output alike, a read of the
// pty a write; what comes while Next hands out goes through Next.
// Together, in the order they came, they are the program's output exactly
// once, and the attachment's position counts both (a real /bin/sh on a
// real pty).
func TestTerminalDirectOutput(t *testing.T) {
	h, _ := realHarnessWith(t, time.Second, nil)
	a, err := h.r.AttachTerminal(t.Context(), anon, "", TerminalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Detach(workers.ReasonDetach)

	type chunk struct {
		direct bool
		b      []byte
	}
	var (
		mu     sync.Mutex
		chunks []chunk
		seen   bytes.Buffer
	)
	add := func(direct bool, b []byte) {
		mu.Lock()
		defer mu.Unlock()
		chunks = append(chunks, chunk{direct, bytes.Clone(b)})
		seen.Write(b)
	}
	a.SetDirect(func(b []byte) { add(true, b) }, func(error) {})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, MaxFrame)
		for {
			n, err := a.Next(ctx, buf)
			if err != nil {
				return
			}
			add(false, buf[:n])
		}
	}()
	waitFor := func(what string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			mu.Lock()
			ok := strings.Contains(seen.String(), what)
			mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the output after 20 s", what)
			}
			time.Sleep(5 * time.Millisecond) // polling with a deadline
		}
	}

	// Small: typed one byte at a time, each echoed on its own. An echo goes
	// direct only when Next already waits caught up, and on a loaded
	// machine a whole line's echoes can come while the reader loop is
	// still on its way back into Next: lines go on (each waited for) until
	// one echo came direct, at most 50.
	directSeen := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range chunks {
			if c.direct {
				return true
			}
		}
		return false
	}
	for round := 0; round < 50 && !directSeen(); round++ {
		for _, c := range []byte(fmt.Sprintf("echo D_$((6*%d))\r", 7+round)) {
			if err := a.WriteWithin(t.Context(), []byte{c}, time.Second); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(fmt.Sprintf("D_%d", 6*(7+round)))
	}
	// Bulk: 64 KiB of one letter, framed by markers (their echo is B_''S).
	if err := a.WriteWithin(t.Context(), []byte("printf B_''S; head -c 65536 /dev/zero | tr '\\0' z; printf B_''E\r"), time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor("B_E")
	cancel()
	<-done
	a.Detach(workers.ReasonDetach) // ends the terminal: its reader, and a direct write in progress, are done after
	select {
	case <-a.t.endDone:
	case <-time.After(20 * time.Second):
		t.Fatal("terminal not ended 20 s after its detach")
	}

	mu.Lock()
	defer mu.Unlock()
	// A pty read hands out about 4 KiB: a direct write over 1 KiB is bulk.
	var direct, bulk int
	for _, c := range chunks {
		if c.direct {
			direct++
			if len(c.b) > MaxFrame {
				t.Errorf("a direct write of %d bytes (at most %d)", len(c.b), MaxFrame)
			}
			if len(c.b) > 1<<10 {
				bulk++
			}
		}
	}
	if direct == 0 {
		t.Errorf("no output came through the direct writer (%d chunks)", len(chunks))
	}
	if bulk == 0 {
		t.Errorf("no bulk output came through the direct writer (%d chunks)", len(chunks))
	}
	out := seen.String()
	if i := strings.Index(out, "B_S"); i < 0 || !strings.HasPrefix(out[i+3:], strings.Repeat("z", 65536)+"B_E") {
		t.Errorf("the bulk output is not whole and in order")
	}
	if strings.Count(out, "D_42") != 1 {
		t.Errorf("the short answer came %d times", strings.Count(out, "D_42"))
	}
	a.t.mu.Lock()
	pos, end := a.pos, a.t.ring.End()
	a.t.mu.Unlock()
	if int64(seen.Len()) != pos || pos > end {
		t.Errorf("received %d bytes; the attachment's position is %d, the ring's end %d", seen.Len(), pos, end)
	}
}
