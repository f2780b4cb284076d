package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dashgate/dashgate/store"
)

// searchWindow is how many of the newest entries Search walks before it
// asks the full-text index: a word in more than limit of them is found
// there at once.
const searchWindow = 1000

// DefaultCallTimeout is Options.CallTimeout's default.
const DefaultCallTimeout = 5 * time.Second

// Options tune a Store; the zero value is the default.
type Options struct {
	// Log receives Open's records (one INFO per migration applied); nil:
	// nothing is logged.
	Log *slog.Logger
	// CallTimeout bounds every call (<= 0: DefaultCallTimeout), on top of
	// the caller's context. Open's migration is bounded by Open's context
	// alone: a step may take longer on a big database.
	CallTimeout time.Duration
	// MaxConns is the most connections the pool opens (<= 0: pgxpool's
	// default, the larger of 4 and the number of CPUs).
	MaxConns int32
}

// Store is a store.Store (and a store.Nodes) kept in a PostgreSQL
// database. Its methods are safe for concurrent use.
type Store struct {
	pool    *pgxpool.Pool
	path    string // the URL without its password
	timeout time.Duration

	mu     sync.RWMutex // shared by every call, exclusive in Close
	closed bool
}

var (
	_ store.Store = (*Store)(nil)
	_ store.Nodes = (*Store)(nil)
)

// Open connects to the database at url (postgres://user:password@host:port/db?...,
// or any other form pgx.ParseConfig takes) and migrates its schema, under
// an advisory lock that makes concurrent Opens of one database migrate it
// once. The caller owns the Store and closes it.
//
// Each error is one line that starts "store <Path>": the URL does not
// parse, the server cannot be reached or refuses the login, ErrNewerSchema,
// or a migration failed. None holds the password.
func Open(ctx context.Context, url string, o Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx's parse error already hides the password.
		return nil, fmt.Errorf("store postgres: %w", deadline(ctx, err))
	}
	path := describe(cfg.ConnConfig)
	if o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
	}
	// A canceled call gets a cancel request to the server, so that the
	// statement stops there too (not only in Go); the connection is closed
	// if the server did not answer within a second.
	cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: time.Second}
	}
	timeout := o.CallTimeout
	if timeout <= 0 {
		timeout = DefaultCallTimeout
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", path, deadline(ctx, err))
	}
	if err := migrate(ctx, pool, cfg.ConnConfig, log.With("store", path)); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store %s: %w", path, deadline(ctx, err))
	}
	return &Store{pool: pool, path: path, timeout: timeout}, nil
}

// describe is the URL of cfg without its password (and without the
// parameters, which may hold one).
func describe(cfg *pgx.ConnConfig) string {
	u := url.URL{Scheme: "postgres", User: url.User(cfg.User), Path: "/" + cfg.Database}
	port := strconv.Itoa(int(cfg.Port))
	if strings.HasPrefix(cfg.Host, "/") {
		u.RawQuery = url.Values{"host": {cfg.Host}, "port": {port}}.Encode()
	} else {
		u.Host = net.JoinHostPort(cfg.Host, port)
	}
	return u.String()
}

// Path describes the store for logs and pages: its URL without the
// password, postgres://user@host:port/database.
func (s *Store) Path() string { return s.path }

// call holds the store open for one call and bounds it by the call
// timeout; release with the returned func.
func (s *Store) call(ctx context.Context) (context.Context, func(), error) {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, nil, store.ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	return ctx, func() { cancel(); s.mu.RUnlock() }, nil
}

// deadline is err with ctx's error in front when ctx ended: a statement
// canceled for the call's deadline fails with the server's "canceling
// statement due to user request", which says nothing of the deadline.
func deadline(ctx context.Context, err error) error {
	if cerr := ctx.Err(); err != nil && cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w: %w", cerr, err)
	}
	return err
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

