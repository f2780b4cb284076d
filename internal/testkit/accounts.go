package testkit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"
)

// UnixAccount is a Unix account made by UnixUser for one test. (The kit
// imports nothing of the project, so this is not accounts.Account; a test
// gets that from accounts.Map.Lookup(Name).)
type UnixAccount struct {
	Name     string // "dgt" + up to 8 characters of the label + 8 random hex digits
	UID, GID uint32
	Home     string // <temp>/home/<Name>, mode 0700, owned by the account
	Shell    string // /bin/bash
}

// accountMu serialises this process's useradd, groupadd, usermod and
// userdel runs: each locks /etc/passwd and fails, rather than waits, when
// another holds it. Runs from other processes are retried (accountCmd).
var accountMu sync.Mutex

// requireRoot is RequireRoot for the kit's account makers.
func requireRoot(tb testing.TB, what string) { tb.Helper(); RequireRoot(tb, what+" (to run useradd)") }

// RequireRoot skips tb unless it runs as root; with DASHGATE_E2E=1 it
// fails instead, so CI cannot pass by skipping. what names the test and
// why it needs root, as in "nginx as www-data (workers of another account)".
func RequireRoot(tb testing.TB, what string) {
	tb.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv(EnvE2E) == "1" {
		tb.Fatalf("%s needs root, and DASHGATE_E2E=1 forbids skipping", what)
	}
	tb.Skipf("%s needs root; not root here", what)
}

// accountCmd runs one of the shadow tools, retrying for up to 10 s while
// another process holds the password file's lock (exit status 10 of
// useradd/usermod/userdel, "cannot lock").
func accountCmd(args ...string) error {
	accountMu.Lock()
	defer accountMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var last error
	err := Poll(ctx, func() bool {
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		// ECHILD: an orphan reaper of this process (workers.Manager's, in
		// a parallel test) took the tool's exit status before Wait did;
		// it ran to its end, and the caller's next step (a lookup of the
		// account, its removal) tells whether it did its work.
		if err == nil || errors.Is(err, syscall.ECHILD) {
			last = nil
			return true
		}
		last = fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		return !strings.Contains(string(out), "lock") // another process holds it: try again
	})
	if last != nil {
		return last
	}
	return err
}

