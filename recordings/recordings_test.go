package recordings_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/recordings"
)

func TestMain(m *testing.M) { testkit.VerifyNoLeaks(m) }

// parseCast parses b strictly as asciicast v2 (testkit.ParseCast) or
// fails the test.
func parseCast(t *testing.T, b []byte) testkit.Cast {
	t.Helper()
	c, err := testkit.ParseCast(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func open(t *testing.T, mod func(*recordings.Config)) (*recordings.Store, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "recordings")
	cfg := recordings.Config{Dir: dir}
	if mod != nil {
		mod(&cfg)
	}
	s, err := recordings.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Wait(ctx); err != nil {
			t.Errorf("recordings' writers still running: %v", err)
		}
	})
	return s, dir
}

// finish closes r and waits (bounded) for its writer.
func finish(t *testing.T, r *recordings.Recording) recordings.Result {
	t.Helper()
	r.Close()
	testkit.Recv(t, 10*time.Second, "recording written", r.Done())
	return r.Result()
}

func readCast(t *testing.T, path string) testkit.Cast {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parseCast(t, b)
}

// TestRecordingFormat: a recording is a valid asciicast v2 file: the
// header with the first size, output events whose data joined is the
// output as UTF-8 (a character split across two reads whole, a byte that
// is no UTF-8 as U+FFFD, control characters kept), resizes as COLSxROWS,
// times that never decrease; mode 0600 in a 0700 directory named for the
// owner.
func TestRecordingFormat(t *testing.T) {
	t.Parallel()
	s, dir := open(t, nil)
	r := s.Start("alice", "0123abcd", 100, 30)
	r.Output([]byte("$ echo \"hi\"\\\r\n\x1b[1mbold\x1b[0m\t"))
	r.Output([]byte("\xe2\x80")) // an em dash split across reads
	r.Resize(120, 40)
	r.Output([]byte("\x94 bad:\xff\x00end"))
	res := finish(t, r)
	if res.Truncated() || res.Err != nil {
		t.Fatalf("result %+v", res)
	}
	if filepath.Dir(r.Path()) != filepath.Join(dir, "alice") || !strings.HasPrefix(filepath.Base(r.Path()), "0123abcd-") || filepath.Ext(r.Path()) != ".cast" {
		t.Fatalf("path %s", r.Path())
	}
	c := readCast(t, r.Path())
	if c.Header["width"] != float64(100) || c.Header["height"] != float64(30) {
		t.Fatalf("header %v: want the first size 100x30", c.Header)
	}
	want := "$ echo \"hi\"\\\r\n\x1b[1mbold\x1b[0m\t— bad:\uFFFD\x00end"
	if got := c.Output(); got != want {
		t.Fatalf("output %q, want %q", got, want)
	}
	rs := c.Of("r")
	if len(rs) != 1 || rs[0].Data != "120x40" {
		t.Fatalf("resize events %v", rs)
	}
	if ms := c.Of("m"); len(ms) != 0 {
		t.Fatalf("markers in a whole recording: %v", ms)
	}
	for path, want := range map[string]os.FileMode{r.Path(): 0o600, filepath.Dir(r.Path()): 0o700 | os.ModeDir, dir: 0o700 | os.ModeDir} {
		fi, err := os.Stat(path)
		if err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v (%v), want %v", path, fi.Mode(), err, want)
		}
	}
	if res.Bytes != int64(len(mustRead(t, r.Path()))) {
		t.Errorf("result says %d bytes, the file has %d", res.Bytes, len(mustRead(t, r.Path())))
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRecordingSizeLimit: past MaxBytes the recording stops: the file is
// at most MaxBytes, ends with a marker saying so, and takes nothing more.
func TestRecordingSizeLimit(t *testing.T) {
	t.Parallel()
	const limit = 8 << 10
	s, _ := open(t, func(c *recordings.Config) { c.MaxBytes = limit })
	r := s.Start("", "abc", 80, 24)
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 64) // 1 KiB
	for range 64 {
		r.Output(chunk)
	}
	res := finish(t, r)
	if !res.LimitReached || !res.Truncated() {
		t.Fatalf("result %+v: want the limit reached", res)
	}
	b := mustRead(t, r.Path())
	if len(b) > limit {
		t.Fatalf("file is %d bytes, over the limit %d", len(b), limit)
	}
	c := parseCast(t, b)
	lastEv := c.Events[len(c.Events)-1]
	if lastEv.Code != "m" || !strings.Contains(lastEv.Data, "size limit") {
		t.Fatalf("last event %v: want the size-limit marker", lastEv)
	}
	if got := len(c.Output()); got < limit/2 || !strings.HasPrefix(string(bytes.Repeat(chunk, 64)), c.Output()) {
		t.Fatalf("recorded %d bytes of output, want the first ones up to the limit", got)
	}
	if filepath.Dir(r.Path()) != filepath.Join(filepath.Dir(filepath.Dir(r.Path())), "_anonymous") {
		t.Fatalf("anonymous user's recording at %s", r.Path())
	}
}

