// Package store keeps conversations beyond the life of the process: every
// session's metadata and every history entry a viewer was shown. The
// registry (package sessions) writes to a Store through a write-behind
// journal and reads from it when it restores, reopens, pages, lists closed
// sessions and searches.
//
// Two backends implement Store: Memory (in this package: `--store none`,
// nothing survives a restart) and sqlite.Store (package store/sqlite, an
// embedded file). A PostgreSQL backend follows; the interface therefore
// speaks in whole rows and batches, never in SQL, and every query carries
// the owner it is for (empty until users are kept apart).
package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Errors of a Store.
var (
	// ErrNotFound: no stored session has that id (for that owner).
	ErrNotFound = errors.New("store: session not found")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store: closed")
)

// Session states as stored. Live sessions carry the registry's state
// (created, attached, detached); a session saved by a clean shutdown is
// suspended; an ended one is closed.
const (
	StateSuspended = "suspended"
	StateClosed    = "closed"
)

// Session is one stored conversation's metadata.
type Session struct {
	ID         string
	Owner      string // "" until users are kept apart
	Title      string
	CreatedAt  time.Time
	LastActive time.Time
	State      string    // created, attached, detached, suspended or closed
	EndReason  string    // set when State is closed
	ClosedAt   time.Time // zero unless State is closed
	LastSeq    uint64    // the highest entry seq written for this session (read only: Apply ignores it)
	Model      string    // the model a session was configured with ("" for the default)
}

// Usage is a reply's token counts, when the model server reported them.
type Usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// Entry is one history entry: something a viewer of the session was shown.
// Seq counts a session's entries from 1; entries are ordered by it.
//
// Role is user, assistant, system or tool. Kind is prompt, reply, slash,
// slash_output, error or notice (more may follow: readers keep unknown
// kinds). Code is the JSON-RPC error code of an error entry.
type Entry struct {
	Seq         uint64    `json:"seq"`
	Role        string    `json:"role"`
	Kind        string    `json:"kind"`
	Text        string    `json:"text"`
	At          time.Time `json:"at"`
	TurnID      string    `json:"turn_id,omitempty"`
	Interrupted bool      `json:"interrupted,omitempty"`
	Usage       *Usage    `json:"usage,omitempty"`
	Code        int       `json:"code,omitempty"`
	// Status of a reply: complete, interrupted, error or incomplete (""
	// before issue 15: read Interrupted).
	Status string `json:"status,omitempty"`
	// Data holds the fields of a kind beyond these (a JSON object): an
	// approval's request_id, a tool result's exit_code, ...
	Data json.RawMessage `json:"data,omitempty"`
}

// Entry kinds and roles.
const (
	KindPrompt      = "prompt"
	KindReply       = "reply"
	KindSlash       = "slash"
	KindSlashOutput = "slash_output"
	KindError       = "error"
	KindNotice      = "notice"

	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleSystem    = "system"
	RoleTool      = "tool"
)

// SessionEntry is an entry of one session, as a Batch writes it.
type SessionEntry struct {
	SessionID string
	Entry
}

// Batch is a set of writes applied atomically, in this order: Sessions are
// upserted (the whole row but LastSeq), Entries are upserted by
// (SessionID, Seq), so a later write of a streaming reply replaces its
// earlier checkpoint, then Deletes remove sessions with all their entries.
// An entry whose session is neither stored nor in Sessions is an error.
type Batch struct {
	Sessions []Session
	Entries  []SessionEntry
	Deletes  []string
}

// Empty reports whether b writes nothing.
func (b *Batch) Empty() bool {
	return len(b.Sessions) == 0 && len(b.Entries) == 0 && len(b.Deletes) == 0
}

// ListQuery selects closed sessions, newest closed first.
type ListQuery struct {
	Owner  string
	Before time.Time // only sessions closed before it (zero: no bound)
	Limit  int       // at most this many (<= 0: 50)
}

// Hit is one search result.
type Hit struct {
	SessionID string    `json:"session_id"`
	Title     string    `json:"title"`
	Seq       uint64    `json:"seq"`
	Kind      string    `json:"kind"`
	Snippet   string    `json:"snippet"` // plain text around the match, not HTML
	At        time.Time `json:"at"`
}

// Store keeps sessions and their history. Its methods are safe for
// concurrent use. Errors other than ErrNotFound and ErrClosed are I/O or
// database failures: the caller keeps its data and may retry.
type Store interface {
	// Apply writes b atomically (all of it or nothing).
	Apply(ctx context.Context, b Batch) error
	// Restorable returns every session whose State is not closed, with
	// LastSeq set, in no particular order.
	Restorable(ctx context.Context) ([]Session, error)
	// Get returns one session with LastSeq set; ErrNotFound.
	Get(ctx context.Context, owner, id string) (Session, error)
	// Closed returns closed sessions newest closed first, and whether older
	// ones exist beyond the page.
	Closed(ctx context.Context, q ListQuery) ([]Session, bool, error)
	// History returns up to limit entries of a session with Seq < beforeSeq
	// (0: no bound), oldest first, and whether older ones exist. An unknown
	// session has no entries (no error).
	History(ctx context.Context, sid string, beforeSeq uint64, limit int) ([]Entry, bool, error)
	// Search returns up to limit entries whose text holds every word of
	// query, newest first. Any string is a valid query: operators and
	// quotes are taken as text; a query without words has no hits.
	Search(ctx context.Context, owner, query string, limit int) ([]Hit, error)
	// Delete removes a session and its entries; it reports whether the
	// session existed.
	Delete(ctx context.Context, owner, id string) (bool, error)
	// Prune deletes closed sessions whose ClosedAt is before cutoff, with
	// their entries, and returns how many.
	Prune(ctx context.Context, cutoff time.Time) (int, error)
	// Close releases the store; the caller writes nothing after it.
	Close() error
}
