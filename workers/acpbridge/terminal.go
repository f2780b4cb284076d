package acpbridge

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	acp "github.com/coder/acp-go-sdk"
)

// Terminal bounds.
const (
	// DefaultOutputLimit is the output a terminal keeps, bytes, when
	// terminal/create gives no outputByteLimit.
	DefaultOutputLimit = 1 << 20
	// MaxTerminals bounds the terminals alive at once (created and not
	// released).
	MaxTerminals = 16
)

// terminals are the agent's terminals (ACP terminal/*). Each is a child of
// the bridge in a process group of its own with Pdeathsig SIGKILL, stdin
// /dev/null, stdout and stderr merged into a bounded buffer.
type terminals struct {
	defaultDir func() string // the session's cwd, for a terminal without one

	mu     sync.Mutex
	seq    int
	live   map[string]*terminal // created and not released
	gone   []goneTerminal       // the last MaxTerminals released, for textOf
	closed bool                 // closeAll ran: no more terminals
	all    sync.WaitGroup       // one per reaper, released or not
}

func newTerminals(defaultDir func() string) *terminals {
	return &terminals{defaultDir: defaultDir, live: map[string]*terminal{}}
}

// goneTerminal is a released terminal whose output a tool's text may
// still name: the agent may release it before the bridge handled the
// update that completes its tool (requests run at once, updates queue).
type goneTerminal struct {
	id string
	t  *terminal
}

type terminal struct {
	cmd *exec.Cmd
	out *boundedBuffer

	exited chan struct{} // closed once reaped; exit is set before
	exit   acp.WaitForTerminalExitResponse
}

// errTerminalsClosed answers terminal/create once the bridge is closing.
var errTerminalsClosed = errors.New("the bridge is closing: no new terminals")

// create starts a terminal and returns its id. The command runs as given
// (command and args, no shell) unless args are empty and the command holds
// a space: agents that send a whole command line that way get `/bin/sh -c`.
func (ts *terminals) create(p acp.CreateTerminalRequest) (string, error) {
	limit := DefaultOutputLimit
	if p.OutputByteLimit != nil {
		limit = max(*p.OutputByteLimit, 0)
	}
	argv := append([]string{p.Command}, p.Args...)
	if len(p.Args) == 0 && strings.ContainsAny(p.Command, " \t") {
		argv = []string{"/bin/sh", "-c", p.Command}
	}
	t := &terminal{out: &boundedBuffer{limit: limit}, exited: make(chan struct{})}
	t.cmd = exec.Command(argv[0], argv[1:]...)
	t.cmd.Dir = ts.defaultDir()
	if p.Cwd != nil && *p.Cwd != "" {
		t.cmd.Dir = *p.Cwd
	}
	t.cmd.Env = os.Environ()
	for _, e := range p.Env {
		t.cmd.Env = append(t.cmd.Env, e.Name+"="+e.Value)
	}
	t.cmd.Stdout, t.cmd.Stderr = t.out, t.out // stdin stays nil: /dev/null
	t.cmd.SysProcAttr = childAttr()
	// A background job holding the output pipe does not hold the exit.
	t.cmd.WaitDelay = 500 * time.Millisecond

	ts.mu.Lock()
	defer ts.mu.Unlock() // held over the start: closeAll must see every terminal
	if ts.closed {
		return "", errTerminalsClosed
	}
	if len(ts.live) >= MaxTerminals {
		return "", fmt.Errorf("too many terminals: %d are open, release one first", MaxTerminals)
	}
	if err := spawn(t.cmd.Start); err != nil {
		return "", fmt.Errorf("start %q: %w", argv[0], err)
	}
	ts.seq++
	id := "term-" + strconv.Itoa(ts.seq)
	ts.live[id] = t
	ts.all.Add(1)
	go func() {
		defer ts.all.Done()
		t.cmd.Wait() // the status is read from ProcessState
		st := t.cmd.ProcessState
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			sig := ws.Signal().String()
			t.exit.Signal = &sig
		} else {
			code := st.ExitCode()
			t.exit.ExitCode = &code
		}
		close(t.exited)
	}()
	return id, nil
}

