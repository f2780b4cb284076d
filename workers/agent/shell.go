package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// maxToolOutput caps a command's combined stdout and stderr.
const maxToolOutput = 64 << 10

// denied is the tool result the model gets for a command the viewer refused.
const denied = "the user denied this command"

// runToolCall asks for approval and runs one tool call, returning the
// result for the model. When ctx ends while it waits or runs, the result
// does not matter: the caller answers interrupted.
func (s *server) runToolCall(ctx context.Context, id json.RawMessage, c *toolCall) string {
	if c.name != "shell" {
		return fmt.Sprintf("unknown tool %q: the only tool is shell", c.name)
	}
	var args struct {
		Command string `json:"command"`
	}
	if err := json.Unmarshal([]byte(c.args.String()), &args); err != nil || args.Command == "" {
		return `bad arguments: want {"command": "..."}`
	}
	choice := s.approve(ctx, id, args.Command)
	if choice != "once" {
		return denied
	}
	toolID := "t" + strconv.FormatInt(s.seq.Add(1), 10)
	s.Event(id, "tool_start", map[string]any{"tool_id": toolID, "name": "shell", "command": args.Command})
	r := s.shell(ctx, args.Command)
	s.Event(id, "tool_complete", map[string]any{
		"tool_id": toolID, "exit_code": r.exitCode, "output": r.output,
		"truncated": r.truncated, "duration_ms": r.duration.Milliseconds(),
	})
	res := fmt.Sprintf("exit code %d\n%s", r.exitCode, r.output)
	if r.truncated {
		res += "\n(output truncated at 64 KiB)"
	}
	if r.timedOut {
		res += fmt.Sprintf("\n(killed after the %s time limit)", s.cfg.ToolTimeout)
	}
	return res
}

// approve emits an approval event and waits for the viewer's choice; a
// cancelled prompt withdraws its pending approval and counts as a denial.
func (s *server) approve(ctx context.Context, id json.RawMessage, command string) string {
	reqID := "a" + strconv.FormatInt(s.seq.Add(1), 10)
	ch := make(chan string, 1)
	s.mu.Lock()
	s.approvals[reqID] = ch
	s.mu.Unlock()
	s.Event(id, "approval", map[string]any{"request_id": reqID, "tool": "shell", "command": command})
	select {
	case choice := <-ch:
		return choice
	case <-ctx.Done():
		s.mu.Lock()
		delete(s.approvals, reqID)
		s.mu.Unlock()
		return "deny"
	}
}

type shellResult struct {
	exitCode  int
	output    string
	truncated bool
	timedOut  bool
	duration  time.Duration
}

// capped keeps the first maxToolOutput bytes written to it.
type capped struct {
	mu        sync.Mutex
	buf       []byte
	truncated bool
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	room := maxToolOutput - len(c.buf)
	if len(p) > room {
		c.buf = append(c.buf, p[:room]...)
		c.truncated = true
	} else {
		c.buf = append(c.buf, p...)
	}
	return len(p), nil
}

// shell runs command with /bin/sh -c in its own process group (still a
// child of the worker) and kills the whole group when it times out or ctx
// ends (the turn was interrupted). It returns once the shell is reaped.
// What the command leaves running in the background (`server &`) lives on
// as the worker's descendant, like a job in the session's terminal: it
// carries the worker's marker, so it ends when the worker is closed (the
// last viewer leaves, the session ends).
func (s *server) shell(ctx context.Context, command string) shellResult {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ToolTimeout)
	defer cancel()
	out := &capped{}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
	cmd.Dir = s.cfg.ToolDir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A background job holding the output pipe must not hold the turn: its
	// output after the shell exits is not waited for.
	cmd.WaitDelay = 500 * time.Millisecond
	start := time.Now()
	err := cmd.Start()
	if err != nil {
		return shellResult{exitCode: -1, output: "cannot start /bin/sh: " + err.Error()}
	}
	cmd.Wait() // the exit status is read from ProcessState below
	r := shellResult{duration: time.Since(start), timedOut: errors.Is(ctx.Err(), context.DeadlineExceeded)}
	r.exitCode = cmd.ProcessState.ExitCode() // -1 when killed by a signal
	out.mu.Lock()
	r.output, r.truncated = string(out.buf), out.truncated
	out.mu.Unlock()
	return r
}
