package testkit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"
)

// EnvE2E is the variable that turns a missing dependency of a test (the
// PostgreSQL binaries, Chromium, nginx) from a skip into a failure: CI
// sets DASHGATE_E2E=1 after scripts/e2e-deps.sh installed them.
const EnvE2E = "DASHGATE_E2E"

// pgStartTimeout bounds initdb plus the server's start; pgStopTimeout its
// stop. Both are far above what they take (about 1 s and 50 ms).
const (
	pgStartTimeout = 60 * time.Second
	pgStopTimeout  = 30 * time.Second
)

// pg is the test binary's one PostgreSQL server, started by the first
// Postgres call and stopped by StopPostgres.
var pg struct {
	mu  sync.Mutex
	srv *pgServer
	dbs int // databases created, for their names
}

// pgServer is a running postgres: a child of this process (not waited
// for until StopPostgres), in its own process group, owned by the
// postgres system user when the tests run as root.
type pgServer struct {
	base     string // temporary directory: data/, the Unix socket, the log, the password file
	data     string
	bin      string // the directory of initdb, pg_ctl and postgres
	port     int    // 127.0.0.1:port, and the socket's number
	password string // of the superuser postgres, over TCP (the socket trusts)
	cred     *syscall.Credential
	cmd      *exec.Cmd
	paused   bool // stopped by PausePostgres, its data kept (cmd reaped)
}

// Postgres returns the URL of a new, empty database on the test binary's
// PostgreSQL server, created for tb (CREATE DATABASE) and dropped when tb
// ends: postgres://postgres:<password>@127.0.0.1:<port>/<db>?sslmode=disable
// (TCP with scram-sha-256, as a deployment would connect). The server is
// started on the first call (initdb into a temporary directory, fsync off,
// listening on 127.0.0.1 at a free port and on a Unix socket in that
// directory) and runs until StopPostgres, which the package's TestMain
// calls at exit; if the test binary dies first, the server gets SIGKILL
// (Pdeathsig) and its backends exit when they see their postmaster gone.
//
// As root, initdb and postgres run as the postgres system user (which must
// exist), and the temporary directory is chowned to it; otherwise as the
// caller. The binaries are found on PATH or in /usr/lib/postgresql/*/bin
// (the newest major): when they are missing, tb is skipped with a message,
// or fails when DASHGATE_E2E=1.
func Postgres(tb testing.TB) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pgStartTimeout)
	defer cancel()
	url, drop, err := PostgresDB(ctx)
	if errors.Is(err, ErrNoPostgres) {
		if os.Getenv(EnvE2E) == "1" {
			tb.Fatalf("%v (%s=1: required)", err, EnvE2E)
		}
		tb.Skipf("%v; install Debian's postgresql package (scripts/e2e-deps.sh) to run this test", err)
	}
	if err != nil {
		tb.Fatalf("PostgreSQL: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), pgStopTimeout)
		defer cancel()
		if err := drop(ctx); err != nil {
			tb.Errorf("PostgreSQL: %v", err)
		}
	})
	return url
}

// ErrNoPostgres: the PostgreSQL binaries are not installed.
var ErrNoPostgres = errors.New("PostgreSQL: initdb, pg_ctl and postgres not found on PATH nor in /usr/lib/postgresql/*/bin")

// PostgresDB is Postgres for a caller that is not a test (a benchmark's
// data built once per process, a program): it starts the server if none
// runs and creates a database, and returns its URL and drop, which drops
// the database (ending its connections). It does not skip: without the
// binaries the error is ErrNoPostgres. The server stays up until
// StopPostgres, which also throws away the databases not dropped.
func PostgresDB(ctx context.Context) (url string, drop func(context.Context) error, err error) {
	bin, err := findPostgres()
	if err != nil {
		return "", nil, err
	}
	pg.mu.Lock()
	if pg.srv == nil {
		pg.srv, err = startPostgres(ctx, bin)
		if err != nil {
			pg.mu.Unlock()
			return "", nil, fmt.Errorf("start PostgreSQL: %w", err)
		}
	}
	srv := pg.srv
	pg.dbs++
	db := fmt.Sprintf("test_%d", pg.dbs)
	pg.mu.Unlock()
	if err := srv.exec(ctx, "CREATE DATABASE "+db); err != nil {
		return "", nil, err
	}
	drop = func(ctx context.Context) error {
		// FORCE ends the connections a failed test left open.
		return srv.exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
	}
	return fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/%s?sslmode=disable", srv.password, srv.port, db), drop, nil
}

