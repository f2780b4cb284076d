package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/dashgate/dashgate/store"
)

// Settings implements store.Store.
func (s *Store) Settings(ctx context.Context, owner string) (store.Settings, error) {
	if err := s.acquire(); err != nil {
		return store.Settings{}, err
	}
	defer s.mu.RUnlock()
	var doc string
	err := s.r.QueryRowContext(ctx, `SELECT doc FROM settings WHERE owner = ?`, owner).Scan(&doc)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Settings{}, nil
	}
	if err != nil {
		return store.Settings{}, fmt.Errorf("settings of %q: %w", owner, err)
	}
	return decodeSettings(owner, doc)
}

// PutSettings implements store.Store: one statement, which merges the
// fields p sets into the stored document (json_patch; p holds no null,
// which json_patch would take for a removal) and returns the result.
func (s *Store) PutSettings(ctx context.Context, owner string, p store.SettingsPatch) (store.Settings, error) {
	if err := s.acquire(); err != nil {
		return store.Settings{}, err
	}
	defer s.mu.RUnlock()
	patch, err := json.Marshal(p)
	if err != nil {
		return store.Settings{}, fmt.Errorf("put settings of %q: %w", owner, err)
	}
	var doc string
	err = s.w.QueryRowContext(ctx, `INSERT INTO settings (owner, doc) VALUES (?, json(?))
ON CONFLICT (owner) DO UPDATE SET doc = json_patch(settings.doc, excluded.doc)
RETURNING doc`, owner, string(patch)).Scan(&doc)
	if err != nil {
		return store.Settings{}, fmt.Errorf("put settings of %q: %w", owner, err)
	}
	return decodeSettings(owner, doc)
}

// decodeSettings reads a stored document: fields it lacks are zero, ones
// this release does not know are left out.
func decodeSettings(owner, doc string) (store.Settings, error) {
	var st store.Settings
	if err := json.Unmarshal([]byte(doc), &st); err != nil {
		return store.Settings{}, fmt.Errorf("settings of %q: %w", owner, err)
	}
	return st, nil
}
