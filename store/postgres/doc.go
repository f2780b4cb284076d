// Package postgres is the PostgreSQL backend of store.Store, for several
// dashgate nodes that share their sessions, on github.com/jackc/pgx/v5
// (pgxpool). It also implements store.Nodes (a table of heartbeats).
//
// Open parses the URL, connects a pool, and migrates the schema with goose
// (the SQL steps in migrations/postgres, embedded; each step one
// transaction) while it holds a PostgreSQL advisory lock on a dedicated
// connection, so that nodes started together migrate once and the others
// wait for it. A schema newer than this code is refused (ErrNewerSchema).
// The caller owns the *Store; Close blocks until the calls in flight have
// returned and the pool's connections are closed, and every method after
// it returns store.ErrClosed.
//
// Every call runs under a deadline (Options.CallTimeout) on top of the
// caller's context; when it passes, pgx sends PostgreSQL a cancel request
// for the statement (then closes the connection if that did not end it),
// and the call returns an error that is context.DeadlineExceeded.
//
// Concurrency is PostgreSQL's: Apply locks the rows of its sessions (FOR
// UPDATE, in id order) before it checks owners and epochs, so a Claim
// cannot bump an epoch between the check and the write; Claim takes rows
// with FOR UPDATE SKIP LOCKED, so claimers never wait on each other (a
// row another transaction holds at that instant is left for the next
// Claim) and each session goes to one of them.
//
// Search indexes words computed in Go, the same way store/sqlite does
// (runs of Unicode letters and digits, lower-cased), as a tsvector with a
// GIN index, and queries it with a tsquery of the same words, each a
// prefix ('word':*, which the GIN index answers), ANDed: it does
// not depend on the server's locale or text search configuration, and any
// string is a valid query.
//
// PostgreSQL text holds neither NUL nor invalid UTF-8: in the free text of
// a row (titles, entry texts, data, turn ids, ...) Apply stores each as
// U+FFFD rather than fail the batch forever. Ids, owners and nodes are
// written as given.
//
// Nothing here logs but Open, once per migration it applies (INFO). The
// URL's password is never logged nor put in an error; Path describes the
// store without it.
package postgres
