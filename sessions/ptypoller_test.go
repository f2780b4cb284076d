package sessions

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// newTestPoller is a readPoller of the test's own (the package's tests
// share ptyPoller), closed when the test ends, which ends its backstop.
func newTestPoller(t *testing.T) *readPoller {
	t.Helper()
	p := &readPoller{}
	p.once.Do(p.start)
	if p.epfd < 0 {
		t.Fatal("readPoller: no epoll instance")
	}
	t.Cleanup(func() { // after the masters' Close (cleanups run last first)
		p.outer.Close()
		unix.Close(p.epfd)
	})
	return p
}

// newTestPTYMasterIn is newTestPTYMaster with the master in p.
func newTestPTYMasterIn(t *testing.T, p *readPoller) (*ptyMaster, *os.File) {
	t.Helper()
	master, tty := openTestPTY(t)
	wake, err := newWake()
	if err != nil {
		t.Fatal(err)
	}
	m := newPTYMasterIn(p, master, wake)
	t.Cleanup(func() { m.Close() })
	if m.id == 0 {
		t.Fatal("the master is not in the test's poller")
	}
	return m, tty
}

// readAsIdle and readAsTyped read m until it fails, sending each read's
// bytes to out: two names for the same loop, to tell the goroutines apart
// in a stack dump (goroutineState).
func readAsIdle(m *ptyMaster, out chan<- string)  { readEach(m, out) }
func readAsTyped(m *ptyMaster, out chan<- string) { readEach(m, out) }

func readEach(m *ptyMaster, out chan<- string) {
	buf := make([]byte, 64)
	for {
		n, err := m.Read(buf)
		if err != nil {
			close(out)
			return
		}
		out <- string(buf[:n])
	}
}

// goroutineState is the state ("select", "syscall", ...) of the goroutine
// whose stack calls fn, "" when none does.
func goroutineState(fn string) string {
	for _, g := range goroutineStacks() {
		if !strings.Contains(g, "."+fn+"(") {
			continue
		}
		head, _, _ := strings.Cut(g, "\n") // goroutine 7 [select]:
		if i, j := strings.IndexByte(head, '['), strings.IndexAny(head, ",]"); i >= 0 && j > i {
			return head[i+1 : j]
		}
	}
	return ""
}

// awaitState polls until fn's goroutine is in state, for up to 10 s.
func awaitState(t *testing.T, fn, state, why string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); goroutineState(fn) != state; {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s is %q after 10 s, want %q", why, fn, goroutineState(fn), state)
		}
		runtime.Gosched()
	}
}

// expectRead waits up to 10 s for s from out.
func expectRead(t *testing.T, out <-chan string, s, why string) {
	t.Helper()
	select {
	case got := <-out:
		if got != s {
			t.Fatalf("%s: read %q, want %q", why, got, s)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: nothing read 10 s after the output", why)
	}
}

// The lead goes to the terminal being typed in at its first echo and
// stays there: an idle terminal's reader that held it hands the echo over
// and parks, and from then on the typed terminal's reader waits in
// epoll_wait itself, so its echoes wake it with no hand-over.
func TestPTYPollerLeadGoesToTheTypedTerminal(t *testing.T) {
	p := newTestPoller(t)
	idle, _ := newTestPTYMasterIn(t, p)
	typed, tty := newTestPTYMasterIn(t, p)
	idleOut, typedOut := make(chan string, 1), make(chan string, 1)
	go readAsIdle(idle, idleOut)
	awaitState(t, "readAsIdle", "syscall", "the first reader to wait takes the vacant lead")
	go readAsTyped(typed, typedOut)
	awaitState(t, "readAsTyped", "select", "a reader waits parked while another leads")
	for _, key := range []string{"a", "b", "c"} {
		if _, err := tty.Write([]byte(key)); err != nil {
			t.Fatal(err)
		}
		expectRead(t, typedOut, key, "the typed terminal's echo")
		awaitState(t, "readAsTyped", "syscall", "after its echo the typed terminal's reader leads")
		if s := goroutineState("readAsIdle"); s != "select" {
			t.Fatalf("the idle terminal's reader is %q while the typed one leads, want parked (select)", s)
		}
	}
	idle.Close()
	typed.Close()
	for _, out := range []chan string{idleOut, typedOut} {
		for range out { // closed when its Read fails
		}
	}
}

// A report for a parked reader comes to it while the lead is vacant (its
// holder's own report came, and it has not waited again): backstop,
// woken in Go's poller, hands it over.
func TestPTYPollerVacantLeadHandsOver(t *testing.T) {
	p := newTestPoller(t)
	leader, leaderTTY := newTestPTYMasterIn(t, p)
	parked, parkedTTY := newTestPTYMasterIn(t, p)
	leaderOut, parkedOut := make(chan string), make(chan string, 1)
	go readAsTyped(leader, leaderOut) // unbuffered: after its first read it waits to send, not to read
	awaitState(t, "readAsTyped", "syscall", "the first reader to wait takes the vacant lead")
	go readAsIdle(parked, parkedOut)
	awaitState(t, "readAsIdle", "select", "a reader waits parked while another leads")
	if _, err := leaderTTY.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	awaitState(t, "readAsTyped", "chan send", "the leader, its report read, does not wait again")
	if _, err := parkedTTY.Write([]byte("b")); err != nil {
		t.Fatal(err)
	}
	expectRead(t, parkedOut, "b", "a parked reader's output while the lead is vacant")
	expectRead(t, leaderOut, "a", "the leader's output")
	leader.Close()
	parked.Close()
	for _, out := range []chan string{leaderOut, parkedOut} {
		for range out {
		}
	}
}
