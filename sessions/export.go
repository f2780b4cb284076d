package sessions

import (
	"context"
	"time"
)

// Transcript is a whole conversation as a user exports it: the session's
// metadata and every history entry, oldest first.
type Transcript struct {
	ID        string    `json:"session_id"`
	Title     string    `json:"title"`
	State     string    `json:"state"` // created, attached, detached, suspended or closed
	CreatedAt time.Time `json:"created_at"`
	Model     string    `json:"model,omitempty"`
	Entries   []Message `json:"entries"`
}

// MaxTranscriptEntries bounds an export: a longer conversation's oldest
// entries are left out (Transcript.Entries starts later; its first Seq
// says where).
const MaxTranscriptEntries = 100_000

// Transcript returns session sid, live or stored, with its whole history
// for p, who must be allowed to use it (its owner: an admin reaps, never
// reads). It reads as session.history does, page by page (archive.entries):
// memory for a live session's latest entries, the store for the rest. Errors:
// ErrNotFound (unknown, or another user's), *StoreError, ctx's error.
func (r *Registry) Transcript(ctx context.Context, p Principal, sid string) (Transcript, error) {
	var t Transcript
	var owner string
	r.mu.Lock()
	s := r.findLocked(p, sid, accessUse)
	if s != nil {
		t = Transcript{ID: sid, Title: s.title, State: string(s.state), CreatedAt: s.createdAt, Model: s.model}
		owner = s.owner
	}
	r.mu.Unlock()
	if s == nil {
		r.journal.flush(ctx) // a session closed just now: its last writes first
		row, err := r.archive.stored(ctx, p, sid)
		if err != nil {
			return Transcript{}, err
		}
		t = Transcript{ID: sid, Title: row.Title, State: row.State, CreatedAt: row.CreatedAt, Model: row.Model}
		owner = row.Owner
	}
	entries, err := r.archive.entries(ctx, s, owner, sid)
	if err != nil {
		return Transcript{}, err
	}
	t.Entries = entries
	return t, nil
}