// stallWriter is a recording's file whose writes block until release is
// closed (a disk that stopped answering), then go to buf.
type stallWriter struct {
	release chan struct{}
	entered chan struct{} // closed at the first write
	once    sync.Once
	mu      sync.Mutex
	buf     bytes.Buffer
}

func (w *stallWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.entered) })
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *stallWriter) Close() error { return nil }

func (w *stallWriter) bytes() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return bytes.Clone(w.buf.Bytes())
}

// TestRecordingStalledWriterNeverBlocks: while the file's writes block,
// Output returns at once every time (64 MiB of it, far past the queue):
// what does not fit is dropped, and once the writer goes on the recording
// says how much is missing, then has the output that came after.
func TestRecordingStalledWriterNeverBlocks(t *testing.T) {
	t.Parallel()
	w := &stallWriter{release: make(chan struct{}), entered: make(chan struct{})}
	const queue = 256 << 10
	s, _ := open(t, func(c *recordings.Config) {
		c.QueueBytes = queue
		c.Create = func(string) (io.WriteCloser, error) { return w, nil }
	})
	r := s.Start("alice", "abc", 80, 24)
	testkit.Recv(t, 10*time.Second, "the writer stalled in its first write", w.entered)

	chunk := bytes.Repeat([]byte("x"), 32<<10)
	flooded := make(chan struct{})
	go func() {
		defer close(flooded)
		for range 2048 { // 64 MiB
			r.Output(chunk)
		}
	}()
	testkit.Recv(t, 10*time.Second, "64 MiB of Output while the writer is stalled", flooded)

	close(w.release)
	r.Output([]byte("after the stall"))
	res := finish(t, r)
	if res.Dropped < 60<<20 || !res.Truncated() {
		t.Fatalf("result %+v: want about 64 MiB dropped and the recording truncated", res)
	}
	c := parseCast(t, w.bytes())
	// The marker stands where the output is missing: before what came after.
	var marker, after int = -1, -1
	for i, ev := range c.Events {
		if ev.Code == "m" && strings.Contains(ev.Data, "not recorded") && marker < 0 {
			marker = i
		}
		if ev.Code == "o" && strings.Contains(ev.Data, "after the stall") {
			after = i
		}
	}
	if marker < 0 || after < 0 || marker > after {
		t.Fatalf("events %v…: want a marker saying output was not recorded (at %d) before the output after the stall (at %d)", c.Of("m"), marker, after)
	}
	out := c.Output()
	if !strings.HasSuffix(out, "after the stall") || len(out) > queue+len("after the stall") {
		t.Fatalf("recorded %d bytes ending %q: want at most the queue (%d), then what came after", len(out), out[max(0, len(out)-20):], queue)
	}
}

// TestRecordingCreateFails: a recording whose file cannot be made takes
// output without blocking and reports why.
func TestRecordingCreateFails(t *testing.T) {
	t.Parallel()
	s, _ := open(t, func(c *recordings.Config) {
		c.Create = func(string) (io.WriteCloser, error) { return nil, os.ErrPermission }
	})
	r := s.Start("alice", "abc", 80, 24)
	r.Output([]byte("x"))
	res := finish(t, r)
	if !errors.Is(res.Err, os.ErrPermission) || !res.Truncated() {
		t.Fatalf("result %+v", res)
	}
}

// TestSweepDeletesOldOnly: the sweep deletes recordings last written
// before the retention, of every owner, and leaves newer ones, those
// still being written and files that are not recordings.
func TestSweepDeletesOldOnly(t *testing.T) {
	t.Parallel()
	s, dir := open(t, func(c *recordings.Config) { c.Retention = time.Hour })
	now := time.Now()
	old := now.Add(-2 * time.Hour)
	mk := func(owner, sid string, mtime time.Time) string {
		t.Helper()
		r := s.Start(owner, sid, 80, 24)
		r.Output([]byte("x"))
		finish(t, r)
		if err := os.Chtimes(r.Path(), mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return r.Path()
	}
	oldA, oldB := mk("alice", "a1", old), mk("bob@example.com", "b1", old)
	newA := mk("alice", "a2", now)
	stranger := filepath.Join(dir, "alice", "notes.txt")
	if err := os.WriteFile(stranger, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(stranger, old, old)
	active := s.Start("alice", "a3", 80, 24) // still being written
	active.Output([]byte("x"))
	testkit.WaitFor(t, 10*time.Second, "the active recording's file", func() bool { _, err := os.Stat(active.Path()); return err == nil })
	os.Chtimes(active.Path(), old, old)

	n, err := s.Sweep(now)
	if err != nil || n != 2 {
		t.Fatalf("Sweep = %d, %v; want the 2 old ones", n, err)
	}
	for _, p := range []string{oldA, oldB} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: old recording kept (%v)", p, err)
		}
	}
	for _, p := range []string{newA, stranger, active.Path()} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: deleted (%v)", p, err)
		}
	}
	finish(t, active)
}

