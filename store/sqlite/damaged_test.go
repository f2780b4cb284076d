package sqlite

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dashgate/dashgate/store"
)

// crashEnv makes the test binary the crash helper (crashHelper): its value
// is the store file.
const crashEnv = "DASHGATE_SQLITE_CRASH_HELPER"

// helperEntries is how many entries the crash helper writes, each with the
// word "crashword".
const helperEntries = 300

// crashHelper opens the store at path, writes helperEntries entries of
// session "s" in one batch, says "applied" on stdout and waits to be killed
// (stdin is never closed by the test before the kill).
func crashHelper(path string) int {
	ctx := context.Background()
	s, err := Open(ctx, path, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := s.Apply(ctx, testBatch("s", 1000, helperEntries, "crashword")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("applied")
	bufio.NewReader(os.Stdin).ReadString('\n')
	return 0
}

// testBatch is session sid (suspended) with n entries from seq first, each
// naming word and long enough to fill pages.
func testBatch(sid string, first, n int, word string) store.Batch {
	b := store.Batch{Sessions: []store.Session{{ID: sid, Title: "t", State: store.StateSuspended}}}
	for i := range n {
		b.Entries = append(b.Entries, store.SessionEntry{SessionID: sid, Entry: store.Entry{
			Seq: uint64(first + i), Role: store.RoleUser, Kind: store.KindPrompt,
			Text: fmt.Sprintf("%s entry %d %s", word, first+i, strings.Repeat("pad ", i%50))}})
	}
	return b
}

// closedStore makes a store file at dir/name holding session "s" with 300
// entries of the word "kept", closed (checkpointed: no -wal beside it).
func closedStore(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	s, err := Open(t.Context(), p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(t.Context(), testBatch("s", 1, 300, "kept")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestOpenDamaged: a database file that is damaged where SQLite itself
// would not notice at once (cut inside its last page, bytes after its last
// page, a full-text index block overwritten) is refused with ErrDamaged,
// one line naming the file, and the file keeps its bytes, its mtime and
// has nothing new beside it.
func TestOpenDamaged(t *testing.T) {
	t.Parallel()
	cut := func(n int64) func(t *testing.T, p string) {
		return func(t *testing.T, p string) {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(p, fi.Size()-n); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, p string)
		want   string
	}{
		{"cut one byte short", cut(1), "its header says"},
		{"cut inside its last page", cut(100), "its header says"},
		{"cut to a page boundary", cut(4096), "its header says"},
		{"bytes after its last page", func(t *testing.T, p string) {
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.Write(make([]byte, 1000)); err != nil {
				t.Fatal(err)
			}
		}, "its header says"},
		{"a full-text index block overwritten", func(t *testing.T, p string) {
			// The same length, so only the index's own check can tell.
			db, err := sql.Open("sqlite", p)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			_, err = db.Exec(`UPDATE entries_fts_data SET block = zeroblob(length(block))
WHERE id = (SELECT max(id) FROM entries_fts_data)`)
			if err != nil {
				t.Fatal(err)
			}
		}, "fts5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := closedStore(t, t.TempDir(), "dashgate.db")
			tc.damage(t, p)
			if _, err := os.Stat(p + "-wal"); err == nil {
				t.Fatal("the damaged file has a -wal beside it")
			}
			// An old mtime, so a write in the same clock tick would show.
			old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
			before := stateOf(t, p)
			s, err := Open(t.Context(), p, Options{})
			if err == nil {
				s.Close()
				t.Fatal("Open of a damaged file succeeded")
			}
			msg := err.Error()
			if !errors.Is(err, ErrDamaged) || !strings.Contains(msg, p) || !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
				t.Errorf("Open error %q; want one line, ErrDamaged naming the file and saying %q", msg, tc.want)
			}
			before.check(t, stateOf(t, p))
		})
	}
}

// TestOpenAfterCrash: a store whose writer was killed (SIGKILL) with its
// changes only in the -wal opens, with every change; so does one whose
// checkpoint was cut short after its first page (the header then counts
// pages the file does not have yet: they are in the -wal).
func TestOpenAfterCrash(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := closedStore(t, dir, "dashgate.db")
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnv+"="+p)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if line != "applied\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("crash helper said %q, %v", line, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("crash helper: %v; want killed", err)
	}
	wal, err := os.ReadFile(p + "-wal")
	if err != nil || len(wal) <= walHeader {
		t.Fatalf("after the kill the -wal holds %d bytes, %v; want frames", len(wal), err)
	}

	// The same files with the checkpoint cut short: page 1 of the newest
	// frame holding it copied into the file, nothing else.
	short := filepath.Join(dir, "short")
	if err := os.Mkdir(short, 0o700); err != nil {
		t.Fatal(err)
	}
	ps := filepath.Join(short, "dashgate.db")
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if data, err := os.ReadFile(p + suffix); err == nil {
			writeFile(t, ps+suffix, data)
		}
	}
	page1 := lastFrameOf(t, wal, 1)
	f, err := os.OpenFile(ps, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(page1, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	fi, _ := os.Stat(ps)
	if pages := int64(binary.BigEndian.Uint32(page1[28:])); pages*int64(len(page1)) <= fi.Size() {
		t.Fatalf("the header copied from the -wal counts %d pages, the file has %d bytes: not ahead of it", pages, fi.Size())
	}

	for name, path := range map[string]string{"killed": p, "checkpoint cut short": ps} {
		t.Run(name, func(t *testing.T) {
			s := openTest(t, path)
			got, err := s.Get(t.Context(), "", "s")
			if err != nil || got.LastSeq != 1000+helperEntries-1 {
				t.Fatalf("Get after the crash: LastSeq %d, %v; want %d", got.LastSeq, err, 1000+helperEntries-1)
			}
			hits, err := s.Search(t.Context(), "", "crashword", helperEntries+1)
			if err != nil || len(hits) != helperEntries {
				t.Fatalf("Search of the helper's word: %d hits, %v; want %d", len(hits), err, helperEntries)
			}
		})
	}
}

// walHeader is the size of a -wal file's header; each frame is a
// walFrameHeader-byte header and a page.
const (
	walHeader      = 32
	walFrameHeader = 24
)

// lastFrameOf returns the page pgno of the newest frame of wal holding it.
func lastFrameOf(t *testing.T, wal []byte, pgno uint32) []byte {
	t.Helper()
	pageSize := int(binary.BigEndian.Uint32(wal[8:]))
	var page []byte
	for off := walHeader; off+walFrameHeader+pageSize <= len(wal); off += walFrameHeader + pageSize {
		if binary.BigEndian.Uint32(wal[off:]) == pgno {
			page = wal[off+walFrameHeader : off+walFrameHeader+pageSize]
		}
	}
	if page == nil {
		t.Fatalf("no frame of page %d in the -wal", pgno)
	}
	return page
}

// TestSealAfterCleanClose: a clean Close seals the file it leaves, and the
// seal holds only while the file keeps those very bytes (one byte changed,
// same size and all, and Open runs the full check again).
func TestSealAfterCleanClose(t *testing.T) {
	p := closedStore(t, t.TempDir(), "dashgate.db")
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if !sealed(p, fi.Size()) {
		t.Fatal("a cleanly closed store is not sealed")
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if sealed(p, fi.Size()) {
		t.Fatal("the seal still holds after a byte of the file changed")
	}
}
