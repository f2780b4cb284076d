// Command acpagent is an Agent Client Protocol agent for dashgate's tests,
// written with github.com/coder/acp-go-sdk's agent side: the acp bridge's
// tests (workers/acpbridge) and the e2e suite build it and run it behind
// `dashgate acp`. ACPTEST_MODE picks its behaviour: "" (loadSession,
// protocol version 1), "v2" (answers protocolVersion 2), "noload" (no
// loadSession), "stubborn" (outlives its stdin's end and ignores
// SIGTERM). ACPTEST_CAPS lists the promptCapabilities it advertises
// ("image", "embedded": embeddedContext; comma-separated; none by
// default). Each prompt's text picks the turn (see Prompt): among them
// "fs DIR" writes and reads a file through the client and "terminal" runs
// a command through it, so a test sees as whom the client did them.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	acp "github.com/coder/acp-go-sdk"
)

// The show turn's texts: each carries markup that must stay text
// (e2e/acp_ui_test.go checks them).
const (
	showTitle = `Edit <img src=x onerror="window.__pwned=1">`
	showPath  = "/src/<x>.go"
)

var showPlan = []acp.PlanEntry{
	{Content: "Read the <i>code</i>", Priority: acp.PlanEntryPriorityHigh, Status: acp.PlanEntryStatusCompleted},
	{Content: "Edit it", Priority: acp.PlanEntryPriorityMedium, Status: acp.PlanEntryStatusInProgress},
	{Content: "Run the tests", Priority: acp.PlanEntryPriorityLow, Status: acp.PlanEntryStatusPending},
}

// testAgent is the agent; mode is ACPTEST_MODE.
type testAgent struct {
	connP atomic.Pointer[acp.AgentSideConnection] // set once the connection runs
	mode  string

	mu      sync.Mutex
	cancels map[acp.SessionId]context.CancelFunc
}

func main() { os.Exit(runTestAgent()) }

// runTestAgent serves ACP on stdin and stdout until stdin ends.
func runTestAgent() int {
	a := &testAgent{mode: os.Getenv("ACPTEST_MODE"), cancels: map[acp.SessionId]context.CancelFunc{}}
	if a.mode == "stubborn" {
		// SIGPIPE too: its log line on a stderr nobody reads any more
		// would end it.
		signal.Ignore(syscall.SIGTERM, syscall.SIGPIPE)
	}
	conn := acp.NewAgentSideConnection(a, os.Stdout, os.Stdin)
	a.connP.Store(conn)
	<-conn.Done()
	if a.mode == "stubborn" {
		// Only SIGKILL ends it. (A bare select{} would end it: the runtime
		// kills a process whose goroutines all sleep.)
		never := make(chan os.Signal, 1)
		signal.Notify(never, syscall.SIGUSR1)
		for {
			<-never
		}
	}
	return 0
}

// conn waits for the connection NewAgentSideConnection returns: its
// handlers may run before it returned.
func (a *testAgent) conn() *acp.AgentSideConnection {
	for {
		if c := a.connP.Load(); c != nil {
			return c
		}
		runtime.Gosched()
	}
}

func (a *testAgent) Initialize(_ context.Context, _ acp.InitializeRequest) (acp.InitializeResponse, error) {
	v := acp.ProtocolVersion(acp.ProtocolVersionNumber)
	if a.mode == "v2" {
		v = 2
	}
	return acp.InitializeResponse{
		ProtocolVersion:   v,
		AgentInfo:         &acp.Implementation{Name: "testagent", Version: "1.2.3"},
		AgentCapabilities: acp.AgentCapabilities{LoadSession: a.mode != "noload", PromptCapabilities: promptCaps(os.Getenv("ACPTEST_CAPS"))},
	}, nil
}

// promptCaps reads ACPTEST_CAPS.
func promptCaps(v string) acp.PromptCapabilities {
	var c acp.PromptCapabilities
	for _, w := range strings.Split(v, ",") {
		switch strings.TrimSpace(w) {
		case "image":
			c.Image = true
		case "embedded":
			c.EmbeddedContext = true
		}
	}
	return c
}

