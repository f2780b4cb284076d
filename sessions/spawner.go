package sessions

import (
	"strings"

	"github.com/dashgate/dashgate/workers"
)

// ProcSpawner starts real children through a workers.Manager.
type ProcSpawner struct {
	Manager   *workers.Manager
	WorkerCmd []string // program and arguments of the chat worker
	PTYCmd    []string // program and arguments run in a terminal
	PTYDir    string   // working directory of terminals ("" = dashgate's)
	Env       []string // environment given to both (see FilterEnv)
}

// SpawnWorker starts a chat worker for sid.
func (p ProcSpawner) SpawnWorker(sid string, onClose func(workers.CloseResult)) (Worker, error) {
	w, err := p.Manager.StartWorker(workers.Spec{
		SessionID: sid, Path: p.WorkerCmd[0], Args: p.WorkerCmd[1:], Env: p.Env, OnClose: onClose,
	})
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return w, nil
}

// SpawnPTY starts the terminal program for sid at cols x rows, with
// TERM=xterm-256color.
func (p ProcSpawner) SpawnPTY(sid string, cols, rows uint16, onClose func(workers.CloseResult)) (*workers.Proc, error) {
	env := append(FilterEnv(p.Env, nil, "TERM"), "TERM=xterm-256color")
	return p.Manager.Start(workers.Spec{
		Kind: workers.KindPTY, SessionID: sid, Path: p.PTYCmd[0], Args: p.PTYCmd[1:],
		Env: env, Dir: p.PTYDir, Cols: cols, Rows: rows, OnClose: onClose,
	})
}

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
