package recordings

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Defaults of Config.
const (
	DefaultMaxBytes   = 64 << 20
	DefaultQueueBytes = 4 << 20
	DefaultRetention  = 30 * 24 * time.Hour
	DefaultFlushEvery = 50 * time.Millisecond
)

// ErrNotFound: no such recording of that owner (also for a name that
// could not be one).
var ErrNotFound = errors.New("recording not found")

// Config configures a Store. Zero values take the defaults noted.
type Config struct {
	// Dir holds the recordings, one directory per owner (DirOf); made 0700.
	Dir string
	// MaxBytes bounds each recording's file, bytes (DefaultMaxBytes): an
	// event that would pass it ends the recording with a marker saying so.
	MaxBytes int64
	// QueueBytes bounds what one recording holds for its writer, bytes of
	// output plus 64 per event (DefaultQueueBytes): past it Output drops.
	QueueBytes int
	// FlushEvery is how long the writer gathers output after the first
	// of a batch before it writes (DefaultFlushEvery), unless a quarter
	// of QueueBytes is waiting: a recording in progress is at most this
	// far behind its terminal.
	FlushEvery time.Duration
	// Retention: Run deletes recordings last written longer ago than this
	// (0: kept for good).
	Retention time.Duration
	// SweepEvery is how often Run sweeps (0: a tenth of Retention, at
	// least a minute and at most an hour).
	SweepEvery time.Duration
	Log        *slog.Logger // discarded when nil
	// Create makes a recording's file at path (nil: a new file, mode 0600,
	// refused when it exists). Tests give a writer that stalls.
	Create func(path string) (io.WriteCloser, error)
}

// Store is the recordings of one dashgate (see the package doc).
type Store struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	active map[string]bool // files being written: the sweep leaves them
	wg     sync.WaitGroup
}

// Info is one recording as listed.
type Info struct {
	User      string    // its owner ("" the anonymous user)
	Dir       string    // DirOf(User)
	File      string    // its file name, <sid>-<start>.cast
	SessionID string    // the session whose terminal it recorded
	Started   time.Time // when the recording began (UTC, to the millisecond)
	Modified  time.Time // its last write
	Size      int64     // bytes
	Active    bool      // its terminal still runs
}

