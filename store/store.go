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
// the owner it is for (empty until users are kept apart). The exceptions
// are the registry's own: Restorable and Prune read and delete across
// owners, and so do Claim, ClaimSession, Renew and Release, which speak
// for a node.
//
// Ownership is data with a version: a node holds a session under a lease
// (Session.Node, LeaseUntil) with an epoch that Claim bumps; each write
// says which epoch it was made under and a stale one is refused whole
// (ErrFenced), never merged. A write with epoch 0 is not checked, as
// before leases existed.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Errors of a Store.
var (
	// ErrNotFound: no stored session has that id (for that owner).
	ErrNotFound = errors.New("store: session not found")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store: closed")
	// ErrOtherOwner: a batch's session row names an owner other than the
	// stored session's. Apply wrote nothing: the owner of a stored session
	// never changes.
	ErrOtherOwner = errors.New("store: session belongs to another owner")
	// ErrFenced: a write carried an epoch other than the session's stored
	// one (another node claimed it since). Apply wrote nothing. The error
	// is a *FencedError naming the sessions.
	ErrFenced = errors.New("store: fenced")
	// ErrLeaseHeld: ClaimSession found the session held by another node
	// under a live lease (LeaseUntil after now); nothing was written. The
	// caller answers as for a session it does not have: the holder serves
	// it.
	ErrLeaseHeld = errors.New("store: session leased by another node")
)

// FencedError is Apply's error when writes of a batch carry an epoch that
// is not their session's stored epoch. errors.Is(err, ErrFenced) holds.
type FencedError struct {
	SessionIDs []string // the fenced sessions, sorted, each once
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("store: fenced: session %s written under a stale epoch", strings.Join(e.SessionIDs, ", "))
}

// Is reports whether target is ErrFenced.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

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
	// Agent is the name of the agent the session talks to (--agent; "" for
	// the built-in worker), AgentSession the agent's own id of the
	// conversation (an ACP agent's sessionId, for session/load; "" until
	// the agent gave one).
	Agent        string
	AgentSession string

	// Ownership as data (see Claim). Node is the node that holds the
	// session ("" for none), LeaseUntil when its hold ends (zero: ended),
	// Epoch how many times it was claimed. Apply stores the three only when
	// it creates the row; afterwards only Claim, Renew and Release change
	// them. Epoch is also the fence of a row in a Batch: non-zero, it must
	// equal the stored epoch (ErrFenced); zero writes unfenced.
	Node       string
	LeaseUntil time.Time
	Epoch      uint64
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
	// Attachments are the files sent with a prompt (issue 42), in the
	// order they were attached; their bytes are stored apart (Attachment).
	Attachments []AttachmentRef `json:"attachments,omitempty"`
	// Partial marks a checkpoint of a reply still streaming (issue 43):
	// written again as it grows, and a last time without Partial when it
	// ends. A store need not make it searchable until then (store/sqlite
	// does not; it indexes what a crash left partial when it opens). Never
	// sent to clients.
	Partial bool `json:"-"`
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

// SessionEntry is an entry of one session, as a Batch writes it. Epoch
// is the epoch its writer holds the session under: non-zero, it must equal
// the session's stored epoch (ErrFenced); zero writes unfenced.
type SessionEntry struct {
	SessionID string
	Epoch     uint64
	Entry
}

// Batch is a set of writes applied atomically, in this order: Sessions are
// upserted (the whole row but LastSeq, Owner and, once stored, Node,
// LeaseUntil and Epoch), Entries are upserted by (SessionID, Seq), so a
// later write of a streaming reply replaces its earlier checkpoint, then
// Deletes remove sessions with all their entries. An entry whose session
// is neither stored nor in Sessions is an error (ErrNotFound); so is a row
// whose Owner is not the stored session's (ErrOtherOwner: the owner never
// changes) and a row or entry whose non-zero Epoch is not the stored one
// (a *FencedError). Deletes carry no epoch: they are a user's, not a node's.
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

// MaxSearchWords is how many words of a search query count; the rest are
// ignored. Every word must match, so more only narrow the hits, while each
// costs the full-text index a lookup: a pasted page of text would cost a
// thousand (seconds of CPU) for what its first words already find.
const MaxSearchWords = 32

