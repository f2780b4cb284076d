package users

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/sync/singleflight"
	"golang.org/x/sys/unix"
)

// Limits.
const (
	// MaxFileSize bounds a users file (bytes): about 200 000 users.
	MaxFileSize = 16 << 20
	// maxLine bounds one line (bytes); a good line is at most 125.
	maxLine = 4096
	// cacheSize bounds the cache of verified tokens (entries). A good
	// token is one per user, so it only matters past that many users.
	cacheSize = 4096
	// secretLen is the length of SECRET in a token (hex characters).
	secretLen = 48
	// stampLen is the length of a Stamp (hex characters).
	stampLen = 16
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

// ValidName reports whether name may name a user of a users file.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// ParseError is a malformed line of a users file. Reason says what is
// wrong without quoting the line (it may hold a hash or a token).
type ParseError struct {
	Line   int    // 1-based
	Reason string // "no colon", "bad name ...", "not a bcrypt hash", "duplicate name \"x\"", ...
}

func (e *ParseError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Reason) }

type entry struct {
	hash  []byte
	stamp string
}

// Set is the users of one users file, immutable once parsed (its cache of
// verified tokens aside). Safe for concurrent use.
type Set struct {
	users map[string]entry
	names []string // sorted

	mu    sync.RWMutex
	cache map[[sha256.Size]byte]string // sha256(token) -> user; good tokens only
	group singleflight.Group           // one bcrypt at a time per token
}

// Parse reads a users file (see the package doc) from r. A malformed line
// is a *ParseError; an empty input is an empty Set.
func Parse(r io.Reader) (*Set, error) {
	s := &Set{users: map[string]entry{}, cache: map[[sha256.Size]byte]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 512), maxLine)
	n := 0
	for sc.Scan() {
		n++
		name, hash, reason := parseLine(sc.Text())
		if reason == "" && name == "" {
			continue // blank or comment
		}
		if reason == "" {
			if _, dup := s.users[name]; dup {
				reason = fmt.Sprintf("duplicate name %q", name)
			}
		}
		if reason != "" {
			return nil, &ParseError{Line: n, Reason: reason}
		}
		s.users[name] = entry{hash: []byte(hash), stamp: stampOf(name, hash)}
		s.names = append(s.names, name)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, &ParseError{Line: n + 1, Reason: fmt.Sprintf("longer than %d bytes", maxLine)}
		}
		return nil, err
	}
	slices.Sort(s.names)
	return s, nil
}

// parseLine splits one line. It returns ("", "", "") for a blank line or
// a comment, a reason when the line is malformed, else the name and hash.
func parseLine(line string) (name, hash, reason string) {
	line = strings.TrimSuffix(line, "\r")
	trimmed := strings.TrimSpace(line)
	if trimmed == "" || strings.HasPrefix(trimmed, "#") {
		return "", "", ""
	}
	name, hash, ok := strings.Cut(line, ":")
	if !ok {
		return "", "", "no colon (want NAME:HASH)"
	}
	if !ValidName(name) {
		return "", "", "bad name (want 1 to 64 of A-Z a-z 0-9 . _ @ -, starting with a letter or digit)"
	}
	if !isBcrypt(hash) {
		return "", "", "not a bcrypt hash (make the line with `dashgate user add`)"
	}
	return name, hash, ""
}

// isBcrypt reports whether h has the shape of a bcrypt hash: $2a$, $2b$
// or $2y$, a two-digit cost bcrypt accepts, 53 characters of its base64.
func isBcrypt(h string) bool {
	if len(h) != 60 || !(strings.HasPrefix(h, "$2a$") || strings.HasPrefix(h, "$2b$") || strings.HasPrefix(h, "$2y$")) {
		return false
	}
	if h[6] != '$' {
		return false
	}
	for _, c := range []byte(h[7:]) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '/') {
			return false
		}
	}
	_, err := bcrypt.Cost([]byte(h))
	return err == nil
}

