package sqlite

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

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