// Store keeps sessions and their history. Its methods are safe for
// concurrent use. Errors other than ErrNotFound and ErrClosed are I/O or
// database failures: the caller keeps its data and may retry.
type Store interface {
	// Apply writes b atomically (all of it or nothing).
	Apply(ctx context.Context, b Batch) error
	// Restorable returns every session whose State is not closed, with
	// LastSeq set, in no particular order, across owners: the admin
	// page's view of the sessions other nodes hold (the registry takes
	// its own with Claim).
	Restorable(ctx context.Context) ([]Session, error)
	// RestorableFor is Restorable of one owner's sessions.
	RestorableFor(ctx context.Context, owner string) ([]Session, error)
	// Get returns one session with LastSeq set; ErrNotFound.
	Get(ctx context.Context, owner, id string) (Session, error)
	// Closed returns closed sessions newest closed first, and whether older
	// ones exist beyond the page.
	Closed(ctx context.Context, q ListQuery) ([]Session, bool, error)
	// HistoryFor returns up to limit entries of owner's session sid with
	// Seq < beforeSeq (0: no bound), oldest first, and whether older ones
	// exist. An unknown session, or another owner's, has no entries (no
	// error).
	HistoryFor(ctx context.Context, owner, sid string, beforeSeq uint64, limit int) ([]Entry, bool, error)
	// Search returns up to limit of owner's entries whose text holds, for
	// every word of query, a word it is a prefix of (case-folded: "Pomegran
	// ju" finds "pomegranate juice"; "granate" does not, a word matches
	// from its start only), newest first. Words are
	// runs of letters and digits. Any string is a valid query: operators
	// and quotes are taken as text; a query without words has no hits.
	// Only the first MaxSearchWords words count.
	Search(ctx context.Context, owner, query string, limit int) ([]Hit, error)
	// Delete removes a session and its entries; it reports whether the
	// session existed.
	Delete(ctx context.Context, owner, id string) (bool, error)
	// Prune deletes closed sessions whose ClosedAt is before cutoff, with
	// their entries, and returns how many, across owners (the registry's
	// retention sweep).
	Prune(ctx context.Context, cutoff time.Time) (int, error)
	// Rename sets the title of owner's session id and nothing else (no read
	// of the row: a write beside it keeps its fields); it reports whether
	// the session exists for owner.
	Rename(ctx context.Context, owner, id, title string) (bool, error)

	// The leases are on one clock: now is the time Claim, ClaimSession
	// and Renew judge and extend leases by, and the zero time means the
	// store's own clock, as the registry passes it (PostgreSQL's now(),
	// which every node of a cluster shares, so that no node's skew moves
	// another's lease; time.Now() for Memory and SQLite, which one node
	// has to itself). Tests pass a fixed time.
	//
	// Claim gives node the sessions that are not closed and are unowned
	// (Node ""), already node's, or whose lease ended (LeaseUntil <= now),
	// all in one transaction: each gets Epoch+1, Node = node and
	// LeaseUntil = now+ttl. It returns them with LastSeq set, in no
	// particular order; node writes them with the returned Epoch. node's
	// own sessions get a new epoch too, so writes of node's earlier run
	// are fenced: a node claims at start, then Renews. A session
	// another node holds under a live lease is not taken. node must not be
	// "" and ttl must be > 0 (an error otherwise).
	Claim(ctx context.Context, node string, ttl time.Duration, now time.Time) ([]Session, error)
	// ClaimSession is Claim of one session: it gives node the session sid
	// when it is not closed and is unowned (Node ""), already node's, or
	// its lease ended (LeaseUntil <= now), atomically: Epoch+1, Node = node,
	// LeaseUntil = now+ttl. It returns the row as stored, with LastSeq set;
	// node writes it with the returned Epoch. Of several nodes claiming one
	// claimable session at once, exactly one gets it; the others get
	// ErrLeaseHeld. It reads and writes across owners (a node's call):
	// the caller authorizes first. Errors: ErrNotFound (no such session,
	// or it is closed), ErrLeaseHeld (another node holds a live lease on
	// it), ErrClosed; node must not be "" and ttl must be > 0 (an error
	// otherwise).
	ClaimSession(ctx context.Context, node, sid string, ttl time.Duration, now time.Time) (Session, error)
	// Renew sets LeaseUntil = now+ttl on each session of held (id -> the
	// epoch node claimed it with) that node still holds at that epoch, and
	// returns the ids of held it no longer holds (claimed by another node,
	// deleted), sorted. A lease that ended but was not claimed again is
	// renewed: nobody wrote under another epoch.
	Renew(ctx context.Context, node string, held map[string]uint64, ttl time.Duration, now time.Time) ([]string, error)
	// Release ends node's leases (LeaseUntil zero; Node and Epoch stay), so
	// that another node may claim them at once; it returns how many. Use it
	// at a clean stop, after the last write.
	Release(ctx context.Context, node string) (int, error)
	// Close releases the store; the caller writes nothing after it.
	Close() error

	// PutAttachment stores a file attached to a session of a.Owner's
	// (a.ID new). The session's row need not be stored yet: the bytes
	// come before the prompt that names them. They go with the session
	// (Delete, Prune, a Batch's Deletes).
	PutAttachment(ctx context.Context, a Attachment) error
	// Attachment returns owner's attachment id of session sid with its
	// bytes; ErrNotFound for any other (another owner's, another
	// session's, deleted).
	Attachment(ctx context.Context, owner, sid, id string) (Attachment, error)
	// DeleteAttachment removes owner's attachment id of session sid and
	// reports whether it was there (the page took back a file it had not
	// sent).
	DeleteAttachment(ctx context.Context, owner, sid, id string) (bool, error)

	// Settings returns owner's settings (settings.go): the zero Settings
	// when owner never stored any (no error).
	Settings(ctx context.Context, owner string) (Settings, error)
	// PutSettings writes the fields p sets of owner's settings, and only
	// those, in one statement (the row is made when owner has none; a
	// PutSettings of other fields at the same time keeps its own), and
	// returns owner's settings as they are after it.
	PutSettings(ctx context.Context, owner string, p SettingsPatch) (Settings, error)
}

