package acpbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/dashgate/dashgate/workers/jsonl"
)

// ProtocolVersion is the only ACP protocol version the bridge speaks; an
// agent answering initialize with another fails the prompt with
// FailVersion.
const ProtocolVersion = 1

// The environment variables Config reads.
const (
	EnvInitTimeout = "DASHGATE_ACP_INIT_TIMEOUT" // a Go duration
	EnvCloseWait   = "DASHGATE_ACP_CLOSE_WAIT"   // a Go duration
)

// Defaults of Config.
const (
	// DefaultInitTimeout bounds initialize, session/new and session/load:
	// long, since `npx` may download the agent first.
	DefaultInitTimeout = 60 * time.Second
	// DefaultCloseWait is how long the agent may take to exit once its
	// stdin closed, before SIGTERM (and SIGKILL a second later).
	DefaultCloseWait = 500 * time.Millisecond
)

// Protocol bounds.
const (
	maxLine      = 16 << 20  // a request line (prompts are large)
	maxDelta     = 128 << 10 // text of one delta or thought event
	maxOutput    = 128 << 10 // a prompt result carries output up to this; above, the deltas are the reply
	maxSlashOut  = 512 << 10 // a slash result's output (it has no deltas)
	maxToolText  = 64 << 10  // a tool_complete's output, and each text of a content item
	maxEventLine = 900 << 10 // an event line over this loses its content (dashgate reads lines of 1 MiB)
)

// Failure is the `failure` word of an ok:false reply.
type Failure string

// The failures of a prompt or a slash command.
const (
	FailStart   Failure = "agent_start"   // the agent program could not be started
	FailTimeout Failure = "agent_timeout" // it did not answer initialize (or session/new, session/load) in time
	FailVersion Failure = "agent_version" // it speaks another ACP protocol version
	FailExited  Failure = "agent_exited"  // it died (or closed its stdout)
	FailError   Failure = "agent_error"   // it answered with a JSON-RPC error
)

// Config is the bridge's settings.
type Config struct {
	Argv        []string      // the agent program and its arguments
	InitTimeout time.Duration // 0 means DefaultInitTimeout
	CloseWait   time.Duration // 0 means DefaultCloseWait
	Cwd         string        // a session's cwd when the prompt gives none; "" is $HOME, else the bridge's
	Version     string        // the bridge's version, sent as clientInfo.version
	Log         *slog.Logger  // diagnostics; nil discards them
}

// ConfigFromEnv is Config for argv with the variables above.
func ConfigFromEnv(argv []string, getenv func(string) string) (Config, error) {
	cfg := Config{Argv: argv}
	if len(argv) == 0 || argv[0] == "" {
		return cfg, errors.New("no agent program: usage: dashgate acp -- <agent program> [args...]")
	}
	if strings.Contains(argv[0], "/") && !filepath.IsAbs(argv[0]) {
		// Relative to the bridge's directory, not the session's cwd the
		// agent starts in.
		abs, err := filepath.Abs(argv[0])
		if err != nil {
			return cfg, err
		}
		cfg.Argv = append([]string{abs}, argv[1:]...)
	}
	err := jsonl.EnvDurations(getenv, []string{EnvInitTimeout, EnvCloseWait}, []*time.Duration{&cfg.InitTimeout, &cfg.CloseWait})
	return cfg, err
}

// Main is `dashgate acp -- <agent> [args...]` (args without "acp"): it arms
// the parent watchdog, reads Config from the environment, and runs the
// bridge on the process's stdin and stdout until stdin ends, SIGTERM or
// SIGINT. It returns the exit code.
func Main(args []string, version string) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if !jsonl.WatchParent("dashgate acp") {
		return 1
	}
	cfg, err := ConfigFromEnv(args, os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashgate acp:", err)
		return 2
	}
	cfg.Version = version
	cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("component", "acp")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return Run(ctx, cfg, os.Stdin, os.Stdout, os.Stderr)
}

