package testkit

import (
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestUnixUser: UnixUser makes a real account with a 0700 home it owns,
// reachable through traversable directories, a group of its own and the
// shell /bin/bash; UnixGroup adds it to a group; their cleanups remove the
// account, its home, its processes and the group.
func TestUnixUser(t *testing.T) {
	var u UnixAccount
	var grp string
	var pid int
	t.Run("make", func(t *testing.T) {
		u = UnixUser(t, "Alice!")
		grp, _ = UnixGroup(t, u.Name)
		if !strings.HasPrefix(u.Name, "dgtalice") || len(u.Name) != len("dgtalice")+8 {
			t.Errorf("name %q: want dgtalice + 8 hex digits", u.Name)
		}
		var st unix.Stat_t
		if err := unix.Stat(u.Home, &st); err != nil || st.Uid != u.UID || st.Gid != u.GID || st.Mode&0o777 != 0o700 {
			t.Errorf("home %s: %+v %v, want uid %d gid %d mode 0700", u.Home, st, err, u.UID, u.GID)
		}
		if filepath.Base(filepath.Dir(u.Home)) != "home" || !traversable(filepath.Dir(u.Home)) {
			t.Errorf("the directories above %s are not traversable", u.Home)
		}
		pw, err := user.Lookup(u.Name)
		if err != nil {
			t.Fatal(err)
		}
		if ids, _ := pw.GroupIds(); len(ids) < 2 {
			t.Errorf("groups %v: want its own and %s", ids, grp)
		}
		// A process of the account, left running: the cleanup must end it.
		cmd := exec.Command("/bin/sleep", "300")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID}}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go cmd.Wait()
		pid = cmd.Process.Pid
	})
	if _, err := user.Lookup(u.Name); !errors.As(err, new(user.UnknownUserError)) {
		t.Errorf("account %s still there after cleanup: %v", u.Name, err)
	}
	if _, err := user.LookupGroup(grp); !errors.As(err, new(user.UnknownGroupError)) {
		t.Errorf("group %s still there after cleanup: %v", grp, err)
	}
	if _, err := os.Stat(u.Home); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("home %s still there after cleanup: %v", u.Home, err)
	}
	if pid != 0 && !Gone(pid) {
		t.Errorf("the account's process %d survived the cleanup", pid)
	}
}

func traversable(dir string) bool {
	for ; ; dir = filepath.Dir(dir) {
		st, err := os.Stat(dir)
		if err != nil || st.Mode().Perm()&0o001 == 0 {
			return false
		}
		if dir == "/" {
			return true
		}
	}
}

// TestExecutableByAll: a program in a 0700 directory (as go test builds
// the test binary) is copied somewhere another account can run it; one
// that is runnable already is returned as is.
func TestExecutableByAll(t *testing.T) {
	u := UnixUser(t, "bin")
	hidden := t.TempDir()
	os.Chmod(hidden, 0o700)
	src := filepath.Join(hidden, "true")
	if err := copyFile(src, "/bin/true", 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(path string) error {
		cmd := exec.Command(path)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID}}
		return cmd.Run()
	}
	if err := run(src); !errors.Is(err, os.ErrPermission) {
		t.Fatalf("running %s as %s: %v, want a permission error (the test shows nothing otherwise)", src, u.Name, err)
	}
	got := ExecutableByAll(t, src)
	if got == src {
		t.Fatalf("ExecutableByAll(%s) returned it as is", src)
	}
	if err := run(got); err != nil {
		t.Errorf("running the copy %s as %s: %v", got, u.Name, err)
	}
	if resolved, _ := filepath.EvalSymlinks("/bin/true"); ExecutableByAll(t, "/bin/true") != resolved {
		t.Errorf("ExecutableByAll(/bin/true) = %s, want %s", ExecutableByAll(t, "/bin/true"), resolved)
	}
}