// describeBlocks says what each block of a prompt held, for the blocks
// turn: text(TEXT), image(MIME,N bytes of base64), resource(URI,MIME,TEXT),
// joined by " | ".
func describeBlocks(blocks []acp.ContentBlock) string {
	var out []string
	for _, b := range blocks {
		switch {
		case b.Text != nil:
			out = append(out, "text("+b.Text.Text+")")
		case b.Image != nil:
			out = append(out, fmt.Sprintf("image(%s,%d)", b.Image.MimeType, len(b.Image.Data)))
		case b.Resource != nil && b.Resource.Resource.TextResourceContents != nil:
			r := b.Resource.Resource.TextResourceContents
			mime := ""
			if r.MimeType != nil {
				mime = *r.MimeType
			}
			out = append(out, fmt.Sprintf("resource(%s,%s,%s)", r.Uri, mime, r.Text))
		default:
			out = append(out, "other")
		}
	}
	return strings.Join(out, " | ")
}

func (a *testAgent) NewSession(_ context.Context, p acp.NewSessionRequest) (acp.NewSessionResponse, error) {
	sid := acp.SessionId(fmt.Sprintf("s-%d", os.Getpid()))
	go a.conn().SessionUpdate(context.Background(), acp.SessionNotification{SessionId: sid, Update: acp.SessionUpdate{
		AvailableCommandsUpdate: &acp.SessionAvailableCommandsUpdate{AvailableCommands: []acp.AvailableCommand{
			{Name: "review", Description: "review the changes", Input: &acp.AvailableCommandInput{Unstructured: &acp.UnstructuredCommandInput{Hint: "what to review"}}},
		}},
	}})
	return acp.NewSessionResponse{SessionId: sid}, nil
}

// LoadSession replays an earlier conversation, as agents do, before it
// answers: the bridge must not forward it.
func (a *testAgent) LoadSession(ctx context.Context, p acp.LoadSessionRequest) (acp.LoadSessionResponse, error) {
	if !strings.HasPrefix(string(p.SessionId), "s-") {
		return acp.LoadSessionResponse{}, acp.NewInvalidParams(map[string]any{"error": "no such session"})
	}
	for _, u := range []acp.SessionUpdate{
		acp.UpdateUserMessageText("the earlier question"),
		acp.UpdateAgentMessageText("REPLAYED answer"),
		acp.StartToolCall("old-1", "REPLAYED tool", acp.WithStartStatus(acp.ToolCallStatusCompleted)),
	} {
		if err := a.conn().SessionUpdate(ctx, acp.SessionNotification{SessionId: p.SessionId, Update: u}); err != nil {
			return acp.LoadSessionResponse{}, err
		}
	}
	return acp.LoadSessionResponse{}, nil
}

func (a *testAgent) say(ctx context.Context, sid acp.SessionId, text string) error {
	return a.conn().SessionUpdate(ctx, acp.SessionNotification{SessionId: sid, Update: acp.UpdateAgentMessageText(text)})
}

func (a *testAgent) update(ctx context.Context, sid acp.SessionId, u acp.SessionUpdate) error {
	return a.conn().SessionUpdate(ctx, acp.SessionNotification{SessionId: sid, Update: u})
}

