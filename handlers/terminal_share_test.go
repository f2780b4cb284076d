package handlers_test

import (
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/sys/unix"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/sessions"
)

// attachedCount is the count of the last "attached" frame p got (-1: none).
func (p *ptyClient) attachedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.texts) - 1; i >= 0; i-- {
		if p.texts[i]["type"] == "attached" {
			return int(p.texts[i]["count"].(float64))
		}
	}
	return -1
}

func (p *ptyClient) waitAttached(n int) {
	p.t.Helper()
	testkit.WaitFor(p.t, 10*time.Second, "attached count", func() bool { return p.attachedCount() == n })
}

// Two sockets with share=1 see the same output live, both may type, and
// each is told how many sockets share the terminal; a third without share
// takes it over from both.
func TestTerminalShared(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	sid := e.chat().create()
	share := url.Values{"session_id": {sid}, "share": {"1"}}
	a := e.pty(share)
	a.waitAttached(1)
	a.send("export MARK=shared\n")
	a.expect(`export MARK`, 5*time.Second)
	b := e.pty(share)
	a.waitAttached(2)
	b.waitAttached(2)
	b.send("echo from-b-$MARK\n")
	a.expect(`[\r\n]from-b-shared\r\n`, 5*time.Second) // a sees what b typed, live
	b.expect(`[\r\n]from-b-shared\r\n`, 5*time.Second)
	a.send("echo from-a-$((40+2))\n")
	b.expect(`[\r\n]from-a-42\r\n`, 5*time.Second)

	b.drop()
	a.waitAttached(1)
	a.send("echo still-here\n") // b's leaving ended nothing
	a.expect(`[\r\n]still-here\r\n`, 5*time.Second)

	c := e.pty(share)
	a.waitAttached(2)
	d := e.pty(url.Values{"session_id": {sid}}) // no share: takes it over
	for _, p := range []*ptyClient{a, c} {
		if err := p.closeErr(); websocket.CloseStatus(err) != 4409 {
			t.Fatalf("shared socket closed with %v, want 4409", err)
		}
	}
	d.send("echo $MARK-after\n")
	d.expect(`[\r\n]shared-after\r\n`, 5*time.Second)
	if n := d.countText("attached"); n != 0 {
		t.Fatalf("a socket without share got %d attached frames; want none (PROTOCOL.md §3)", n)
	}
}

// The terminal's size follows the socket typed into last: a resize from a
// socket that did not type last is kept for it and applied when it types.
func TestTerminalSharedSizeFollowsTyping(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	sid := e.chat().create()
	a := e.pty(url.Values{"session_id": {sid}, "share": {"1"}, "cols": {"101"}, "rows": {"31"}})
	a.send("stty size\n")
	a.expect(`[\r\n]31 101\r\n`, 5*time.Second)
	b := e.pty(url.Values{"session_id": {sid}, "share": {"1"}, "cols": {"72"}, "rows": {"19"}})
	b.waitAttached(2)
	a.control(`{"type":"resize","cols":103,"rows":33}`) // a typed last: applies
	a.send("stty size\n")
	a.expect(`[\r\n]33 103\r\n`, 5*time.Second)
	b.send("stty size\n") // b types: its size
	b.expect(`[\r\n]19 72\r\n`, 5*time.Second)
	a.control(`{"type":"resize","cols":90,"rows":25}`) // kept for a, not applied
	b.send("stty size; echo mark-1\n")
	b.expect(`[\r\n]19 72\r\nmark-1\r\n`, 5*time.Second)
	a.send("stty size; echo mark-2\n")
	a.expect(`[\r\n]25 90\r\nmark-2\r\n`, 5*time.Second)
	// b runs a program that prints the size at each SIGWINCH. A resize
	// from a, which did not type last, is kept for a, not applied (the
	// error frame of a bad control frame after it says a's resize was
	// handled: a socket's frames are handled in order).
	b.send(`sh -c 'trap "echo W\$(stty size)" WINCH; echo trapped; while :; do sleep 0.05; done'` + "\n")
	b.expect(`[\r\n]trapped\r\n`, 5*time.Second)
	a.control(`{"type":"resize","cols":100,"rows":40}`)
	a.control(`{"type":"nope"}`)
	a.waitText("error")
	in, _ := e.reg.Get(sessions.Principal{}, sid)
	if cols, rows := ptySize(t, in.PTYPID); cols != 72 || rows != 19 {
		t.Fatalf("the terminal is %dx%d after a resize from a socket that did not type last; want b's 72x19", cols, rows)
	}
	a.send("x")                            // a types: its size
	b.expect(`W40 100\r\n`, 5*time.Second) // after the echo of x
	a.drop()                               // b, alone, gets its size at once, before it types
	b.waitAttached(1)
	b.expect(`W40 100\r\n(?s:.*)W19 72\r\n`, 5*time.Second)
}

// ptySize reads the size of the terminal of the program pid (its stdin).
func ptySize(t *testing.T, pid int) (cols, rows int) {
	t.Helper()
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/0", pid), os.O_RDONLY|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		t.Fatal(err)
	}
	return int(ws.Col), int(ws.Row)
}
