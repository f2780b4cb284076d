package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/dashgate/dashgate/store"
)

// Errors of Open, each wrapped in a one-line error that names the file.
var (
	// ErrCorrupt: the file is not a SQLite database. Open did not write to it.
	ErrCorrupt = errors.New("not a SQLite database")
	// ErrDamaged: the file is a SQLite database whose pages or full-text
	// index are damaged (truncated, overwritten). Open did not write to it.
	ErrDamaged = errors.New("damaged SQLite database")
	// ErrNewerSchema: the file was written by a newer dashgate. Open did
	// not write to it.
	ErrNewerSchema = errors.New("schema newer than this dashgate knows")
	// ErrNoFTS5: the linked SQLite was built without FTS5, which Search needs.
	ErrNoFTS5 = errors.New("SQLite built without FTS5")
)

// Options tune a Store; the zero value is the default.
type Options struct {
	// Readers is how many connections serve reads at once (<= 0: 4).
	Readers int
}

// Store is a store.Store kept in one SQLite file. Its methods are safe for
// concurrent use.
type Store struct {
	path string
	w    *sql.DB // one connection: every write goes through it, in turn
	r    *sql.DB // query_only connections for reads

	mu     sync.RWMutex // shared by every call, exclusive in Close
	closed bool
}

var _ store.Store = (*Store)(nil)

// sqliteHeader opens every SQLite database file (the header string).
var sqliteHeader = []byte("SQLite format 3\x00")

// Open opens the store at path, creating the file when it does not exist,
// and migrates its schema. The caller owns the Store and closes it.
//
// Each error is one line naming path: a directory, a file or folder it may
// not create or write, ErrCorrupt (the file is not a database; it is left
// as it was, with no -wal or -shm beside it), ErrDamaged (its size is
// not what its header says, or PRAGMA quick_check, which covers the
// full-text index, finds a problem; left as it was), ErrNewerSchema (left
// as it was), ErrNoFTS5, or a database error. That check reads the whole
// file once, before anything opens it for writing.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", path, err)
	}
	if err := checkFile(abs); err != nil {
		return nil, err
	}
	if err := checkIntact(ctx, abs); err != nil {
		return nil, err
	}
	w, err := sql.Open("sqlite", dsn(abs, false))
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", abs, err)
	}
	// One writer connection: SQLite runs one write transaction at a time, so
	// more connections would only wait on busy_timeout; with one, writers
	// queue in database/sql. It is never closed while idle, so a failed
	// write cannot lose connection state between retries.
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	if err := prepare(ctx, w, abs); err != nil {
		w.Close()
		return nil, err
	}
	r, err := sql.Open("sqlite", dsn(abs, true))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("store %s: %w", abs, err)
	}
	readers := opts.Readers
	if readers <= 0 {
		readers = 4
	}
	r.SetMaxOpenConns(readers)
	r.SetMaxIdleConns(readers)
	if err := r.PingContext(ctx); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("store %s: open reader: %w", abs, err)
	}
	return &Store{path: abs, w: w, r: r}, nil
}

// dsn is the modernc DSN of the file at abs. The pragmas are in the DSN so
// that every connection a pool opens gets them. journal_mode is not among
// them: it is a property of the file, set once by prepare after the schema
// version was read, so that Open writes nothing to a file it will refuse.
func dsn(abs string, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous(NORMAL)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		// Take the write lock at BEGIN, not at the first write, so a
		// transaction never fails half-way on a lock (busy_timeout waits).
		q.Set("_txlock", "immediate")
	}
	return (&url.URL{Scheme: "file", Path: abs, RawQuery: q.Encode()}).String()
}

// checkFile refuses what SQLite would mishandle or write to before it
// tells: a directory, a path that cannot be created or written, and a file
// whose header is not SQLite's. It creates an empty file when there is none
// (SQLite takes an empty file as a new database).
func checkFile(abs string) error {
	fi, err := os.Stat(abs)
	switch {
	case err == nil && fi.IsDir():
		return fmt.Errorf("store %s: is a directory", abs)
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		// Create it here, where the error is the system's own one line.
		f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("store %s: cannot create: %w", abs, unwrapPath(err))
		}
		return f.Close()
	case err != nil:
		return fmt.Errorf("store %s: cannot open: %w", abs, unwrapPath(err))
	}
	f, err := os.OpenFile(abs, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("store %s: cannot write: %w", abs, unwrapPath(err))
	}
	defer f.Close()
	head := make([]byte, len(sqliteHeader))
	n, err := io.ReadFull(f, head)
	switch {
	case n == 0 && (err == io.EOF):
		return nil // empty: a new database
	case err != nil && !errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("store %s: read: %w", abs, unwrapPath(err))
	case !bytes.Equal(head[:n], sqliteHeader) || n < len(head):
		return fmt.Errorf("store %s: %w (left unchanged)", abs, ErrCorrupt)
	}
	return nil
}