// Nodes is what a Store shared by several dashgate nodes also does (the
// PostgreSQL backend; Memory and SQLite, which one node has to itself, do
// not): it keeps each node's heartbeat, so that any node can list the
// cluster. Find it with a type assertion on a Store.
type Nodes interface {
	// Heartbeat records that node runs and answers at addr (host:port,
	// or "" when unknown), carrying load, as of now. A heartbeat older
	// than the stored one changes nothing: LastSeen (and the load with
	// it) only moves forward. node must not be "" (an error otherwise).
	// Of load.List, the first MaxNodeWorkers are kept; the counts are
	// kept as given.
	Heartbeat(ctx context.Context, node, addr string, load NodeLoad, now time.Time) error
	// Nodes returns every node that ever sent a heartbeat, sorted by ID,
	// each Live when its LastSeen+expiry is after now. expiry must be > 0
	// (an error otherwise).
	Nodes(ctx context.Context, now time.Time, expiry time.Duration) ([]Node, error)
}

// ClusterSecrets is a store shared by the nodes of a cluster that keeps
// secrets every node uses (PostgreSQL's store implements it).
type ClusterSecrets interface {
	// ClusterSecret returns the secret stored under name; when there is
	// none it stores candidate first (the first node to ask wins, atomic
	// among concurrent askers) and returns it. candidate must not be
	// empty. Errors: the store's.
	ClusterSecret(ctx context.Context, name string, candidate []byte) ([]byte, error)
}

// Node is one node of a cluster, as its heartbeats say.
type Node struct {
	ID       string
	Addr     string
	LastSeen time.Time // its newest heartbeat
	Live     bool      // LastSeen is within the expiry Nodes was asked with
	Load     NodeLoad  // as of LastSeen
}

// MaxNodeWorkers bounds NodeLoad.List as a heartbeat stores it: a node
// with more children lists its first 1,000 (its Workers count stays
// whole), so one row stays small however busy the node.
const MaxNodeWorkers = 1000

// NodeLoad is what a node runs, as one heartbeat says: the count of its
// live sessions and of its children (chat workers and terminals), and
// those children themselves (at most MaxNodeWorkers of them, in the
// order given; nil for none), so that any node's admin page can show
// and reap them.
type NodeLoad struct {
	Sessions int
	Workers  int
	List     []NodeWorker
}

// NodeWorker is one child of a node in its heartbeat.
type NodeWorker struct {
	PID       int       `json:"pid"`
	SessionID string    `json:"session_id"`
	User      string    `json:"user"` // its session's owner; "" the anonymous user
	Kind      string    `json:"kind"` // "chat" or "pty"
	StartedAt time.Time `json:"started_at"`
}
