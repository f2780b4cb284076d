package sessions

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/dashgate/dashgate/accounts"
	"github.com/dashgate/dashgate/store"
)

// This file owns the Unix account a session's children run as
// (Config.Accounts): its lookup at each spawn and what a refusal does.

// accountOf returns the Unix account the children of s run as: nil when
// Config.Accounts is not set. A refusal (errors.Is(err,
// accounts.ErrRefused)) is returned as the *accounts.RefusedError itself
// (its message is the reason the person reads) after one WARN "unix
// account refused" record with sid, user and reason; any other failure,
// or no account, is wrapped with the owner's name. It must be called
// without r.mu (the lookup may run id(1)).
func (r *Registry) accountOf(s *Session) (*accounts.Account, error) {
	if r.cfg.Accounts == nil {
		return nil, nil
	}
	r.mu.Lock()
	owner := s.owner // set once (a spare's, when it is taken, before it spawns anything else)
	r.mu.Unlock()
	acct, err := r.cfg.Accounts(owner)
	if errors.Is(err, accounts.ErrRefused) {
		var re *accounts.RefusedError
		if errors.As(err, &re) {
			err = re
		}
		r.log.Warn("unix account refused", "sid", s.id, "user", owner, "reason", err.Error())
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("unix account of user %q: %w", owner, err)
	}
	if acct == nil { // never run as dashgate by mistake
		return nil, fmt.Errorf("unix account of user %q: none found", owner)
	}
	return acct, nil
}

// refused reports whether err is an account refusal (see accountOf).
func refused(err error) bool { return errors.Is(err, accounts.ErrRefused) }

// checkAccount is Prompt's check, before a turn starts, that a worker
// could start for s: with Config.Accounts and no live worker, a refusal
// of the owner is kept as one notice in the history and returned.
// Anything else (a lookup that failed otherwise) is left to the spawn.
func (r *Registry) checkAccount(s *Session) error {
	if r.cfg.Accounts == nil {
		return nil
	}
	r.mu.Lock()
	w := s.worker
	r.mu.Unlock()
	if w != nil && !w.Closing() {
		return nil
	}
	_, err := r.accountOf(s)
	if !refused(err) {
		return nil
	}
	r.mu.Lock()
	if s.live() {
		r.appendLocked(s, Message{Role: store.RoleSystem, Kind: store.KindNotice, Text: err.Error()})
	}
	r.mu.Unlock()
	return err
}

// TerminalRefusal says why session sid's terminal would be refused before
// its program starts, for p (who must be able to use sid): the owner's
// account refusal (an *accounts.RefusedError, matching
// accounts.ErrRefused), which no retry mends; else the cap its last start
// met (matching ErrCapacity or workers.ErrCapacity, its message naming
// the flag) until one of its terminals starts, which a retry may get
// past; or nil. It starts nothing: the dashboard asks it after a refused
// upgrade, whose status and sentence a browser's WebSocket never shows.
// Errors: ErrNotFound (an unknown, ended or another user's session,
// answered alike).
func (r *Registry) TerminalRefusal(p Principal, sid string) error {
	r.mu.Lock()
	s := r.findLocked(p, sid, accessUse)
	var capped error
	if s != nil {
		capped = s.startRefused
	}
	r.mu.Unlock()
	if s == nil {
		return ErrNotFound
	}
	if r.cfg.Accounts != nil {
		if _, err := r.accountOf(s); refused(err) {
			return err
		}
	}
	return capped
}

// TerminalDir is where a file dropped on terminal tid ("" DefaultTerminal)
// of session sid goes, and whom it is written as, for p (who must be able
// to use sid): the current directory of that terminal's shell when it
// runs, else the account's home
// (without accounts: a ProcSpawner's PTYDir, else dashgate's own
// directory); acct is the owner's Unix account, nil without accounts
// (dashgate's own user). Errors: ErrTerminalID, ErrNotFound (an unknown,
// ended or another user's session), the owner's account refusal
// (accounts.ErrRefused).
func (r *Registry) TerminalDir(p Principal, sid, tid string) (dir string, acct *accounts.Account, err error) {
	if tid, err = TerminalID(tid); err != nil {
		return "", nil, err
	}
	r.mu.Lock()
	s := r.findLocked(p, sid, accessUse)
	pid := 0
	if s != nil {
		if t := s.terms.get(tid); t != nil {
			pid = t.PID()
		}
	}
	r.mu.Unlock()
	if s == nil {
		return "", nil, ErrNotFound
	}
	if acct, err = r.accountOf(s); err != nil {
		return "", nil, err
	}
	if pid > 0 {
		if d, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err == nil && strings.HasPrefix(d, "/") && !strings.HasSuffix(d, " (deleted)") {
			return d, acct, nil
		}
	}
	if acct != nil {
		return acct.Home, acct, nil
	}
	if ps, ok := r.cfg.Spawner.(*ProcSpawner); ok && ps.PTYDir != "" {
		return ps.PTYDir, nil, nil
	}
	d, err := os.Getwd()
	return d, nil, err
}
