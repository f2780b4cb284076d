// Package cluster is what several dashgate nodes sharing one PostgreSQL
// database need of each other beyond the store: PGBus, a
// sessions.ChangeBus on LISTEN/NOTIFY, so that a session.changed on one
// node reaches the watchers on every other, and an admin's reap of what
// another node holds (sessions.RemoteReap) reaches that node.
//
// Who owns what: NewPGBus opens one dedicated listening connection and a
// one-connection pool for NOTIFY, and starts two goroutines (the listener,
// which reconnects by itself, and the sender); each Subscribe starts one
// more. The caller owns the PGBus and calls Close, which blocks until every
// one of those goroutines has returned and both connections are closed.
// Publish never blocks; a subscription's stop blocks until its function no
// longer runs.
//
// What is lost: NOTIFY is a hint, not a log. Announcements published while
// the listening connection is down (between the WARN "change bus listener
// lost" and the INFO "change bus listener back"), or while PostgreSQL cannot
// be reached for a NOTIFY, or beyond a bounded queue, are not delivered.
// session.changed tolerates that by design: the store stays the truth, and a
// dashboard's next list (session.list) re-reads what a lost hint would have
// told it. A lost reap reaps nothing: the admin page still lists the row,
// and the admin reaps it again.
package cluster