// bridge is one running `dashgate acp`.
type bridge struct {
	srv     *jsonl.Server
	out     *outbox // the events of the agent's updates, in order (outbox.go)
	cfg     Config
	log     *slog.Logger
	errOut  io.Writer
	closing chan struct{} // closed at stdin EOF or when Run's ctx ends
	turns   chan struct{} // a one-slot semaphore: one turn at a time
	terms   *terminals
	seq     atomic.Int64   // request_id numbers
	wg      sync.WaitGroup // goroutines waiting for the agent's answers

	// The agent, touched only by the holder of turns (and by Run's end,
	// once no request runs).
	agent   *agentProc
	conn    *acp.ClientSideConnection
	info    acp.Implementation
	canLoad bool
	caps    acp.PromptCapabilities // what its session/prompt takes besides text (attach.go)

	mu        sync.Mutex
	session   acp.SessionId // "" until session/new or session/load answered
	cwd       string        // the session's
	turn      *turn         // the call the agent's updates belong to; nil between calls
	replaying bool          // session/load runs: its updates are history dashgate has
	commands  []map[string]any
	cmdsDirty bool                   // commands changed since an event carried them
	perms     map[string]*permission // request_id -> the agent's waiting request

	// fresh: the session was made by session/new and has had no prompt
	// yet, so the next one carries the user's system prompt (withSystem).
	fresh bool
}

// Run serves dashgate's requests from in until EOF or ctx ends, writing
// replies and events to out and diagnostics to errOut, and returns the exit
// code. Before it returns, the agent is stopped (Config.CloseWait, then
// SIGTERM, then SIGKILL) and reaped, and every terminal killed and reaped.
func Run(ctx context.Context, cfg Config, in io.Reader, out, errOut io.Writer) int {
	if cfg.InitTimeout <= 0 {
		cfg.InitTimeout = DefaultInitTimeout
	}
	if cfg.CloseWait <= 0 {
		cfg.CloseWait = DefaultCloseWait
	}
	if cfg.Cwd == "" {
		cfg.Cwd, _ = os.UserHomeDir()
	}
	if cfg.Cwd == "" {
		cfg.Cwd, _ = os.Getwd()
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	b := &bridge{
		srv:     jsonl.NewServer("dashgate acp", out, errOut),
		cfg:     cfg,
		log:     cfg.Log,
		errOut:  errOut,
		closing: make(chan struct{}),
		turns:   make(chan struct{}, 1),
		perms:   map[string]*permission{},
	}
	b.out = newOutbox(b.srv)
	b.terms = newTerminals(b.sessionCwd)
	b.srv.MaxLine = maxLine
	var closeOnce sync.Once
	closeNow := func() { closeOnce.Do(func() { close(b.closing) }) }
	stopWatch := context.AfterFunc(ctx, closeNow)
	defer stopWatch()
	code := b.srv.Serve(ctx, &eofReader{r: in, eof: closeNow}, b.handle)
	closeNow()
	b.shutdown()
	return code
}

// eofReader calls eof when its reader ends, before the request loop sees
// the end: a turn waiting for the agent then stops waiting at once.
type eofReader struct {
	r   io.Reader
	eof func()
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil {
		e.eof()
	}
	return n, err
}

// shutdown stops the agent and the terminals; no request runs any more.
func (b *bridge) shutdown() {
	if b.agent != nil {
		b.stopAgent(b.cfg.CloseWait)
	}
	b.terms.closeAll()
	b.wg.Wait()
}

// stopAgent stops and forgets the agent, and forgets its session.
func (b *bridge) stopAgent(wait time.Duration) {
	a := b.agent
	esc := a.stop(wait)
	b.log.Info("agent closed", "agent_pid", a.cmd.Process.Pid, "status", a.status(), "escalation", esc)
	b.agent, b.conn = nil, nil
	b.mu.Lock()
	b.session = ""
	b.mu.Unlock()
}

func (b *bridge) sessionCwd() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cwd
}

