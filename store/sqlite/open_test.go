package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/store/storetest"
)

func TestOpenRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		path func(t *testing.T) string // skips when the case cannot fail here
		want string
	}{
		{"directory", func(t *testing.T) string { return t.TempDir() }, "is a directory"},
		{"parent is a file", func(t *testing.T) string {
			f := filepath.Join(t.TempDir(), "file")
			writeFile(t, f, []byte("x"))
			return filepath.Join(f, "dashgate.db")
		}, "cannot create"},
		{"missing parent", func(t *testing.T) string {
			return filepath.Join(t.TempDir(), "no", "such", "dashgate.db")
		}, "cannot create"},
		{"directory no one may create in (/proc)", func(t *testing.T) string {
			if _, err := os.Stat("/proc/self"); err != nil {
				t.Skip("no /proc here")
			}
			return "/proc/dashgate-store-test.db"
		}, "cannot create"},
		{"read-only directory", func(t *testing.T) string {
			dir := t.TempDir()
			if err := os.Chmod(dir, 0o500); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Chmod(dir, 0o700) })
			if f, err := os.Create(filepath.Join(dir, "probe")); err == nil {
				f.Close()
				t.Skip("permissions are not enforced for this user (root): parent-is-a-file covers cannot-create")
			}
			return filepath.Join(dir, "dashgate.db")
		}, "cannot create"},
		{"read-only file", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "dashgate.db")
			writeFile(t, p, nil)
			if err := os.Chmod(p, 0o400); err != nil {
				t.Fatal(err)
			}
			if f, err := os.OpenFile(p, os.O_RDWR, 0); err == nil {
				f.Close()
				t.Skip("permissions are not enforced for this user (root)")
			}
			return p
		}, "cannot write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := tc.path(t)
			s, err := Open(t.Context(), p, Options{})
			if err == nil {
				s.Close()
				t.Fatalf("Open(%s) succeeded; want an error", p)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.want) || !strings.Contains(msg, p) || strings.Contains(msg, "\n") {
				t.Errorf("Open(%s) error %q; want one line naming the path and saying %q", p, msg, tc.want)
			}
		})
	}
}

// fileState is what Open must leave as it was: the bytes, the mtime and
// the files beside it.
type fileState struct {
	data    []byte
	mtime   time.Time
	sidecar []string
}

func stateOf(t *testing.T, path string) fileState {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	var sidecar []string
	for _, suffix := range []string{"-wal", "-shm", "-journal"} {
		if _, err := os.Stat(path + suffix); err == nil {
			sidecar = append(sidecar, suffix)
		}
	}
	return fileState{data: data, mtime: fi.ModTime(), sidecar: sidecar}
}

func (a fileState) check(t *testing.T, b fileState) {
	t.Helper()
	if !bytes.Equal(a.data, b.data) || !a.mtime.Equal(b.mtime) || len(b.sidecar) != len(a.sidecar) {
		t.Errorf("file changed: %d bytes -> %d (equal %v), mtime %v -> %v, sidecars %v -> %v",
			len(a.data), len(b.data), bytes.Equal(a.data, b.data), a.mtime, b.mtime, a.sidecar, b.sidecar)
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestOpenCorrupt(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 4096)
	for i := range random {
		random[i] = byte(rnd.UintN(256))
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"random bytes", random},
		{"text file", []byte(strings.Repeat("listen = 127.0.0.1:8080\nstore = dashgate.db\n", 40))},
		{"short file", []byte("SQLite")},
		{"header then garbage", append([]byte("SQLite format 3\x00"), random[16:]...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := filepath.Join(t.TempDir(), "dashgate.db")
			writeFile(t, p, tc.data)
			// An old mtime, so a write in the same clock tick would show.
			old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
			before := stateOf(t, p)
			s, err := Open(t.Context(), p, Options{})
			if err == nil {
				s.Close()
				t.Fatal("Open of a corrupt file succeeded")
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), p) {
				t.Errorf("Open error %q; want ErrCorrupt naming the file", err)
			}
			before.check(t, stateOf(t, p))
		})
	}
}

func TestOpenNewerSchema(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "dashgate.db")
	s := openTest(t, p)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(fmt.Sprintf("PRAGMA user_version = %d", schemaVersion+1)); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	before := stateOf(t, p)

	_, err = Open(t.Context(), p, Options{})
	want := fmt.Sprintf("store %s has schema version %d; this dashgate knows up to %d", p, schemaVersion+1, schemaVersion)
	if !errors.Is(err, ErrNewerSchema) || err.Error() != want {
		t.Errorf("Open error %q; want ErrNewerSchema reading %q", err, want)
	}
	before.check(t, stateOf(t, p))
}

func TestReopenKeepsData(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "dashgate.db")
	s, err := Open(t.Context(), p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	when := time.Date(2025, 5, 6, 7, 8, 9, 10, time.UTC)
	b := store.Batch{
		Sessions: []store.Session{{ID: "s", Title: "kept", CreatedAt: when, LastActive: when, State: store.StateSuspended}},
		Entries:  []store.SessionEntry{{SessionID: "s", Entry: store.Entry{Seq: 3, Role: store.RoleUser, Kind: store.KindPrompt, Text: "persist me", At: when}}},
	}
	if err := s.Apply(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p + "-wal"); err == nil {
		t.Errorf("Close left %s-wal behind", p)
	}

	s = openTest(t, p)
	rs, err := s.Restorable(t.Context())
	if err != nil || len(rs) != 1 || rs[0].Title != "kept" || rs[0].LastSeq != 3 || !rs[0].CreatedAt.Equal(when) {
		t.Fatalf("Restorable after reopen = %+v, %v", rs, err)
	}
	hits, err := s.Search(t.Context(), "", "persist", 10)
	if err != nil || len(hits) != 1 {
		t.Fatalf("Search after reopen = %+v, %v", hits, err)
	}
}

