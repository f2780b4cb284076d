// Package builtin is dashgate's built-in worker (`dashgate worker`): a
// JSON-lines program per PROTOCOL.md §4 with a few slash commands and an echo
// agent for prompts. Of the project it imports only workers/jsonl, the
// protocol's worker side, which imports nothing of the project: like any
// third-party worker.
package builtin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/shirou/gopsutil/v4/host"
	"github.com/shirou/gopsutil/v4/mem"
	"github.com/shirou/gopsutil/v4/process"

	"github.com/dashgate/dashgate/workers/jsonl"
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

// Main runs the worker on the process's stdin and stdout and returns its exit
// code. It arms the parent watchdog before anything else (docs/failure-classes.md #10):
// it exits when getppid() is no longer DASHGATE_PARENT_PID, and on stdin EOF.
func Main() int {
	if !jsonl.WatchParent("dashgate worker") {
		return 1
	}
	return Run(context.Background(), os.Stdin, os.Stdout, os.Stderr)
}

type server struct {
	*jsonl.Server
}

// Run serves requests from in until EOF and returns the exit code. Requests
// run concurrently; `/exit CODE` makes Run return CODE at once.
func Run(ctx context.Context, in io.Reader, out, errOut io.Writer) int {
	s := &server{jsonl.NewServer("dashgate worker", out, errOut)}
	s.Logf("ready, pid %d", os.Getpid())
	return s.Serve(ctx, in, s.handle)
}

func (s *server) handle(ctx context.Context, req jsonl.Request) {
	switch req.Method {
	case "slash":
		var p struct {
			Command string `json:"command"`
		}
		json.Unmarshal(req.Params, &p)
		out, err := s.slash(ctx, p.Command)
		if err != nil {
			s.Fail(req.ID, err.Error())
			return
		}
		s.Reply(req.ID, map[string]any{"output": out})
	case "prompt":
		var p struct {
			Text        string             `json:"text"`
			TurnID      string             `json:"turn_id"`
			Attachments []jsonl.Attachment `json:"attachments"`
		}
		json.Unmarshal(req.Params, &p)
		// The echo agent reads no file: each one is said, not dropped.
		for _, a := range p.Attachments {
			s.Notice(req.ID, jsonl.NotSent(a))
		}
		s.prompt(ctx, req.ID, p.Text)
	default:
		s.Fail(req.ID, "unknown method "+strconv.Quote(req.Method))
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

func (s *server) slash(ctx context.Context, command string) (string, error) {
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
		s.Exit(code)
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
	fmt.Fprintf(&b, "cpus: %d (Go code on %d at a time), go: %s\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
	if p, err := process.NewProcessWithContext(ctx, int32(os.Getpid())); err == nil {
		if mi, err := p.MemoryInfoWithContext(ctx); err == nil {
			fmt.Fprintf(&b, "worker: pid %d, ppid %d, rss %d KiB, goroutines %d", os.Getpid(), os.Getppid(), mi.RSS>>10, runtime.NumGoroutine())
		}
	}
	return b.String()
}

// echoWord is a word of the prompt with the white space before it.
var echoWord = regexp.MustCompile(`\s*\S+`)

// prompt answers with an echo agent: the text comes back word by word as
// delta events, then in full in the reply. Line breaks are kept (a
// multi-line prompt starts on a line of its own after "(echo agent)"), so
// Markdown comes back as Markdown; runs of spaces become one. A cancelled
// prompt replies with what was streamed so far and interrupted=true.
func (s *server) prompt(ctx context.Context, id json.RawMessage, text string) {
	var streamed strings.Builder
	streamed.WriteString("(echo agent)")
	s.Event(id, "delta", map[string]any{"text": "(echo agent)"})
	t := time.NewTicker(wordDelay())
	defer t.Stop()
	for i, w := range echoWord.FindAllString(text, -1) {
		word := strings.TrimLeftFunc(w, unicode.IsSpace)
		sep := w[:len(w)-len(word)]
		switch {
		case i == 0 && strings.Contains(text, "\n"):
			sep = "\n\n"
		case !strings.Contains(sep, "\n"):
			sep = " "
		}
		select {
		case <-ctx.Done():
			s.Reply(id, map[string]any{"output": streamed.String(), "interrupted": true})
			return
		case <-t.C:
		}
		s.Event(id, "delta", map[string]any{"text": sep + word})
		streamed.WriteString(sep + word)
	}
	s.Reply(id, map[string]any{"output": streamed.String()})
}
