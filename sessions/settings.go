package sessions

import (
	"context"
	"time"

	"github.com/dashgate/dashgate/store"
)

// A user's settings (issue 42, store.Settings) are kept in the store by
// owner. The registry reads them for the user: here for settings.get and
// settings.set, in a turn for the system prompt (systemPrompt). Which
// values are valid (an agent the server offers, a model the model server
// lists, the bounds) the caller checks: it has the lists.

// Settings returns p's settings (the zero Settings when p chose none).
// Errors: ErrNotFound for the admin token's principal, which owns none;
// *StoreError.
func (r *Registry) Settings(ctx context.Context, p Principal) (store.Settings, error) {
	owner, ok := p.owner()
	if !ok {
		return store.Settings{}, ErrNotFound
	}
	s, err := r.cfg.Store.Settings(ctx, owner)
	if err != nil {
		return store.Settings{}, &StoreError{err}
	}
	return s, nil
}

// PutSettings writes the fields patch sets of p's settings (the others
// stay as stored) and returns p's settings after it. Errors: as Settings.
func (r *Registry) PutSettings(ctx context.Context, p Principal, patch store.SettingsPatch) (store.Settings, error) {
	owner, ok := p.owner()
	if !ok {
		return store.Settings{}, ErrNotFound
	}
	s, err := r.cfg.Store.PutSettings(ctx, owner, patch)
	if err != nil {
		return store.Settings{}, &StoreError{err}
	}
	return s, nil
}

// settingsReadTimeout bounds a turn's read of its owner's settings: a
// failing store costs a prompt no more than this.
const settingsReadTimeout = time.Second

// systemPrompt is the system prompt a turn of s sends its worker (the
// prompt's "system", PROTOCOL.md): its owner's, read from the store
// each turn, so that a change applies to the next prompt of every
// session. When the store cannot say, the one the last turn of s read
// (a WARN): a store outage does not change what the model is told.
// r.mu must not be held.
func (r *Registry) systemPrompt(ctx context.Context, s *Session) string {
	rctx, cancel := context.WithTimeout(ctx, settingsReadTimeout)
	defer cancel()
	st, err := r.cfg.Store.Settings(rctx, s.owner)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil { // not the turn's own end (an interrupt)
			r.log.Warn("settings read", "sid", s.id, "err", err)
		}
		return s.system
	}
	s.system = st.SystemPrompt
	return s.system
}