func stampOf(name, hash string) string {
	sum := sha256.Sum256([]byte(name + "\x00" + hash))
	return hex.EncodeToString(sum[:])[:stampLen]
}

// Load reads and parses the users file at path. It refuses a symlink, a
// file that is not regular, not the effective uid's, group- or
// world-writable, or larger than MaxFileSize; every error names path.
func Load(path string) (*Set, error) {
	f, err := openSafe(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := readBounded(f)
	if err != nil {
		return nil, fmt.Errorf("users file %s: %w", path, err)
	}
	s, err := Parse(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("users file %s: %w", path, err)
	}
	return s, nil
}

// readBounded reads f from its offset to the end, at most MaxFileSize.
func readBounded(f *os.File) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("larger than %d bytes", MaxFileSize)
	}
	return data, nil
}

// openSafe opens path with O_NOFOLLOW and refuses what Load refuses.
// O_NONBLOCK keeps the open of a FIFO from waiting for a writer (it is
// then refused); on a regular file it changes nothing.
func openSafe(path string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, perm)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("users file %s is a symlink: refusing it", path)
	}
	if err != nil {
		return nil, fmt.Errorf("users file: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("users file %s: %w", path, err)
	}
	if why := unsafeFile(st); why != "" {
		f.Close()
		return nil, fmt.Errorf("users file %s %s: refusing it (whoever can write it can log in as anyone)", path, why)
	}
	return f, nil
}

// unsafeFile says why a users file must not be trusted, or "".
func unsafeFile(st unix.Stat_t) string {
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return "is not a regular file"
	case st.Uid != uint32(os.Geteuid()):
		return fmt.Sprintf("is owned by uid %d, not %d", st.Uid, os.Geteuid())
	case st.Mode&0o022 != 0:
		return fmt.Sprintf("is writable by group or others (mode %04o)", st.Mode&0o777)
	}
	return ""
}

// Verify checks a token of the form NAME.SECRET and returns the user it
// logs in. ok is false for a malformed token, an unknown name or a wrong
// secret. A token verified once is answered from the Set's cache (one
// SHA-256); otherwise Verify costs one bcrypt comparison (about 50 ms at
// the default cost), concurrent calls with the same token sharing it. An
// unknown name or a malformed token costs no bcrypt: names are not
// secrets (they appear in logs and on /admin), and making garbage cost a
// hash would hand out CPU to whoever sends it.
func (s *Set) Verify(token string) (user string, ok bool) {
	i := strings.LastIndexByte(token, '.')
	if i < 0 {
		return "", false
	}
	name, secret := token[:i], token[i+1:]
	e, found := s.users[name]
	if !found || !validSecret(secret) {
		return "", false
	}
	key := sha256.Sum256([]byte(token))
	s.mu.RLock()
	u, hit := s.cache[key]
	s.mu.RUnlock()
	if hit {
		return u, true
	}
	v, _, _ := s.group.Do(string(key[:]), func() (any, error) {
		if bcrypt.CompareHashAndPassword(e.hash, []byte(secret)) != nil {
			return false, nil
		}
		s.remember(key, name)
		return true, nil
	})
	if !v.(bool) {
		return "", false
	}
	return name, true
}

// remember caches a verified token, dropping an arbitrary entry when full.
func (s *Set) remember(key [sha256.Size]byte, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.cache) >= cacheSize {
		for k := range s.cache {
			delete(s.cache, k)
			break
		}
	}
	s.cache[key] = name
}

func validSecret(s string) bool {
	if len(s) != secretLen {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Stamp is a short digest (16 hex characters) of user's line: it changes
// when the user is given a new token. ok is false when user is not in the
// Set. web binds a login cookie to it.
func (s *Set) Stamp(user string) (stamp string, ok bool) {
	e, ok := s.users[user]
	return e.stamp, ok
}

// Names returns the users' names, sorted (a new slice).
func (s *Set) Names() []string { return slices.Clone(s.names) }

// Len is the number of users.
func (s *Set) Len() int { return len(s.names) }
