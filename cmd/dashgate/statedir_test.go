package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
)

// nobody is the uid of another local user in the tests that plant files.
const nobody = 65534

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the test gives a file to another uid (chown)")
	}
}

// TestDefaultStateDir: the default state dir is the XDG one, never /tmp,
// and without XDG_STATE_HOME and HOME dashgate asks for --state-dir.
func TestDefaultStateDir(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"xdg", map[string]string{"XDG_STATE_HOME": "/x/state", "HOME": "/home/a"}, "/x/state/dashgate"},
		{"home", map[string]string{"HOME": "/home/a"}, "/home/a/.local/state/dashgate"},
		{"relative xdg is ignored", map[string]string{"XDG_STATE_HOME": "state", "HOME": "/home/a"}, "/home/a/.local/state/dashgate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseConfig(nil, func(k string) string { return tt.env[k] }, io.Discard)
			if err != nil || cfg.StateDir != tt.want {
				t.Fatalf("state dir %q (%v), want %q", cfg.StateDir, err, tt.want)
			}
		})
	}
	_, err := parseConfig(nil, func(string) string { return "" }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--state-dir") {
		t.Fatalf("without XDG_STATE_HOME and HOME: %v, want a refusal naming --state-dir", err)
	}
	if cfg, err := parseConfig([]string{"--state-dir", "/srv/dg"}, func(string) string { return "" }, io.Discard); err != nil || cfg.StateDir != "/srv/dg" {
		t.Fatalf("--state-dir without HOME: %q %v", cfg.StateDir, err)
	}
}

// TestStateDirRefused: a state dir another user could have planted (a
// symlink, another uid's, writable by others) stops the start with exit 2
// and one line, before its token is read or printed.
func TestStateDirRefused(t *testing.T) {
	plant := func(t *testing.T, dir string, mode os.FileMode, uid int) {
		t.Helper()
		if err := os.Mkdir(dir, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "token"), []byte("planted-token-0123456789abcdef0123456789\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if uid >= 0 {
			if err := os.Chown(filepath.Join(dir, "token"), uid, uid); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(dir, uid, uid); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name  string
		root  bool
		setup func(t *testing.T, dir string)
		want  string
	}{
		{"world-writable", false, func(t *testing.T, dir string) { plant(t, dir, 0o777, -1) }, "writable by others (mode 0777)"},
		{"group-writable", false, func(t *testing.T, dir string) { plant(t, dir, 0o770, -1) }, "writable by others (mode 0770)"},
		{"symlink to another's directory", true, func(t *testing.T, dir string) {
			theirs := dir + "-theirs"
			plant(t, theirs, 0o700, nobody)
			if err := os.Symlink(theirs, dir); err != nil {
				t.Fatal(err)
			}
		}, "is a symlink"},
		{"another user's", true, func(t *testing.T, dir string) { plant(t, dir, 0o700, nobody) }, "owned by uid " + strconv.Itoa(nobody)},
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root {
				needRoot(t)
			}
			dir := filepath.Join(t.TempDir(), "state")
			tt.setup(t, dir)
			var stdout, stderr bytes.Buffer
			// The deadline only bounds a dashgate that wrongly starts serving.
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, self, "--state-dir", dir, "--addr", "127.0.0.1:0", "--store", "none")
			cmd.Env = append(os.Environ(), mainEnv+"=1")
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			cmd.Run()
			code := cmd.ProcessState.ExitCode()
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], tt.want) || !strings.Contains(lines[0], dir) || !strings.Contains(lines[0], "--state-dir") {
				t.Fatalf("exit %d, stderr %q: want exit 2 and one line naming %s, %q and --state-dir", code, stderr.String(), dir, tt.want)
			}
			if strings.Contains(stdout.String()+stderr.String(), "planted-token") {
				t.Fatalf("the planted token was printed: %q", stdout.String())
			}
		})
	}
}

