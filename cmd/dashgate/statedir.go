package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// The state directory holds the login token, the instance locks of the
// startup sweep and the default store: whoever can write it can log in as
// its owner and read their conversations. dashgate therefore makes it
// itself (0700) and refuses one another local user could have planted.

// defaultStateDir is $XDG_STATE_HOME/dashgate, else
// $HOME/.local/state/dashgate (the XDG default), else "" (validate then
// asks for --state-dir). Relative values are ignored, as the XDG Base
// Directory specification says.
func defaultStateDir(getenv func(string) string) string {
	if d := getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "dashgate")
	}
	if h := getenv("HOME"); filepath.IsAbs(h) {
		return filepath.Join(h, ".local", "state", "dashgate")
	}
	return ""
}

// legacyStateDir is where dashgate kept its state before the XDG default:
// /tmp/dashgate-<uid>, a directory any local user could have made first.
func legacyStateDir() string {
	return filepath.Join(os.TempDir(), "dashgate-"+strconv.Itoa(os.Getuid()))
}

// prepareStateDir creates dir (0700, and its missing parents) and refuses
// a directory another local user could have planted or can write into: a
// symlink, not a directory, not owned by the effective uid, or group- or
// world-writable. Errors are *startupError (exit 2, one line).
func prepareStateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return &startupError{fmt.Errorf("state dir %s: %w", dir, err)}
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return refusedState(dir, "is a symlink or not a directory")
		}
		return &startupError{fmt.Errorf("state dir %s: %w", dir, err)}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &startupError{fmt.Errorf("state dir %s: %w", dir, err)}
	}
	if why := notOurs(st); why != "" {
		return refusedState(dir, why)
	}
	if perm := st.Mode & 0o777; perm&0o022 != 0 {
		return refusedState(dir, fmt.Sprintf("is writable by others (mode %04o)", perm))
	}
	return nil
}

func refusedState(dir, why string) error {
	return &startupError{fmt.Errorf("state dir %s %s: refusing it, another user could have planted it (chmod 700 a directory of your own, or choose one with --state-dir)", dir, why)}
}

// notOurs says why a file is not the effective uid's, or "".
func notOurs(st unix.Stat_t) string {
	if st.Uid != uint32(os.Geteuid()) {
		return fmt.Sprintf("is owned by uid %d, not %d", st.Uid, os.Geteuid())
	}
	return ""
}

// openTokenFile opens <state-dir>/token read-write, creating it 0600. It
// refuses a symlink (O_NOFOLLOW), a file that is not regular, not the
// effective uid's, or readable or writable by anyone else: such a token
// may be someone else's choosing. The caller closes the file.
func openTokenFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("token file %s is a symlink: refusing it (remove it to make a new token)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	why := notOurs(st)
	switch {
	case why != "":
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		why = "is not a regular file"
	case st.Mode&0o777 != 0o600:
		why = fmt.Sprintf("has mode %04o, not 0600", st.Mode&0o777)
	}
	if why != "" {
		f.Close()
		return nil, fmt.Errorf("token file %s %s: refusing it (remove it to make a new token)", path, why)
	}
	return f, nil
}

// refuseSymlinks refuses a store file, or its -wal, -shm and .lock
// companions, that is a symlink (SQLite would follow it) or another
// user's. Missing files are fine: they are made by this process.
func refuseSymlinks(path string) error {
	for _, p := range []string{path, path + "-wal", path + "-shm", path + ".lock"} {
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("store %s: %w", p, err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("store %s is a symlink: refusing it", p)
		}
		if st, ok := fi.Sys().(*unix.Stat_t); ok {
			if why := notOurs(*st); why != "" {
				return fmt.Errorf("store %s %s: refusing it", p, why)
			}
		}
	}
	return nil
}

// noticeLegacyStateDir says once, in one WARN record, that conversations
// kept in the old default state directory (/tmp/dashgate-<uid>) are not
// used, where they live now and how to move them. "Once" is kept by a
// marker file in the new state directory.
func noticeLegacyStateDir(stateDir string, log *slog.Logger) {
	old := legacyStateDir()
	if filepath.Clean(old) == filepath.Clean(stateDir) {
		return
	}
	if _, err := os.Lstat(filepath.Join(old, "dashgate.db")); err != nil {
		return
	}
	marker := filepath.Join(stateDir, "legacy-state-noticed")
	f, err := os.OpenFile(marker, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return // said before (or the marker cannot be made: say nothing rather than every start)
	}
	fmt.Fprintln(f, old)
	f.Close()
	log.Warn("conversations in the old state directory are not used",
		"old_state_dir", old, "state_dir", stateDir,
		"move", fmt.Sprintf("stop dashgate, then: mv %s/dashgate.db* %s/token %s/", old, old, stateDir))
}