// Prompt runs the turn its text names: "hello", "blocks", "big <n>", "plan",
// "maxtokens", "perm", "wait", "die", "fs <dir>", "terminal", "sleepterm",
// "terminals <n>", "id" (a terminal says its uid, gid, cwd and HOME; the
// agent its own uid), "read <path>", "session" (its ACP session id), "show" (see there), "burst <n> [file]"
// (n chunks of 1 KiB at once, then file made);
// anything else is
// echoed.
func (a *testAgent) Prompt(_ context.Context, p acp.PromptRequest) (acp.PromptResponse, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a.mu.Lock()
	a.cancels[p.SessionId] = cancel
	a.mu.Unlock()
	sid := p.SessionId
	text := ""
	if len(p.Prompt) > 0 && p.Prompt[0].Text != nil {
		text = p.Prompt[0].Text.Text
	}
	verb, arg, _ := strings.Cut(text, " ")
	end := acp.PromptResponse{StopReason: acp.StopReasonEndTurn}
	switch verb {
	case "hello":
		a.say(ctx, sid, "Hello, ")
		a.say(ctx, sid, "world")
	case "blocks": // what the prompt's blocks held (its attached files)
		a.say(ctx, sid, describeBlocks(p.Prompt))
	case "big":
		var n int
		fmt.Sscan(arg, &n)
		a.say(ctx, sid, strings.Repeat("é", n/2))
	case "plan":
		a.update(ctx, sid, acp.UpdateAgentThoughtText("thinking"))
		a.update(ctx, sid, acp.UpdatePlan(acp.PlanEntry{Content: "step one", Priority: acp.PlanEntryPriorityHigh, Status: acp.PlanEntryStatusPending}))
	case "maxtokens":
		a.say(ctx, sid, "cut")
		end.StopReason = acp.StopReasonMaxTokens
	case "perm":
		a.update(ctx, sid, acp.StartToolCall("edit-1", "Edit file", acp.WithStartKind(acp.ToolKindEdit),
			acp.WithStartLocations([]acp.ToolCallLocation{{Path: "/tmp/x.go", Line: acp.Ptr(3)}})))
		// Not ctx: the bridge answers the request itself when the turn
		// is cancelled.
		r, err := a.conn().RequestPermission(context.Background(), acp.RequestPermissionRequest{
			SessionId: sid,
			ToolCall:  acp.ToolCallUpdate{ToolCallId: "edit-1"},
			Options: []acp.PermissionOption{
				{Kind: acp.PermissionOptionKindAllowOnce, Name: "Allow", OptionId: "yes"},
				{Kind: acp.PermissionOptionKindAllowAlways, Name: "Always", OptionId: "yes-always"},
				{Kind: acp.PermissionOptionKindRejectOnce, Name: "No", OptionId: "no"},
			},
		})
		switch {
		case err != nil:
			return acp.PromptResponse{}, err
		case r.Outcome.Cancelled != nil:
			a.say(context.Background(), sid, "permission cancelled") // ctx ended with the cancel
			return acp.PromptResponse{StopReason: acp.StopReasonCancelled}, nil
		default:
			a.say(ctx, sid, "chose "+string(r.Outcome.Selected.OptionId))
		}
	case "wait":
		a.say(ctx, sid, "waiting")
		<-ctx.Done()
		return acp.PromptResponse{StopReason: acp.StopReasonCancelled}, nil
	case "die":
		a.say(ctx, sid, "about to die")
		fmt.Fprintln(os.Stderr, "panic: the test agent fell over")
		os.Exit(3)
	case "fs":
		path := arg + "/sub/file.txt"
		if _, err := a.conn().WriteTextFile(ctx, acp.WriteTextFileRequest{SessionId: sid, Path: path, Content: "one\ntwo\nthree\n"}); err != nil {
			a.say(ctx, sid, "write failed: "+err.Error())
		}
		r, err := a.conn().ReadTextFile(ctx, acp.ReadTextFileRequest{SessionId: sid, Path: path, Line: acp.Ptr(2), Limit: acp.Ptr(1)})
		a.say(ctx, sid, fmt.Sprintf("read %q err=%v;", r.Content, err != nil))
		_, err = a.conn().ReadTextFile(ctx, acp.ReadTextFileRequest{SessionId: sid, Path: "relative.txt"})
		a.say(ctx, sid, fmt.Sprintf(" relative: %v", err))
	case "terminal":
		t, err := a.conn().CreateTerminal(ctx, acp.CreateTerminalRequest{SessionId: sid, Command: "/bin/sh",
			Args: []string{"-c", "echo out; echo err >&2; echo $GREETING; exit 3"}, Env: []acp.EnvVariable{{Name: "GREETING", Value: "hi there"}}})
		if err != nil {
			return acp.PromptResponse{}, err
		}
		a.update(ctx, sid, acp.StartToolCall("run-1", "Run a command", acp.WithStartKind(acp.ToolKindExecute),
			acp.WithStartContent([]acp.ToolCallContent{acp.ToolTerminalRef(t.TerminalId)})))
		w, err := a.conn().WaitForTerminalExit(ctx, acp.WaitForTerminalExitRequest{SessionId: sid, TerminalId: t.TerminalId})
		if err != nil {
			return acp.PromptResponse{}, err
		}
		o, err := a.conn().TerminalOutput(ctx, acp.TerminalOutputRequest{SessionId: sid, TerminalId: t.TerminalId})
		if err != nil {
			return acp.PromptResponse{}, err
		}
		a.update(ctx, sid, acp.UpdateToolCall("run-1", acp.WithUpdateStatus(acp.ToolCallStatusFailed)))
		_, rerr := a.conn().ReleaseTerminal(ctx, acp.ReleaseTerminalRequest{SessionId: sid, TerminalId: t.TerminalId})
		_, gerr := a.conn().TerminalOutput(ctx, acp.TerminalOutputRequest{SessionId: sid, TerminalId: t.TerminalId})
		a.say(ctx, sid, fmt.Sprintf("exit=%d output=%q exitStatus=%d release=%v after=%v", *w.ExitCode, o.Output, *o.ExitStatus.ExitCode, rerr, gerr != nil))
	case "id":
		// As whom the client runs a terminal: its id(1), cwd and HOME.
		t, err := a.conn().CreateTerminal(ctx, acp.CreateTerminalRequest{SessionId: sid, Command: "/bin/sh",
			Args: []string{"-c", `echo "uid=$(id -u) gid=$(id -g) cwd=$(pwd) home=$HOME"`}})
		if err != nil {
			return acp.PromptResponse{}, err
		}
		if _, err := a.conn().WaitForTerminalExit(ctx, acp.WaitForTerminalExitRequest{SessionId: sid, TerminalId: t.TerminalId}); err != nil {
			return acp.PromptResponse{}, err
		}
		o, err := a.conn().TerminalOutput(ctx, acp.TerminalOutputRequest{SessionId: sid, TerminalId: t.TerminalId})
		if err != nil {
			return acp.PromptResponse{}, err
		}
		a.say(ctx, sid, "terminal "+strings.TrimSpace(o.Output)+fmt.Sprintf("; agent uid=%d", os.Getuid()))
	case "show":
		// Everything the SDK's demo agent does not send: its slash commands,
		// thinking, a plan, a line of text, tool call t1 (an edit with a diff
		// and a terminal), a permission with every option kind, then t1
		// completed and "Done: <option id>".
		hint := "what to look at"
		for _, u := range []acp.SessionUpdate{
			{AvailableCommandsUpdate: &acp.SessionAvailableCommandsUpdate{AvailableCommands: []acp.AvailableCommand{{
				Name: "review", Description: "Review the <b>diff</b>",
				Input: &acp.AvailableCommandInput{Unstructured: &acp.UnstructuredCommandInput{Hint: hint}},
			}}}},
			acp.UpdateAgentThoughtText("Let me <b>think</b>"),
			acp.UpdateAgentThoughtText(" about it."),
			acp.UpdatePlan(showPlan...),
			acp.UpdateAgentMessageText("Plan ready."),
			acp.StartToolCall("t1", showTitle,
				acp.WithStartKind(acp.ToolKindEdit),
				acp.WithStartStatus(acp.ToolCallStatusInProgress),
				acp.WithStartLocations([]acp.ToolCallLocation{{Path: showPath, Line: acp.Ptr(3)}}),
				acp.WithStartContent([]acp.ToolCallContent{
					acp.ToolDiffContent("/src/a.go", "a\n<B>\nc\n", "a\nb\nc\n"),
					acp.ToolTerminalRef("term-1"),
				})),
		} {
			if err := a.conn().SessionUpdate(ctx, acp.SessionNotification{SessionId: sid, Update: u}); err != nil {
				return acp.PromptResponse{}, err
			}
		}
		r, err := a.conn().RequestPermission(ctx, acp.RequestPermissionRequest{
			SessionId: sid,
			ToolCall:  acp.ToolCallUpdate{ToolCallId: "t1", Title: acp.Ptr(showTitle)},
			Options: []acp.PermissionOption{
				{Kind: acp.PermissionOptionKindAllowOnce, Name: "Yes", OptionId: "allow-once"},
				{Kind: acp.PermissionOptionKindAllowAlways, Name: "Yes, <b>always</b>", OptionId: "allow-always"},
				{Kind: acp.PermissionOptionKindRejectOnce, Name: "No", OptionId: "reject-once"},
				{Kind: acp.PermissionOptionKindRejectAlways, OptionId: "reject-always"}, // no name: the button's own words
			},
		})
		if err != nil {
			return acp.PromptResponse{}, err
		}
		chosen := "cancelled"
		if r.Outcome.Selected != nil {
			chosen = string(r.Outcome.Selected.OptionId)
		}
		for _, u := range []acp.SessionUpdate{
			acp.UpdateToolCall("t1", acp.WithUpdateStatus(acp.ToolCallStatusCompleted)),
			acp.UpdateAgentMessageText(" Done: " + chosen),
		} {
			if err := a.conn().SessionUpdate(ctx, acp.SessionNotification{SessionId: sid, Update: u}); err != nil {
				return acp.PromptResponse{}, err
			}
		}
	case "burst":
		// n chunks of 1 KiB, written as fast as the pipe takes them;
		// then, when a path follows, that file is made: all was sent.
		var n int
		var done string
		fmt.Sscan(arg, &n, &done)
		chunk := strings.Repeat("x", 1023) + "\n"
		for range n {
			if err := a.say(ctx, sid, chunk); err != nil {
				return acp.PromptResponse{}, err
			}
		}
		if done != "" {
			if err := os.WriteFile(done, nil, 0o600); err != nil {
				return acp.PromptResponse{}, err
			}
		}
	case "session":
		a.say(ctx, sid, "session "+string(sid)) // a loaded one keeps the id of the process that made it
	case "read":
		r, err := a.conn().ReadTextFile(ctx, acp.ReadTextFileRequest{SessionId: sid, Path: arg})
		if err != nil {
			a.say(ctx, sid, "read failed: "+err.Error())
		} else {
			a.say(ctx, sid, "read: "+r.Content)
		}
	case "truncate":
		t, err := a.conn().CreateTerminal(ctx, acp.CreateTerminalRequest{SessionId: sid, Command: "printf 'aaaaébbbb'", OutputByteLimit: acp.Ptr(5)})
		if err != nil {
			return acp.PromptResponse{}, err
		}
		a.conn().WaitForTerminalExit(ctx, acp.WaitForTerminalExitRequest{SessionId: sid, TerminalId: t.TerminalId})
		o, _ := a.conn().TerminalOutput(ctx, acp.TerminalOutputRequest{SessionId: sid, TerminalId: t.TerminalId})
		a.say(ctx, sid, fmt.Sprintf("output=%q truncated=%v", o.Output, o.Truncated))
	case "sleepterm":
		// A terminal whose shell has a child of its own: only a kill of
		// the process group reaches the grandchild.
		_, err := a.conn().CreateTerminal(ctx, acp.CreateTerminalRequest{SessionId: sid, Command: "/bin/sh",
			Args: []string{"-c", "sleep 1000 & wait"}})
		if err != nil {
			return acp.PromptResponse{}, err
		}
		a.say(ctx, sid, "started")
	case "terminals":
		var n int
		fmt.Sscan(arg, &n)
		var last error
		for range n {
			if _, err := a.conn().CreateTerminal(ctx, acp.CreateTerminalRequest{SessionId: sid, Command: "/bin/sh", Args: []string{"-c", "exec sleep 1000"}}); err != nil {
				last = err
				break
			}
		}
		a.say(ctx, sid, fmt.Sprintf("last error: %v", last))
	default:
		a.say(ctx, sid, "echo: "+text)
	}
	return end, nil
}

