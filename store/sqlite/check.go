package sqlite

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/url"
	"os"
	"strings"
	"syscall"

	sqlite3 "modernc.org/sqlite/lib"
)

// damagedError reads "store <path>: damaged SQLite database: <problem>
// (left unchanged)" and is ErrDamaged.
type damagedError struct{ path, problem string }

func (e *damagedError) Error() string {
	return fmt.Sprintf("store %s: %v: %s (left unchanged)", e.path, ErrDamaged, e.problem)
}

func (e *damagedError) Unwrap() error { return ErrDamaged }

// checkIntact refuses a database file whose pages or full-text index are
// damaged, before anything opens it for writing: a file size that is not
// the header's page count × page size, and whatever PRAGMA quick_check
// finds, which includes FTS5's own integrity-check of entries_fts (what
// INSERT INTO entries_fts(entries_fts) VALUES('integrity-check') runs;
// SQLite 3.44 and later run it for every virtual table).
//
// The check reads through a read-only connection. With no -wal beside the
// file it is also immutable: no lock, no -shm or -wal made. With a -wal
// (a crash left one, or the file is open elsewhere) it reads through it, as
// the store will, and the size is not checked: the header is the last
// checkpoint's, and the newest pages may be in the -wal. A file with a hot
// rollback journal is not checked (only a writer can roll it back); ours
// are always in WAL mode.
func checkIntact(ctx context.Context, abs string) error {
	fi, err := os.Stat(abs)
	if err != nil {
		return fmt.Errorf("store %s: %w", abs, unwrapPath(err))
	}
	if fi.Size() == 0 {
		return nil // a new database
	}
	if sidecarSize(abs+"-journal") > 0 {
		return nil
	}
	walSize := sidecarSize(abs + "-wal")
	if walSize <= 0 {
		if problem, err := checkSize(abs, fi.Size()); err != nil {
			return err
		} else if problem != "" {
			return &damagedError{path: abs, problem: problem}
		}
		if sealed(abs, fi.Size()) {
			return nil // the very bytes a clean Close left, after an Open that checked them
		}
	}
	q := url.Values{}
	q.Set("mode", "ro")
	if walSize < 0 {
		q.Set("immutable", "1")
	}
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: abs, RawQuery: q.Encode()}).String())
	if err != nil {
		return fmt.Errorf("store %s: %w", abs, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	problem, err := quickCheck(ctx, db)
	switch {
	case isCode(err, sqlite3.SQLITE_NOTADB):
		return fmt.Errorf("store %s: %w (left unchanged)", abs, ErrCorrupt)
	case isCode(err, sqlite3.SQLITE_CORRUPT):
		return &damagedError{path: abs, problem: oneLine(err.Error())}
	case err != nil:
		return fmt.Errorf("store %s: check: %w", abs, err)
	case problem != "":
		return &damagedError{path: abs, problem: problem}
	}
	return nil
}

// The seal: quick_check reads every page (about 2 s for 10,000 sessions of
// 50 entries), so a clean Close records the size and the CRC-32C of the
// file it leaves (no -wal: checkpointed) in <file>.sealed, and the next
// Open skips quick_check when the file still has exactly those bytes (a
// read of the file, about 20 ms for the same store). Anything else (a
// crash's -wal, a cut, an overwritten page, no seal) gets the full check.

// sealPath is where the seal of the database file abs is kept.
func sealPath(abs string) string { return abs + ".sealed" }

// fileCRC is the size and the CRC-32C (Castagnoli) of the file at path.
func fileCRC(path string) (int64, uint32, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	n, err := io.Copy(h, f)
	return n, h.Sum32(), err
}

// seal records the size and CRC of the closed database file abs (see
// above); the caller has checkpointed it and no -wal is left.
func seal(abs string) error {
	size, sum, err := fileCRC(abs)
	if err != nil {
		return err
	}
	tmp := sealPath(abs) + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%d %08x\n", size, sum)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, sealPath(abs)) // replaces a symlink, never follows it
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// sealed reports whether the database file abs (of size bytes) still has
// the bytes its seal records.
func sealed(abs string, size int64) bool {
	f, err := os.OpenFile(sealPath(abs), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	var wantSize int64
	var wantSum uint32
	_, err = fmt.Fscanf(f, "%d %x\n", &wantSize, &wantSum)
	f.Close()
	if err != nil || wantSize != size {
		return false
	}
	n, sum, err := fileCRC(abs)
	return err == nil && n == wantSize && sum == wantSum
}

// sidecarSize is the size of the file at path, or -1 when there is none.
func sidecarSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return -1
	}
	return fi.Size()
}

// checkSize compares the size of the database file at abs with what its
// header says (offsets of the SQLite file format: the page size at 16, the
// page count at 28, valid when the change counter at 24 equals the number
// at 92, as SQLite reads it). It returns the problem, "" when none.
func checkSize(abs string, size int64) (string, error) {
	f, err := os.Open(abs)
	if err != nil {
		return "", fmt.Errorf("store %s: %w", abs, unwrapPath(err))
	}
	defer f.Close()
	var h [100]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Sprintf("%d bytes, shorter than its header", size), nil
		}
		return "", fmt.Errorf("store %s: read: %w", abs, unwrapPath(err))
	}
	pageSize := int64(binary.BigEndian.Uint16(h[16:]))
	if pageSize == 1 {
		pageSize = 65536
	}
	pages := int64(binary.BigEndian.Uint32(h[28:]))
	valid := pages > 0 && binary.BigEndian.Uint32(h[24:]) == binary.BigEndian.Uint32(h[92:])
	if pageSize < 512 || pageSize&(pageSize-1) != 0 || !valid {
		return "", nil // SQLite itself tells (not a database) or goes by the file's size
	}
	if size != pages*pageSize {
		return fmt.Sprintf("%d bytes, but its header says %d pages of %d bytes (%d)", size, pages, pageSize, pages*pageSize), nil
	}
	return "", nil
}

// quickCheck runs PRAGMA quick_check on db and returns its first problem,
// "" when it says ok.
func quickCheck(ctx context.Context, db *sql.DB) (string, error) {
	rows, err := db.QueryContext(ctx, "PRAGMA quick_check(1)")
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var problem string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return "", err
		}
		if line != "ok" && problem == "" {
			problem = oneLine(line)
		}
	}
	return problem, rows.Err()
}

// oneLine is the first line of a check's report that names a problem
// ("*** in database main ***" only says where).
func oneLine(s string) string {
	for line := range strings.Lines(s) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "***") {
			return line
		}
	}
	return strings.TrimSpace(s)
}
