package sessions

import (
	"errors"
	"fmt"

	"github.com/dashgate/dashgate/workers"
)

// This file owns a session's several terminals (issue 42: tabs in the
// dashboard's terminal pane): their ids, the per-session cap, the set a
// session holds (terminals, guarded by the registry's mutex) and the close
// of one of them (terminal.close). Each terminal is a pty child of its own,
// counted in its owner's MaxTerminalsPerUser and ended like every child
// (Terminal.end); closing the session ends them all (finish).

// DefaultTerminal is the id of a session's first terminal: the one
// /ws/pty attaches when it names none, as every client did before issue 42
// (a resume token of that time is this terminal's).
const DefaultTerminal = "1"

// MaxTerminalsPerSession bounds the terminals one session runs at once.
// Eight tabs is more than a pane shows; beyond it an attach of a new
// terminal is refused (ErrTerminalsFull) and nothing is spawned.
const MaxTerminalsPerSession = 8

// ErrTerminalsFull: the session runs MaxTerminalsPerSession terminals; a
// new one needs one of them closed first. It matches ErrCapacity (503 on
// /ws/pty, 4029 on the chat socket).
var ErrTerminalsFull = fmt.Errorf("%w: a session runs at most %d terminals; close one first", ErrCapacity, MaxTerminalsPerSession)

// ErrTerminalID: a terminal id that is not 1 to 16 of a-z and 0-9.
var ErrTerminalID = errors.New("a terminal id is 1 to 16 characters of a-z and 0-9")

// TerminalID is id as the registry names it: "" is DefaultTerminal; else
// 1 to 16 of [a-z0-9] (ErrTerminalID).
func TerminalID(id string) (string, error) {
	if id == "" {
		return DefaultTerminal, nil
	}
	if len(id) > 16 {
		return "", ErrTerminalID
	}
	for i := range len(id) {
		if c := id[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return "", ErrTerminalID
		}
	}
	return id, nil
}

// TerminalInfo is one running terminal of a session (Info.Terminals).
type TerminalInfo struct {
	ID  string `json:"terminal"`
	PID int    `json:"pid"`
}

// terminals is a session's running terminals in the order they started
// (at most MaxTerminalsPerSession, so a slice). Guarded by the registry's
// mutex; a terminal leaves it when it ends (Terminal.end) or when its
// session's teardown takes them all (finish).
type terminals struct {
	list []*Terminal
}

// get is the terminal with id, nil for none.
func (ts *terminals) get(id string) *Terminal {
	for _, t := range ts.list {
		if t.id == id {
			return t
		}
	}
	return nil
}

// full reports whether a new terminal would pass MaxTerminalsPerSession.
func (ts *terminals) full() bool { return len(ts.list) >= MaxTerminalsPerSession }

func (ts *terminals) add(t *Terminal) { ts.list = append(ts.list, t) }

// remove takes t out and reports whether it was in.
func (ts *terminals) remove(t *Terminal) bool {
	for i, u := range ts.list {
		if u == t {
			ts.list = append(ts.list[:i], ts.list[i+1:]...)
			return true
		}
	}
	return false
}

// byPID is the terminal whose program has pid, nil for none.
func (ts *terminals) byPID(pid int) *Terminal {
	for _, t := range ts.list {
		if t.PID() == pid {
			return t
		}
	}
	return nil
}

// take empties the set and returns what it held (the close funnel's).
func (ts *terminals) take() []*Terminal {
	all := ts.list
	ts.list = nil
	return all
}

// anyParked reports whether one of them waits for a reattach (takes each
// one's mutex: the registry's may be held, no terminal's).
func (ts *terminals) anyParked() bool {
	for _, t := range ts.list {
		if t.parked() {
			return true
		}
	}
	return false
}

// info lists them for Info.Terminals (nil for none).
func (ts *terminals) info() []TerminalInfo {
	if len(ts.list) == 0 {
		return nil
	}
	out := make([]TerminalInfo, len(ts.list))
	for i, t := range ts.list {
		out[i] = TerminalInfo{ID: t.id, PID: t.PID()}
	}
	return out
}

// CloseTerminal ends terminal tid ("" DefaultTerminal) of p's session sid,
// as terminal.close asks: its program's whole tree is ended with reason
// terminal_closed (one INFO "worker closed" record) and reaped before it
// returns, and its sockets close with 1000 "terminal closed". The session
// and its other terminals stay; a terminal-only session ends with it
// (end_reason client_close). closed is false when the session runs no
// such terminal. Errors: ErrTerminalID, ErrNotFound (an unknown, ended or
// another user's session).
func (r *Registry) CloseTerminal(p Principal, sid, tid string) (closed bool, err error) {
	id, err := TerminalID(tid)
	if err != nil {
		return false, err
	}
	r.mu.Lock()
	s := r.findLocked(p, sid, accessUse)
	var t *Terminal
	if s != nil {
		t = s.terms.get(id)
	}
	r.mu.Unlock()
	if s == nil {
		return false, ErrNotFound
	}
	if t == nil {
		return false, nil
	}
	t.end(workers.ReasonTerminalClosed, false)
	return true, nil
}