func TestConcurrentApply(t *testing.T) {
	t.Parallel()
	s := openTest(t, filepath.Join(t.TempDir(), "dashgate.db"))
	const writers, batches = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers*batches)
	for w := range writers {
		wg.Go(func() {
			id := fmt.Sprintf("s%d", w)
			sess := store.Session{ID: id, State: "attached", CreatedAt: time.Unix(1, 0), LastActive: time.Unix(1, 0)}
			for i := range batches {
				sess.LastActive = time.Unix(int64(i+1), 0)
				b := store.Batch{Sessions: []store.Session{sess}, Entries: []store.SessionEntry{
					{SessionID: id, Entry: store.Entry{Seq: uint64(i + 1), Kind: store.KindReply, Text: fmt.Sprintf("writer %d batch %d", w, i)}},
				}}
				if err := s.Apply(context.Background(), b); err != nil {
					errs <- err
					return
				}
				// Reads run beside the writes.
				if _, _, err := s.HistoryFor(context.Background(), "", id, 0, 5); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	rs, err := s.Restorable(t.Context())
	if err != nil || len(rs) != writers {
		t.Fatalf("Restorable = %d sessions, %v; want %d", len(rs), err, writers)
	}
	for _, r := range rs {
		if r.LastSeq != batches {
			t.Errorf("%s LastSeq %d; want %d", r.ID, r.LastSeq, batches)
		}
	}
}

func TestTwoStoresIndependent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := openTest(t, filepath.Join(dir, "a.db"))
	b := openTest(t, filepath.Join(dir, "b.db"))
	sess := store.Session{ID: "only-in-a", State: "attached"}
	if err := a.Apply(t.Context(), store.Batch{Sessions: []store.Session{sess}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(t.Context(), "", "only-in-a"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("b.Get of a's session: %v; want ErrNotFound", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Get(t.Context(), "", "only-in-a"); err != nil {
		t.Errorf("a.Get after b.Close: %v", err)
	}
}

// TestDiskFull fills the file (max_page_count stands in for a full disk:
// SQLITE_FULL either way), then lets it grow: the same batch, retried,
// succeeds.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	s := openTest(t, filepath.Join(t.TempDir(), "dashgate.db"))
	sess := store.Session{ID: "s", State: "attached"}
	if err := s.Apply(t.Context(), store.Batch{Sessions: []store.Session{sess}}); err != nil {
		t.Fatal(err)
	}
	var pages int
	if err := s.w.QueryRowContext(t.Context(), "PRAGMA page_count").Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(t.Context(), fmt.Sprintf("PRAGMA max_page_count = %d", pages)); err != nil {
		t.Fatal(err)
	}
	var b store.Batch
	for i := range 200 {
		b.Entries = append(b.Entries, store.SessionEntry{SessionID: "s", Entry: store.Entry{Seq: uint64(i + 1), Text: strings.Repeat("fill the disk ", 50)}})
	}
	err := s.Apply(t.Context(), b)
	if !isCode(err, sqlite3.SQLITE_FULL) {
		t.Fatalf("Apply on a full file: %v; want SQLITE_FULL", err)
	}
	if got, err := s.Get(t.Context(), "", "s"); err != nil || got.LastSeq != 0 {
		t.Fatalf("after the failed batch LastSeq %d, %v; want 0 (nothing written)", got.LastSeq, err)
	}
	if _, err := s.w.ExecContext(t.Context(), "PRAGMA max_page_count = 1073741823"); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(t.Context(), b); err != nil {
		t.Fatalf("retry after space returned: %v", err)
	}
	if got, err := s.Get(t.Context(), "", "s"); err != nil || got.LastSeq != 200 {
		t.Fatalf("after the retry LastSeq %d, %v; want 200", got.LastSeq, err)
	}
}

func FuzzSearch(f *testing.F) {
	for _, q := range storetest.HostileQueries() {
		f.Add(q)
	}
	s := openTest(f, filepath.Join(f.TempDir(), "dashgate.db"))
	when := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	err := s.Apply(f.Context(), store.Batch{
		Sessions: []store.Session{{ID: "s", State: "attached"}},
		Entries: []store.SessionEntry{
			{SessionID: "s", Entry: store.Entry{Seq: 1, Text: `the quick "brown" fox NEAR(a b) -x col:x AND OR NOT * ^`, At: when}},
			{SessionID: "s", Entry: store.Entry{Seq: 2, Text: "ünïcödé 日本語のテキスト ελληνικά", At: when}},
		},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, query string) {
		hits, err := s.Search(context.Background(), "", query, 10)
		if err != nil {
			t.Fatalf("Search(%q): %v", query, err)
		}
		if ftsQuery(query) == "" && len(hits) > 0 {
			t.Fatalf("Search(%q) without words = %d hits", query, len(hits))
		}
	})
}
