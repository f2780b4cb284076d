package sessions

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/workers"
)

// This file owns slash commands: a command's run in the worker, its
// entries in the conversation, and its cancel by Interrupt.

// Exec runs a slash command in the session's worker (spawning it when
// needed) and returns its output. v becomes a viewer of the session.
// Errors: ErrNotFound, ErrLeaseUnproven (nothing was recorded),
// workers.ErrCapacity, *workers.Error, and an
// *accounts.RefusedError when Config.Accounts refused the owner (nothing
// was spawned; the history keeps the command and one notice with the
// reason, not an error entry).
func (r *Registry) Exec(ctx context.Context, v Viewer, sid, command string) (string, error) {
	s, err := r.use(v, sid)
	if err != nil {
		return "", err
	}
	if err := r.lease.mayWork(s); err != nil { // ErrLeaseUnproven (lease.go)
		return "", err
	}
	// A slash command and its output, or its error, are part of the
	// conversation: a resumed session shows them. The command is shown
	// when it is sent; its result, unless the session ended meanwhile or
	// the caller went.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r.mu.Lock()
	r.shareLocked(s, v, Message{Role: store.RoleUser, Kind: store.KindSlash, Text: command})
	s.execs++
	unregister := r.execStopLocked(s, func() { cancel(errInterrupted) })
	r.mu.Unlock()
	out, err := r.exec(ctx, s, command)
	interrupted := err != nil && errors.Is(context.Cause(ctx), errInterrupted)
	if interrupted && errors.Is(err, context.Canceled) {
		// Interrupted, and the worker gave no answer of its own (it was
		// still starting, or did not stop within the grace and was
		// recycled): the command failed, and says why.
		err = &workers.Error{Failure: workers.FailInterrupted, Message: "command interrupted"}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	unregister()
	shown := !errors.Is(err, ErrNotFound) && !errors.Is(err, context.Canceled)
	if s.live() && shown {
		if refused(err) {
			// No worker could start as the owner: one notice says why.
			r.shareLocked(s, v, Message{Role: store.RoleSystem, Kind: store.KindNotice, Text: err.Error()})
		} else if err != nil {
			code, msg := r.cfg.DescribeError(err)
			// An interrupted command's error says so (the dashboard shows
			// it as stopped, not as a failure).
			r.shareLocked(s, v, Message{Role: store.RoleSystem, Kind: store.KindError, Text: msg, Code: code, Interrupted: interrupted})
		} else {
			r.shareLocked(s, v, Message{Role: store.RoleAssistant, Kind: store.KindSlashOutput, Text: out})
		}
	}
	if s.execs--; s.execs == 0 && s.exited != nil {
		res := *s.exited
		s.exited = nil
		if s.live() {
			r.exitedLocked(s, res)
		}
	}
	return out, err
}

func (r *Registry) exec(ctx context.Context, s *Session, command string) (string, error) {
	w, err := r.ensureWorker(ctx, s)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.WorkerTimeout)
	defer cancel()
	r.mu.Lock()
	model := s.model // "" for the default: the agent worker's /model says which
	r.mu.Unlock()
	raw, err := w.Call(ctx, "slash", map[string]string{"command": command, "model": model}, nil)
	r.touch(s)
	if err != nil {
		return "", err
	}
	var res struct {
		Output string `json:"output"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return "", &workers.Error{Failure: workers.FailProtocol, Message: "result is not {\"output\": string}"}
	}
	return res.Output, nil
}

// execStopLocked registers the cancel of a running slash command of s, which
// Interrupt calls; the returned func unregisters it. r.mu must be held.
func (r *Registry) execStopLocked(s *Session, cancel func()) func() {
	if s.execStops == nil {
		s.execStops = map[*func()]struct{}{}
	}
	key := &cancel
	s.execStops[key] = struct{}{}
	return func() { delete(s.execStops, key) }
}
