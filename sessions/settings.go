package sessions

import (
	"context"

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
