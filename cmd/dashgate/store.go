package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/store/postgres"
	"github.com/dashgate/dashgate/store/sqlite"
)

// startupError is a refusal to start (bad store, bad flags found late):
// Main prints its one line and exits with code 2.
type startupError struct{ err error }

func (e *startupError) Error() string { return e.err.Error() }
func (e *startupError) Unwrap() error { return e.err }

// openedStore is the conversation store and what holds it.
type openedStore struct {
	store.Store
	Path    string // "" for the memory store
	Durable bool   // it outlives the process: sessions are suspended at shutdown
	lease   *os.File
}

// Close closes the store, then gives up its lease.
func (o *openedStore) Close() error {
	err := o.Store.Close()
	if o.lease != nil {
		o.lease.Close()
	}
	return err
}

// maxStoreSlots bounds how many default store files one state directory
// holds (one per dashgate running on it at once).
const maxStoreSlots = 16

// openStore opens the store --store names. A store file is used by one
// dashgate at a time: it holds an exclusive lease (flock on <file>.lock)
// for as long as it runs. With the default (<state-dir>/dashgate.db), a
// second dashgate on the same state directory takes the next free file,
// dashgate-2.db and so on, so two instances never mix their sessions; an
// explicit --store that is leased refuses start. Errors are
// *startupError.
func openStore(ctx context.Context, cfg config, log *slog.Logger) (*openedStore, error) {
	if cfg.Store == "none" {
		return &openedStore{Store: store.NewMemory()}, nil
	}
	if isPostgresURL(cfg.Store) {
		return openPostgres(ctx, cfg, log)
	}
	paths := []string{cfg.Store}
	if cfg.Store == "" {
		paths = paths[:0]
		for i := 1; i <= maxStoreSlots; i++ {
			name := "dashgate.db"
			if i > 1 {
				name = "dashgate-" + strconv.Itoa(i) + ".db"
			}
			paths = append(paths, filepath.Join(cfg.StateDir, name))
		}
	}
	var lease *os.File
	var path string
	for _, p := range paths {
		f, err := leaseStore(p)
		if errors.Is(err, errLeased) && cfg.Store == "" {
			continue
		}
		if err != nil {
			return nil, &startupError{err}
		}
		lease, path = f, p
		break
	}
	if lease == nil {
		return nil, &startupError{fmt.Errorf("every store file in %s is in use (%d dashgates run on it)", cfg.StateDir, maxStoreSlots)}
	}
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		lease.Close()
		return nil, &startupError{fmt.Errorf("open store: %w", err)}
	}
	log.Info("store opened", "path", path)
	return &openedStore{Store: st, Path: path, Durable: true, lease: lease}, nil
}

var errLeased = errors.New("in use by another dashgate")

// leaseStore takes the exclusive lease of the store file path.
func leaseStore(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("store %s: %w", path, err)
	}
	if err := refuseSymlinks(path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store %s: lease: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		pid, _ := os.ReadFile(path + ".lock")
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("store %s: %w (pid %s)", path, errLeased, strings.TrimSpace(string(pid)))
		}
		return nil, fmt.Errorf("store %s: lease: %w", path, err)
	}
	f.Truncate(0)
	fmt.Fprintf(f, "%d\n", os.Getpid())
	return f, nil
}

// isPostgresURL reports whether --store names a PostgreSQL database.
func isPostgresURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// openPostgres opens the PostgreSQL store of --store, trying again every
// second for --store-wait when the server cannot be reached yet (one WARN
// per attempt after the first); then, or without --store-wait, the reason
// refuses the start (exit 2). The password is never logged: every error
// names the URL without it.
func openPostgres(ctx context.Context, cfg config, log *slog.Logger) (*openedStore, error) {
	deadline := time.Now().Add(cfg.StoreWait)
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		st, err := postgres.Open(actx, cfg.Store, postgres.Options{Log: log})
		cancel()
		if err == nil {
			log.Info("store opened", "path", st.Path(), "backend", "postgres")
			return &openedStore{Store: st, Path: st.Path(), Durable: true}, nil
		}
		if errors.Is(err, postgres.ErrNewerSchema) || time.Now().Add(time.Second).After(deadline) {
			return nil, &startupError{fmt.Errorf("open store: %w", err)}
		}
		log.Warn("store not reachable yet: trying again", "attempt", attempt, "err", err,
			"wait_left_ms", time.Until(deadline).Milliseconds())
		select {
		case <-ctx.Done():
			return nil, &startupError{fmt.Errorf("open store: %w", ctx.Err())}
		case <-time.After(time.Second):
		}
	}
}
