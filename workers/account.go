package workers

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/dashgate/dashgate/accounts"
)

// Starting a child as a Unix account (Spec.Account, issue 25). The
// credential itself is SysProcAttr.Credential, applied by the forked child
// (proc.go); what is here is what must be right before the fork: the
// environment, the working directory, a login shell's argv, and the
// terminal's owner.

// loginShell is the command of a login shell: the account's shell (spec's
// Path without an account), argv0 "-" + its base name, as login(1) starts
// it.
func loginShell(spec Spec) *exec.Cmd {
	shell := spec.Path
	if spec.Account != nil {
		shell = spec.Account.Shell
	}
	cmd := exec.Command(shell)
	cmd.Args = []string{"-" + filepath.Base(shell)}
	return cmd
}

// accountEnv is env with HOME, USER, LOGNAME and SHELL set to a's, never
// dashgate's: any value env had for them is dropped.
func accountEnv(env []string, a *accounts.Account) []string {
	own := map[string]string{"HOME": a.Home, "USER": a.Name, "LOGNAME": a.Name, "SHELL": a.Shell}
	out := make([]string, 0, len(env)+len(own))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := own[k]; !ok {
			out = append(out, kv)
		}
	}
	for _, k := range []string{"HOME", "USER", "LOGNAME", "SHELL"} {
		out = append(out, k+"="+own[k])
	}
	return out
}

// workDir is the directory a child of a starts in: dir when set and a can
// enter it, else a's home when it can, else "/" (the child would fail to
// start in a directory it cannot enter: the chdir runs after setuid).
func workDir(dir string, a *accounts.Account) string {
	for _, d := range []string{dir, a.Home} {
		if d != "" && canEnter(d, a) {
			return d
		}
	}
	return "/"
}

// canEnter reports whether a may chdir into dir: it exists, is a
// directory, and a has search (x) permission on it and every directory
// above it, by the owner, group or other bits as path_resolution(7)
// applies them to a's uid and groups (uid 0 always may). ACLs are not
// read: a directory reachable only through an ACL counts as closed.
func canEnter(dir string, a *accounts.Account) bool {
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil || !filepath.IsAbs(resolved) {
		return false
	}
	if st, err := os.Stat(resolved); err != nil || !st.IsDir() {
		return false
	}
	if a.UID == 0 {
		return true
	}
	for d := resolved; ; d = filepath.Dir(d) {
		var st unix.Stat_t
		if unix.Stat(d, &st) != nil {
			return false
		}
		var bit uint32
		switch {
		case st.Uid == a.UID:
			bit = unix.S_IXUSR
		case st.Gid == a.GID || slices.Contains(a.Groups, st.Gid):
			bit = unix.S_IXGRP
		default:
			bit = unix.S_IXOTH
		}
		if st.Mode&bit == 0 {
			return false
		}
		if d == "/" {
			return true
		}
	}
}

// ttyGroup is the gid of the "tty" group, or -1 when there is none.
var ttyGroup = sync.OnceValue(func() int {
	g, err := user.LookupGroup("tty")
	if err != nil {
		return -1
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return -1
	}
	return gid
})

// ptyPair is a pty's two descriptors, both close-on-exec, and the slave's
// path (/dev/pts/N).
type ptyPair struct {
	master, slave int
	name          string
}

// openPTYPair opens a pty pair, the slave at ws's size, the master
// non-blocking when nonblock. With an account the slave is made the
// account's, group tty (the account's own group where there is no tty
// group), mode 0620, as OpenSSH and Teleport do, so that the user's
// programs own their terminal and others cannot read it. Both ends are
// close-on-exec, so a fork of another child meanwhile does not get them,
// and O_NOCTTY, so neither becomes dashgate's controlling terminal. The
// caller closes both.
//
// It opens them with open(2) and ioctl(2) only (posix_openpt, unlockpt,
// ptsname and open, as glibc's openpty does): creack/pty's os.OpenFile
// put each end in Go's poller and its Fd() took the master out again, 20
// system calls a pty where this makes 5 (BENCHMARKS.md, issue 43).
func openPTYPair(ws *unix.Winsize, a *accounts.Account, nonblock bool) (pair ptyPair, err error) {
	flags := unix.O_RDWR | unix.O_NOCTTY | unix.O_CLOEXEC
	if nonblock {
		flags |= unix.O_NONBLOCK
	}
	master, err := unix.Open("/dev/ptmx", flags, 0)
	if err != nil {
		return ptyPair{}, &os.PathError{Op: "open", Path: "/dev/ptmx", Err: err}
	}
	slave := -1
	defer func() {
		if err != nil {
			unix.Close(master)
			if slave >= 0 {
				unix.Close(slave)
			}
		}
	}()
	if err := unix.IoctlSetPointerInt(master, unix.TIOCSPTLCK, 0); err != nil {
		return ptyPair{}, fmt.Errorf("unlockpt: %w", err)
	}
	n, err := unix.IoctlGetUint32(master, unix.TIOCGPTN)
	if err != nil {
		return ptyPair{}, fmt.Errorf("ptsname: %w", err)
	}
	name := "/dev/pts/" + strconv.FormatUint(uint64(n), 10)
	if slave, err = unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0); err != nil {
		return ptyPair{}, &os.PathError{Op: "open", Path: name, Err: err}
	}
	if err := unix.IoctlSetWinsize(master, unix.TIOCSWINSZ, ws); err != nil {
		return ptyPair{}, fmt.Errorf("set pty size: %w", err)
	}
	if a != nil {
		gid := ttyGroup()
		if gid < 0 {
			gid = int(a.GID)
		}
		// The mode first: once the slave is the account's, changing its mode
		// would take CAP_FOWNER, which a dashgate that is not root (the
		// unit's dedicated-user variant) does not have.
		if err := unix.Fchmod(slave, 0o620); err != nil {
			return ptyPair{}, fmt.Errorf("chmod pty %s: %w", name, err)
		}
		if err := unix.Fchown(slave, int(a.UID), gid); err != nil {
			return ptyPair{}, fmt.Errorf("chown pty %s to %s: %w", name, a.Name, err)
		}
	}
	return ptyPair{master: master, slave: slave, name: name}, nil
}

// startOnPTY starts cmd with tty (the slave of a pair from openPTYPair)
// as its standard input, output and error.
func startOnPTY(cmd *exec.Cmd, tty *os.File, attrs *syscall.SysProcAttr) error {
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = attrs
	return cmd.Start()
}