// TestListAndOpen: an owner lists and opens their own recordings; another
// owner's, a name File never makes and a path outside answer ErrNotFound.
func TestListAndOpen(t *testing.T) {
	t.Parallel()
	s, dir := open(t, nil)
	r := s.Start("alice", "abc", 80, 24)
	r.Output([]byte("hello"))
	finish(t, r)
	b := s.Start("bob", "def", 80, 24)
	finish(t, b)
	file := filepath.Base(r.Path())

	list, err := s.List("alice")
	if err != nil || len(list) != 1 || list[0].File != file || list[0].User != "alice" || list[0].SessionID != "abc" || list[0].Size == 0 || list[0].Active {
		t.Fatalf("List(alice) = %+v, %v", list, err)
	}
	all, err := s.ListAll()
	if err != nil || len(all) != 2 {
		t.Fatalf("ListAll = %+v, %v", all, err)
	}
	f, in, err := s.OpenFile("alice", file)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(f)
	f.Close()
	if !strings.Contains(string(got), "hello") || in.Size != int64(len(got)) {
		t.Fatalf("OpenFile: %q, %+v", got, in)
	}
	if err := os.Symlink(r.Path(), filepath.Join(dir, "bob", "def-20260101T000000.000Z.cast")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ owner, file string }{
		{"bob", file},               // another owner's
		{"", file},                  // the anonymous user is another owner
		{"bob", "../alice/" + file}, // a path
		{"alice", "abc.cast"},       // not a name File makes
		{"alice", strings.TrimSuffix(file, ".cast")},        // without its extension
		{"bob", "def-20260101T000000.000Z.cast"},            // a symlink
		{"../alice", file},                                  // an owner that is a path: escaped
		{"alice/../alice", file},                            // the same
		{"alice", file + "/"},                               // not a name
		{"alice", filepath.Join(dir, "alice", file)},        // an absolute path
		{"alice", "abc-20260101T000000.000Z.cast\x00.cast"}, // a NUL
	} {
		if f, _, err := s.OpenFile(tc.owner, tc.file); !errors.Is(err, recordings.ErrNotFound) {
			if f != nil {
				f.Close()
			}
			t.Errorf("OpenFile(%q, %q) = %v, want ErrNotFound", tc.owner, tc.file, err)
		}
	}
}

// TestDirOf: every owner gets one directory name, a single path element
// safe in a URL, that UserOf turns back; UserOf refuses names DirOf never
// makes.
func TestDirOf(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, owner := range []string{"", "alice", "_anonymous", "~5Fanonymous", "..", ".", ".hidden", "a/b", "a b", "é", "a.b_c-d", "bob@example.com", "~", "-x"} {
		d := recordings.DirOf(owner)
		if d == "" || d == "." || d == ".." || strings.ContainsAny(d, "/%\x00 ") {
			t.Errorf("DirOf(%q) = %q", owner, d)
		}
		if other, ok := seen[d]; ok {
			t.Errorf("DirOf(%q) = DirOf(%q) = %q", owner, other, d)
		}
		seen[d] = owner
		if back, ok := recordings.UserOf(d); !ok || back != owner {
			t.Errorf("UserOf(DirOf(%q) = %q) = %q, %v", owner, d, back, ok)
		}
	}
	for _, d := range []string{"", ".", "..", "a/b", "~2", "~2f", "~2F", "_x", ".x", "~zz", "a%2Fb"} {
		if u, ok := recordings.UserOf(d); ok && recordings.DirOf(u) != d {
			t.Errorf("UserOf(%q) = %q, true; DirOf of it is %q", d, u, recordings.DirOf(u))
		} else if ok && (d == "" || d == "." || d == ".." || strings.Contains(d, "/")) {
			t.Errorf("UserOf(%q) accepted", d)
		}
	}
}

// TestRecordingWrittenAsItGoes: output reaches the file while the
// terminal runs, not only at its close, and the file is valid asciicast at
// each point (a recording in progress can be downloaded and played).
func TestRecordingWrittenAsItGoes(t *testing.T) {
	t.Parallel()
	s, _ := open(t, nil)
	r := s.Start("alice", "abc", 80, 24)
	for _, out := range []string{"first\r\n", "second\r\n"} {
		r.Output([]byte(out))
		testkit.WaitFor(t, 10*time.Second, "the file holds "+out, func() bool {
			b, err := os.ReadFile(r.Path())
			if err != nil {
				return false
			}
			c, err := testkit.ParseCast(b)
			return err == nil && strings.HasSuffix(c.Output(), out)
		})
	}
	finish(t, r)
}
