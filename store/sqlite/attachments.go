package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/dashgate/dashgate/store"
)

// attachmentsColumn is an entry's attachments as the entries table keeps
// them: a JSON array, "" for none.
func attachmentsColumn(refs []store.AttachmentRef) (string, error) {
	if len(refs) == 0 {
		return "", nil
	}
	b, err := json.Marshal(refs)
	if err != nil {
		return "", fmt.Errorf("attachments: %w", err)
	}
	return string(b), nil
}

// PutAttachment implements store.Store: one INSERT.
func (s *Store) PutAttachment(ctx context.Context, a store.Attachment) error {
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	created, err := toNanos(a.CreatedAt)
	if err != nil {
		return fmt.Errorf("put attachment %q: %w", a.ID, err)
	}
	data := a.Data
	if data == nil {
		data = []byte{} // NOT NULL: an empty file is a zero-length blob
	}
	if _, err := s.w.ExecContext(ctx, `INSERT INTO attachments (id, session_id, owner, name, type, kind, size, created_at, data)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, a.ID, a.SessionID, a.Owner, a.Name, a.Type, a.Kind, a.Size, created, data); err != nil {
		return fmt.Errorf("put attachment %q: %w", a.ID, err)
	}
	return nil
}

// Attachment implements store.Store.
func (s *Store) Attachment(ctx context.Context, owner, sid, id string) (store.Attachment, error) {
	if err := s.acquire(); err != nil {
		return store.Attachment{}, err
	}
	defer s.mu.RUnlock()
	a := store.Attachment{Owner: owner}
	var created int64
	err := s.r.QueryRowContext(ctx, `SELECT id, session_id, name, type, kind, size, created_at, data FROM attachments
WHERE id = ? AND session_id = ? AND owner = ?`, id, sid, owner).Scan(&a.ID, &a.SessionID, &a.Name, &a.Type, &a.Kind, &a.Size, &created, &a.Data)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Attachment{}, fmt.Errorf("attachment %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Attachment{}, fmt.Errorf("attachment %q: %w", id, err)
	}
	a.CreatedAt = fromNanos(created)
	return a, nil
}

// DeleteAttachment implements store.Store.
func (s *Store) DeleteAttachment(ctx context.Context, owner, sid, id string) (bool, error) {
	if err := s.acquire(); err != nil {
		return false, err
	}
	defer s.mu.RUnlock()
	res, err := s.w.ExecContext(ctx, `DELETE FROM attachments WHERE id = ? AND session_id = ? AND owner = ?`, id, sid, owner)
	if err != nil {
		return false, fmt.Errorf("delete attachment %q: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("delete attachment %q: %w", id, err)
	}
	return n > 0, nil
}
