// Package users is the users of --users-file: who may log in to a
// multi-user dashgate with a token of their own.
//
// # The file
//
// One user a line, NAME:HASH, where NAME matches
// ^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$ and HASH is the bcrypt hash
// (golang.org/x/crypto/bcrypt, $2a$/$2b$/$2y$, 60 characters) of the
// user's SECRET. Lines starting with '#' (after blanks) are comments;
// blank lines are allowed; a trailing '\r' is ignored. Any other line is an
// error naming its line number and what is wrong (the line itself is
// never echoed: it may hold a hash or a pasted token). The file must be a
// regular file of the effective uid that no group or other can write, and
// not a symlink: whoever can write it can log in as anyone.
//
// # The token
//
// A user's token is NAME.SECRET, SECRET being 48 lowercase hex characters
// (24 random bytes). The name travels in the token so that checking it
// costs one hash comparison, not one per user; it is split at the last
// '.', since names may hold dots. [NewToken] makes one, [Add] appends it
// to a file, [Remove] takes a user out.
//
// # Why bcrypt, and why a cache
//
// The file holds hashes, not tokens, so a copy of it (a backup, a
// world-readable mistake) does not log anyone in. SECRET has 192 bits of
// entropy, so any hash would resist guessing; bcrypt is used because it is
// the standard password hash of x/crypto, and its cost (about 50 ms at
// bcrypt.DefaultCost) also slows an online guesser down. That cost would
// be paid on every request carrying a bearer or query token (scripts
// upgrade WebSockets with one), so a [Set] keeps a bounded cache of the
// tokens it has verified, keyed by their SHA-256: a hit costs one hash.
// Only good tokens are cached; a Set is immutable, so a reload (a new Set)
// starts with an empty cache and a removed user's token stops working.
//
// # Who owns what
//
// A [Set] is immutable once parsed and safe for concurrent use. A [File]
// is the live Set of one path: [File.Reload] swaps it atomically (the
// caller, on SIGHUP); [File.Verify] and [File.Stamp] read the current one.
// Nothing here holds a file open between calls, starts a goroutine or
// needs closing. [Add] and [Remove] take an exclusive flock on the file
// so that concurrent edits do not interleave; they block while another
// edit holds it.
package users
