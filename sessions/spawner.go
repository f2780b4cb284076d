package sessions

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/dashgate/dashgate/workers"
)

// ProcSpawner starts real children through a workers.Manager.
type ProcSpawner struct {
	Manager   *workers.Manager
	WorkerCmd []string // program and arguments of the chat worker
	PTYCmd    []string // program and arguments run in a terminal
	PTYDir    string   // working directory of terminals ("" = dashgate's)
	Env       []string // environment given to both (see FilterEnv)
	// WorkerEnv is added to the chat worker's environment only (the agent's
	// settings and its API key: a terminal never sees them).
	WorkerEnv []string
	// LoginShell runs a terminal of a request with an Account as that
	// account's login shell (workers.Spec.LoginShell: Account.Shell, argv0
	// "-" + its base name) instead of PTYCmd. dashgate sets it with
	// --unix-users when --pty-cmd was not given.
	LoginShell bool
	// Agents is the worker's program and arguments for each agent a
	// session may name besides the built-in one (SpawnRequest.Agent): for
	// an ACP agent, dashgate's bridge (`dashgate acp -- <agent>`). Such a
	// worker gets Env only: WorkerEnv is the built-in agent's.
	Agents map[string][]string
	// MaxLine is the longest request line a chat worker may be sent
	// (AttachLimits.MaxLine: a prompt's attached files are in it): every
	// chat worker gets it as DASHGATE_MAX_LINE (0: not set).
	MaxLine int
}

// AgentEOFGrace is how long an ACP agent's bridge has, once its stdin
// closed, to end the agent politely before the usual escalation (SIGTERM
// to the whole tree, SIGKILL after --worker-grace): a running turn's
// session/cancel, the agent's stdin closed, 500 ms for it to exit
// (acpbridge.DefaultCloseWait), SIGTERM to its process group, SIGKILL a
// second later. Claude Code's adapter, which does not exit on EOF, is gone
// about 1.3 s after its SIGTERM: within this grace, so the record says
// escalation none.
const AgentEOFGrace = 3 * time.Second

// SpawnWorker starts a chat worker, as req.Account when set: WorkerCmd,
// or the command of req.Agent in Agents. Its "worker closed" record
// carries user (req.Owner) and, for a named agent, agent. An agent
// Agents lacks is an *UnknownAgentError, nothing started.
func (p ProcSpawner) SpawnWorker(req SpawnRequest) (Worker, error) {
	cmd, env, attrs := p.WorkerCmd, append(p.Env[:len(p.Env):len(p.Env)], p.WorkerEnv...), []any{"user", req.Owner}
	if req.Agent != "" {
		if cmd = p.Agents[req.Agent]; len(cmd) == 0 {
			return nil, &UnknownAgentError{Name: req.Agent}
		}
		env, attrs = p.Env, append(attrs, "agent", req.Agent)
	}
	if p.MaxLine > 0 {
		env = append(env[:len(env):len(env)], workers.EnvMaxLine+"="+strconv.Itoa(p.MaxLine))
	}
	spec := workers.Spec{
		SessionID: req.SessionID, Path: cmd[0], Args: cmd[1:], Env: env,
		CancelGrace: req.CancelGrace, OnClose: req.OnClose, LogAttrs: attrs, Account: req.Account,
	}
	if req.Agent != "" {
		spec.EOFGrace = AgentEOFGrace
	}
	w, err := p.Manager.StartWorker(spec)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return w, nil
}

// SpawnPTY starts the terminal program at req's size, with
// TERM=xterm-256color, as req.Account when set (its login shell with
// LoginShell); its "worker closed" record carries user (req.Owner).
func (p ProcSpawner) SpawnPTY(req SpawnRequest) (PTY, error) {
	env := append(FilterEnv(p.Env, nil, "TERM"), "TERM=xterm-256color")
	wake, err := newWake()
	if err != nil {
		return nil, err
	}
	proc, err := p.Manager.Start(workers.Spec{
		Kind: workers.KindPTY, SessionID: req.SessionID, Path: p.PTYCmd[0], Args: p.PTYCmd[1:],
		Env: env, Dir: p.PTYDir, Cols: req.Cols, Rows: req.Rows, PTYUnpolled: true, OnClose: req.OnClose,
		LogAttrs: []any{"user", req.Owner}, Account: req.Account, LoginShell: p.LoginShell && req.Account != nil,
	})
	if err != nil {
		wake.Close()
		return nil, err
	}
	return &procPTY{Proc: proc, master: newPTYMaster(proc.PTY(), wake)}, nil
}

// procPTY is a KindPTY child and its pty master.
type procPTY struct {
	*workers.Proc
	master *ptyMaster // workers.Proc's own copy of it is closed
}

// Read waits for the program's output (ptyMaster.Read).
func (p *procPTY) Read(b []byte) (int, error) { return p.master.Read(b) }

// Write sends input, waiting at most until ctx's deadline.
func (p *procPTY) Write(ctx context.Context, b []byte) error { return p.master.Write(ctx, b) }

// WriteWithin sends input in whole, waiting for room at most d (and until
// ctx's deadline); what the pty takes at once arms no timer.
func (p *procPTY) WriteWithin(ctx context.Context, b []byte, d time.Duration) error {
	return p.master.WriteWithin(ctx, b, d)
}

// Resize sets the window size in cells.
func (p *procPTY) Resize(cols, rows uint16) error { return p.master.Resize(cols, rows) }

// Release ends a Read in progress and closes the pty master.
func (p *procPTY) Release() error { return p.master.Close() }

var _ PTY = (*procPTY)(nil)

// DefaultEnvAllowlist names the variables that reach workers and terminals;
// "LC_*" stands for every locale variable. Nothing else of dashgate's
// environment does (its tokens above all).
var DefaultEnvAllowlist = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_*", "TERM", "TZ"}

// FilterEnv returns the entries of environ whose name is allowed (per
// DefaultEnvAllowlist, plus extra) and not in drop.
func FilterEnv(environ, extra []string, drop ...string) []string {
	allowed := func(name string) bool {
		for _, d := range drop {
			if name == d {
				return false
			}
		}
		for _, a := range append(DefaultEnvAllowlist[:len(DefaultEnvAllowlist):len(DefaultEnvAllowlist)], extra...) {
			if a == name || (strings.HasSuffix(a, "*") && strings.HasPrefix(name, strings.TrimSuffix(a, "*"))) {
				return true
			}
		}
		return false
	}
	var out []string
	for _, kv := range environ {
		name, _, ok := strings.Cut(kv, "=")
		if ok && allowed(name) {
			out = append(out, kv)
		}
	}
	return out
}
