// Package builtin is dashgate's built-in worker (`dashgate worker`): a
// JSON-lines program per PROTOCOL.md §4 with a few slash commands and an echo
// agent for prompts. It imports nothing of the project, like any third-party
// worker would.
package builtin

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shirou/gopsutil/v4/host"
	"github.com/shirou/gopsutil/v4/mem"
	"github.com/shirou/gopsutil/v4/process"
)

// WordDelay is the pause between two streamed words of an echo reply, so a
// person sees the reply arrive in pieces.
const WordDelay = 40 * time.Millisecond

// WordDelayEnv names an environment variable that sets the pause between
// two streamed words instead of WordDelay (a Go duration, "1us" at least;
// the benchmark streams as fast as the gateway goes with it). dashgate
// passes it to workers only when --pass-env names it.
const WordDelayEnv = "ECHO_AGENT_WORD_DELAY"

func wordDelay() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(WordDelayEnv)); err == nil && d > 0 {
		return d
	}
	return WordDelay
}

// maxLine bounds one request line.
const maxLine = 1 << 20

// Main runs the worker on the process's stdin and stdout and returns its exit
// code. It arms the parent watchdog before anything else (docs/failure-classes.md #10):
// it exits when getppid() is no longer DASHGATE_PARENT_PID, and on stdin EOF.
func Main() int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if want, err := strconv.Atoi(os.Getenv("DASHGATE_PARENT_PID")); err == nil {
		if os.Getppid() != want {
			fmt.Fprintln(os.Stderr, "dashgate worker: parent is gone, exiting")
			return 1
		}
		go watchParent(want)
	}
	return Run(ctx, os.Stdin, os.Stdout, os.Stderr)
}

// watchParent exits the process as soon as its parent changes: compares the
// parent pid only, never start times (docs/failure-classes.md #9).
func watchParent(want int) {
	t := time.NewTicker(250 * time.Millisecond)
	for range t.C {
		if os.Getppid() != want {
			fmt.Fprintln(os.Stderr, "dashgate worker: parent is gone, exiting")
			os.Exit(1)
		}
	}
}

type request struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

type server struct {
	out     io.Writer
	outM    sync.Mutex
	exiting atomic.Bool // set by /exit and when Run returns

	mu       sync.Mutex
	inflight map[string]context.CancelFunc
	wg       sync.WaitGroup
}

// Run serves requests from in until EOF and returns the exit code. Requests
// run concurrently; `/exit CODE` makes Run return CODE at once.
func Run(ctx context.Context, in io.Reader, out, errOut io.Writer) int {
	ctx, cancel := context.WithCancel(ctx)
	s := &server{out: out, inflight: map[string]context.CancelFunc{}}
	// Run returns only once its requests have: they are cancelled first.
	defer s.wg.Wait()
	defer cancel()
	defer s.exiting.Store(true)
	exit := make(chan int, 1)
	lines := make(chan []byte)
	go func() {
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64<<10), maxLine)
		for sc.Scan() {
			select {
			case lines <- append([]byte(nil), sc.Bytes()...):
			case <-ctx.Done():
				return
			}
		}
		close(lines)
	}()
	fmt.Fprintln(errOut, "dashgate worker: ready, pid", os.Getpid())
	for {
		select {
		case code := <-exit:
			return code
		case line, ok := <-lines:
			if !ok {
				return 0 // stdin EOF: our owner is done with us
			}
			var req request
			if err := json.Unmarshal(line, &req); err != nil || len(req.ID) == 0 {
				fmt.Fprintf(errOut, "dashgate worker: bad request line: %.80q\n", line)
				continue
			}
			rctx, cancel := context.WithCancel(ctx)
			s.mu.Lock()
			s.inflight[string(req.ID)] = cancel
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer func() {
					s.mu.Lock()
					delete(s.inflight, string(req.ID))
					s.mu.Unlock()
					cancel()
				}()
				s.handle(rctx, req, exit)
			}()
		}
	}
}

func (s *server) write(v any) {
	if s.exiting.Load() {
		return // the process is going away: no more replies
	}
	b, _ := json.Marshal(v)
	s.outM.Lock()
	defer s.outM.Unlock()
	s.out.Write(append(b, '\n'))
}

func (s *server) reply(id json.RawMessage, result any) {
	s.write(map[string]any{"id": id, "ok": true, "result": result})
}

func (s *server) fail(id json.RawMessage, msg string) {
	s.write(map[string]any{"id": id, "ok": false, "error": msg})
}

