// Package jsonl is the worker side of dashgate's JSON-lines worker protocol
// (PROTOCOL.md §4): the request loop, the parent watchdog and the writing
// of replies and events, shared by the built-in worker (`dashgate worker`)
// and the agent (`dashgate agent`). Like any third-party worker, it imports
// nothing of the project.
//
// Ownership: Serve owns its reader and the goroutines it starts, and
// returns only once every request it started has returned (they are
// cancelled first). The Server writes to out; the caller closes nothing.
package jsonl

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultMaxLine bounds one request line, bytes, unless Server.MaxLine
// says otherwise.
const DefaultMaxLine = 1 << 20

// EnvMaxLine is the variable in which dashgate tells its workers the
// longest request line it may send them (a prompt carries its attached
// files, base64: PROTOCOL.md §4); Serve reads lines at least that long.
const EnvMaxLine = "DASHGATE_MAX_LINE"

// envMaxLine is EnvMaxLine's value, 0 when unset or not a number.
func envMaxLine() int {
	n, err := strconv.Atoi(os.Getenv(EnvMaxLine))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// Request is one request line.
type Request struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// Server serves requests and writes the worker's lines. Its methods are
// safe for concurrent use.
type Server struct {
	// MaxLine bounds one request line, bytes (DefaultMaxLine when 0; the
	// larger of it and EnvMaxLine's value); set it before Serve. A longer
	// line ends Serve as if stdin ended.
	MaxLine int

	name    string // "dashgate worker": the prefix of its diagnostics
	out     io.Writer
	errOut  io.Writer
	outMu   sync.Mutex
	exiting atomic.Bool // nothing more is written
	exit    chan int

	mu       sync.Mutex
	inflight map[string]context.CancelFunc
	wg       sync.WaitGroup
}

// NewServer returns a server writing its lines to out and its diagnostics,
// prefixed with name, to errOut.
func NewServer(name string, out, errOut io.Writer) *Server {
	return &Server{name: name, out: out, errOut: errOut, exit: make(chan int, 1), inflight: map[string]context.CancelFunc{}}
}

// Serve reads request lines from in and runs each with handle on a
// goroutine of its own, with a context that ends when a `cancel` request
// names it (Serve answers those itself) or Serve returns. It returns 0 at
// stdin EOF or when ctx ends, or the code given to Exit; before it does,
// every request is cancelled and waited for.
func (s *Server) Serve(ctx context.Context, in io.Reader, handle func(ctx context.Context, req Request)) int {
	ctx, cancel := context.WithCancel(ctx)
	defer s.wg.Wait()
	defer cancel()
	defer s.exiting.Store(true)
	lines := make(chan []byte)
	go func() {
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64<<10), max(cmp.Or(s.MaxLine, DefaultMaxLine), envMaxLine()))
		for sc.Scan() {
			select {
			case lines <- append([]byte(nil), sc.Bytes()...):
			case <-ctx.Done():
				return
			}
		}
		close(lines)
	}()
	for {
		select {
		case <-ctx.Done():
			return 0
		case code := <-s.exit:
			return code
		case line, ok := <-lines:
			if !ok {
				return 0 // stdin EOF: our owner is done with us
			}
			var req Request
			if err := json.Unmarshal(line, &req); err != nil || len(req.ID) == 0 {
				s.Logf("bad request line: %.80q", line)
				continue
			}
			if req.Method == "cancel" {
				s.cancel(req)
				continue
			}
			rctx, rcancel := context.WithCancel(ctx)
			s.mu.Lock()
			s.inflight[string(req.ID)] = rcancel
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer func() {
					s.mu.Lock()
					delete(s.inflight, string(req.ID))
					s.mu.Unlock()
					rcancel()
				}()
				handle(rctx, req)
			}()
		}
	}
}

// cancel ends the request a `cancel` request names and answers it.
func (s *Server) cancel(req Request) {
	var p struct {
		ID json.RawMessage `json:"id"`
	}
	json.Unmarshal(req.Params, &p)
	s.mu.Lock()
	stop := s.inflight[string(p.ID)]
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
	s.Reply(req.ID, map[string]any{"cancelled": stop != nil})
}

// Exit makes Serve return code at once; nothing more is written.
func (s *Server) Exit(code int) {
	s.exiting.Store(true)
	select {
	case s.exit <- code:
	default:
	}
}

