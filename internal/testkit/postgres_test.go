package testkit

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"
)

// TestPostgres starts the server, gets two databases that are apart,
// checks that the server runs as a user other than root, then stops it:
// the postmaster is reaped, its process group is empty and its directory
// gone, and a next call starts a new server.
func TestPostgres(t *testing.T) {
	ctx := t.Context()
	query := func(url, sql string) string {
		t.Helper()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		defer conn.Close(context.Background())
		var out string
		if err := conn.QueryRow(ctx, sql).Scan(&out); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return out
	}
	var pid int
	var dir string
	t.Run("two databases", func(t *testing.T) {
		a, b := Postgres(t), Postgres(t)
		if a == b {
			t.Fatalf("two calls gave one URL %s", a)
		}
		if da, db := query(a, "SELECT current_database()"), query(b, "SELECT current_database()"); da == db {
			t.Errorf("both URLs reach database %s", da)
		}
		if !strings.HasPrefix(a, "postgres://postgres:") || !strings.Contains(a, "@127.0.0.1:") {
			t.Errorf("URL %s: want postgres://postgres:<password>@127.0.0.1:<port>/...", a)
		}
		pid = PostgresPID()
		if pid == 0 || Gone(pid) {
			t.Fatalf("postmaster pid %d does not run", pid)
		}
		var st unix.Stat_t
		if err := unix.Stat("/proc/"+strconv.Itoa(pid), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid == 0 {
			t.Errorf("postmaster %d runs as root", pid)
		}
		dir = pg.srv.base
	})
	if t.Failed() || pid == 0 {
		return
	}
	if err := StopPostgres(); err != nil {
		t.Fatalf("StopPostgres: %v", err)
	}
	if !Gone(pid) {
		t.Errorf("postmaster %s runs after StopPostgres", Describe(pid))
	}
	if err := unix.Kill(-pid, 0); err != unix.ESRCH {
		t.Errorf("kill(-%d, 0) = %v after StopPostgres; want ESRCH (no backend left)", pid, err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("server directory %s after StopPostgres: %v; want removed", dir, err)
	}
	if PostgresPID() != 0 {
		t.Errorf("PostgresPID after StopPostgres = %d; want 0", PostgresPID())
	}
	// A later call starts a new server.
	t.Run("restarted", func(t *testing.T) {
		if got := query(Postgres(t), "SELECT 'up'"); got != "up" {
			t.Errorf("query on the restarted server = %q", got)
		}
	})
	if err := StopPostgres(); err != nil {
		t.Errorf("StopPostgres: %v", err)
	}
}