func randomHex() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// UnixUser makes a real Unix account for the test: `useradd --create-home
// --home-dir <temp>/home/<name> --shell /bin/bash <name>`, with a name
// unique to this run ("dgt" + up to 8 letters or digits of label + 8 hex
// digits), its home mode 0700 and its parent directories traversable. At
// cleanup every process of the account is SIGKILLed (pkill -KILL -u),
// waited for, and the account, its group and its home are removed
// (userdel --remove). It skips the test unless it runs as root, and fails
// instead with DASHGATE_E2E=1.
func UnixUser(tb testing.TB, label string) UnixAccount {
	tb.Helper()
	requireRoot(tb, "a test with real Unix accounts")
	var short strings.Builder
	for _, r := range strings.ToLower(label) {
		if short.Len() < 8 && (r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			short.WriteRune(r)
		}
	}
	name := "dgt" + short.String() + randomHex()
	base, err := os.MkdirTemp("", "dashgate-home-")
	if err != nil {
		tb.Fatal(err)
	}
	homes := filepath.Join(base, "home")
	if err := os.Mkdir(homes, 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(base, 0o755); err != nil { // MkdirTemp makes it 0700
		tb.Fatal(err)
	}
	home := filepath.Join(homes, name)
	if err := accountCmd("useradd", "--create-home", "--home-dir", home, "--shell", "/bin/bash", name); err != nil {
		os.RemoveAll(base)
		tb.Fatalf("make a Unix account: %v", err)
	}
	tb.Cleanup(func() {
		if err := RemoveUnixUser(name); err != nil {
			tb.Errorf("remove Unix account %s: %v", name, err)
		}
		os.RemoveAll(base)
	})
	if err := os.Chmod(home, 0o700); err != nil {
		tb.Fatal(err)
	}
	u, err := user.Lookup(name)
	if err != nil {
		tb.Fatalf("the new account %s: %v", name, err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return UnixAccount{Name: name, UID: uint32(uid), GID: uint32(gid), Home: home, Shell: "/bin/bash"}
}

// RemoveUnixUser SIGKILLs every process of the account, waits up to 10 s
// for them to be gone, and removes the account and its home (userdel
// --remove). UnixUser's cleanup calls it.
func RemoveUnixUser(name string) error {
	u, err := user.Lookup(name)
	if err != nil {
		return err
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	exec.Command("pkill", "-KILL", "-u", name).Run() // status 1: nothing matched
	if !Until(10*time.Second, func() bool { return len(processesOf(uint32(uid))) == 0 }) {
		return fmt.Errorf("processes %v of uid %d survived pkill -KILL", processesOf(uint32(uid)), uid)
	}
	return accountCmd("userdel", "--remove", name)
}

// processesOf lists the live processes whose real uid is uid (zombies are
// left out: they hold no account resource, and their parent reaps them).
func processesOf(uid uint32) []int {
	all, err := procfs.AllProcs()
	if err != nil {
		return nil
	}
	var out []int
	for _, p := range all {
		st, err := p.NewStatus()
		if err != nil || len(st.UIDs) == 0 || st.UIDs[0] != uint64(uid) {
			continue
		}
		if s, err := p.Stat(); err == nil && (s.State == "Z" || s.State == "X") {
			continue
		}
		out = append(out, p.PID)
	}
	return out
}

// UnixGroup makes a Unix group for the test (groupadd, a name unique to
// this run) and adds each of members to it (usermod -aG); it is removed at
// cleanup (groupdel). It returns the name and gid. Root only, as UnixUser.
func UnixGroup(tb testing.TB, members ...string) (string, uint32) {
	tb.Helper()
	requireRoot(tb, "a test with real Unix groups")
	name := "dgtg" + randomHex()
	if err := accountCmd("groupadd", name); err != nil {
		tb.Fatalf("make a Unix group: %v", err)
	}
	tb.Cleanup(func() {
		if err := accountCmd("groupdel", name); err != nil {
			tb.Errorf("remove Unix group %s: %v", name, err)
		}
	})
	for _, m := range members {
		if err := accountCmd("usermod", "-aG", name, m); err != nil {
			tb.Fatalf("add %s to group %s: %v", m, name, err)
		}
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		tb.Fatal(err)
	}
	gid, _ := strconv.ParseUint(g.Gid, 10, 32)
	return name, uint32(gid)
}

// ExecutableByAll returns path when every user can run it (each directory
// on the way is o+x, the file o+rx), else a copy in a 0755 temporary
// directory, removed at cleanup: go test builds the test binary into a
// 0700 directory, which another account cannot enter.
func ExecutableByAll(tb testing.TB, path string) string {
	tb.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		tb.Fatal(err)
	}
	if abs, err = filepath.EvalSymlinks(abs); err != nil {
		tb.Fatal(err)
	}
	if runnableByAll(abs) {
		return abs
	}
	dir, err := os.MkdirTemp("", "dashgate-bin-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	dst := filepath.Join(dir, filepath.Base(abs))
	if err := copyFile(dst, abs, 0o755); err != nil {
		tb.Fatalf("copy %s for other accounts: %v", abs, err)
	}
	if !runnableByAll(dst) {
		tb.Fatalf("%s: still not runnable by every user (is %s traversable?)", dst, os.TempDir())
	}
	return dst
}

// runnableByAll: the file is o+rx and every directory above it o+x.
func runnableByAll(path string) bool {
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm()&0o005 != 0o005 {
		return false
	}
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		st, err := os.Stat(dir)
		if err != nil || st.Mode().Perm()&0o001 == 0 {
			return false
		}
		if dir == "/" {
			return true
		}
	}
}

func copyFile(dst, src string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, mode)
}