// Write writes v as one line, unless the server is exiting.
func (s *Server) Write(v any) {
	if s.exiting.Load() {
		return // the process is going away: no more lines
	}
	b, _ := json.Marshal(v)
	s.outMu.Lock()
	defer s.outMu.Unlock()
	s.out.Write(append(b, '\n'))
}

// Reply answers request id with result.
func (s *Server) Reply(id json.RawMessage, result any) {
	s.Write(map[string]any{"id": id, "ok": true, "result": result})
}

// Fail answers request id with ok:false and msg; fields (a failure word,
// retry_after) are added to the line.
func (s *Server) Fail(id json.RawMessage, msg string, fields ...any) {
	m := map[string]any{"id": id, "ok": false, "error": msg}
	for i := 0; i+1 < len(fields); i += 2 {
		m[fmt.Sprint(fields[i])] = fields[i+1]
	}
	s.Write(m)
}

// Event streams an event of request id: {"id","event":name,...fields}.
func (s *Server) Event(id json.RawMessage, name string, fields map[string]any) {
	m := make(map[string]any, len(fields)+2)
	for k, v := range fields {
		m[k] = v
	}
	m["id"], m["event"] = id, name
	s.Write(m)
}

// Logf writes one diagnostic line to errOut, prefixed with the name.
func (s *Server) Logf(format string, args ...any) {
	fmt.Fprintf(s.errOut, s.name+": "+format+"\n", args...)
}

// WatchParent arms the parent watchdog (docs/failure-classes.md #10): when
// DASHGATE_PARENT_PID is set and is not, or stops being, this process's
// parent, the process exits with code 1 after one line on stderr. It
// compares parent pids only, never start times (#9). It waits on the
// parent's pidfd (awaitExit: an idle worker is never woken), or, on a
// kernel without pidfds, looks every 250 ms. It reports false when the
// parent is already gone (the caller exits).
func WatchParent(name string) bool {
	var want int
	if _, err := fmt.Sscan(os.Getenv("DASHGATE_PARENT_PID"), &want); err != nil {
		return true
	}
	if os.Getppid() != want {
		fmt.Fprintln(os.Stderr, name+": parent is gone, exiting")
		return false
	}
	go func() {
		if !awaitExit(want, func() bool { return os.Getppid() == want }) {
			// No pidfd (before Linux 5.3): the parent pid is polled.
			t := time.NewTicker(250 * time.Millisecond)
			for range t.C {
				if os.Getppid() != want {
					break
				}
			}
		}
		fmt.Fprintln(os.Stderr, name+": parent is gone, exiting")
		os.Exit(1)
	}()
	return true
}

// awaitExit waits, in Go's poller, for the process pid to exit (its pidfd
// turns readable then, pidfd_open(2)) and reports true; an idle worker is
// thus never woken to look at its parent (a ticker woke each one 4 times a
// second: 100 idle workers cost 2.6 to 5.6 % of a core, 1,500 context
// switches a second). It reports false at once when the kernel gives no
// pidfd. same says whether pid is still the process meant (the worker's
// parent: getppid); it is asked once the pidfd is open, so that a pid
// freed meanwhile and given to another process is seen as gone.
func awaitExit(pid int, same func() bool) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return errors.Is(err, unix.ESRCH) // already gone; ENOSYS and others: poll
	}
	if !same() {
		unix.Close(fd)
		return true
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return false
	}
	f := os.NewFile(uintptr(fd), "pidfd") // nonblocking: in Go's poller
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	err = rc.Read(func(fd uintptr) bool {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, 0)
		return err == nil && n > 0 // readable: the process exited
	})
	return err == nil
}

// EnvDurations sets each *to whose environment variable (getenv's answer
// for its name) is set to that Go duration; a variable left unset or empty
// leaves its *to as it is. Errors: a value that is not a positive
// duration, naming the variable (the first such one, in names' order).
// The workers read their settings this way (dashgate gives them in the
// environment only, never argv).
func EnvDurations(getenv func(string) string, names []string, to []*time.Duration) error {
	for i, name := range names {
		v := getenv(name)
		if v == "" {
			continue
		}
		n, err := time.ParseDuration(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("%s=%q: want a positive Go duration", name, v)
		}
		*to[i] = n
	}
	return nil
}
