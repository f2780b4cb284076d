package acpbridge

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// spawn runs start on the spawning thread: one goroutine locked to its OS
// thread for the life of the process (spawnLoop), so that the Pdeathsig of
// every child it forks fires when the bridge dies, never when some Go
// thread that happened to fork it exits.
func spawn(start func() error) error {
	spawner.once.Do(func() {
		spawner.jobs = make(chan spawnJob)
		go spawnLoop(spawner.jobs)
	})
	done := make(chan error, 1)
	spawner.jobs <- spawnJob{start: start, done: done}
	return <-done
}

type spawnJob struct {
	start func() error
	done  chan<- error
}

var spawner struct {
	once sync.Once
	jobs chan spawnJob
}

// spawnLoop is the spawning goroutine. It never unlocks its thread and
// never returns, by design (the leak checks of the tests ignore it).
func spawnLoop(jobs <-chan spawnJob) {
	runtime.LockOSThread()
	for j := range jobs {
		j.done <- j.start()
	}
}

// childAttr is the SysProcAttr of the agent and of terminals: a process
// group of its own (so that its whole tree is signalled at once), dying with
// the bridge.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// agentProc is the running agent: its stdin and stdout pipes (the ACP
// connection), the tail of its stderr, and its reaper.
type agentProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser // our end; closing it tells the agent to exit
	stdout io.ReadCloser  // our end; closed once the agent is reaped
	tail   *tailWriter
	watch  *stdoutWatch

	exited  chan struct{} // closed once the agent is reaped
	waitErr error         // cmd.Wait's error, set before exited closes
}

// startAgent starts argv in dir with the bridge's environment. Its stderr
// goes to errOut and into a tail kept for error messages. The error is
// exec's (not found, not executable).
func startAgent(argv []string, dir string, errOut io.Writer) (*agentProc, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	a := &agentProc{tail: &tailWriter{fwd: errOut, max: 4 << 10}, exited: make(chan struct{})}
	a.cmd = exec.Command(argv[0], argv[1:]...)
	a.cmd.Dir = dir
	// Files, not writers, for stdin and stdout: exec starts no copying
	// goroutine for them, so Wait never closes stdout before the
	// connection has read the agent's last answer.
	a.cmd.Stdin, a.cmd.Stdout = inR, outW
	a.cmd.Stderr = a.tail
	// A grandchild that keeps stderr open does not hold the reaper.
	a.cmd.WaitDelay = time.Second
	a.cmd.SysProcAttr = childAttr()
	err = spawn(a.cmd.Start)
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, err
	}
	a.stdin = inW
	a.watch = &stdoutWatch{r: outR, atStart: true}
	a.stdout = outR
	go func() {
		a.waitErr = a.cmd.Wait()
		close(a.exited)
	}()
	return a, nil
}

// isExited reports whether the agent was reaped.
func (a *agentProc) isExited() bool {
	select {
	case <-a.exited:
		return true
	default:
		return false
	}
}

// status says how the agent ended, for messages ("exit status 3",
// "signal: killed"); call it after exited closed.
func (a *agentProc) status() string {
	if a.cmd.ProcessState == nil {
		return "an unknown status"
	}
	return a.cmd.ProcessState.String()
}

// stop ends the agent and returns once it is reaped, with how far it had
// to go ("" for none, "sigterm", "sigkill"): it closes its stdin and waits
// wait for it to exit, then SIGTERMs its process group, waits a second,
// then SIGKILLs the group. With wait 0 it goes to SIGKILL at once. What the
// agent left in its group is killed in every case.
func (a *agentProc) stop(wait time.Duration) string {
	a.stdin.Close()
	defer a.stdout.Close()
	pgid := a.cmd.Process.Pid
	esc := ""
	if wait > 0 {
		if a.waitExit(wait) {
			syscall.Kill(-pgid, syscall.SIGKILL)
			return esc
		}
		esc = "sigterm"
		syscall.Kill(-pgid, syscall.SIGTERM)
		if a.waitExit(time.Second) {
			syscall.Kill(-pgid, syscall.SIGKILL)
			return esc
		}
	}
	if !a.isExited() {
		esc = "sigkill"
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
	<-a.exited // SIGKILL cannot be refused; WaitDelay bounds the stderr copy
	return esc
}

// waitExit waits at most d for the agent to be reaped and reports whether
// it was.
func (a *agentProc) waitExit(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-a.exited:
		return true
	case <-t.C:
		return false
	}
}

// lastWords is the end of the agent's stderr, at most three lines on one
// line ("" when it wrote nothing), and the first line on its stdout that
// was no JSON, for error messages.
func (a *agentProc) lastWords() string {
	var parts []string
	if t := a.tail.lastLines(3); t != "" {
		parts = append(parts, "its last words on stderr: "+t)
	}
	if g := a.watch.firstGarbage(); g != "" {
		parts = append(parts, fmt.Sprintf("it wrote something that is not ACP on stdout: %q", g))
	}
	return strings.Join(parts, "; ")
}

// tailWriter forwards what the agent writes on stderr and keeps its last
// max bytes.
type tailWriter struct {
	fwd io.Writer
	max int

	mu  sync.Mutex
	buf []byte
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.fwd.Write(p) // diagnostics only: a failing stderr is no reason to stop
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if over := len(w.buf) - w.max; over > 0 {
		w.buf = w.buf[:copy(w.buf, w.buf[over:])]
	}
	return len(p), nil
}

// lastLines is the last n non-blank lines, joined by " / ", at most 400
// bytes.
func (w *tailWriter) lastLines(n int) string {
	w.mu.Lock()
	lines := strings.Split(string(bytes.ToValidUTF8(w.buf, nil)), "\n")
	w.mu.Unlock()
	var keep []string
	for i := len(lines) - 1; i >= 0 && len(keep) < n; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			keep = append([]string{l}, keep...)
		}
	}
	s := strings.Join(keep, " / ")
	if len(s) > 400 {
		s = "…" + string(cutUTF8(s[len(s)-400:]))
	}
	return s
}

// cutUTF8 drops the bytes of a character cut at the start of s.
func cutUTF8(s string) string { return strings.ToValidUTF8(s, "") }

// stdoutWatch passes the agent's stdout to the ACP connection and notes
// the first line that does not start like a JSON object (the library only
// logs and skips such a line): the error of an agent that never answers
// can then say what it printed instead.
type stdoutWatch struct {
	r       io.Reader
	atStart bool // the next byte starts a line

	mu      sync.Mutex
	garbage []byte // the first bad line, at most 200 bytes
	inBad   bool   // copying a bad line
	done    bool   // one bad line is enough
}

func (w *stdoutWatch) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range p[:n] {
		switch {
		case c == '\n':
			w.atStart = true
			if w.inBad {
				w.inBad, w.done = false, true
			}
		case w.inBad:
			if len(w.garbage) < 200 {
				w.garbage = append(w.garbage, c)
			}
		case w.atStart && (c == ' ' || c == '\t' || c == '\r'):
		case w.atStart:
			w.atStart = false
			if c != '{' && !w.done {
				w.inBad = true
				w.garbage = append(w.garbage, c)
			}
		}
	}
	return n, err
}

func (w *stdoutWatch) firstGarbage() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.ToValidUTF8(string(w.garbage), "")
}

// waitGone waits, at most d, for the agent to be reaped after its
// connection closed; an agent that closed its stdout but lives on is
// killed. It reports how it ended.
func (a *agentProc) waitGone(d time.Duration) string {
	if !a.waitExit(d) {
		syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
		<-a.exited
		return "closed its output and was killed"
	}
	return "exited (" + a.status() + ")"
}