// toInt64 is a seq or an epoch as stored (bigint is signed).
func toInt64(what string, v uint64) (int64, error) {
	if v > math.MaxInt64 {
		return 0, fmt.Errorf("%s %d out of range", what, v)
	}
	return int64(v), nil
}

// text is s as PostgreSQL text can hold it: NUL and invalid UTF-8 become
// U+FFFD.
func text(s string) string {
	if strings.IndexByte(s, 0) < 0 && utf8.ValidString(s) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

const sessionColumns = `id, owner, title, created_at, last_active, state, end_reason, closed_at, model, node, lease_until, epoch, agent, agent_session`

// lastSeq is the column expression of a session's highest entry seq (the
// (session_id, seq) index answers it with one seek).
const lastSeq = `COALESCE((SELECT max(seq) FROM entries WHERE session_id = sessions.id), 0)`

// scanSession reads sessionColumns and lastSeq.
func scanSession(row pgx.Row) (store.Session, error) {
	var s store.Session
	var created, active, closed, lease, epoch, last int64
	if err := row.Scan(&s.ID, &s.Owner, &s.Title, &created, &active, &s.State, &s.EndReason, &closed, &s.Model,
		&s.Node, &lease, &epoch, &s.Agent, &s.AgentSession, &last); err != nil {
		return store.Session{}, err
	}
	s.CreatedAt, s.LastActive, s.ClosedAt = fromNanos(created), fromNanos(active), fromNanos(closed)
	s.LastSeq, s.LeaseUntil, s.Epoch = uint64(last), fromNanos(lease), uint64(epoch)
	return s, nil
}

// Apply implements store.Store: one transaction, which locks the stored
// rows of b's sessions before it checks them.
func (s *Store) Apply(ctx context.Context, b store.Batch) error {
	ctx, done, err := s.call(ctx)
	if err != nil {
		return err
	}
	defer done()
	if b.Empty() {
		return ctx.Err()
	}
	if err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return applyTx(ctx, tx, b) }); err != nil {
		return fmt.Errorf("apply: %w", deadline(ctx, err))
	}
	return nil
}