// failure is why a call failed: a Failure word and one sentence.
type failure struct {
	kind Failure
	msg  string
}

// interrupted is the failure of a call cancelled by dashgate before the
// agent answered: it is answered ok, status interrupted.
var interrupted = &failure{kind: "interrupted"}

// promptParams are a prompt's params (PROTOCOL.md §4, §7) and the ACP
// additions.
type promptParams struct {
	Text           string             `json:"text"`
	TurnID         string             `json:"turn_id"`
	AgentSessionID string             `json:"agent_session_id"`
	Cwd            string             `json:"cwd"`
	Attachments    []jsonl.Attachment `json:"attachments"` // the files it carries (attach.go)

	// System is the user's system prompt (issue 42; "" for none). ACP has
	// no field for one: it goes as the first text block of the first
	// prompt of a conversation the agent starts afresh (withSystem).
	System string `json:"system"`
}

func (b *bridge) handle(ctx context.Context, req jsonl.Request) {
	switch req.Method {
	case "prompt":
		var p promptParams
		if err := json.Unmarshal(req.Params, &p); err != nil {
			b.srv.Fail(req.ID, "bad prompt params: "+err.Error())
			return
		}
		b.runTurn(ctx, req.ID, p, false)
	case "slash":
		var p struct {
			Command        string `json:"command"`
			AgentSessionID string `json:"agent_session_id"`
			Cwd            string `json:"cwd"`
		}
		json.Unmarshal(req.Params, &p)
		p.Command = strings.TrimSpace(p.Command)
		if p.Command == "/help" || strings.HasPrefix(p.Command, "/help ") {
			b.srv.Reply(req.ID, map[string]any{"output": b.helpText()})
			return
		}
		if !strings.HasPrefix(p.Command, "/") {
			b.srv.Fail(req.ID, "a slash command starts with /")
			return
		}
		b.runTurn(ctx, req.ID, promptParams{Text: p.Command, AgentSessionID: p.AgentSessionID, Cwd: p.Cwd}, true)
	case "approval":
		b.approve(req)
	default:
		b.srv.Fail(req.ID, "unknown method "+strconv.Quote(req.Method))
	}
}

// helpText lists the agent's commands, as its last
// available_commands_update said.
func (b *bridge) helpText() string {
	b.mu.Lock()
	cmds := b.commands
	b.mu.Unlock()
	if len(cmds) == 0 {
		return "The agent has not listed any commands (yet): they come once a conversation started."
	}
	var s strings.Builder
	s.WriteString("The agent's commands:\n")
	for _, c := range cmds {
		fmt.Fprintf(&s, "/%s", c["name"])
		if h, _ := c["hint"].(string); h != "" {
			fmt.Fprintf(&s, " <%s>", h)
		}
		if d, _ := c["description"].(string); d != "" {
			fmt.Fprintf(&s, " — %s", d)
		}
		s.WriteByte('\n')
	}
	return s.String()
}