func (a *testAgent) Cancel(_ context.Context, p acp.CancelNotification) error {
	a.mu.Lock()
	c := a.cancels[p.SessionId]
	a.mu.Unlock()
	if c != nil {
		c()
	}
	return nil
}

func (a *testAgent) Authenticate(context.Context, acp.AuthenticateRequest) (acp.AuthenticateResponse, error) {
	return acp.AuthenticateResponse{}, nil
}

func (a *testAgent) CloseSession(context.Context, acp.CloseSessionRequest) (acp.CloseSessionResponse, error) {
	return acp.CloseSessionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionClose)
}

func (a *testAgent) ListSessions(context.Context, acp.ListSessionsRequest) (acp.ListSessionsResponse, error) {
	return acp.ListSessionsResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionList)
}

func (a *testAgent) ResumeSession(context.Context, acp.ResumeSessionRequest) (acp.ResumeSessionResponse, error) {
	return acp.ResumeSessionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionResume)
}

func (a *testAgent) SetSessionConfigOption(context.Context, acp.SetSessionConfigOptionRequest) (acp.SetSessionConfigOptionResponse, error) {
	return acp.SetSessionConfigOptionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionSetConfigOption)
}

func (a *testAgent) SetSessionMode(context.Context, acp.SetSessionModeRequest) (acp.SetSessionModeResponse, error) {
	return acp.SetSessionModeResponse{}, nil
}

// testAgentCmd is the argv that runs the test agent in mode.