// unwrapPath drops the *PathError's own copy of the path, which the
// caller's message already names.
func unwrapPath(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	return err
}

// newerSchemaError reads "store <path> has schema version N; this dashgate
// knows up to M" and is ErrNewerSchema.
type newerSchemaError struct {
	path       string
	have, know int
}

func (e *newerSchemaError) Error() string {
	return fmt.Sprintf("store %s has schema version %d; this dashgate knows up to %d", e.path, e.have, e.know)
}

func (e *newerSchemaError) Unwrap() error { return ErrNewerSchema }

// prepare reads the schema version (the first read: a damaged file fails
// here, before anything was written), refuses a newer schema, checks FTS5,
// switches the file to WAL and applies the missing migrations (migrate).
func prepare(ctx context.Context, w *sql.DB, abs string) error {
	user, applied, err := readVersion(ctx, w)
	if err != nil {
		if isCode(err, sqlite3.SQLITE_NOTADB) || isCode(err, sqlite3.SQLITE_CORRUPT) {
			return fmt.Errorf("store %s: %w (left unchanged)", abs, ErrCorrupt)
		}
		return fmt.Errorf("store %s: read schema version: %w", abs, err)
	}
	if have := max(user, applied); have > schemaVersion {
		return &newerSchemaError{path: abs, have: have, know: schemaVersion}
	}
	var fts5 bool
	if err := w.QueryRowContext(ctx, "SELECT sqlite_compileoption_used('ENABLE_FTS5')").Scan(&fts5); err != nil {
		return fmt.Errorf("store %s: check FTS5: %w", abs, err)
	}
	if !fts5 {
		return fmt.Errorf("store %s: %w", abs, ErrNoFTS5)
	}
	var mode string
	if err := w.QueryRowContext(ctx, "PRAGMA journal_mode = WAL").Scan(&mode); err != nil {
		return fmt.Errorf("store %s: set WAL: %w", abs, err)
	}
	if mode != "wal" {
		return fmt.Errorf("store %s: journal mode is %q, not wal", abs, mode)
	}
	if user != schemaVersion || applied != schemaVersion {
		if err := migrate(ctx, w, abs); err != nil {
			return err
		}
	}
	// A reply's checkpoints are not searchable until its last write
	// (store.Entry.Partial); one a crash left partial is made so now.
	if _, err := w.ExecContext(ctx, `UPDATE entries SET partial = 0 WHERE partial <> 0`); err != nil {
		return fmt.Errorf("store %s: index partial entries: %w", abs, err)
	}
	return nil
}

// isCode reports whether err is a SQLite error whose primary result code
// is code.
func isCode(err error, code int) bool {
	e, ok := errors.AsType[*msqlite.Error](err)
	return ok && e.Code()&0xff == code
}

// acquire holds the store open for one call; release with s.mu.RUnlock.
func (s *Store) acquire() error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return store.ErrClosed
	}
	return nil
}

// zeroTime stands for the zero time.Time in a time column.
const zeroTime = math.MinInt64

var (
	minTime = time.Unix(0, math.MinInt64+1)
	maxTime = time.Unix(0, math.MaxInt64)
)

// toNanos is t as stored: unix nanoseconds, zeroTime for the zero time. A
// time outside 1678..2262 cannot be stored.
func toNanos(t time.Time) (int64, error) {
	if t.IsZero() {
		return zeroTime, nil
	}
	if t.Before(minTime) || t.After(maxTime) {
		return 0, fmt.Errorf("time %s out of the storable range", t)
	}
	return t.UnixNano(), nil
}

