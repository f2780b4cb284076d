package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/pressly/goose/v3"
)

// migrationFiles are the schema's steps, one goose SQL file each
// (NNNNN_what.sql, in order), in the folder of the SQLite dialect. A
// released step is never edited; a change is a new file at the end.
//
// Times are INTEGER unix nanoseconds; the zero time.Time is stored as
// zeroTime (the smallest int64), so it sorts before every real time as
// time.Time.Before does.
//
//go:embed migrations/sqlite/*.sql
var migrationFiles embed.FS

// migrationDir is the folder of migrationFiles this backend runs.
const migrationDir = "migrations/sqlite"

// schemaVersion is the newest schema this code knows: the number of the
// last migration file. It is also kept in PRAGMA user_version, as before
// goose, so a dashgate that only reads user_version refuses a newer file.
var schemaVersion = lastMigration()

func lastMigration() int {
	names, err := fs.Glob(migrationFiles, migrationDir+"/*.sql")
	if err != nil || len(names) == 0 {
		panic("store/sqlite: no embedded migrations")
	}
	last := 0
	for _, n := range names {
		num, _, _ := strings.Cut(path.Base(n), "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			panic("store/sqlite: migration without a number: " + n)
		}
		last = max(last, v)
	}
	return last
}

// gooseTable is goose's record of the steps applied (its default name).
const gooseTable = "goose_db_version"

// readVersion returns the schema version of the file w is open on: the
// larger of PRAGMA user_version (the only record before goose) and the
// newest step in goose's table. It writes nothing.
func readVersion(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}) (user, applied int, err error) {
	if err := q.QueryRowContext(ctx, "PRAGMA user_version").Scan(&user); err != nil {
		return 0, 0, err
	}
	var n int
	if err := q.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?`, gooseTable).Scan(&n); err != nil {
		return 0, 0, err
	}
	if n == 0 {
		return user, 0, nil
	}
	var v sql.NullInt64
	if err := q.QueryRowContext(ctx, `SELECT max(version_id) FROM `+gooseTable+` WHERE is_applied`).Scan(&v); err != nil {
		return 0, 0, err
	}
	return user, int(v.Int64), nil
}

// migrate applies the missing steps with goose, each in its own
// transaction on w, then records schemaVersion in PRAGMA user_version. A
// file of the schema before goose (user_version 1, no goose table) gets
// goose's table, step 1 finds everything in place, and the later steps
// run. Open runs it with the file to itself (cmd/dashgate holds a lease
// on the file); two Opens migrating one file at once are not supported.
func migrate(ctx context.Context, w *sql.DB, abs string) error {
	sub, err := fs.Sub(migrationFiles, migrationDir)
	if err != nil {
		return fmt.Errorf("store %s: migrations: %w", abs, err)
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, w, sub, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("store %s: migrations: %w", abs, err)
	}
	// p.Close would close w, which Open keeps: p holds nothing else.
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("store %s: migrate: %w", abs, err)
	}
	// PRAGMA takes no parameters; schemaVersion is an int of this code.
	if _, err := w.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", schemaVersion)); err != nil {
		return fmt.Errorf("store %s: set schema version: %w", abs, err)
	}
	return nil
}
