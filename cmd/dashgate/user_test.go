package main

import (
	"bytes"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/dashgate/dashgate/users"
)

// runUser runs `dashgate user args...` with env as the environment.
func runUser(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = userRun(args, func(k string) string { return env[k] }, &out, &errb)
	return code, out.String(), errb.String()
}

// loginToken checks that out is one line holding a login URL under base
// and returns its token.
func loginToken(t *testing.T, out, base string) string {
	t.Helper()
	if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
		t.Fatalf("stdout %q: want exactly one line", out)
	}
	u, err := url.Parse(strings.TrimSuffix(out, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	tok := u.Query().Get("token")
	u.RawQuery = ""
	if u.String() != base || tok == "" {
		t.Fatalf("login URL %q: want %s?token=TOKEN", out, base)
	}
	return tok
}

func TestUserAdd(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "users")
	var out, errb bytes.Buffer
	code := Main([]string{"user", "add", "--users-file", path, "--url", "https://box.example/dash", "alice"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	tok := loginToken(t, out.String(), "https://box.example/dash/")
	if !regexp.MustCompile(`^alice\.[0-9a-f]{48}$`).MatchString(tok) {
		t.Errorf("token %q: want alice.SECRET", tok)
	}
	for _, want := range []string{"shown this once", "SIGHUP", "kill -HUP", "systemctl reload"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr %q does not say %q", errb.String(), want)
		}
	}
	if strings.Contains(errb.String(), tok) {
		t.Error("stderr repeats the token")
	}
	s, err := users.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if u, ok := s.Verify(tok); !ok || u != "alice" {
		t.Errorf("Verify(the printed token) = %q, %v", u, ok)
	}
	data, _ := os.ReadFile(path)
	hash := strings.TrimSuffix(strings.TrimPrefix(string(data), "alice:"), "\n")
	if cost, err := bcrypt.Cost([]byte(hash)); err != nil || cost != bcrypt.DefaultCost {
		t.Errorf("the line's bcrypt cost is %d (%v), want bcrypt.DefaultCost %d", cost, err, bcrypt.DefaultCost)
	}
	if fi, _ := os.Stat(path); fi.Mode() != 0o600 {
		t.Errorf("users file mode %v, want 0600", fi.Mode())
	}

	// Flags after the name, a name the query must escape.
	code, stdout, stderr := runUser(t, nil, "add", "bob@example.com", "--users-file", path, "--url", "http://[::1]:9000/x/")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if !strings.Contains(stdout, "?token=bob%40example.com.") {
		t.Errorf("login URL %q: the token is not query-escaped", stdout)
	}
	tok = loginToken(t, stdout, "http://[::1]:9000/x/")
	if f, err := users.Open(path); err != nil {
		t.Fatal(err)
	} else if u, ok := f.Verify(tok); !ok || u != "bob@example.com" {
		t.Errorf("Verify(bob's printed token) = %q, %v", u, ok)
	}
}

func TestUserDefaults(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	env := map[string]string{"XDG_STATE_HOME": state, "HOME": "/nonexistent"}
	code, stdout, stderr := runUser(t, env, "add", "alice")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	loginToken(t, stdout, "http://127.0.0.1:8787/")
	path := filepath.Join(state, "dashgate", "users")
	if s, err := users.Load(path); err != nil || s.Len() != 1 {
		t.Fatalf("the default users file %s: %v", path, err)
	}
	if fi, err := os.Stat(filepath.Dir(path)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("state dir: %v, %v; want made 0700", fi, err)
	}

	other := filepath.Join(t.TempDir(), "elsewhere")
	env["DASHGATE_USERS_FILE"] = other
	env["DASHGATE_URL"] = "https://dash.example"
	code, stdout, stderr = runUser(t, env, "add", "bob")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	loginToken(t, stdout, "https://dash.example/")
	if s, err := users.Load(other); err != nil || s.Len() != 1 {
		t.Errorf("$DASHGATE_USERS_FILE %s: %v", other, err)
	}
	if code, stdout, _ := runUser(t, env, "list"); code != 0 || stdout != "bob\n" {
		t.Errorf("list with $DASHGATE_USERS_FILE: exit %d, %q", code, stdout)
	}
	if code, stdout, _ := runUser(t, env, "list", "--users-file", path); code != 0 || stdout != "alice\n" {
		t.Errorf("list --users-file over the env: exit %d, %q", code, stdout)
	}
	if code, _, stderr := runUser(t, map[string]string{}, "list"); code != 2 || !strings.Contains(stderr, "--users-file") {
		t.Errorf("list without HOME or a users file: exit %d, %q", code, stderr)
	}
}

func TestUserListRemove(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "users")
	for _, n := range []string{"carol", "alice", "bob"} {
		if code, _, stderr := runUser(t, nil, "add", "--users-file", path, n); code != 0 {
			t.Fatalf("add %s: exit %d, %q", n, code, stderr)
		}
	}
	if code, stdout, _ := runUser(t, nil, "list", "--users-file", path); code != 0 || stdout != "alice\nbob\ncarol\n" {
		t.Errorf("list: exit %d, %q", code, stdout)
	}
	code, stdout, stderr := runUser(t, nil, "remove", "--users-file", path, "bob")
	if code != 0 || stdout != "" || !strings.Contains(stderr, "sockets close") || !strings.Contains(stderr, "SIGHUP") {
		t.Errorf("remove: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, stdout, _ := runUser(t, nil, "list", "--users-file", path); code != 0 || stdout != "alice\ncarol\n" {
		t.Errorf("list after remove: exit %d, %q", code, stdout)
	}
}

func TestUserErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "users")
	if code, _, stderr := runUser(t, nil, "add", "--users-file", path, "alice"); code != 0 {
		t.Fatalf("add: %q", stderr)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink("users", link); err != nil {
		t.Fatal(err)
	}
	f := "--users-file=" + path
	tests := []struct {
		name  string
		args  []string
		code  int
		want  string // in stderr
		usage bool   // the usage follows
	}{
		{"nothing", nil, 2, "add, list or remove?", true},
		{"unknown command", []string{"rename", "a"}, 2, `unknown command "rename"`, true},
		{"add without a name", []string{"add", f}, 2, "add takes one NAME", true},
		{"add two names", []string{"add", f, "a", "b"}, 2, "add takes one NAME", true},
		{"remove without a name", []string{"remove", f}, 2, "remove takes one NAME", true},
		{"list with a name", []string{"list", f, "a"}, 2, "list takes no name", true},
		{"unknown flag", []string{"list", "--nope"}, 2, "flag provided but not defined: -nope", true},
		{"url on list", []string{"list", "--url", "http://x/"}, 2, "not defined: -url", true},
		{"bad name", []string{"add", f, "bad name"}, 2, `bad user name "bad name"`, true},
		{"bad url", []string{"add", f, "--url", "ftp://x/", "bob"}, 2, `--url "ftp://x/"`, true},
		{"url with a query", []string{"add", f, "--url", "http://x/?a=1", "bob"}, 2, "no query", true},
		{"existing user", []string{"add", f, "alice"}, 2, `"alice": user exists`, false},
		{"absent user", []string{"remove", f, "zed"}, 2, `"zed": no such user`, false},
		{"missing file", []string{"list", "--users-file", filepath.Join(dir, "none")}, 2, "no such file", false},
		{"symlinked file", []string{"list", "--users-file", link}, 2, "is a symlink", false},
		{"symlinked file, add", []string{"add", "--users-file", link, "bob"}, 2, "is a symlink", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runUser(t, nil, tt.args...)
			if code != tt.code || !strings.HasPrefix(stderr, "dashgate user: ") || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and dashgate user: ...%s", code, stderr, tt.code, tt.want)
			}
			if got := strings.Contains(stderr, "usage:"); got != tt.usage {
				t.Errorf("usage printed: %v, want %v (stderr %q)", got, tt.usage, stderr)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
		})
	}
	if code, stdout, _ := runUser(t, nil, "add", "-h"); code != 0 || !strings.Contains(stdout, "usage:") {
		t.Errorf("add -h: exit %d, stdout %q", code, stdout)
	}
	if s, err := users.Load(path); err != nil || strings.Join(s.Names(), ",") != "alice" {
		t.Errorf("the failed commands changed the file: %v %v", s.Names(), err)
	}
}