func fromNanos(n int64) time.Time {
	if n == zeroTime {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// toSeq is seq as stored (SQLite integers are signed).
func toSeq(seq uint64) (int64, error) {
	if seq > math.MaxInt64 {
		return 0, fmt.Errorf("seq %d out of range", seq)
	}
	return int64(seq), nil
}

// toEpoch is epoch as stored.
func toEpoch(epoch uint64) (int64, error) {
	if epoch > math.MaxInt64 {
		return 0, fmt.Errorf("epoch %d out of range", epoch)
	}
	return int64(epoch), nil
}

const sessionColumns = `id, owner, title, created_at, last_active, state, end_reason, closed_at, model, node, lease_until, epoch, agent, agent_session`

// lastSeq is the column expression of a session's highest entry seq (the
// (session_id, seq) index answers it with one seek).
const lastSeq = `COALESCE((SELECT max(seq) FROM entries WHERE session_id = sessions.id), 0)`

type scanner interface{ Scan(dest ...any) error }

func scanSession(sc scanner, withLastSeq bool) (store.Session, error) {
	var s store.Session
	var created, active, closed, lease, epoch int64
	dest := []any{&s.ID, &s.Owner, &s.Title, &created, &active, &s.State, &s.EndReason, &closed, &s.Model, &s.Node, &lease, &epoch, &s.Agent, &s.AgentSession}
	var last int64
	if withLastSeq {
		dest = append(dest, &last)
	}
	if err := sc.Scan(dest...); err != nil {
		return store.Session{}, err
	}
	s.CreatedAt, s.LastActive, s.ClosedAt = fromNanos(created), fromNanos(active), fromNanos(closed)
	s.LastSeq, s.LeaseUntil, s.Epoch = uint64(last), fromNanos(lease), uint64(epoch)
	return s, nil
}

// Apply implements store.Store: one transaction. An entry whose session is
// neither stored nor in b fails the whole batch with store.ErrNotFound.
func (s *Store) Apply(ctx context.Context, b store.Batch) error {
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	if b.Empty() {
		return ctx.Err()
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("apply: begin: %w", err)
	}
	defer tx.Rollback()
	if err := applyTx(ctx, tx, b); err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("apply: commit: %w", err)
	}
	return nil
}

func applyTx(ctx context.Context, tx *sql.Tx, b store.Batch) error {
	if err := checkBatch(ctx, tx, b); err != nil {
		return err
	}
	if len(b.Sessions) > 0 {
		// The owner, and once stored the lease, are not the row's to change.
		st, err := tx.PrepareContext(ctx, `INSERT INTO sessions (`+sessionColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET title = excluded.title, created_at = excluded.created_at,
	last_active = excluded.last_active, state = excluded.state, end_reason = excluded.end_reason,
	closed_at = excluded.closed_at, model = excluded.model, agent = excluded.agent, agent_session = excluded.agent_session`)
		if err != nil {
			return err
		}
		defer st.Close()
		for _, ss := range b.Sessions {
			var t [4]int64
			for i, v := range []time.Time{ss.CreatedAt, ss.LastActive, ss.ClosedAt, ss.LeaseUntil} {
				if t[i], err = toNanos(v); err != nil {
					return fmt.Errorf("session %q: %w", ss.ID, err)
				}
			}
			epoch, err := toEpoch(ss.Epoch)
			if err != nil {
				return fmt.Errorf("session %q: %w", ss.ID, err)
			}
			if _, err := st.ExecContext(ctx, ss.ID, ss.Owner, ss.Title, t[0], t[1], ss.State, ss.EndReason, t[2], ss.Model,
				ss.Node, t[3], epoch, ss.Agent, ss.AgentSession); err != nil {
				return fmt.Errorf("session %q: %w", ss.ID, err)
			}
		}
	}
	if len(b.Entries) > 0 {
		st, err := tx.PrepareContext(ctx, `INSERT INTO entries
	(session_id, seq, role, kind, text, at, turn_id, interrupted, input_tokens, output_tokens, code, status, data, attachments, names, partial)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (session_id, seq) DO UPDATE SET role = excluded.role, kind = excluded.kind, text = excluded.text,
	at = excluded.at, turn_id = excluded.turn_id, interrupted = excluded.interrupted,
	input_tokens = excluded.input_tokens, output_tokens = excluded.output_tokens, code = excluded.code,
	status = excluded.status, data = excluded.data, attachments = excluded.attachments, names = excluded.names,
	partial = excluded.partial`)
		if err != nil {
			return err
		}
		defer st.Close()
		for _, e := range b.Entries {
			seq, err := toSeq(e.Seq)
			if err != nil {
				return fmt.Errorf("entry of session %q: %w", e.SessionID, err)
			}
			at, err := toNanos(e.At)
			if err != nil {
				return fmt.Errorf("entry %d of session %q: %w", e.Seq, e.SessionID, err)
			}
			var in, out sql.NullInt64
			if e.Usage != nil {
				in = sql.NullInt64{Int64: int64(e.Usage.InputTokens), Valid: true}
				out = sql.NullInt64{Int64: int64(e.Usage.OutputTokens), Valid: true}
			}
			refs, err := attachmentsColumn(e.Attachments)
			if err != nil {
				return fmt.Errorf("entry %d of session %q: %w", e.Seq, e.SessionID, err)
			}
			if _, err := st.ExecContext(ctx, e.SessionID, seq, e.Role, e.Kind, e.Text, at, e.TurnID, e.Interrupted, in, out, e.Code, e.Status, string(e.Data),
				refs, store.AttachmentNames(e.Attachments), e.Partial); err != nil {
				return fmt.Errorf("entry %d of session %q: %w", e.Seq, e.SessionID, err)
			}
		}
	}
	for _, id := range b.Deletes {
		// Entries go by ON DELETE CASCADE, their index rows by trigger.
		if _, err := tx.ExecContext(ctx, `DELETE FROM sessions WHERE id = ?`, id); err != nil {
			return fmt.Errorf("delete session %q: %w", id, err)
		}
	}
	return nil
}

// checkBatch reads the stored owner and epoch of b's sessions in tx and
// makes store.CheckBatch's decision on them, before anything is written.
func checkBatch(ctx context.Context, tx *sql.Tx, b store.Batch) error {
	ids := b.FenceIDs()
	if len(ids) == 0 {
		return nil
	}
	st, err := tx.PrepareContext(ctx, `SELECT owner, epoch FROM sessions WHERE id = ?`)
	if err != nil {
		return err
	}
	defer st.Close()
	stored := make(map[string]store.Fence, len(ids))
	for _, id := range ids {
		var f store.Fence
		var epoch int64
		err := st.QueryRowContext(ctx, id).Scan(&f.Owner, &epoch)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return fmt.Errorf("session %q: %w", id, err)
		}
		f.Epoch = uint64(epoch)
		stored[id] = f
	}
	return store.CheckBatch(b, stored)
}

// Restorable implements store.Store.
func (s *Store) Restorable(ctx context.Context) ([]store.Session, error) {
	return s.sessions(ctx, "restorable", `SELECT `+sessionColumns+`, `+lastSeq+` FROM sessions WHERE state <> 'closed'`)
}

// RestorableFor implements store.Store.
func (s *Store) RestorableFor(ctx context.Context, owner string) ([]store.Session, error) {
	return s.sessions(ctx, "restorable", `SELECT `+sessionColumns+`, `+lastSeq+` FROM sessions WHERE state <> 'closed' AND owner = ?`, owner)
}

// sessions reads the sessions query selects (sessionColumns and lastSeq);
// what names the call in errors.
func (s *Store) sessions(ctx context.Context, what, query string, args ...any) ([]store.Session, error) {
	if err := s.acquire(); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var out []store.Session
	for rows.Next() {
		ss, err := scanSession(rows, true)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, ss)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, owner, id string) (store.Session, error) {
	if err := s.acquire(); err != nil {
		return store.Session{}, err
	}
	defer s.mu.RUnlock()
	row := s.r.QueryRowContext(ctx, `SELECT `+sessionColumns+`, `+lastSeq+` FROM sessions WHERE id = ? AND owner = ?`, id, owner)
	ss, err := scanSession(row, true)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Session{}, fmt.Errorf("get %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Session{}, fmt.Errorf("get %q: %w", id, err)
	}
	return ss, nil
}

// Closed implements store.Store. Sessions closed at the same instant come
// in descending id order.
func (s *Store) Closed(ctx context.Context, q store.ListQuery) ([]store.Session, bool, error) {
	if err := s.acquire(); err != nil {
		return nil, false, err
	}
	defer s.mu.RUnlock()
	limit := q.Limit
	if limit <= 0 {
		limit = 50
	}
	before := int64(math.MaxInt64)
	if !q.Before.IsZero() {
		var err error
		if before, err = toNanos(q.Before); err != nil {
			return nil, false, fmt.Errorf("closed: %w", err)
		}
	}
	rows, err := s.r.QueryContext(ctx, `SELECT `+sessionColumns+`, `+lastSeq+` FROM sessions
WHERE state = 'closed' AND owner = ? AND closed_at < ?
ORDER BY closed_at DESC, id DESC LIMIT ?`, q.Owner, before, limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("closed: %w", err)
	}
	defer rows.Close()
	var out []store.Session
	for rows.Next() {
		ss, err := scanSession(rows, true)
		if err != nil {
			return nil, false, fmt.Errorf("closed: %w", err)
		}
		out = append(out, ss)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("closed: %w", err)
	}
	if len(out) > limit {
		return out[:limit], true, nil
	}
	return out, false, nil
}

// HistoryFor implements store.Store. A limit <= 0 returns no entries
// (more still tells whether there are any).
func (s *Store) HistoryFor(ctx context.Context, owner, sid string, beforeSeq uint64, limit int) ([]store.Entry, bool, error) {
	return s.history(ctx, owner, sid, beforeSeq, limit)
}

// history reads sid's entries when owner owns sid.
func (s *Store) history(ctx context.Context, owner, sid string, beforeSeq uint64, limit int) ([]store.Entry, bool, error) {
	if err := s.acquire(); err != nil {
		return nil, false, err
	}
	defer s.mu.RUnlock()
	limit = max(limit, 0)
	before := int64(math.MaxInt64)
	if beforeSeq > 0 && beforeSeq <= math.MaxInt64 {
		before = int64(beforeSeq)
	}
	rows, err := s.r.QueryContext(ctx, `SELECT seq, role, kind, text, at, turn_id, interrupted, input_tokens, output_tokens, code, status, data, attachments
FROM entries WHERE session_id = ? AND seq < ? AND EXISTS (SELECT 1 FROM sessions WHERE id = entries.session_id AND owner = ?)
ORDER BY seq DESC LIMIT ?`, sid, before, owner, limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("history %q: %w", sid, err)
	}
	defer rows.Close()
	var out []store.Entry
	for rows.Next() {
		var e store.Entry
		var seq, at int64
		var in, outTok sql.NullInt64
		var data, refs string
		if err := rows.Scan(&seq, &e.Role, &e.Kind, &e.Text, &at, &e.TurnID, &e.Interrupted, &in, &outTok, &e.Code, &e.Status, &data, &refs); err != nil {
			return nil, false, fmt.Errorf("history %q: %w", sid, err)
		}
		if data != "" {
			e.Data = json.RawMessage(data)
		}
		if refs != "" {
			if err := json.Unmarshal([]byte(refs), &e.Attachments); err != nil {
				return nil, false, fmt.Errorf("history %q: entry %d's attachments: %w", sid, seq, err)
			}
		}
		e.Seq, e.At = uint64(seq), fromNanos(at)
		if in.Valid || outTok.Valid {
			e.Usage = &store.Usage{InputTokens: int(in.Int64), OutputTokens: int(outTok.Int64)}
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("history %q: %w", sid, err)
	}
	more := len(out) > limit
	if more {
		out = out[:limit]
	}
	// Read newest first to stop at limit; returned oldest first.
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	if len(out) == 0 {
		out = nil
	}
	return out, more, nil
}

// Search implements store.Store. Newest first is the order the entries
// were first written (the full-text index walks rowids backwards and stops
// at limit, so a common word costs no more than a rare one); a rewritten
// checkpoint keeps its place. The snippet is about 14 words of plain text
// around the first match, "…" where it was cut, from the entry's text or
// its attachments' names, whichever matched best.
func (s *Store) Search(ctx context.Context, owner, query string, limit int) ([]store.Hit, error) {
	if err := s.acquire(); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	match := ftsQuery(query)
	if match == "" || limit <= 0 {
		return nil, ctx.Err()
	}
	// CROSS JOIN keeps the index as the outer loop, in rowid order.
	rows, err := s.r.QueryContext(ctx, `SELECT e.session_id, s.title, e.seq, e.kind, e.at, snippet(entries_fts, -1, '', '', '…', 14)
FROM entries_fts
CROSS JOIN entries e ON e.id = entries_fts.rowid
CROSS JOIN sessions s ON s.id = e.session_id
WHERE entries_fts MATCH ? AND s.owner = ?
ORDER BY entries_fts.rowid DESC LIMIT ?`, match, owner, limit)
	if err != nil {
		return nil, fmt.Errorf("search: %w", err)
	}
	defer rows.Close()
	var hits []store.Hit
	for rows.Next() {
		var h store.Hit
		var seq, at int64
		if err := rows.Scan(&h.SessionID, &h.Title, &seq, &h.Kind, &at, &h.Snippet); err != nil {
			return nil, fmt.Errorf("search: %w", err)
		}
		h.Seq, h.At = uint64(seq), fromNanos(at)
		hits = append(hits, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("search: %w", err)
	}
	return hits, nil
}

// Delete implements store.Store.
func (s *Store) Delete(ctx context.Context, owner, id string) (bool, error) {
	if err := s.acquire(); err != nil {
		return false, err
	}
	defer s.mu.RUnlock()
	res, err := s.w.ExecContext(ctx, `DELETE FROM sessions WHERE id = ? AND owner = ?`, id, owner)
	if err != nil {
		return false, fmt.Errorf("delete %q: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("delete %q: %w", id, err)
	}
	return n > 0, nil
}

// Prune implements store.Store.
func (s *Store) Prune(ctx context.Context, cutoff time.Time) (int, error) {
	return s.prune(ctx, `DELETE FROM sessions WHERE state = 'closed' AND closed_at < ?`, cutoff)
}

func (s *Store) prune(ctx context.Context, query string, cutoff time.Time, args ...any) (int, error) {
	if err := s.acquire(); err != nil {
		return 0, err
	}
	defer s.mu.RUnlock()
	c, err := toNanos(cutoff)
	if err != nil {
		return 0, fmt.Errorf("prune: %w", err)
	}
	res, err := s.w.ExecContext(ctx, query, append([]any{c}, args...)...)
	if err != nil {
		return 0, fmt.Errorf("prune: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("prune: %w", err)
	}
	return int(n), nil
}

// Rename implements store.Store: one UPDATE of the title.
func (s *Store) Rename(ctx context.Context, owner, id, title string) (bool, error) {
	if err := s.acquire(); err != nil {
		return false, err
	}
	defer s.mu.RUnlock()
	res, err := s.w.ExecContext(ctx, `UPDATE sessions SET title = ? WHERE id = ? AND owner = ?`, title, id, owner)
	if err != nil {
		return false, fmt.Errorf("rename %q: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("rename %q: %w", id, err)
	}
	return n > 0, nil
}

// leaseEnd is now+ttl as stored, after checking node and ttl. The zero
// now is the process's clock (see store.Store.Claim): the caller makes it
// time.Now() first, for the rest of its call.
func leaseEnd(node string, ttl time.Duration, now time.Time) (int64, error) {
	if node == "" {
		return 0, errors.New("empty node name")
	}
	if ttl <= 0 {
		return 0, fmt.Errorf("ttl %v is not positive", ttl)
	}
	return toNanos(now.Add(ttl))
}

// Claim implements store.Store: one transaction that updates the
// claimable rows and reads them back.
func (s *Store) Claim(ctx context.Context, node string, ttl time.Duration, now time.Time) ([]store.Session, error) {
	if now.IsZero() {
		now = time.Now()
	}
	until, err := leaseEnd(node, ttl, now)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	n, err := toNanos(now)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	if err := s.acquire(); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("claim: begin: %w", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `UPDATE sessions SET node = ?, lease_until = ?, epoch = epoch + 1
WHERE state <> 'closed' AND (node = '' OR node = ? OR lease_until <= ?) RETURNING id`, node, until, node, n)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	var claimed []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("claim: %w", err)
		}
		claimed = append(claimed, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	out := make([]store.Session, 0, len(claimed))
	for _, id := range claimed {
		ss, err := scanSession(tx.QueryRowContext(ctx, `SELECT `+sessionColumns+`, `+lastSeq+` FROM sessions WHERE id = ?`, id), true)
		if err != nil {
			return nil, fmt.Errorf("claim %q: %w", id, err)
		}
		out = append(out, ss)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("claim: commit: %w", err)
	}
	if len(out) == 0 {
		out = nil
	}
	return out, nil
}

// ClaimSession implements store.Store: one transaction that updates the
// row when it is claimable and reads it back; when it is not, the same
// transaction tells a closed or unknown session (store.ErrNotFound) from
// one another node holds (store.ErrLeaseHeld).
func (s *Store) ClaimSession(ctx context.Context, node, sid string, ttl time.Duration, now time.Time) (store.Session, error) {
	if now.IsZero() {
		now = time.Now()
	}
	until, err := leaseEnd(node, ttl, now)
	if err != nil {
		return store.Session{}, fmt.Errorf("claim %q: %w", sid, err)
	}
	n, err := toNanos(now)
	if err != nil {
		return store.Session{}, fmt.Errorf("claim %q: %w", sid, err)
	}
	if err := s.acquire(); err != nil {
		return store.Session{}, err
	}
	defer s.mu.RUnlock()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return store.Session{}, fmt.Errorf("claim %q: begin: %w", sid, err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE sessions SET node = ?, lease_until = ?, epoch = epoch + 1
WHERE id = ? AND state <> 'closed' AND (node = '' OR node = ? OR lease_until <= ?)`, node, until, sid, node, n)
	if err != nil {
		return store.Session{}, fmt.Errorf("claim %q: %w", sid, err)
	}
	changed, err := res.RowsAffected()
	if err != nil {
		return store.Session{}, fmt.Errorf("claim %q: %w", sid, err)
	}
	row, err := scanSession(tx.QueryRowContext(ctx, `SELECT `+sessionColumns+`, `+lastSeq+` FROM sessions WHERE id = ?`, sid), true)
	switch {
	case errors.Is(err, sql.ErrNoRows) || (err == nil && changed == 0 && row.State == store.StateClosed):
		return store.Session{}, fmt.Errorf("claim %q: %w", sid, store.ErrNotFound)
	case err != nil:
		return store.Session{}, fmt.Errorf("claim %q: %w", sid, err)
	case changed == 0:
		return store.Session{}, fmt.Errorf("claim %q: held by %q: %w", sid, row.Node, store.ErrLeaseHeld)
	}
	if err := tx.Commit(); err != nil {
		return store.Session{}, fmt.Errorf("claim %q: commit: %w", sid, err)
	}
	return row, nil
}

// Renew implements store.Store: one transaction.
func (s *Store) Renew(ctx context.Context, node string, held map[string]uint64, ttl time.Duration, now time.Time) ([]string, error) {
	if now.IsZero() {
		now = time.Now()
	}
	until, err := leaseEnd(node, ttl, now)
	if err != nil {
		return nil, fmt.Errorf("renew: %w", err)
	}
	if err := s.acquire(); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	if len(held) == 0 {
		return nil, ctx.Err()
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("renew: begin: %w", err)
	}
	defer tx.Rollback()
	st, err := tx.PrepareContext(ctx, `UPDATE sessions SET lease_until = ? WHERE id = ? AND node = ? AND epoch = ?`)
	if err != nil {
		return nil, fmt.Errorf("renew: %w", err)
	}
	defer st.Close()
	var lost []string
	for _, id := range slices.Sorted(maps.Keys(held)) {
		epoch, err := toEpoch(held[id])
		if err != nil {
			lost = append(lost, id) // no stored session has it
			continue
		}
		res, err := st.ExecContext(ctx, until, id, node, epoch)
		if err != nil {
			return nil, fmt.Errorf("renew %q: %w", id, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return nil, fmt.Errorf("renew %q: %w", id, err)
		} else if n == 0 {
			lost = append(lost, id)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("renew: commit: %w", err)
	}
	return lost, nil
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, node string) (int, error) {
	if err := s.acquire(); err != nil {
		return 0, err
	}
	defer s.mu.RUnlock()
	res, err := s.w.ExecContext(ctx, `UPDATE sessions SET lease_until = ? WHERE node = ? AND lease_until <> ?`, int64(zeroTime), node, int64(zeroTime))
	if err != nil {
		return 0, fmt.Errorf("release: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("release: %w", err)
	}
	return int(n), nil
}

// Close implements store.Store: it waits for the calls in flight, then
// checkpoints the WAL into the file and closes both pools. Later calls
// return store.ErrClosed; a second Close returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	errR := s.r.Close()
	// The writer closes last: the last connection to go checkpoints and
	// removes the -wal and -shm files.
	_, errCk := s.w.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`)
	errW := s.w.Close()
	if err := errors.Join(errR, errCk, errW); err != nil {
		return fmt.Errorf("close store %s: %w", s.path, err)
	}
	if sidecarSize(s.path+"-wal") <= 0 {
		// The next Open skips quick_check while the file keeps these bytes;
		// without a seal it only takes longer.
		seal(s.path)
	}
	return nil
}
