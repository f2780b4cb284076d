// Package sqlite is the embedded-file backend of store.Store, on
// modernc.org/sqlite (pure Go, no cgo).
//
// Open owns the file from then on: it checks the file before it writes
// anything (a directory, a file it may not write, a file that is not a
// database or is a damaged one, a schema newer than this code), migrates
// the schema with goose (the SQL steps in migrations/sqlite, embedded;
// each step one transaction; a file of the schema before goose, PRAGMA
// user_version 1, is taken up as it is) and returns a *Store whose Close
// checkpoints and releases the file, then seals it (its size and CRC-32C
// in <file>.sealed), so that the next Open of the same bytes skips the
// page-by-page check. Close blocks until the calls in
// flight have returned; after it every method returns store.ErrClosed.
//
// A Store holds two pools on the one file: one writer connection (SQLite
// lets one transaction write at a time; a single connection queues writers
// in Go instead of spinning on busy_timeout) and a few readers, which WAL
// lets run beside the writer. Nothing here logs: every failure is returned.
//
// Several Stores may share one file (two processes, or two in a test):
// each write is one IMMEDIATE transaction, so Claim takes the claimable
// rows and bumps their epochs in one step no other Store interleaves with,
// and Apply checks its epochs in the transaction that writes. Only Open's
// migration wants the file to itself (cmd/dashgate's lease gives it that).
package sqlite
