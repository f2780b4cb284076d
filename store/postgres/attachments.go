package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

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
	created, err := toNanos(a.CreatedAt)
	if err != nil {
		return fmt.Errorf("put attachment %q: %w", a.ID, err)
	}
	data := a.Data
	if data == nil {
		data = []byte{} // NOT NULL: an empty file is an empty bytea
	}
	_, err = s.exec(ctx, fmt.Sprintf("put attachment %q", a.ID), `INSERT INTO attachments (id, session_id, owner, name, type, kind, size, created_at, data)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, a.ID, a.SessionID, a.Owner, text(a.Name), text(a.Type), text(a.Kind), a.Size, created, data)
	return err
}

// Attachment implements store.Store.
func (s *Store) Attachment(ctx context.Context, owner, sid, id string) (store.Attachment, error) {
	ctx, done, err := s.call(ctx)
	if err != nil {
		return store.Attachment{}, err
	}
	defer done()
	a := store.Attachment{Owner: owner}
	var created int64
	err = s.pool.QueryRow(ctx, `SELECT id, session_id, name, type, kind, size, created_at, data FROM attachments
WHERE id = $1 AND session_id = $2 AND owner = $3`, id, sid, owner).Scan(&a.ID, &a.SessionID, &a.Name, &a.Type, &a.Kind, &a.Size, &created, &a.Data)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Attachment{}, fmt.Errorf("attachment %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Attachment{}, fmt.Errorf("attachment %q: %w", id, deadline(ctx, err))
	}
	a.CreatedAt = fromNanos(created)
	return a, nil
}

// DeleteAttachment implements store.Store.
func (s *Store) DeleteAttachment(ctx context.Context, owner, sid, id string) (bool, error) {
	n, err := s.exec(ctx, fmt.Sprintf("delete attachment %q", id), `DELETE FROM attachments WHERE id = $1 AND session_id = $2 AND owner = $3`, id, sid, owner)
	return n > 0, err
}