func applyTx(ctx context.Context, tx pgx.Tx, b store.Batch) error {
	if err := checkBatch(ctx, tx, b); err != nil {
		return err
	}
	var q pgx.Batch
	type check struct {
		what string
		one  bool // the statement must affect one row
	}
	var checks []check
	for _, ss := range b.Sessions {
		var t [4]int64
		var err error
		for i, v := range []time.Time{ss.CreatedAt, ss.LastActive, ss.ClosedAt, ss.LeaseUntil} {
			if t[i], err = toNanos(v); err != nil {
				return fmt.Errorf("session %q: %w", ss.ID, deadline(ctx, err))
			}
		}
		epoch, err := toInt64("epoch", ss.Epoch)
		if err != nil {
			return fmt.Errorf("session %q: %w", ss.ID, deadline(ctx, err))
		}
		// The owner, and once stored the lease, are not the row's to
		// change; the WHERE refuses a row another transaction created
		// under another owner since checkBatch looked.
		q.Queue(`INSERT INTO sessions (`+sessionColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
ON CONFLICT (id) DO UPDATE SET title = excluded.title, created_at = excluded.created_at,
	last_active = excluded.last_active, state = excluded.state, end_reason = excluded.end_reason,
	closed_at = excluded.closed_at, model = excluded.model, agent = excluded.agent, agent_session = excluded.agent_session
WHERE sessions.owner = excluded.owner`,
			ss.ID, ss.Owner, text(ss.Title), t[0], t[1], text(ss.State), text(ss.EndReason), t[2], text(ss.Model), ss.Node, t[3], epoch, text(ss.Agent), text(ss.AgentSession))
		checks = append(checks, check{fmt.Sprintf("session %q", ss.ID), true})
	}
	for _, e := range b.Entries {
		seq, err := toInt64("seq", e.Seq)
		if err != nil {
			return fmt.Errorf("entry of session %q: %w", e.SessionID, deadline(ctx, err))
		}
		at, err := toNanos(e.At)
		if err != nil {
			return fmt.Errorf("entry %d of session %q: %w", e.Seq, e.SessionID, deadline(ctx, err))
		}
		var in, out *int64
		if e.Usage != nil {
			i, o := int64(e.Usage.InputTokens), int64(e.Usage.OutputTokens)
			in, out = &i, &o
		}
		body := text(e.Text)
		refs, err := attachmentsColumn(e.Attachments)
		if err != nil {
			return fmt.Errorf("entry %d of session %q: %w", e.Seq, e.SessionID, deadline(ctx, err))
		}
		// The words of its attachments' names too: search finds a
		// prompt by the files it carried.
		q.Queue(`INSERT INTO entries
	(session_id, seq, role, kind, text, at, turn_id, interrupted, input_tokens, output_tokens, code, status, data, words, attachments)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, array_to_tsvector($14::text[]), $15)
ON CONFLICT (session_id, seq) DO UPDATE SET role = excluded.role, kind = excluded.kind, text = excluded.text,
	at = excluded.at, turn_id = excluded.turn_id, interrupted = excluded.interrupted,
	input_tokens = excluded.input_tokens, output_tokens = excluded.output_tokens, code = excluded.code,
	status = excluded.status, data = excluded.data, words = excluded.words, attachments = excluded.attachments`,
			e.SessionID, seq, text(e.Role), text(e.Kind), body, at, text(e.TurnID), e.Interrupted, in, out, int64(e.Code),
			text(e.Status), text(string(e.Data)), indexWords(text(e.SearchText())), text(refs))
		checks = append(checks, check{fmt.Sprintf("entry %d of session %q", e.Seq, e.SessionID), false})
	}
	if len(b.Deletes) > 0 {
		// Entries go by ON DELETE CASCADE.
		q.Queue(`DELETE FROM sessions WHERE id = ANY($1)`, b.Deletes)
		checks = append(checks, check{"delete", false})
	}
	br := tx.SendBatch(ctx, &q)
	for _, c := range checks {
		tag, err := br.Exec()
		if err != nil {
			br.Close()
			return fmt.Errorf("%s: %w", c.what, deadline(ctx, err))
		}
		if c.one && tag.RowsAffected() != 1 {
			br.Close()
			return fmt.Errorf("%s: %w", c.what, store.ErrOtherOwner)
		}
	}
	return br.Close()
}

// checkBatch reads the stored owner and epoch of b's sessions in tx and
// makes store.CheckBatch's decision on them, before anything is written.
// It locks the stored rows (FOR UPDATE, in id order, so two batches never
// deadlock) until tx ends.
func checkBatch(ctx context.Context, tx pgx.Tx, b store.Batch) error {
	ids := b.FenceIDs()
	if len(ids) == 0 {
		return nil
	}
	stored := make(map[string]store.Fence, len(ids))
	rows, err := tx.Query(ctx, `SELECT id, owner, epoch FROM sessions WHERE id = ANY($1) ORDER BY id FOR UPDATE`, ids)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id string
		var f store.Fence
		var epoch int64
		if err := rows.Scan(&id, &f.Owner, &epoch); err != nil {
			rows.Close()
			return err
		}
		f.Epoch = uint64(epoch)
		stored[id] = f
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	return store.CheckBatch(b, stored)
}

func (s *Store) Restorable(ctx context.Context) ([]store.Session, error) {
	return s.sessions(ctx, "restorable", `SELECT `+sessionColumns+`, `+lastSeq+` FROM sessions WHERE state <> 'closed'`)
}

// RestorableFor implements store.Store.
func (s *Store) RestorableFor(ctx context.Context, owner string) ([]store.Session, error) {
	return s.sessions(ctx, "restorable", `SELECT `+sessionColumns+`, `+lastSeq+` FROM sessions WHERE state <> 'closed' AND owner = $1`, owner)
}

// sessions reads the sessions query selects (sessionColumns and lastSeq);
// what names the call in errors.
func (s *Store) sessions(ctx context.Context, what, query string, args ...any) ([]store.Session, error) {
	ctx, done, err := s.call(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	return querySessions(ctx, s.pool, what, query, args...)
}

func querySessions(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, what, query string, args ...any) ([]store.Session, error) {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, deadline(ctx, err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Session, error) { return scanSession(r) })
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, deadline(ctx, err))
	}
	if len(out) == 0 {
		out = nil
	}
	return out, nil
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, owner, id string) (store.Session, error) {
	ctx, done, err := s.call(ctx)
	if err != nil {
		return store.Session{}, err
	}
	defer done()
	ss, err := scanSession(s.pool.QueryRow(ctx, `SELECT `+sessionColumns+`, `+lastSeq+` FROM sessions WHERE id = $1 AND owner = $2`, id, owner))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Session{}, fmt.Errorf("get %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Session{}, fmt.Errorf("get %q: %w", id, deadline(ctx, err))
	}
	return ss, nil
}

// Closed implements store.Store. Sessions closed at the same instant come
// in descending id order.
func (s *Store) Closed(ctx context.Context, q store.ListQuery) ([]store.Session, bool, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = 50
	}
	before := int64(math.MaxInt64)
	if !q.Before.IsZero() {
		var err error
		if before, err = toNanos(q.Before); err != nil {
			return nil, false, fmt.Errorf("closed: %w", deadline(ctx, err))
		}
	}
	out, err := s.sessions(ctx, "closed", `SELECT `+sessionColumns+`, `+lastSeq+` FROM sessions
WHERE state = 'closed' AND owner = $1 AND closed_at < $2
ORDER BY closed_at DESC, id DESC LIMIT $3`, q.Owner, before, limit+1)
	if err != nil {
		return nil, false, err
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

const entryColumns = `seq, role, kind, text, at, turn_id, interrupted, input_tokens, output_tokens, code, status, data, attachments`

// history reads sid's entries when owner owns sid.
func (s *Store) history(ctx context.Context, owner, sid string, beforeSeq uint64, limit int) ([]store.Entry, bool, error) {
	ctx, done, err := s.call(ctx)
	if err != nil {
		return nil, false, err
	}
	defer done()
	limit = max(limit, 0)
	before := int64(math.MaxInt64)
	if beforeSeq > 0 && beforeSeq <= math.MaxInt64 {
		before = int64(beforeSeq)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+entryColumns+` FROM entries
WHERE session_id = $1 AND seq < $2 AND EXISTS (SELECT 1 FROM sessions WHERE id = entries.session_id AND owner = $3)
ORDER BY seq DESC LIMIT $4`, sid, before, owner, limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("history %q: %w", sid, deadline(ctx, err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Entry, error) {
		var e store.Entry
		var seq, at, code int64
		var in, outTok *int64
		var data, refs string
		if err := r.Scan(&seq, &e.Role, &e.Kind, &e.Text, &at, &e.TurnID, &e.Interrupted, &in, &outTok, &code, &e.Status, &data, &refs); err != nil {
			return e, err
		}
		if data != "" {
			e.Data = []byte(data)
		}
		if refs != "" {
			if err := json.Unmarshal([]byte(refs), &e.Attachments); err != nil {
				return e, fmt.Errorf("entry %d's attachments: %w", seq, err)
			}
		}
		e.Seq, e.At, e.Code = uint64(seq), fromNanos(at), int(code)
		if in != nil || outTok != nil {
			e.Usage = &store.Usage{}
			if in != nil {
				e.Usage.InputTokens = int(*in)
			}
			if outTok != nil {
				e.Usage.OutputTokens = int(*outTok)
			}
		}
		return e, nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("history %q: %w", sid, deadline(ctx, err))
	}
	more := len(out) > limit
	if more {
		out = out[:limit]
	}
	// Read newest first to stop at limit; returned oldest first.
	slices.Reverse(out)
	if len(out) == 0 {
		out = nil
	}
	return out, more, nil
}

// Search implements store.Store: the entries that hold, for every word of
// query, a word it is a prefix of (case-folded), newest written first (a
// rewritten checkpoint keeps its place). The snippet is about 14 words of
// plain text around the first word that matched, "…" where it was cut, as
// store/sqlite's.
func (s *Store) Search(ctx context.Context, owner, query string, limit int) ([]store.Hit, error) {
	ctx, done, err := s.call(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	words, ok := queryWords(query)
	if !ok || limit <= 0 {
		return nil, ctx.Err()
	}
	q := tsQuery(words)
	// First the newest searchWindow entries, walked newest first: a
	// common word has limit hits among them. Short of limit, all of them
	// from the GIN index (the only plan left with seqscan and indexscan
	// off, for the batch's implicit transaction), then sorted: a rare word,
	// or one no entry has, costs an index probe. The planner alone, seeing
	// a word its statistics do not know, may walk every entry (800 ms over
	// 500,000) or read every match of a common one from the index (60 ms).
	rows, err := s.pool.Query(ctx, `SELECT e.session_id, s.title, e.seq, e.kind, e.at, e.text, e.attachments
FROM (SELECT id, session_id, seq, kind, at, text, attachments, words FROM entries ORDER BY id DESC LIMIT $4) e
JOIN sessions s ON s.id = e.session_id
WHERE e.words @@ $1::tsquery AND s.owner = $2
ORDER BY e.id DESC LIMIT $3`, q, owner, limit, searchWindow)
	if err != nil {
		return nil, fmt.Errorf("search: %w", deadline(ctx, err))
	}
	hits, err := collectHits(rows, words)
	if err != nil || len(hits) == limit {
		return hits, deadline(ctx, err)
	}
	var matched []int64
	var qb pgx.Batch
	qb.Queue(`SELECT set_config('enable_seqscan', 'off', true), set_config('enable_indexscan', 'off', true)`).Exec(func(pgconn.CommandTag) error { return nil })
	qb.Queue(`SELECT COALESCE(array_agg(id), '{}') FROM entries WHERE words @@ $1::tsquery`, q).QueryRow(func(r pgx.Row) error { return r.Scan(&matched) })
	if err := s.pool.SendBatch(ctx, &qb).Close(); err != nil {
		return nil, fmt.Errorf("search: %w", deadline(ctx, err))
	}
	if len(matched) == 0 {
		return nil, nil
	}
	rows, err = s.pool.Query(ctx, `SELECT e.session_id, s.title, e.seq, e.kind, e.at, e.text, e.attachments
FROM entries e JOIN sessions s ON s.id = e.session_id
WHERE e.id = ANY($1) AND s.owner = $2
ORDER BY e.id DESC LIMIT $3`, matched, owner, limit)
	if err != nil {
		return nil, fmt.Errorf("search: %w", deadline(ctx, err))
	}
	hits, err = collectHits(rows, words)
	return hits, deadline(ctx, err)
}

// collectHits reads Search's rows.
func collectHits(rows pgx.Rows, words []string) ([]store.Hit, error) {
	hits, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Hit, error) {
		var h store.Hit
		var seq, at int64
		var e store.Entry
		var refs string
		if err := r.Scan(&h.SessionID, &h.Title, &seq, &h.Kind, &at, &e.Text, &refs); err != nil {
			return h, err
		}
		if refs != "" {
			json.Unmarshal([]byte(refs), &e.Attachments) // a snippet without the names at worst
		}
		h.Seq, h.At, h.Snippet = uint64(seq), fromNanos(at), snippet(e.SearchText(), words, snippetWords)
		return h, nil
	})
	if err != nil {
		return nil, fmt.Errorf("search: %w", err)
	}
	if len(hits) == 0 {
		hits = nil
	}
	return hits, nil
}

// Delete implements store.Store.
func (s *Store) Delete(ctx context.Context, owner, id string) (bool, error) {
	n, err := s.exec(ctx, fmt.Sprintf("delete %q", id), `DELETE FROM sessions WHERE id = $1 AND owner = $2`, id, owner)
	return n > 0, err
}

// Prune implements store.Store.
func (s *Store) Prune(ctx context.Context, cutoff time.Time) (int, error) {
	c, err := toNanos(cutoff)
	if err != nil {
		return 0, fmt.Errorf("prune: %w", deadline(ctx, err))
	}
	n, err := s.exec(ctx, "prune", `DELETE FROM sessions WHERE state = 'closed' AND closed_at < $1`, c)
	return int(n), err
}

// Rename implements store.Store: one UPDATE of the title.
func (s *Store) Rename(ctx context.Context, owner, id, title string) (bool, error) {
	n, err := s.exec(ctx, fmt.Sprintf("rename %q", id), `UPDATE sessions SET title = $1 WHERE id = $2 AND owner = $3`, text(title), id, owner)
	return n > 0, err
}

// exec runs one statement and returns how many rows it changed.
func (s *Store) exec(ctx context.Context, what, sql string, args ...any) (int64, error) {
	ctx, done, err := s.call(ctx)
	if err != nil {
		return 0, err
	}
	defer done()
	tag, err := s.pool.Exec(ctx, sql, args...)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, deadline(ctx, err))
	}
	return tag.RowsAffected(), nil
}

// leaseArgs checks node and ttl and returns what a lease statement
// takes: ttl in nanoseconds and now as stored, nil for the zero time,
// which the statement reads as dbNow: the database's clock, one for every
// node (see store.Store.Claim).
func leaseArgs(node string, ttl time.Duration, now time.Time) (int64, *int64, error) {
	if node == "" {
		return 0, nil, errors.New("empty node name")
	}
	if ttl <= 0 {
		return 0, nil, fmt.Errorf("ttl %v is not positive", ttl)
	}
	if now.IsZero() {
		return int64(ttl), nil, nil
	}
	n, err := toNanos(now)
	if err != nil {
		return 0, nil, err
	}
	return int64(ttl), &n, nil
}

// dbNow is the database's clock as stored (nanoseconds; now() counts
// microseconds), the transaction's start.
const dbNow = `((extract(epoch FROM now()) * 1000000)::bigint * 1000)`

// leaseNow is the time a lease statement judges by: its parameter p
// (leaseArgs' now), or dbNow when that is NULL.
func leaseNow(p string) string { return `COALESCE(` + p + `::bigint, ` + dbNow + `)` }

// Claim implements store.Store: one statement, which locks the claimable
// rows with FOR UPDATE SKIP LOCKED (a row another transaction holds is
// left to the next Claim), bumps their epochs and returns them.
func (s *Store) Claim(ctx context.Context, node string, ttl time.Duration, now time.Time) ([]store.Session, error) {
	d, n, err := leaseArgs(node, ttl, now)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", deadline(ctx, err))
	}
	return s.sessions(ctx, "claim", `UPDATE sessions SET node = $1, lease_until = `+leaseNow("$3")+` + $2, epoch = epoch + 1
WHERE id IN (
	SELECT id FROM sessions
	WHERE state <> 'closed' AND (node = '' OR node = $1 OR lease_until <= `+leaseNow("$3")+`)
	FOR UPDATE SKIP LOCKED)
RETURNING `+sessionColumns+`, `+lastSeq, node, d, n)
}

// ClaimSession implements store.Store: one UPDATE of the row when it is
// claimable (a claimer that waited for another's lock sees the row as the
// other left it: held), then, when it was not, a read of the row to tell
// a closed or unknown session (store.ErrNotFound) from one another node
// holds (store.ErrLeaseHeld).
func (s *Store) ClaimSession(ctx context.Context, node, sid string, ttl time.Duration, now time.Time) (store.Session, error) {
	d, n, err := leaseArgs(node, ttl, now)
	if err != nil {
		return store.Session{}, fmt.Errorf("claim %q: %w", sid, deadline(ctx, err))
	}
	ctx, done, err := s.call(ctx)
	if err != nil {
		return store.Session{}, err
	}
	defer done()
	row, err := scanSession(s.pool.QueryRow(ctx, `UPDATE sessions SET node = $2, lease_until = `+leaseNow("$4")+` + $3, epoch = epoch + 1
WHERE id = $1 AND (node = '' OR node = $2 OR lease_until <= `+leaseNow("$4")+`) AND state <> 'closed'
RETURNING `+sessionColumns+`, `+lastSeq, sid, node, d, n))
	if err == nil {
		return row, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return store.Session{}, fmt.Errorf("claim %q: %w", sid, deadline(ctx, err))
	}
	var holder, state string
	err = s.pool.QueryRow(ctx, `SELECT node, state FROM sessions WHERE id = $1`, sid).Scan(&holder, &state)
	switch {
	case errors.Is(err, pgx.ErrNoRows) || (err == nil && state == store.StateClosed):
		return store.Session{}, fmt.Errorf("claim %q: %w", sid, store.ErrNotFound)
	case err != nil:
		return store.Session{}, fmt.Errorf("claim %q: %w", sid, deadline(ctx, err))
	}
	return store.Session{}, fmt.Errorf("claim %q: held by %q: %w", sid, holder, store.ErrLeaseHeld)
}

// Renew implements store.Store: one statement, which locks node's rows of
// held in id order.
func (s *Store) Renew(ctx context.Context, node string, held map[string]uint64, ttl time.Duration, now time.Time) ([]string, error) {
	d, n, err := leaseArgs(node, ttl, now)
	if err != nil {
		return nil, fmt.Errorf("renew: %w", deadline(ctx, err))
	}
	ctx, done, err := s.call(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if len(held) == 0 {
		return nil, ctx.Err()
	}
	ids := make([]string, 0, len(held))
	epochs := make([]int64, 0, len(held))
	for id, e := range held {
		if e <= math.MaxInt64 { // a larger one no stored session has: lost
			ids, epochs = append(ids, id), append(epochs, int64(e))
		}
	}
	rows, err := s.pool.Query(ctx, `WITH held AS (
	SELECT s.id FROM sessions s JOIN unnest($2::text[], $3::bigint[]) AS h (id, epoch) ON s.id = h.id
	WHERE s.node = $1 AND s.epoch = h.epoch
	ORDER BY s.id FOR UPDATE OF s)
UPDATE sessions SET lease_until = `+leaseNow("$5")+` + $4 WHERE id IN (SELECT id FROM held) RETURNING id`, node, ids, epochs, d, n)
	if err != nil {
		return nil, fmt.Errorf("renew: %w", deadline(ctx, err))
	}
	renewed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("renew: %w", deadline(ctx, err))
	}
	kept := make(map[string]bool, len(renewed))
	for _, id := range renewed {
		kept[id] = true
	}
	var lost []string
	for id := range held {
		if !kept[id] {
			lost = append(lost, id)
		}
	}
	slices.Sort(lost)
	return lost, nil
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, node string) (int, error) {
	n, err := s.exec(ctx, "release", `UPDATE sessions SET lease_until = $1 WHERE node = $2 AND lease_until <> $1`, int64(zeroTime), node)
	return int(n), err
}

// Heartbeat implements store.Nodes: one upsert of node's row, its load
// with it (the list as jsonb, cut to store.MaxNodeWorkers).
func (s *Store) Heartbeat(ctx context.Context, node, addr string, load store.NodeLoad, now time.Time) error {
	if node == "" {
		return errors.New("heartbeat: empty node name")
	}
	n, err := toNanos(now)
	if err != nil {
		return fmt.Errorf("heartbeat: %w", deadline(ctx, err))
	}
	list := load.List
	if len(list) > store.MaxNodeWorkers {
		list = list[:store.MaxNodeWorkers]
	}
	kept := make([]store.NodeWorker, len(list))
	for i, w := range list {
		w.SessionID, w.User, w.Kind = text(w.SessionID), text(w.User), text(w.Kind)
		w.StartedAt = w.StartedAt.UTC()
		kept[i] = w
	}
	js, err := json.Marshal(kept)
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	_, err = s.exec(ctx, "heartbeat", `INSERT INTO nodes (id, addr, last_seen, sessions, workers, worker_list) VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (id) DO UPDATE SET addr = excluded.addr, last_seen = excluded.last_seen,
	sessions = excluded.sessions, workers = excluded.workers, worker_list = excluded.worker_list
WHERE nodes.last_seen <= excluded.last_seen`, node, text(addr), n, load.Sessions, load.Workers, string(js))
	return err
}

// ClusterSecret implements store.ClusterSecrets: one statement that
// inserts candidate unless name is there and returns the stored secret
// (again when a concurrent insert won, see below).
func (s *Store) ClusterSecret(ctx context.Context, name string, candidate []byte) ([]byte, error) {
	if name == "" || len(candidate) == 0 {
		return nil, errors.New("cluster secret: a name and a candidate are required")
	}
	ctx, done, err := s.call(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	// A node whose insert waited for another's commit sees neither row in
	// this statement's snapshot (no rows): the next one sees the winner's.
	for {
		var secret []byte
		err = s.pool.QueryRow(ctx, `WITH ins AS (
	INSERT INTO cluster_secrets (name, secret) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING RETURNING secret
)
SELECT secret FROM ins UNION ALL SELECT secret FROM cluster_secrets WHERE name = $1 LIMIT 1`, name, candidate).Scan(&secret)
		switch {
		case errors.Is(err, pgx.ErrNoRows) && ctx.Err() == nil:
			continue
		case err != nil:
			return nil, fmt.Errorf("cluster secret %q: %w", name, deadline(ctx, err))
		}
		return secret, nil
	}
}

// Nodes implements store.Nodes.
func (s *Store) Nodes(ctx context.Context, now time.Time, expiry time.Duration) ([]store.Node, error) {
	if expiry <= 0 {
		return nil, fmt.Errorf("nodes: expiry %v is not positive", expiry)
	}
	ctx, done, err := s.call(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	rows, err := s.pool.Query(ctx, `SELECT id, addr, last_seen, sessions, workers, worker_list::text FROM nodes ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("nodes: %w", deadline(ctx, err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Node, error) {
		var n store.Node
		var seen int64
		var list string
		if err := r.Scan(&n.ID, &n.Addr, &seen, &n.Load.Sessions, &n.Load.Workers, &list); err != nil {
			return n, err
		}
		if err := json.Unmarshal([]byte(list), &n.Load.List); err != nil {
			return n, fmt.Errorf("node %q worker list: %w", n.ID, err)
		}
		if len(n.Load.List) == 0 {
			n.Load.List = nil
		}
		n.LastSeen = fromNanos(seen)
		n.Live = n.LastSeen.Add(expiry).After(now)
		return n, nil
	})
	if err != nil {
		return nil, fmt.Errorf("nodes: %w", deadline(ctx, err))
	}
	if len(out) == 0 {
		out = nil
	}
	return out, nil
}

// Close implements store.Store: it waits for the calls in flight, then
// closes the pool's connections. Later calls return store.ErrClosed; a
// second Close returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.pool.Close()
	return nil
}
