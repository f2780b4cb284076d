package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
)

// ErrNewerSchema: the database was migrated by a newer dashgate. Open
// did not write to it.
var ErrNewerSchema = errors.New("schema newer than this dashgate knows")

// migrationFiles are the schema's steps, one goose SQL file each
// (NNNNN_what.sql, in order), in the folder of the PostgreSQL dialect. A
// released step is never edited; a change is a new file at the end.
//
//go:embed migrations/postgres/*.sql
var migrationFiles embed.FS

// migrationDir is the folder of migrationFiles this backend runs.
const migrationDir = "migrations/postgres"

// schemaVersion is the newest schema this code knows: the number of the
// last migration file.
var schemaVersion = lastMigration()

func lastMigration() int64 {
	names, err := fs.Glob(migrationFiles, migrationDir+"/*.sql")
	if err != nil || len(names) == 0 {
		panic("store/postgres: no embedded migrations")
	}
	var last int64
	for _, n := range names {
		num, _, _ := strings.Cut(path.Base(n), "_")
		v, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			panic("store/postgres: migration without a number: " + n)
		}
		last = max(last, v)
	}
	return last
}

// gooseTable is goose's record of the steps applied (its default name).
const gooseTable = "goose_db_version"

// migrateLock is the key of the session-level advisory lock Open holds
// while it migrates: an arbitrary constant ("dashgat" in ASCII) that every
// dashgate of every version uses.
const migrateLock int64 = 0x64617368676174

// migrate applies the missing steps with goose, each in its own
// transaction on the pool, while a dedicated connection holds the
// advisory lock: concurrent Opens queue on the lock, and the first to get
// it migrates; the others find nothing left to do. Closing that
// connection releases the lock, whatever happened.
func migrate(ctx context.Context, pool *pgxpool.Pool, cfg *pgx.ConnConfig, log *slog.Logger) error {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrateLock); err != nil {
		return fmt.Errorf("take the migration lock: %w", err)
	}
	have, err := readVersion(ctx, conn)
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if have > schemaVersion {
		return &newerSchemaError{have: have, know: schemaVersion}
	}
	if have == schemaVersion {
		return nil
	}
	sub, err := fs.Sub(migrationFiles, migrationDir)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	db := stdlib.OpenDBFromPool(pool) // closing it leaves the pool open
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, sub, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	results, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, r := range results {
		log.Info("store migrated", "version", r.Source.Version, "file", path.Base(r.Source.Path), "duration_ms", r.Duration.Milliseconds())
	}
	return nil
}

// readVersion is the newest step in goose's table, 0 when there is none.
func readVersion(ctx context.Context, conn *pgx.Conn) (int64, error) {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, gooseTable).Scan(&exists); err != nil {
		return 0, err
	}
	if !exists {
		return 0, nil
	}
	var v *int64
	if err := conn.QueryRow(ctx, `SELECT max(version_id) FROM `+gooseTable+` WHERE is_applied`).Scan(&v); err != nil {
		return 0, err
	}
	if v == nil {
		return 0, nil
	}
	return *v, nil
}

// newerSchemaError reads "schema version N; this dashgate knows up to M"
// and is ErrNewerSchema.
type newerSchemaError struct{ have, know int64 }

func (e *newerSchemaError) Error() string {
	return fmt.Sprintf("schema version %d; this dashgate knows up to %d", e.have, e.know)
}

func (e *newerSchemaError) Unwrap() error { return ErrNewerSchema }