// runTurn answers a prompt (or a slash command other than /help, slash
// true: no delta events, the text is the output): it makes sure the agent
// runs and has a session, sends session/prompt, streams the agent's
// updates as events of id, and replies once the agent answered.
func (b *bridge) runTurn(ctx context.Context, id json.RawMessage, p promptParams, slash bool) {
	select {
	case b.turns <- struct{}{}:
		defer func() { <-b.turns }()
	case <-ctx.Done():
		b.srv.Reply(id, map[string]any{"output": "", "status": "interrupted", "stop_reason": string(acp.StopReasonCancelled)})
		return
	}
	t := newTurn(id, !slash)
	b.setTurn(t)
	defer b.endTurn(t)
	b.flushCommands(t)

	if f := b.ensureSession(ctx, t, p); f != nil {
		b.replyFailure(id, f, t)
		return
	}
	b.mu.Lock()
	sid := b.session
	b.mu.Unlock()
	conn, a := b.conn, b.agent
	blocks, notes := promptBlocks(p, b.caps)
	blocks = b.withSystem(blocks, p.System, slash)
	for _, n := range notes { // before anything of the reply
		b.out.push(t.id, "notice", noticeOf(n))
	}

	type answer struct {
		resp acp.PromptResponse
		err  error
	}
	answers := make(chan answer, 1)
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		// Not ctx: a cancel goes as session/cancel, and the agent answers
		// the prompt with stopReason cancelled. The call ends at the
		// latest when the agent's output closes (Run's end stops it).
		r, err := conn.Prompt(context.Background(), acp.PromptRequest{SessionId: sid, Prompt: blocks})
		answers <- answer{r, err}
	}()
	var ans answer
	cancelled := false
	select {
	case ans = <-answers:
	case <-ctx.Done():
		cancelled = true
		if err := conn.Cancel(context.Background(), acp.CancelNotification{SessionId: sid}); err != nil {
			b.log.Debug("session/cancel", "err", err)
		}
		b.cancelPermissions(t)
		select {
		case ans = <-answers:
		case <-b.closing:
			return // nothing more is written; Run's end stops the agent
		}
	}
	if ans.err != nil {
		if cancelled && a.isAlive(conn) {
			ans = answer{resp: acp.PromptResponse{StopReason: acp.StopReasonCancelled}}
		} else {
			b.replyFailure(id, b.callFailure(ctx, nil, "session/prompt", ans.err), t)
			return
		}
	}
	status := "complete"
	if cancelled || ans.resp.StopReason == acp.StopReasonCancelled {
		status = "interrupted"
	}
	res := map[string]any{"status": status, "stop_reason": string(ans.resp.StopReason)}
	text := t.output()
	switch {
	case slash:
		res["output"], res["truncated"] = cutText(text, maxSlashOut)
	case len(text) <= maxOutput:
		res["output"] = text
	}
	if u := ans.resp.Usage; u != nil {
		res["usage"] = map[string]any{"input_tokens": u.InputTokens, "output_tokens": u.OutputTokens}
	}
	b.out.flush() // the reply after the turn's events
	b.srv.Reply(id, res)
}

// withSystem is the blocks of a prompt with the user's system prompt
// system in front, as a text block of its own, when the conversation is
// one the agent started afresh (session/new) and this is its first
// prompt; otherwise blocks as they are. A slash command (slash) never
// carries it, so that the agent reads the command first; the prompt
// after it does.
func (b *bridge) withSystem(blocks []acp.ContentBlock, system string, slash bool) []acp.ContentBlock {
	if slash {
		return blocks
	}
	b.mu.Lock()
	fresh := b.fresh
	b.fresh = false
	b.mu.Unlock()
	if !fresh || system == "" {
		return blocks
	}
	return append([]acp.ContentBlock{acp.TextBlock(system)}, blocks...)
}

// replyFailure answers id with f: interrupted is ok with what streamed.
func (b *bridge) replyFailure(id json.RawMessage, f *failure, t *turn) {
	b.out.flush() // the reply after the turn's events
	if f == interrupted {
		res := map[string]any{"status": "interrupted", "stop_reason": string(acp.StopReasonCancelled)}
		if text := t.output(); len(text) <= maxOutput {
			res["output"] = text
		}
		b.srv.Reply(id, res)
		return
	}
	b.log.Warn("agent call failed", "reason", string(f.kind), "err", f.msg)
	b.srv.Fail(id, f.msg, "failure", string(f.kind))
}