// TestStateDirMade: a missing state dir (and its parents) is made 0700;
// one of the user's own with mode 0755 (systemd's StateDirectory= default)
// is accepted.
func TestStateDirMade(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "home", ".local", "state", "dashgate")
	if err := prepareStateDir(dir); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: %v %v, want 0700", d, fi.Mode(), err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := prepareStateDir(dir); err != nil {
		t.Fatalf("a 0755 directory of our own: %v", err)
	}
}

// TestStateTokenRefused: a token file that is a symlink, not 0600, not a
// regular file or another user's is refused, never read.
func TestStateTokenRefused(t *testing.T) {
	tests := []struct {
		name  string
		root  bool
		setup func(t *testing.T, path string)
		want  string
	}{
		{"symlink", false, func(t *testing.T, path string) {
			target := filepath.Join(t.TempDir(), "elsewhere")
			os.WriteFile(target, []byte("planted-token-0123456789abcdef0123456789\n"), 0o600)
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}, "is a symlink"},
		{"readable by others", false, func(t *testing.T, path string) {
			os.WriteFile(path, []byte("planted-token-0123456789abcdef0123456789\n"), 0o644)
			os.Chmod(path, 0o644)
		}, "has mode 0644, not 0600"},
		{"a fifo", false, func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
		{"another user's", true, func(t *testing.T, path string) {
			os.WriteFile(path, []byte("planted-token-0123456789abcdef0123456789\n"), 0o600)
			if err := os.Chown(path, nobody, nobody); err != nil {
				t.Fatal(err)
			}
		}, "owned by uid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root {
				needRoot(t)
			}
			dir := t.TempDir()
			tt.setup(t, filepath.Join(dir, "token"))
			tok, err := stateToken(dir)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("token %q, err %v; want a refusal saying %q", tok, err, tt.want)
			}
		})
	}
}

// TestStoreSymlinkRefused: a store file, or its -wal, that is a symlink is
// refused before SQLite would follow it.
func TestStoreSymlinkRefused(t *testing.T) {
	for _, suffix := range []string{"", "-wal"} {
		dir := t.TempDir()
		path := filepath.Join(dir, "dashgate.db")
		if err := os.Symlink(filepath.Join(t.TempDir(), "theirs.db"), path+suffix); err != nil {
			t.Fatal(err)
		}
		f, err := leaseStore(path)
		if err == nil {
			f.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "is a symlink") {
			t.Fatalf("store with a symlinked %q: %v, want a refusal", "dashgate.db"+suffix, err)
		}
	}
}

// TestLegacyStateDirNotice: conversations left in the old default
// (/tmp/dashgate-<uid>) are named once, with where they live now and how
// to move them; the next start says nothing.
func TestLegacyStateDirNotice(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	old := filepath.Join(tmp, "dashgate-"+strconv.Itoa(os.Getuid()))
	if err := os.Mkdir(old, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(old, "dashgate.db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "state")
	if err := prepareStateDir(state); err != nil {
		t.Fatal(err)
	}
	log, buf := testkit.NewLogger()
	noticeLegacyStateDir(state, log)
	noticeLegacyStateDir(state, log)
	recs := buf.Records("conversations in the old state directory are not used")
	if len(recs) != 1 {
		t.Fatalf("%d notices, want 1:\n%s", len(recs), buf)
	}
	r := recs[0]
	if r.Str("level") != "WARN" || r.Str("old_state_dir") != old || r.Str("state_dir") != state || !strings.Contains(r.Str("move"), "mv "+old+"/dashgate.db*") {
		t.Fatalf("notice %v", r)
	}
	// Pointing --state-dir at the old directory is a choice: no notice.
	log2, buf2 := testkit.NewLogger()
	noticeLegacyStateDir(old, log2)
	if n := len(buf2.Records("conversations in the old state directory are not used")); n != 0 {
		t.Fatalf("%d notices with --state-dir at the old directory", n)
	}
}
