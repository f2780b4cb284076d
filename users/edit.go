package users

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/sys/unix"
)

// hashCost is the bcrypt cost of the lines NewToken makes; tests lower it.
var hashCost = bcrypt.DefaultCost

// ErrExists is returned by Add for a name already in the file.
var ErrExists = errors.New("user exists")

// ErrNoUser is returned by Remove for a name not in the file.
var ErrNoUser = errors.New("no such user")

// NewToken makes a fresh token NAME.SECRET for name (SECRET: 24 random
// bytes as 48 lowercase hex characters) and its users-file line
// NAME:HASH (bcrypt of SECRET, no newline). It fails for an invalid name.
func NewToken(name string) (token, line string, err error) {
	if !ValidName(name) {
		return "", "", fmt.Errorf("bad user name %q (want 1 to 64 of A-Z a-z 0-9 . _ @ -, starting with a letter or digit)", name)
	}
	var b [secretLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	secret := hex.EncodeToString(b[:])
	hash, err := bcrypt.GenerateFromPassword([]byte(secret), hashCost)
	if err != nil {
		return "", "", fmt.Errorf("hash token: %w", err)
	}
	return name + "." + secret, name + ":" + string(hash), nil
}

// Add gives name a fresh token, appends its line to the users file at
// path and returns the token (shown once: the file keeps only its hash).
// The file is made 0600 when absent; an existing one must pass what Load
// checks and parse. It fails with ErrExists when name is in the file.
// Add holds an exclusive flock on the file while it reads and appends,
// blocking while another Add or Remove holds it.
func Add(path, name string) (token string, err error) {
	token, line, err := NewToken(name)
	if err != nil {
		return "", err
	}
	f, data, err := openLocked(path, true)
	if err != nil {
		return "", err
	}
	defer f.Close()
	s, err := Parse(bytes.NewReader(data))
	if err != nil {
		return "", fmt.Errorf("users file %s: %w", path, err)
	}
	if _, ok := s.users[name]; ok {
		return "", fmt.Errorf("users file %s: %q: %w", path, name, ErrExists)
	}
	var buf []byte
	if len(data) > 0 && data[len(data)-1] != '\n' {
		buf = append(buf, '\n')
	}
	buf = append(buf, line...)
	buf = append(buf, '\n')
	if _, err := f.Write(buf); err != nil {
		return "", fmt.Errorf("users file %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return "", fmt.Errorf("users file %s: %w", path, err)
	}
	return token, nil
}

// Remove rewrites the users file at path without name's line, keeping
// every other line (comments included) byte for byte. The new file is
// written beside the old one (0600, fsynced) and renamed over it, so a
// reader sees the old file or the new one, never half of one. It fails
// with ErrNoUser when name is not in the file, and holds the same flock
// as Add.
func Remove(path, name string) error {
	f, data, err := openLocked(path, false)
	if err != nil {
		return err
	}
	defer f.Close()
	s, err := Parse(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("users file %s: %w", path, err)
	}
	if _, ok := s.users[name]; !ok {
		return fmt.Errorf("users file %s: %q: %w", path, name, ErrNoUser)
	}
	var out []byte
	for rest := data; len(rest) > 0; {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line = rest[:i+1]
		}
		rest = rest[len(line):]
		if n, _, _ := parseLine(string(bytes.TrimSuffix(line, []byte("\n")))); n == name {
			continue
		}
		out = append(out, line...)
	}
	return replace(path, out)
}

// replace writes data to a temporary file in path's directory (0600, as
// os.CreateTemp makes it),
// fsyncs it, renames it over path and fsyncs the directory. The caller
// holds the lock of the file being replaced.
func replace(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("users file %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
			err = fmt.Errorf("users file %s: %w", path, err)
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// openLocked opens the users file at path for appending (creating it 0600
// when create is set), refusing what Load refuses, takes an exclusive
// flock and reads the whole file. Since Remove replaces the file by a
// rename, the lock is only good if the file locked is still the one at
// path: when it is not, it opens again. The caller closes the file, which
// releases the lock.
func openLocked(path string, create bool) (*os.File, []byte, error) {
	flag := os.O_RDWR | os.O_APPEND
	if create {
		flag |= os.O_CREATE
	}
	for range 100 {
		f, err := openSafe(path, flag, 0o600)
		if err != nil {
			return nil, nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("users file %s: lock: %w", path, err)
		}
		var held, now unix.Stat_t
		err = unix.Fstat(int(f.Fd()), &held)
		if err == nil {
			err = unix.Lstat(path, &now)
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			f.Close()
			return nil, nil, fmt.Errorf("users file %s: %w", path, err)
		}
		if err != nil || held.Dev != now.Dev || held.Ino != now.Ino {
			f.Close() // replaced (or removed) while we waited: lock the new one
			continue
		}
		if _, err := f.Seek(0, 0); err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("users file %s: %w", path, err)
		}
		data, err := readBounded(f)
		if err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("users file %s: %w", path, err)
		}
		return f, data, nil
	}
	return nil, nil, fmt.Errorf("users file %s: replaced 100 times while locking it", path)
}
