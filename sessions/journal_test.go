package sessions

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/store/sqlite"
)

// smallDisk mounts a tmpfs of size bytes on a new temporary directory and
// unmounts it when t ends (after the cleanups registered later). It skips
// where mounting is not allowed (not root).
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Skipf("cannot mount a small filesystem here: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fillDisk writes dir/filler until the filesystem is full and returns its
// path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, n := range []int{64 << 10, 4 << 10, 1} {
		buf := make([]byte, n)
		for {
			if _, err = f.Write(buf); err != nil {
				break
			}
		}
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("fill %s: %v", dir, err)
		}
	}
	return path
}

// TestJournalSavesWhatFits: on a real full disk, the journal's backlog of
// two sessions is bigger than the space that comes back. The retry saves,
// in parts, what fits (the first session's oldest entries, in seq order:
// they are there after the file is opened again), and at shutdown one ERROR
// record names what could not be saved; the failure itself is one ERROR.
func TestJournalSavesWhatFits(t *testing.T) {
	t.Parallel()
	dir := smallDisk(t, 4<<20)
	path := filepath.Join(dir, "dashgate.db")
	st, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			st.Close()
		}
	})
	log, logs := testkit.NewLogger()
	j := newJournal(st, log)
	for _, sid := range []string{"a", "b"} {
		j.putSession(store.Session{ID: sid, Title: sid, State: store.StateSuspended})
	}
	if err := j.flush(t.Context()); err != nil {
		t.Fatal(err)
	}

	filler := fillDisk(t, dir)
	// 2 x 4 MB of entries, queued in turn, against 512 KiB set free below.
	const n = 8000
	text := strings.Repeat("a backlog bigger than the free space ", 13) // ~480 bytes
	for seq := uint64(1); seq <= n; seq++ {
		for _, sid := range []string{"a", "b"} {
			j.putEntry(sid, 0, store.Entry{Seq: seq, Role: store.RoleUser, Kind: store.KindPrompt, Text: fmt.Sprint(seq, " ", text)})
		}
	}
	testkit.WaitFor(t, 60*time.Second, "the store write failure", func() bool { return len(logs.Records("store write failed")) > 0 })
	fi, err := os.Stat(filler)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filler, fi.Size()-512<<10); err != nil {
		t.Fatal(err)
	}
	var saved uint64
	testkit.WaitFor(t, 30*time.Second, "a part of the backlog saved", func() bool {
		got, err := st.Get(t.Context(), "", "a")
		saved = got.LastSeq
		return err == nil && got.LastSeq > 0
	})

	t.Logf("saved while running: a up to seq %d", saved)
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if err := j.close(ctx); err == nil {
		t.Fatal("close of a journal whose store is full succeeded")
	}
	closed = true
	st.Close() // its checkpoint may fail on the full disk: the -wal keeps the commits
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}

	if recs := logs.Records("store write failed"); len(recs) != 1 || recs[0]["level"] != "WARN" {
		t.Fatalf("failure records: %v", recs)
	}
	recs := logs.Records("store: changes lost at shutdown")
	if len(recs) != 1 || recs[0]["level"] != "ERROR" {
		t.Fatalf("loss records: %v", recs)
	}
	lost, _ := recs[0]["lost"].([]any)
	if len(lost) != 2 {
		t.Fatalf("loss record names %v; want sessions a and b", recs[0]["lost"])
	}
	la, _ := lost[0].(map[string]any)
	lb, _ := lost[1].(map[string]any)
	aFrom, _ := la["from_seq"].(float64)
	if la["sid"] != "a" || lb["sid"] != "b" || lb["from_seq"] != float64(1) || lb["to_seq"] != float64(n) ||
		lb["entries"] != float64(n) || la["to_seq"] != float64(n) || la["entries"] != float64(n)-aFrom+1 {
		t.Fatalf("loss record names %v; want a from its first unsaved seq to %d, and all %d of b", lost, n, n)
	}
	if recs[0]["entries"] != float64(2*n)-aFrom+1 {
		t.Fatalf("loss record counts %v entries; want %v", recs[0]["entries"], float64(2*n)-aFrom+1)
	}

	// What was saved is there after a restart: a's entries up to the
	// first lost one, in seq order, nothing of b.
	st2, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	a, err := st2.Get(t.Context(), "", "a")
	if err != nil || a.LastSeq < saved || a.LastSeq != uint64(aFrom)-1 {
		t.Fatalf("after reopening, a's LastSeq %d, %v; want %v (saved while running: %d)", a.LastSeq, err, aFrom-1, saved)
	}
	es, _, err := st2.HistoryFor(t.Context(), "", "a", 0, n)
	if err != nil || uint64(len(es)) != a.LastSeq {
		t.Fatalf("after reopening, a has %d entries, %v; want %d", len(es), err, a.LastSeq)
	}
	for i, e := range es {
		if e.Seq != uint64(i+1) || !strings.HasPrefix(e.Text, fmt.Sprint(e.Seq, " ")) {
			t.Fatalf("entry %d of a: seq %d %.20q", i, e.Seq, e.Text)
		}
	}
	if b, err := st2.Get(t.Context(), "", "b"); err != nil || b.LastSeq != 0 {
		t.Fatalf("after reopening, b's LastSeq %d, %v; want 0", b.LastSeq, err)
	}
}