// get returns the live terminal id.
func (ts *terminals) get(id string) (*terminal, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.live[id]
	if t == nil {
		return nil, acp.NewInvalidParams(map[string]any{"error": "no terminal " + strconv.Quote(id)})
	}
	return t, nil
}

// output is terminal/output.
func (t *terminal) output() acp.TerminalOutputResponse {
	out, truncated := t.out.snapshot()
	r := acp.TerminalOutputResponse{Output: out, Truncated: truncated}
	select {
	case <-t.exited:
		r.ExitStatus = &acp.TerminalExitStatus{ExitCode: t.exit.ExitCode, Signal: t.exit.Signal}
	default:
	}
	return r
}

// wait is terminal/wait_for_exit: it blocks until the command exits or
// ctx ends (the agent cancelled the request, the connection closed).
func (t *terminal) wait(ctx context.Context) (acp.WaitForTerminalExitResponse, error) {
	select {
	case <-t.exited:
		return t.exit, nil
	case <-ctx.Done():
		return acp.WaitForTerminalExitResponse{}, ctx.Err()
	}
}

// kill SIGKILLs the terminal's process group (terminal/kill); the
// terminal stays, its output readable.
func (t *terminal) kill() {
	syscall.Kill(-t.cmd.Process.Pid, syscall.SIGKILL)
}

// release kills the terminal if it runs and forgets it (terminal/release).
// Its reaper still waits for it; closeAll waits for the reaper.
func (ts *terminals) release(id string) error {
	ts.mu.Lock()
	t := ts.live[id]
	delete(ts.live, id)
	if t != nil {
		ts.gone = append(ts.gone, goneTerminal{id, t})
		if len(ts.gone) > MaxTerminals {
			ts.gone = ts.gone[1:]
		}
	}
	ts.mu.Unlock()
	if t == nil {
		return acp.NewInvalidParams(map[string]any{"error": "no terminal " + strconv.Quote(id)})
	}
	t.kill()
	return nil
}

// closeAll kills every terminal, released or not, refuses new ones, and
// returns once each is reaped.
func (ts *terminals) closeAll() {
	ts.mu.Lock()
	ts.closed = true
	live := ts.live
	ts.live = map[string]*terminal{}
	ts.mu.Unlock()
	for _, t := range live {
		t.kill()
	}
	ts.all.Wait() // SIGKILL cannot be refused; WaitDelay bounds the output copy
}

// textOf is the output of terminal id for a tool's text, "" when unknown.
func (ts *terminals) textOf(id string) string {
	ts.mu.Lock()
	t := ts.live[id]
	for _, g := range ts.gone {
		if t == nil && g.id == id {
			t = g.t
		}
	}
	ts.mu.Unlock()
	if t == nil {
		return ""
	}
	s, _ := t.out.snapshot()
	return s
}

// boundedBuffer keeps the last limit bytes written to it, cut at a UTF-8
// character boundary; truncated says whether anything was dropped.
type boundedBuffer struct {
	limit int

	mu        sync.Mutex
	buf       []byte
	truncated bool
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	n := len(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(p) > b.limit {
		// Only the end of p can stay: keep the buffer's allocation small.
		b.buf, b.truncated = b.buf[:0], true
		p = p[len(p)-b.limit:]
	}
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.limit; over > 0 {
		for over < len(b.buf) && !utf8.RuneStart(b.buf[over]) {
			over++
		}
		b.buf = b.buf[:copy(b.buf, b.buf[over:])]
		b.truncated = true
	}
	return n, nil
}

func (b *boundedBuffer) snapshot() (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.buf
	// The first write above may have started inside a character.
	for len(out) > 0 && !utf8.RuneStart(out[0]) && b.truncated {
		out = out[1:]
	}
	return string(out), b.truncated
}
