package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dashgate/dashgate/sessions"
)

// Channel is the LISTEN/NOTIFY channel every PGBus of a database shares.
const Channel = "dashgate_changes"

// MaxPayload is the most bytes of JSON one NOTIFY carries (PostgreSQL's
// limit is 8,000 bytes, less in some builds): an announcement whose
// encoding is longer goes as a hint, with only its ids (see Payload).
const MaxPayload = 7900

// sendQueue bounds what Publish holds unsent; beyond it announcements are
// dropped (and counted, see Dropped). A subscription holds what
// sessions.MemoryBus does (the local fan-out) and drops beyond it, counted
// too.
const sendQueue = 1024

// Reconnection backoff of the listening connection: the first attempt
// after a loss waits backoffMin, each failed one doubles the wait up to
// backoffMax.
const (
	backoffMin = 100 * time.Millisecond
	backoffMax = 5 * time.Second
)

// Bounds of the calls to PostgreSQL: connecting (and LISTEN) and one
// NOTIFY, on top of the bus's own life.
const (
	connectTimeout = 10 * time.Second
	notifyTimeout  = 5 * time.Second
)

// listenerAppName is the application_name of the listening connection
// (pg_stat_activity), unless the URL sets one.
const listenerAppName = "dashgate change bus"

// Payload is the JSON of one NOTIFY on Channel:
//
//	{"origin":"<registry id>","owner":"alice","change":{"session_id":"…","state":"attached","title":"…"}}
//
// When that is longer than MaxPayload, the NOTIFY is a hint instead:
//
//	{"origin":"…","owner":"alice","change":{"session_id":"…","state":"attached","title":""},"hint":true}
//
// with only the ids (origin, owner, the session id and its state, the
// change's kind). A receiver treats a hint as "re-read this session": the
// Announcement it is delivered as has an empty Title and EndReason, and a
// watcher's next list (session.list) gives the session as it is.
//
// An admin's reap forwarded to another node (sessions.RemoteReap) has
// reap, and an empty owner and change:
//
//	{"origin":"…","owner":"","change":{"session_id":"","state":"","title":""},"reap":{"node":"web-1","from":"web-2","pid":4242,"by":"carol"}}
//
// with session_id instead of pid for a session. Its hint is itself (it
// has only ids): one longer than MaxPayload is not sent.
type Payload struct {
	Origin string               `json:"origin"`
	Owner  string               `json:"owner"`
	Change sessions.Change      `json:"change"`
	Hint   bool                 `json:"hint,omitempty"`
	Reap   *sessions.RemoteReap `json:"reap,omitempty"`
}

// encode is a's NOTIFY payload: whole, or the hint when whole is longer
// than MaxPayload; an error when even the hint is (an owner or session id
// of kilobytes, or a reap's: its hint is itself, ids only).
func encode(a sessions.Announcement) ([]byte, error) {
	p := Payload{Origin: a.Origin, Owner: a.Owner, Change: a.Change, Reap: a.Reap}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	if len(b) <= MaxPayload {
		return b, nil
	}
	p.Hint = true
	p.Change = sessions.Change{SessionID: a.Change.SessionID, State: a.Change.State}
	if b, err = json.Marshal(p); err != nil {
		return nil, err
	}
	if len(b) > MaxPayload {
		return nil, fmt.Errorf("announcement of %d bytes even as a hint, over %d", len(b), MaxPayload)
	}
	return b, nil
}

// PGBus is a sessions.ChangeBus on PostgreSQL's LISTEN/NOTIFY: every PGBus
// on one database (one per node) hears every announcement published on
// any of them, its own included, as sessions.MemoryBus does (a
// sessions.Registry skips its own by Announcement.Origin). Delivery is a
// hint: see the package doc for what is lost. Its methods are safe for
// concurrent use.
type PGBus struct {
	log     *slog.Logger
	connCfg *pgx.ConnConfig // of the listening connection
	pool    *pgxpool.Pool   // one connection, for NOTIFY
	out     chan sessions.Announcement

	ctx    context.Context // done at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the listener and the sender

	// local delivers what the listener hears to this bus's subscribers:
	// the same fan-out as the registries of one process.
	local sessions.MemoryBus

	dropped atomic.Uint64
	once    sync.Once
}

// NewPGBus connects to the database at url (postgres://user:password@host:port/db?…,
// or any form pgx.ParseConfig takes) and LISTENs on Channel before it
// returns: an announcement published anywhere afterwards reaches its
// subscribers. ctx bounds the connection only, not the bus's life. log
// (nil: nothing is logged) gets one WARN when the listening connection is
// lost and one INFO when it is back; no record holds the password.
//
// Errors: the URL does not parse, or the server cannot be reached, refuses
// the login or the LISTEN. The caller owns the PGBus and Closes it.
func NewPGBus(ctx context.Context, url string, log *slog.Logger) (*PGBus, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	connCfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("change bus: %w", err) // pgx's parse error hides the password
	}
	if _, ok := connCfg.RuntimeParams["application_name"]; !ok {
		connCfg.RuntimeParams["application_name"] = listenerAppName
	}
	poolCfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("change bus: %w", err)
	}
	poolCfg.MaxConns = 1 // NOTIFYs go one at a time, in order
	log = log.With("channel", Channel, "db", describe(connCfg))
	conn, err := listen(ctx, connCfg)
	if err != nil {
		return nil, fmt.Errorf("change bus %s: %w", describe(connCfg), err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		closeConn(conn)
		return nil, fmt.Errorf("change bus %s: %w", describe(connCfg), err)
	}
	b := &PGBus{log: log, connCfg: connCfg, pool: pool, out: make(chan sessions.Announcement, sendQueue)}
	b.local.OnDrop = func() { b.dropped.Add(1) }
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.wg.Add(2)
	go func() { defer b.wg.Done(); b.listenLoop(conn) }()
	go func() { defer b.wg.Done(); b.sendLoop() }()
	return b, nil
}