func (s *server) handle(ctx context.Context, req request, exit chan<- int) {
	switch req.Method {
	case "slash":
		var p struct {
			Command string `json:"command"`
		}
		json.Unmarshal(req.Params, &p)
		out, err := s.slash(ctx, p.Command, exit)
		if err != nil {
			s.fail(req.ID, err.Error())
			return
		}
		s.reply(req.ID, map[string]any{"output": out})
	case "prompt":
		var p struct {
			Text   string `json:"text"`
			TurnID string `json:"turn_id"`
		}
		json.Unmarshal(req.Params, &p)
		s.prompt(ctx, req.ID, p.Text)
	case "cancel":
		var p struct {
			ID json.RawMessage `json:"id"`
		}
		json.Unmarshal(req.Params, &p)
		s.mu.Lock()
		cancel := s.inflight[string(p.ID)]
		s.mu.Unlock()
		if cancel != nil {
			cancel()
		}
		s.reply(req.ID, map[string]any{"cancelled": cancel != nil})
	default:
		s.fail(req.ID, "unknown method "+strconv.Quote(req.Method))
	}
}

const help = `commands:
  /help          this list
  /echo TEXT     answer TEXT
  /time          the worker's clock (RFC 3339)
  /sleep SECONDS wait, then answer (interruptible)
  /sysinfo       host and worker process facts
  /exit CODE     the worker exits with CODE (to exercise crash paths)
anything else is a prompt, answered by an echo agent`

func (s *server) slash(ctx context.Context, command string, exit chan<- int) (string, error) {
	name, arg, _ := strings.Cut(strings.TrimSpace(command), " ")
	arg = strings.TrimSpace(arg)
	switch name {
	case "/help":
		return help, nil
	case "/echo":
		return arg, nil
	case "/time":
		return time.Now().Format(time.RFC3339Nano), nil
	case "/sleep":
		secs, err := strconv.ParseFloat(arg, 64)
		if err != nil || secs < 0 || secs > 3600 {
			return "", fmt.Errorf("usage: /sleep SECONDS (0 to 3600)")
		}
		t := time.NewTimer(time.Duration(secs * float64(time.Second)))
		defer t.Stop()
		select {
		case <-t.C:
			return fmt.Sprintf("slept %gs", secs), nil
		case <-ctx.Done():
			return "", fmt.Errorf("sleep cancelled")
		}
	case "/sysinfo":
		return sysinfo(ctx), nil
	case "/exit":
		code, err := strconv.Atoi(arg)
		if err != nil {
			code = 1
		}
		s.exiting.Store(true)
		select {
		case exit <- code:
		default:
		}
		<-ctx.Done() // never answered: the process is exiting
		return "", ctx.Err()
	default:
		return "", fmt.Errorf("unknown command %s (try /help)", name)
	}
}

func sysinfo(ctx context.Context) string {
	var b strings.Builder
	if h, err := host.InfoWithContext(ctx); err == nil {
		fmt.Fprintf(&b, "host: %s, %s %s (%s), kernel %s, up %ds\n", h.Hostname, h.Platform, h.PlatformVersion, h.KernelArch, h.KernelVersion, h.Uptime)
	}
	if vm, err := mem.VirtualMemoryWithContext(ctx); err == nil {
		fmt.Fprintf(&b, "memory: %d MiB total, %d MiB available\n", vm.Total>>20, vm.Available>>20)
	}
	fmt.Fprintf(&b, "cpus: %d, go: %s\n", runtime.NumCPU(), runtime.Version())
	if p, err := process.NewProcessWithContext(ctx, int32(os.Getpid())); err == nil {
		if mi, err := p.MemoryInfoWithContext(ctx); err == nil {
			fmt.Fprintf(&b, "worker: pid %d, ppid %d, rss %d KiB, goroutines %d", os.Getpid(), os.Getppid(), mi.RSS>>10, runtime.NumGoroutine())
		}
	}
	return b.String()
}

// prompt answers with an echo agent: the text comes back word by word as
// delta events, then in full in the reply. A cancelled prompt replies with
// what was streamed so far and interrupted=true.
func (s *server) prompt(ctx context.Context, id json.RawMessage, text string) {
	words := strings.Fields(text)
	streamed := []string{"(echo agent)"}
	s.write(map[string]any{"id": id, "event": "delta", "text": "(echo agent)"})
	t := time.NewTicker(wordDelay())
	defer t.Stop()
	for _, w := range words {
		select {
		case <-ctx.Done():
			s.reply(id, map[string]any{"output": strings.Join(streamed, " "), "interrupted": true})
			return
		case <-t.C:
		}
		s.write(map[string]any{"id": id, "event": "delta", "text": " " + w})
		streamed = append(streamed, w)
	}
	s.reply(id, map[string]any{"output": strings.Join(streamed, " ")})
}
