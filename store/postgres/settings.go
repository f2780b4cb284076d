package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/dashgate/dashgate/store"
)

// Settings implements store.Store.
func (s *Store) Settings(ctx context.Context, owner string) (store.Settings, error) {
	ctx, done, err := s.call(ctx)
	if err != nil {
		return store.Settings{}, err
	}
	defer done()
	var doc []byte
	err = s.pool.QueryRow(ctx, `SELECT doc FROM settings WHERE owner = $1`, owner).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Settings{}, nil
	}
	if err != nil {
		return store.Settings{}, fmt.Errorf("settings of %q: %w", owner, deadline(ctx, err))
	}
	return decodeSettings(owner, doc)
}

// PutSettings implements store.Store: one statement, which merges the
// fields p sets into the stored document (jsonb ||, a shallow merge: the
// document is flat) and returns the result. Its strings are as text
// holds them (no NUL: jsonb refuses \u0000).
func (s *Store) PutSettings(ctx context.Context, owner string, p store.SettingsPatch) (store.Settings, error) {
	for _, f := range []**string{&p.DefaultAgent, &p.DefaultModel, &p.SystemPrompt, &p.Theme, &p.TerminalFontFamily} {
		if *f != nil {
			v := text(**f) // a copy: the caller's string stays as it was
			*f = &v
		}
	}
	patch, err := json.Marshal(p)
	if err != nil {
		return store.Settings{}, fmt.Errorf("put settings of %q: %w", owner, err)
	}
	ctx, done, err := s.call(ctx)
	if err != nil {
		return store.Settings{}, err
	}
	defer done()
	var doc []byte
	err = s.pool.QueryRow(ctx, `INSERT INTO settings (owner, doc) VALUES ($1, $2::jsonb)
ON CONFLICT (owner) DO UPDATE SET doc = settings.doc || excluded.doc
RETURNING doc`, owner, string(patch)).Scan(&doc)
	if err != nil {
		return store.Settings{}, fmt.Errorf("put settings of %q: %w", owner, deadline(ctx, err))
	}
	return decodeSettings(owner, doc)
}

// decodeSettings reads a stored document: fields it lacks are zero, ones
// this release does not know are left out.
func decodeSettings(owner string, doc []byte) (store.Settings, error) {
	var st store.Settings
	if err := json.Unmarshal(doc, &st); err != nil {
		return store.Settings{}, fmt.Errorf("settings of %q: %w", owner, err)
	}
	return st, nil
}