// StopPostgres stops the server Postgres started, if any (pg_ctl stop -m
// immediate: the data is thrown away), reaps it, waits until no process of
// its process group is left, and removes its directory. It returns once
// all of that is done; a later Postgres starts a new server. Call it at
// the end of TestMain, e.g. in VerifyNoLeaks's goleak.Cleanup.
func StopPostgres() error {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	srv := pg.srv
	if srv == nil {
		return nil
	}
	pg.srv = nil
	ctx, cancel := context.WithTimeout(context.Background(), pgStopTimeout)
	defer cancel()
	return srv.stop(ctx)
}

// PostgresPID returns the pid of the running server's postmaster, or 0
// when none runs, or it is paused (for a test of the kit, and of leaks).
func PostgresPID() int {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.srv == nil || pg.srv.paused {
		return 0
	}
	return pg.srv.cmd.Process.Pid
}

// findPostgres returns the directory holding initdb, pg_ctl and postgres.
func findPostgres() (string, error) {
	var dirs []string
	if p, err := exec.LookPath("initdb"); err == nil {
		if p, err = filepath.EvalSymlinks(p); err == nil {
			dirs = append(dirs, filepath.Dir(p))
		}
	}
	// Debian keeps them out of PATH, one directory per major version.
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	slices.SortFunc(found, func(a, b string) int { return majorOf(b) - majorOf(a) })
	for _, p := range found {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "pg_ctl")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", ErrNoPostgres
}

// majorOf is the version in /usr/lib/postgresql/<major>/bin/initdb.
func majorOf(p string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(p))))
	return n
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// startPostgres runs initdb and starts postgres, and returns once the
// server accepts connections. On error nothing is left running.
func startPostgres(ctx context.Context, bin string) (srv *pgServer, err error) {
	base, err := os.MkdirTemp("", "dashgate-pg-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(base)
		}
	}()
	s := &pgServer{base: base, data: filepath.Join(base, "data"), bin: bin}
	if os.Geteuid() == 0 {
		// postgres refuses to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, and no postgres user to run the server as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
		if err := os.Chown(base, uid, gid); err != nil {
			return nil, err
		}
	}
	pw := make([]byte, 16)
	rand.Read(pw)
	s.password = hex.EncodeToString(pw)
	pwFile := filepath.Join(base, "pwfile")
	if err := s.writeFile(pwFile, s.password+"\n"); err != nil {
		return nil, err
	}
	// --no-locale: the server's locale is C whatever the machine's; no
	// test depends on a locale (store/postgres tokenizes in Go).
	if out, err := s.command(ctx, "initdb", "-D", s.data, "-U", "postgres", "--pwfile", pwFile,
		"--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--no-locale", "--no-sync").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w: %s", err, lastLines(string(out), 10))
	}
	os.Remove(pwFile)
	if s.port, err = freePort(); err != nil {
		return nil, err
	}
	if err := s.launch(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// launch starts postgres on s's data directory and port, and returns once
// it accepts connections; on error nothing of it is left running.
func (s *pgServer) launch(ctx context.Context) error {
	logPath := filepath.Join(s.base, "postgres.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	// Not exec.CommandContext: the server outlives ctx, which bounds only the start.
	s.cmd = exec.Command(filepath.Join(s.bin, "postgres"), "-D", s.data, "-k", s.base, "-h", "127.0.0.1", "-p", strconv.Itoa(s.port),
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=400", "-c", "shared_buffers=64MB")
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.Env = pgEnv()
	s.cmd.SysProcAttr = &unix.SysProcAttr{Credential: s.cred, Setpgid: true, Pdeathsig: unix.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	Own(s.cmd.Process.Pid)
	err = PollErr(ctx, func() (bool, error) {
		if Gone(s.cmd.Process.Pid) {
			return false, errors.New("postgres exited")
		}
		return s.exec(ctx, "SELECT 1") == nil, nil
	})
	if err != nil {
		log, _ := os.ReadFile(logPath)
		stopCtx, cancel := context.WithTimeout(context.Background(), pgStopTimeout)
		defer cancel()
		s.halt(stopCtx, "immediate")
		return fmt.Errorf("postgres on port %d: %w: %s", s.port, err, lastLines(string(log), 10))
	}
	return nil
}

// PausePostgres stops the running server as an outage would (pg_ctl stop
// -m fast: clients are disconnected, committed data kept), reaps it and
// waits until no process of it is left; its data directory and port stay,
// for ResumePostgres. Until then every connection to its databases is
// refused, every test's: a test that pauses it must not run in parallel
// (t.Parallel) with another that uses it. It blocks until the server is gone or ctx ends. Errors: no
// server runs, or it is paused already; the stop's.
func PausePostgres(ctx context.Context) error {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.srv == nil || pg.srv.paused {
		return errors.New("PostgreSQL: no running server to pause")
	}
	if err := pg.srv.halt(ctx, "fast"); err != nil {
		return err
	}
	pg.srv.paused = true
	return nil
}

// ResumePostgres starts again the server PausePostgres stopped, on the
// same data directory and port (the same URLs work again), and returns
// once it accepts connections or ctx ends. Errors: no paused server; the
// start's (then nothing is left running, and StopPostgres cleans up).
func ResumePostgres(ctx context.Context) error {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.srv == nil || !pg.srv.paused {
		return errors.New("PostgreSQL: no paused server to resume")
	}
	if err := pg.srv.launch(ctx); err != nil {
		return err
	}
	pg.srv.paused = false
	return nil
}

// command is name of the server's bin directory, run as the server's user.
func (s *pgServer) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, name), args...)
	cmd.Env = pgEnv()
	cmd.Dir = s.base
	cmd.SysProcAttr = &unix.SysProcAttr{Credential: s.cred, Pdeathsig: unix.SIGKILL}
	return cmd
}

// pgEnv is the environment of initdb and postgres: none of the caller's
// PG* variables, a locale that exists everywhere.
func pgEnv() []string {
	env := []string{"LC_ALL=C", "LANG=C"}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k == "PATH" || k == "TZ" {
			env = append(env, kv)
		}
	}
	return env
}

