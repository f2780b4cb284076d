package recordings

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Ext is a recording's file extension.
const Ext = ".cast"

// anonymousDir is the directory of the anonymous user (""); DirOf escapes
// a leading '_' of every other name, so none other can be it.
const anonymousDir = "_anonymous"

// stampLayout is a recording's start in its file name (UTC).
const stampLayout = "20060102T150405.000Z"

// fileRE is what File makes: <sid>-<start>.cast.
var fileRE = regexp.MustCompile(`^([A-Za-z0-9]{1,64})-([0-9]{8}T[0-9]{6}\.[0-9]{3}Z)\.cast$`)

// DirOf is the directory name of owner's recordings: "_anonymous" for the
// anonymous user (""), else owner with every byte outside [A-Za-z0-9._-],
// and a leading '.' or '_', written as ~XX (two upper-case hex digits).
// It is one path element, never "." or "..", safe in a URL path segment,
// and no two owners share one (UserOf inverts it).
func DirOf(owner string) string {
	if owner == "" {
		return anonymousDir
	}
	var b strings.Builder
	for i := 0; i < len(owner); i++ {
		c := owner[i]
		safe := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' ||
			(c == '.' || c == '_') && i > 0
		if safe {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "~%02X", c)
		}
	}
	return b.String()
}

// UserOf is the owner whose directory name is dir, and false for a name
// DirOf never makes (so a client's dir is checked by it before use).
func UserOf(dir string) (string, bool) {
	if dir == anonymousDir {
		return "", true
	}
	var b strings.Builder
	for i := 0; i < len(dir); i++ {
		c := dir[i]
		if c != '~' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(dir) {
			return "", false
		}
		v, err := hex.DecodeString(dir[i+1 : i+3])
		if err != nil {
			return "", false
		}
		b.WriteByte(v[0])
		i += 2
	}
	user := b.String()
	if user == "" || DirOf(user) != dir { // one spelling per owner
		return "", false
	}
	return user, true
}

// File is the file name of a recording of session sid begun at start:
// <sid>-<start, UTC, to the millisecond>.cast. A sid that is not 1 to 64
// letters and digits (dashgate's are 24 hex digits) is replaced by a hash
// of it.
func File(sid string, start time.Time) string {
	if !alnum(sid) {
		h := sha256.Sum256([]byte(sid))
		sid = hex.EncodeToString(h[:8])
	}
	return sid + "-" + start.UTC().Format(stampLayout) + Ext
}

// ValidFile reports whether name is a file name File makes, and returns
// its session id and start.
func ValidFile(name string) (sid string, start time.Time, ok bool) {
	m := fileRE.FindStringSubmatch(name)
	if m == nil {
		return "", time.Time{}, false
	}
	start, err := time.Parse(stampLayout, m[2])
	if err != nil {
		return "", time.Time{}, false
	}
	return m[1], start, true
}

func alnum(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