// Open makes (or checks) cfg.Dir, 0700, and returns the Store.
func Open(cfg Config) (*Store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("recordings: no directory")
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.QueueBytes <= 0 {
		cfg.QueueBytes = DefaultQueueBytes
	}
	if cfg.FlushEvery <= 0 {
		cfg.FlushEvery = DefaultFlushEvery
	}
	if cfg.SweepEvery <= 0 {
		cfg.SweepEvery = min(max(cfg.Retention/10, time.Minute), time.Hour)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Create == nil {
		cfg.Create = createFile
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("recordings directory: %w", err)
	}
	fi, err := os.Lstat(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("recordings directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("recordings directory %s: not a directory (a symlink is refused)", cfg.Dir)
	}
	if err := os.Chmod(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("recordings directory: %w", err)
	}
	return &Store{cfg: cfg, log: cfg.Log, active: map[string]bool{}}, nil
}

func createFile(path string) (io.WriteCloser, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
}

// Start begins the recording of session sid's terminal, owned by owner,
// now, at cols×rows cells. It does no I/O: the file is made by the
// recording's writer goroutine, and a failure there is logged (WARN
// "recording truncated") and leaves the recording empty. The caller owns
// the Recording and must Close it.
func (s *Store) Start(owner, sid string, cols, rows uint16) *Recording {
	now := time.Now()
	r := &Recording{
		s:     s,
		path:  filepath.Join(s.cfg.Dir, DirOf(owner), File(sid, now)),
		start: now,
		head: header{Version: 2, Width: int(cols), Height: int(rows), Timestamp: now.Unix(),
			Env: map[string]string{"TERM": "xterm-256color"}, Title: "dashgate terminal of session " + sid},
		wake: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
	s.mu.Lock()
	s.active[r.path] = true
	s.wg.Add(1)
	s.mu.Unlock()
	go r.run()
	return r
}

// highWater is the queued bytes at which the writer writes without
// waiting for the rest of its batch: a quarter of Config.QueueBytes.
func (s *Store) highWater() int { return s.cfg.QueueBytes / 4 }

// Dir is the directory the recordings are in (Config.Dir).
func (s *Store) Dir() string { return s.cfg.Dir }

// finished is the writer's end: the file is no longer active, the result
// logged, Done closed.
func (s *Store) finished(r *Recording) {
	s.mu.Lock()
	delete(s.active, r.path)
	s.mu.Unlock()
	r.logResult(s.log)
	close(r.done)
	s.wg.Done()
}

// Wait blocks until every recording's writer returned (their terminals
// Closed them), or ctx ends (its error).
func (s *Store) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run sweeps expired recordings now, then every Config.SweepEvery, until
// ctx ends. Without a retention it returns at once.
func (s *Store) Run(ctx context.Context) {
	if s.cfg.Retention <= 0 {
		return
	}
	t := time.NewTicker(s.cfg.SweepEvery)
	defer t.Stop()
	for {
		n, err := s.Sweep(time.Now())
		if err != nil {
			s.log.Warn("recordings sweep", "err", err)
		}
		if n > 0 {
			s.log.Info("recordings expired", "removed", n, "retention_ms", s.cfg.Retention.Milliseconds())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sweep deletes every recording not written since now minus the
// retention, except those being written, and returns how many it deleted.
// Only regular files named as File names them are touched.
func (s *Store) Sweep(now time.Time) (int, error) {
	if s.cfg.Retention <= 0 {
		return 0, nil
	}
	cutoff := now.Add(-s.cfg.Retention)
	all, err := s.list(nil)
	n := 0
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, in := range all {
		if in.Active || !in.Modified.Before(cutoff) {
			continue
		}
		if err := os.Remove(filepath.Join(s.cfg.Dir, in.Dir, in.File)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// List returns owner's recordings, newest first.
func (s *Store) List(owner string) ([]Info, error) {
	dir := DirOf(owner)
	return s.list(&dir)
}

// ListAll returns every owner's recordings, newest first.
func (s *Store) ListAll() ([]Info, error) { return s.list(nil) }

// list reads the directory of one owner (dir), or of all.
func (s *Store) list(dir *string) ([]Info, error) {
	var dirs []string
	if dir != nil {
		dirs = []string{*dir}
	} else {
		ents, err := os.ReadDir(s.cfg.Dir)
		if err != nil {
			return nil, fmt.Errorf("list recordings: %w", err)
		}
		for _, e := range ents {
			if _, ok := UserOf(e.Name()); ok && e.IsDir() {
				dirs = append(dirs, e.Name())
			}
		}
	}
	var out []Info
	var errs []error
	for _, d := range dirs {
		user, _ := UserOf(d)
		ents, err := os.ReadDir(filepath.Join(s.cfg.Dir, d))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("list recordings: %w", err))
			continue
		}
		for _, e := range ents {
			sid, started, ok := ValidFile(e.Name())
			if !ok || !e.Type().IsRegular() {
				continue
			}
			fi, err := e.Info()
			if err != nil {
				continue // removed meanwhile
			}
			path := filepath.Join(s.cfg.Dir, d, e.Name())
			s.mu.Lock()
			active := s.active[path]
			s.mu.Unlock()
			out = append(out, Info{User: user, Dir: d, File: e.Name(), SessionID: sid, Started: started,
				Modified: fi.ModTime(), Size: fi.Size(), Active: active})
		}
	}
	slices.SortFunc(out, func(a, b Info) int {
		if c := b.Started.Compare(a.Started); c != 0 {
			return c
		}
		return strings.Compare(a.Dir+"/"+a.File, b.Dir+"/"+b.File)
	})
	return out, errors.Join(errs...)
}

// OpenFile opens owner's recording named file for reading: ErrNotFound
// when file is not a name File makes, or owner has no such recording (so
// another owner's answers as a missing one). The caller closes it.
func (s *Store) OpenFile(owner, file string) (io.ReadSeekCloser, Info, error) {
	sid, started, ok := ValidFile(file)
	if !ok {
		return nil, Info{}, ErrNotFound
	}
	dir := DirOf(owner)
	path := filepath.Join(s.cfg.Dir, dir, file)
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ELOOP) {
			return nil, Info{}, ErrNotFound
		}
		return nil, Info{}, fmt.Errorf("open recording: %w", err)
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = ErrNotFound
		}
		return nil, Info{}, err
	}
	s.mu.Lock()
	active := s.active[path]
	s.mu.Unlock()
	return f, Info{User: owner, Dir: dir, File: file, SessionID: sid, Started: started, Modified: fi.ModTime(), Size: fi.Size(), Active: active}, nil
}