// ensureSession starts the agent when none runs (or it died) and opens
// its session when there is none, emitting agent_session.
func (b *bridge) ensureSession(ctx context.Context, t *turn, p promptParams) *failure {
	if b.agent != nil && !b.agent.isAlive(b.conn) {
		b.stopAgent(0)
	}
	cwd := p.Cwd
	if cwd == "" {
		cwd = b.cfg.Cwd
	}
	if b.agent == nil {
		if f := b.startAgent(ctx, cwd); f != nil {
			return f
		}
	}
	b.mu.Lock()
	has := b.session != ""
	b.mu.Unlock()
	if has {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, b.cfg.InitTimeout)
	defer cancel()
	loaded, notice := false, ""
	var sid acp.SessionId
	if p.AgentSessionID != "" {
		notice = "the agent could not load the earlier conversation, so this is a new one"
		if b.canLoad {
			b.setReplaying(true)
			_, err := b.conn.LoadSession(sctx, acp.LoadSessionRequest{SessionId: acp.SessionId(p.AgentSessionID), Cwd: cwd, McpServers: []acp.McpServer{}})
			b.setReplaying(false)
			if err == nil {
				loaded, notice, sid = true, "", acp.SessionId(p.AgentSessionID)
			} else if f := b.callFailure(ctx, sctx, "session/load", err); f.kind != FailError {
				b.failedAgent(f)
				return f
			} else {
				b.log.Warn("session/load refused", "err", f.msg)
			}
		}
	}
	if !loaded {
		r, err := b.conn.NewSession(sctx, acp.NewSessionRequest{Cwd: cwd, McpServers: []acp.McpServer{}})
		if err != nil {
			f := b.callFailure(ctx, sctx, "session/new", err)
			b.failedAgent(f)
			return f
		}
		sid = r.SessionId
	}
	b.mu.Lock()
	b.session, b.cwd, b.fresh = sid, cwd, !loaded
	b.mu.Unlock()
	ev := map[string]any{
		"agent_session_id": string(sid), "loaded": loaded,
		"agent": map[string]any{"name": b.info.Name, "version": b.info.Version},
	}
	if notice != "" {
		ev["notice"] = notice
	}
	b.out.push(t.id, "agent_session", ev)
	return nil
}

// failedAgent stops an agent that cannot go on after f: one that timed
// out or died (an agent_error leaves it be, as does an interrupt).
func (b *bridge) failedAgent(f *failure) {
	if f.kind == FailTimeout || f.kind == FailExited {
		b.stopAgent(0)
	}
}

// startAgent starts the agent in dir and initializes it.
func (b *bridge) startAgent(ctx context.Context, dir string) *failure {
	a, err := startAgent(b.cfg.Argv, dir, b.errOut)
	if err != nil {
		return &failure{FailStart, fmt.Sprintf("cannot start the agent %q: %v", b.cfg.Argv[0], errors.Unwrap(err))}
	}
	b.log.Debug("agent started", "agent_pid", a.cmd.Process.Pid, "argv", b.cfg.Argv)
	conn := acp.NewClientSideConnection(&client{b: b}, a.stdin, a.watch)
	conn.SetLogger(b.log)
	b.agent, b.conn = a, conn
	ictx, cancel := context.WithTimeout(ctx, b.cfg.InitTimeout)
	defer cancel()
	resp, err := conn.Initialize(ictx, acp.InitializeRequest{
		ProtocolVersion: ProtocolVersion,
		ClientCapabilities: acp.ClientCapabilities{
			Fs:       acp.FileSystemCapabilities{ReadTextFile: true, WriteTextFile: true},
			Terminal: true,
		},
		ClientInfo: &acp.Implementation{Name: "dashgate", Version: b.cfg.Version},
	})
	if err != nil {
		f := b.callFailure(ctx, ictx, "initialize", err)
		b.stopAgent(0)
		return f
	}
	if resp.ProtocolVersion != ProtocolVersion {
		b.stopAgent(0)
		return &failure{FailVersion, fmt.Sprintf("the agent speaks ACP protocol version %d, and dashgate acp speaks version %d only", resp.ProtocolVersion, ProtocolVersion)}
	}
	b.info = acp.Implementation{Name: filepath.Base(b.cfg.Argv[0])}
	if resp.AgentInfo != nil {
		b.info = *resp.AgentInfo
	}
	b.canLoad = resp.AgentCapabilities.LoadSession
	b.caps = resp.AgentCapabilities.PromptCapabilities
	return nil
}

