package files_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/dashgate/dashgate/accounts"
	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/workers/files"
)

// The test binary is the helper too: `<test binary> file put|get ...`.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "file" {
		os.Exit(files.Main(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

func self(t *testing.T) files.Helper {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return files.Helper{Self: exe}
}

// get is Get into a buffer.
func get(t *testing.T, h files.Helper, dir, path string) (string, []byte, error) {
	t.Helper()
	var buf bytes.Buffer
	abs, err := h.Get(context.Background(), dir, path, func(string, int64) io.Writer { return &buf })
	return abs, buf.Bytes(), err
}

func TestPutAndGet(t *testing.T) {
	h := self(t)
	dir := t.TempDir()
	body := bytes.Repeat([]byte("dashgate\n"), 10000)
	path, n, err := h.Put(context.Background(), dir, "notes.txt", bytes.NewReader(body), 1<<20)
	if err != nil || path != filepath.Join(dir, "notes.txt") || n != int64(len(body)) {
		t.Fatalf("Put: %q %d %v, want %s/notes.txt %d", path, n, err, dir, len(body))
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, body) {
		t.Fatalf("the uploaded file holds %d bytes, not what was sent", len(got))
	}
	abs, got, err := get(t, h, dir, "notes.txt") // relative to dir
	if err != nil || abs != path || !bytes.Equal(got, body) {
		t.Fatalf("Get notes.txt: %q, %d bytes, %v; want %s and what was put", abs, len(got), err, path)
	}

	// Never replaced: the first file stays.
	if _, _, err := h.Put(context.Background(), dir, "notes.txt", strings.NewReader("other"), 1<<20); !errors.Is(err, files.ErrExists) {
		t.Errorf("Put over an existing file: %v, want ErrExists", err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, body) {
		t.Errorf("a refused Put changed the existing file")
	}
	// Nor through a symbolic link, dangling or not.
	if err := os.Symlink("/tmp/dashgate-files-elsewhere", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.Put(context.Background(), dir, "link", strings.NewReader("x"), 10); !errors.Is(err, files.ErrExists) {
		t.Errorf("Put over a symbolic link: %v, want ErrExists", err)
	}
	if _, err := os.Lstat("/tmp/dashgate-files-elsewhere"); err == nil {
		t.Errorf("Put followed the symbolic link")
	}

	// Over the bound: refused, nothing left.
	if _, _, err := h.Put(context.Background(), dir, "big.bin", bytes.NewReader(make([]byte, 1001)), 1000); !errors.Is(err, files.ErrTooLarge) {
		t.Errorf("Put of 1001 bytes with max 1000: %v, want ErrTooLarge", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "big.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused large Put left its file: %v", err)
	}
	if _, _, err := h.Put(context.Background(), dir, "exact.bin", bytes.NewReader(make([]byte, 1000)), 1000); err != nil {
		t.Errorf("Put of exactly max bytes: %v", err)
	}

	for _, name := range []string{"", ".", "..", "../escape", "a/b", "x\x00y", strings.Repeat("n", 256)} {
		if _, _, err := h.Put(context.Background(), dir, name, strings.NewReader("x"), 10); !errors.Is(err, files.ErrBadName) {
			t.Errorf("Put %q: %v, want ErrBadName", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escape")); err == nil {
		t.Errorf("Put ../escape wrote outside the directory")
	}

	if _, _, err := get(t, h, dir, "missing"); !errors.Is(err, files.ErrNotFound) {
		t.Errorf("Get of a missing file: %v, want ErrNotFound", err)
	}
	if _, _, err := get(t, h, dir, "/"); !errors.Is(err, files.ErrNotFile) {
		t.Errorf("Get of a directory: %v, want ErrNotFile", err)
	}
	if _, _, err := h.Put(context.Background(), filepath.Join(dir, "absent"), "x", strings.NewReader("x"), 10); !errors.Is(err, files.ErrNotFound) {
		t.Errorf("Put into a missing directory: %v, want ErrNotFound", err)
	}
}

// As an account: the kernel decides. nobody cannot write a directory
// root owns, nor read /etc/shadow; what nobody uploads is nobody's.
func TestAsAccount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("starting the helper as another account needs root")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const nobody = 65534
	h := files.Helper{Self: testkit.ExecutableByAll(t, exe), Account: &accounts.Account{Name: "nobody", UID: nobody, GID: nobody, Groups: []uint32{nobody}, Home: "/"}}

	// Not t.TempDir: its parent is 0700, which nobody cannot enter.
	rootDir, err := os.MkdirTemp("", "dashgate-files-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(rootDir) })
	if err := os.Chmod(rootDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.Put(context.Background(), rootDir, "x", strings.NewReader("x"), 10); !errors.Is(err, files.ErrDenied) {
		t.Errorf("nobody's Put into a directory of root's: %v, want ErrDenied", err)
	}
	if _, err := os.Stat(filepath.Join(rootDir, "x")); err == nil {
		t.Errorf("nobody's refused Put left a file")
	}
	if _, _, err := get(t, h, "/", "/etc/shadow"); !errors.Is(err, files.ErrDenied) {
		t.Errorf("nobody's Get of /etc/shadow: %v, want ErrDenied", err)
	}

	own := filepath.Join(rootDir, "nobody")
	if err := os.Mkdir(own, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(own, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	path, _, err := h.Put(context.Background(), own, "mine.txt", strings.NewReader("hello"), 10)
	if err != nil {
		t.Fatalf("nobody's Put into their own directory: %v", err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if sys := st.Sys().(*syscall.Stat_t); sys.Uid != nobody || sys.Gid != nobody {
		t.Errorf("nobody's upload is owned by %d:%d, want %d:%d", sys.Uid, sys.Gid, nobody, nobody)
	}
}