// describe is host:port/db of cfg, for records and errors (no password).
func describe(cfg *pgx.ConnConfig) string {
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))) + "/" + cfg.Database
}

// listen connects with cfg and LISTENs on Channel, within connectTimeout.
func listen(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{Channel}.Sanitize()); err != nil {
		closeConn(conn)
		return nil, fmt.Errorf("listen: %w", err)
	}
	return conn, nil
}

// closeConn closes conn, bounded: a server that does not answer the
// goodbye costs at most a second.
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn.Close(ctx)
}

// listenLoop delivers the notifications of conn until Close, reconnecting
// after a loss; it closes the connection it holds when it returns.
func (b *PGBus) listenLoop(conn *pgx.Conn) {
	for {
		n, err := conn.WaitForNotification(b.ctx)
		if err == nil {
			b.dispatch(n.Payload)
			continue
		}
		closeConn(conn)
		if b.ctx.Err() != nil {
			return
		}
		lost := time.Now()
		b.log.Warn("change bus listener lost", "err", err)
		if conn = b.reconnect(); conn == nil {
			return // closed while reconnecting
		}
		b.log.Info("change bus listener back", "duration_ms", time.Since(lost).Milliseconds())
	}
}

// reconnect listens again, waiting backoffMin before the first attempt
// and twice as long after each failure, up to backoffMax. It returns nil
// once the bus is closed.
func (b *PGBus) reconnect() *pgx.Conn {
	wait := backoffMin
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return nil
		case <-t.C:
		}
		conn, err := listen(b.ctx, b.connCfg)
		if err == nil {
			return conn
		}
		if b.ctx.Err() != nil {
			return nil
		}
		wait = min(2*wait, backoffMax)
		b.log.Debug("change bus listener still down", "err", err, "retry_ms", wait.Milliseconds())
		t.Reset(wait)
	}
}

// dispatch decodes one notification and queues it for every subscription.
func (b *PGBus) dispatch(payload string) {
	var p Payload
	if err := json.Unmarshal([]byte(payload), &p); err != nil {
		b.log.Warn("change bus payload not understood", "err", err, "bytes", len(payload))
		return
	}
	b.local.Publish(sessions.Announcement{Origin: p.Origin, Owner: p.Owner, Change: p.Change, Reap: p.Reap})
}

// sendLoop NOTIFYs what Publish queued, one at a time, until Close. A
// NOTIFY that fails is lost: one WARN when they start failing, one INFO
// when one goes through again.
func (b *PGBus) sendLoop() {
	failing := false
	for {
		var a sessions.Announcement
		select {
		case <-b.ctx.Done():
			return
		case a = <-b.out:
		}
		payload, err := encode(a)
		if err != nil {
			b.dropped.Add(1)
			b.log.Warn("change bus announcement not sent", "sid", a.Change.SessionID, "err", err)
			continue
		}
		ctx, cancel := context.WithTimeout(b.ctx, notifyTimeout)
		_, err = b.pool.Exec(ctx, "SELECT pg_notify($1, $2)", Channel, string(payload))
		cancel()
		switch {
		case err != nil && b.ctx.Err() != nil:
			return
		case err != nil:
			b.dropped.Add(1)
			if !failing {
				failing = true
				b.log.Warn("change bus notify failed", "err", err)
			}
		case failing:
			failing = false
			b.log.Info("change bus notify back")
		}
	}
}

// Publish queues a for NOTIFY on Channel and returns at once (it runs under
// the publishing registry's lock): the encoding and the NOTIFY happen on
// the bus's sender, in the order of the Publish calls. Beyond sendQueue
// unsent announcements a is dropped (counted); after Close it is never sent.
func (b *PGBus) Publish(a sessions.Announcement) {
	select {
	case b.out <- a:
	default:
		b.dropped.Add(1)
	}
}

// Subscribe calls f, on a goroutine of its own and one call at a time, in
// the order PostgreSQL delivered them, for every announcement heard after
// it (its own bus's included), until stop, which returns once f no longer
// runs. Each subscription holds what a sessions.MemoryBus one does;
// beyond, new ones are dropped for it. After Close, f is never called.
func (b *PGBus) Subscribe(f func(sessions.Announcement)) (stop func()) {
	return b.local.Subscribe(f)
}

// Dropped is how many announcements this bus lost so far: published beyond
// its send queue, too large even as a hint, NOTIFYs that failed, and
// deliveries beyond a subscription's queue (one per subscription).
func (b *PGBus) Dropped() uint64 { return b.dropped.Load() }

// Close stops the bus: it blocks until the listener, the sender and every
// subscription's goroutine have returned and both connections are closed.
// Announcements not yet sent or delivered are lost. It is idempotent and
// returns nil; a stop func of a subscription still works after it.
func (b *PGBus) Close() error {
	b.once.Do(func() {
		b.cancel()
		b.wg.Wait()
		b.pool.Close()
		b.local.Close()
	})
	return nil
}

var _ sessions.ChangeBus = (*PGBus)(nil)