// callFailure says why a call to the agent failed: ctx is the caller's
// (dashgate cancelled: interrupted), bounded the call's own deadline (nil
// when it had none).
func (b *bridge) callFailure(ctx, bounded context.Context, method string, err error) *failure {
	a := b.agent
	if !a.isAlive(b.conn) || brokenPipe(err) {
		how := a.waitGone(2 * time.Second)
		msg := fmt.Sprintf("the agent %s during %s", how, method)
		if w := a.lastWords(); w != "" {
			msg += "; " + w
		}
		return &failure{FailExited, msg}
	}
	if ctx.Err() != nil {
		return interrupted
	}
	if bounded != nil && bounded.Err() != nil {
		msg := fmt.Sprintf("the agent did not answer %s within %s", method, b.cfg.InitTimeout)
		if w := a.lastWords(); w != "" {
			msg += "; " + w
		}
		return &failure{FailTimeout, msg}
	}
	var re *acp.RequestError
	if errors.As(err, &re) {
		msg := fmt.Sprintf("the agent answered %s with an error: %s", method, re.Message)
		if d, ok := re.Data.(map[string]any); ok {
			for _, k := range []string{"details", "error", "message"} {
				if s, ok := d[k].(string); ok && s != "" {
					msg += ": " + s
					break
				}
			}
		}
		return &failure{FailError, msg}
	}
	return &failure{FailError, fmt.Sprintf("the agent's %s failed: %v", method, err)}
}

// brokenPipe reports whether err is the connection's failure to write to
// the agent's stdin because the agent closed it (it is exiting, or
// exited and is not reaped yet).
func brokenPipe(err error) bool {
	var re *acp.RequestError
	if !errors.As(err, &re) {
		return errors.Is(err, syscall.EPIPE)
	}
	d, _ := re.Data.(map[string]any)
	s, _ := d["error"].(string)
	return strings.Contains(s, syscall.EPIPE.Error())
}

// isAlive reports whether the agent runs and its output is open.
func (a *agentProc) isAlive(conn *acp.ClientSideConnection) bool {
	if a == nil || a.isExited() {
		return false
	}
	select {
	case <-conn.Done():
		return false
	default:
		return true
	}
}

func (b *bridge) setReplaying(on bool) {
	b.mu.Lock()
	b.replaying = on
	b.mu.Unlock()
}

func (b *bridge) setTurn(t *turn) {
	b.mu.Lock()
	b.turn = t
	b.mu.Unlock()
}

// endTurn forgets t; the agent's requests still waiting in it are
// answered cancelled.
func (b *bridge) endTurn(t *turn) {
	b.cancelPermissions(t)
	b.mu.Lock()
	if b.turn == t {
		b.turn = nil
	}
	b.mu.Unlock()
}

// flushCommands emits the agent's commands in t when they changed since an
// event last carried them (an update outside any call).
func (b *bridge) flushCommands(t *turn) {
	b.mu.Lock()
	cmds, dirty := b.commands, b.cmdsDirty
	b.cmdsDirty = false
	b.mu.Unlock()
	if dirty {
		b.event(t, "commands", map[string]any{"commands": cmds})
	}
}

// event writes an event of t. A line that would outgrow what dashgate
// reads loses its content (diffs of big files), marked content_truncated.
func (b *bridge) event(t *turn, name string, fields map[string]any) {
	if _, ok := fields["content"]; ok {
		if line, _ := json.Marshal(fields); len(line) > maxEventLine {
			delete(fields, "content")
			fields["content_truncated"] = true
		}
	}
	b.out.push(t.id, name, fields)
}
