package sessions

import (
	"context"
	"slices"
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

// transcriptPage is how many entries one read of an export takes.
const transcriptPage = 500

// MaxTranscriptEntries bounds an export: a longer conversation's oldest
// entries are left out (Transcript.Entries starts later; its first Seq
// says where).
const MaxTranscriptEntries = 100_000

// Transcript returns session sid, live or stored, with its whole history
// for p, who must be allowed to use it (its owner: an admin reaps, never
// reads). It reads as session.history does, page by page: memory for a
// live session's latest entries, the store for the rest. Errors:
// ErrNotFound (unknown, or another user's), *StoreError, ctx's error.
func (r *Registry) Transcript(ctx context.Context, p Principal, sid string) (Transcript, error) {
	var t Transcript
	r.mu.Lock()
	if s := r.findLocked(p, sid, accessUse); s != nil {
		t = Transcript{ID: sid, Title: s.title, State: string(s.state), CreatedAt: s.createdAt, Model: s.model}
	}
	r.mu.Unlock()
	if t.ID == "" {
		r.journal.flush(ctx) // a session closed just now: its last writes first
		row, err := r.storedSession(ctx, p, sid)
		if err != nil {
			return Transcript{}, err
		}
		t = Transcript{ID: sid, Title: row.Title, State: row.State, CreatedAt: row.CreatedAt, Model: row.Model}
	}
	var pages [][]Message
	n := 0
	for before := uint64(0); n < MaxTranscriptEntries; {
		page, more, err := r.History(ctx, p, sid, before, min(transcriptPage, MaxTranscriptEntries-n))
		if err != nil {
			return Transcript{}, err
		}
		if len(page) == 0 {
			break
		}
		pages = append(pages, page)
		n += len(page)
		before = page[0].Seq
		if !more {
			break
		}
	}
	slices.Reverse(pages)
	t.Entries = slices.Concat(pages...)
	if t.Entries == nil {
		t.Entries = []Message{}
	}
	return t, nil
}