// writeFile writes a file the server's user can read, and only it.
func (s *pgServer) writeFile(path, text string) error {
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		return err
	}
	if s.cred != nil {
		return os.Chown(path, int(s.cred.Uid), int(s.cred.Gid))
	}
	return nil
}

// exec runs one statement as the superuser over the Unix socket.
func (s *pgServer) exec(ctx context.Context, sql string) error {
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", s.base, s.port))
	if err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

// stop ends the server (halt with -m immediate; a paused one is gone
// already) and removes its directory.
func (s *pgServer) stop(ctx context.Context) error {
	var errs []error
	if !s.paused {
		errs = append(errs, s.halt(ctx, "immediate"))
	}
	if err := os.RemoveAll(s.base); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// halt ends the server with pg_ctl stop -m mode (SIGKILL to its process
// group if that fails), reaps it and waits for its process group to be
// empty.
func (s *pgServer) halt(ctx context.Context, mode string) error {
	pid := s.cmd.Process.Pid
	var errs []error
	if out, err := s.command(ctx, "pg_ctl", "stop", "-D", s.data, "-m", mode, "-w").CombinedOutput(); err != nil && !Gone(pid) {
		errs = append(errs, fmt.Errorf("pg_ctl stop: %w: %s", err, lastLines(string(out), 5)))
		unix.Kill(-pid, unix.SIGKILL)
	}
	s.cmd.Wait() // its exit status after SIGQUIT is not an error of ours
	Disown(pid)
	// The postmaster reaps its backends before it exits; a backend that
	// outlived it would still be in its process group.
	if err := Poll(ctx, func() bool { return unix.Kill(-pid, 0) == unix.ESRCH }); err != nil {
		unix.Kill(-pid, unix.SIGKILL)
		errs = append(errs, fmt.Errorf("postgres process group %d still has processes: %w", pid, err))
	}
	return errors.Join(errs...)
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
