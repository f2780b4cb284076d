package postgres

import (
	"database/sql"
	"io/fs"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/store"
)

// TestNodeLoadMigration: a database of schema 1 (the last release, which
// kept no load) with a node's heartbeat opens; the node reads back as
// running nothing, and its next heartbeat stores its load.
func TestNodeLoadMigration(t *testing.T) {
	t.Parallel()
	url := testkit.Postgres(t)
	first, err := fs.ReadFile(migrationFiles, migrationDir+"/00001_initial.sql")
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, fstest.MapFS{"00001_initial.sql": {Data: first}}, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(t.Context()); err != nil {
		t.Fatal(err)
	}
	seen := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	if _, err := db.ExecContext(t.Context(), `INSERT INTO nodes (id, addr, last_seen) VALUES ('old', 'old:1', $1)`, seen.UnixNano()); err != nil {
		t.Fatal(err)
	}

	s := openTest(t, url, Options{})
	got, err := s.Nodes(t.Context(), seen, time.Minute)
	if err != nil || len(got) != 1 || got[0].ID != "old" || !got[0].LastSeen.Equal(seen) || got[0].Load.Sessions != 0 || got[0].Load.Workers != 0 || got[0].Load.List != nil {
		t.Fatalf("Nodes after the migration = %+v, %v; want node old, seen as before, running nothing", got, err)
	}
	load := store.NodeLoad{Sessions: 2, Workers: 1, List: []store.NodeWorker{{PID: 7, SessionID: "s", User: "u", Kind: "chat", StartedAt: seen}}}
	if err := s.Heartbeat(t.Context(), "old", "old:1", load, seen.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Nodes(t.Context(), seen, time.Minute); err != nil || got[0].Load.Sessions != 2 || len(got[0].Load.List) != 1 || got[0].Load.List[0].PID != 7 {
		t.Fatalf("Nodes after a heartbeat = %+v, %v", got, err)
	}
}

var _ = stdlib.GetDefaultDriver // registers "pgx" for database/sql
