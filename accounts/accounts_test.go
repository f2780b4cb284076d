package accounts_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/dashgate/dashgate/accounts"
	"github.com/dashgate/dashgate/internal/testkit"
)

func writeMap(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "users.map")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMapFile: the map file's lines are dashgateuser:unixuser with blank
// lines and # comments; a malformed line is an error naming its line.
func TestMapFile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, text, err string // err: a part of the error; "" for none
	}{
		{"ok", "# who is who\n\nalice:alice\n  bob : robert  \n", ""},
		{"no colon", "alice:alice\nbob\n", "line 2"},
		{"empty unix name", "# c\nalice:\n", "line 2"},
		{"empty dashgate name", ":alice\n", "line 1"},
		{"bad unix name", "alice:alice\n\ncarol:-rf\n", "line 3"},
		{"unix name with a slash", "dave:../etc\n", "line 1"},
		{"mapped twice", "alice:alice\nalice:bob\n", "line 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := accounts.New(accounts.Options{MapFile: writeMap(t, tc.text)})
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("New: %v, want an error naming %q", err, tc.err)
			}
		})
	}
	if _, err := accounts.New(accounts.Options{MapFile: filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Error("a missing map file is no error")
	}
}

// refused asserts err is a *RefusedError for user whose message contains
// want.
func refused(t *testing.T, err error, user, want string) {
	t.Helper()
	var re *accounts.RefusedError
	if !errors.As(err, &re) || !errors.Is(err, accounts.ErrRefused) {
		t.Fatalf("error %v (%T): want a *RefusedError matching ErrRefused", err, err)
	}
	if re.User != user || !strings.Contains(err.Error(), want) {
		t.Fatalf("refusal %+v: want user %q and a message containing %q", re, user, want)
	}
}

// TestRootRefused: an account with uid 0 is refused unless AllowRoot.
func TestRootRefused(t *testing.T) {
	t.Parallel()
	m, err := accounts.New(accounts.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Lookup("root")
	refused(t, err, "root", `dashgate user "root" maps to uid 0: refused (--allow-root-users)`)

	m, err = accounts.New(accounts.Options{AllowRoot: true})
	if err != nil {
		t.Fatal(err)
	}
	a, err := m.Lookup("root")
	if err != nil {
		t.Fatalf("Lookup(root) with AllowRoot: %v", err)
	}
	if a.UID != 0 || a.GID != 0 || a.Home != "/root" || a.Shell == "" || !slices.Contains(a.Groups, 0) {
		t.Errorf("root is %+v", a)
	}
}

// TestUnknownRefused: a user without an account, and one the map file
// does not list, are refused with the message the person sees.
func TestUnknownRefused(t *testing.T) {
	t.Parallel()
	m, _ := accounts.New(accounts.Options{})
	_, err := m.Lookup("dgtnosuch0000")
	refused(t, err, "dgtnosuch0000", `no Unix account for dashgate user "dgtnosuch0000"`)

	m, err = accounts.New(accounts.Options{MapFile: writeMap(t, "alice:dgtnosuch0001\n"), AllowRoot: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Lookup("root") // an account exists, but the map does not list root
	refused(t, err, "root", "not in the Unix users map")
	_, err = m.Lookup("alice")
	refused(t, err, "alice", `no Unix account "dgtnosuch0001" for dashgate user "alice"`)
}

// TestBadNamesRunNothing: a name outside [A-Za-z0-9._-], or one starting
// with '-', is refused before any command runs: id and getent on PATH are
// programs that note each run, and none is noted (a valid lookup is, which
// shows the noting works).
func TestBadNamesRunNothing(t *testing.T) {
	// Not parallel: it sets PATH.
	bin, runs := t.TempDir(), filepath.Join(t.TempDir(), "runs")
	for _, prog := range []string{"id", "getent"} {
		path, err := exec.LookPath(prog)
		if err != nil {
			t.Skipf("%s: %v", prog, err)
		}
		script := "#!/bin/sh\necho \"$0 $*\" >>" + runs + "\nexec " + path + " \"$@\"\n"
		if err := os.WriteFile(filepath.Join(bin, prog), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	m, _ := accounts.New(accounts.Options{AllowRoot: true})
	for _, name := range []string{"-G", "--help", "a b", "a;id", "../root", "a/b", "", "ro\not", "x$(id)", strings.Repeat("a", 33), ".."} {
		_, err := m.Lookup(name)
		refused(t, err, name, "not a valid account name")
	}
	if b, err := os.ReadFile(runs); err == nil {
		t.Fatalf("commands ran for bad names:\n%s", b)
	}
	if _, err := m.Lookup("root"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(runs); !strings.Contains(string(b), "id -G -- root") || !strings.Contains(string(b), "getent passwd -- root") {
		t.Fatalf("a valid lookup ran %q, want id -G -- root and getent passwd -- root", b)
	}
}

// TestRealAccount: a real account's uid, gid, full group list (a
// supplementary group added with usermod -aG included), home and shell;
// a map file may give it another dashgate name; a second lookup within the
// TTL is the cached one (a group added meanwhile is seen by a new Map
// only), and lookups may run concurrently.
func TestRealAccount(t *testing.T) {
	t.Parallel()
	u := testkit.UnixUser(t, "alice")
	_, gid := testkit.UnixGroup(t, u.Name)
	m, err := accounts.New(accounts.Options{MapFile: writeMap(t, "alice:"+u.Name+"\n")})
	if err != nil {
		t.Fatal(err)
	}
	a, err := m.Lookup("alice")
	if err != nil {
		t.Fatal(err)
	}
	want := accounts.Account{Name: u.Name, UID: u.UID, GID: u.GID, Groups: []uint32{u.GID, gid}, Home: u.Home, Shell: "/bin/bash"}
	if a.Name != want.Name || a.UID != want.UID || a.GID != want.GID || !slices.Equal(a.Groups, want.Groups) || a.Home != want.Home || a.Shell != want.Shell {
		t.Fatalf("Lookup(alice) = %+v, want %+v", *a, want)
	}
	a.Groups[0] = 12345 // the caller's copy

	_, later := testkit.UnixGroup(t, u.Name)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			b, err := m.Lookup("alice")
			if err != nil || !slices.Equal(b.Groups, want.Groups) {
				t.Errorf("cached Lookup(alice) = %+v, %v: want the groups %v of the first lookup", b, err, want.Groups)
			}
		})
	}
	wg.Wait()
	fresh, _ := accounts.New(accounts.Options{})
	b, err := fresh.Lookup(u.Name)
	if err != nil || !slices.Equal(b.Groups, []uint32{u.GID, gid, later}) {
		t.Fatalf("new Map's Lookup = %+v, %v: want groups %v", b, err, []uint32{u.GID, gid, later})
	}
}
