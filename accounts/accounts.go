package accounts

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Account is a Unix account as the password and group databases give it.
type Account struct {
	Name   string   // the Unix user name
	UID    uint32   // passwd field 3
	GID    uint32   // the primary group, passwd field 4
	Groups []uint32 // every group the account is in (id -G): the primary first, then the supplementary ones
	Home   string   // passwd field 6
	Shell  string   // passwd field 7; "/bin/sh" when the field is empty
}

// ErrRefused matches every *RefusedError (errors.Is).
var ErrRefused = errors.New("unix account refused")

// RefusedError says why a dashgate user gets no Unix account: none exists,
// the map file does not list the user, the name is not a valid account
// name, or the account is root (uid 0) without AllowRoot. Reason is the
// whole sentence, meant for the person (it names the user); User is the
// dashgate user, for logs.
type RefusedError struct {
	User   string
	Reason string
}

func (e *RefusedError) Error() string { return e.Reason }

// Is makes errors.Is(err, ErrRefused) true.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// Options configures New.
type Options struct {
	// MapFile is --unix-users-map: lines of "dashgateuser:unixuser", blank
	// lines and # comments ignored. "" maps each dashgate user to the Unix
	// account of the same name; with a file, a user it does not list is
	// refused.
	MapFile string
	// AllowRoot is --allow-root-users: without it an account with uid 0 is
	// refused.
	AllowRoot bool
	// TTL is how long a successful lookup is reused; 0 means DefaultTTL.
	// Refusals are not cached: an account made meanwhile is seen at once.
	TTL time.Duration
	// Output runs a lookup command (id(1), getent(1)) and returns its
	// standard output, as exec.Cmd.Output does; nil: exec.Cmd.Output.
	// dashgate gives workers.Output, which keeps the orphan reaper from
	// taking the command's exit status (its Wait would fail with ECHILD
	// and the lookup fall back to /etc files).
	Output func(*exec.Cmd) ([]byte, error)
}

// DefaultTTL is how long Lookup reuses an account it found, so that a
// spawn does not run id(1) each time while a change to the group database
// is still seen soon.
const DefaultTTL = 30 * time.Second

// commandTimeout bounds each run of id(1) or getent(1) (an NSS backend
// such as LDAP may hang).
const commandTimeout = 5 * time.Second

// Map resolves dashgate users to Unix accounts. Safe for concurrent use.
type Map struct {
	opts    Options
	mapping map[string]string // dashgate user → Unix name; nil: the same name

	mu    sync.Mutex
	cache map[string]cached // by dashgate user; guarded by mu
}

type cached struct {
	acct Account
	at   time.Time
}

// New returns a Map; with a MapFile it reads and checks the file now. A
// malformed line is an error naming the file and its line number.
func New(o Options) (*Map, error) {
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.Output == nil {
		o.Output = (*exec.Cmd).Output
	}
	m := &Map{opts: o, cache: map[string]cached{}}
	if o.MapFile != "" {
		mp, err := readMapFile(o.MapFile)
		if err != nil {
			return nil, err
		}
		m.mapping = mp
	}
	return m, nil
}

// readMapFile parses "dashgateuser:unixuser" lines.
func readMapFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--unix-users-map: %w", err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		dg, ux, ok := strings.Cut(line, ":")
		dg, ux = strings.TrimSpace(dg), strings.TrimSpace(ux)
		switch {
		case !ok || dg == "" || ux == "":
			return nil, fmt.Errorf("--unix-users-map %s line %d: want dashgateuser:unixuser, got %q", path, n, line)
		case !ValidName(ux):
			return nil, fmt.Errorf("--unix-users-map %s line %d: %q is not a valid Unix account name (letters, digits, '.', '_', '-', not starting with '-')", path, n, ux)
		}
		if prev, dup := out[dg]; dup && prev != ux {
			return nil, fmt.Errorf("--unix-users-map %s line %d: %q is mapped twice (%q, %q)", path, n, dg, prev, ux)
		}
		out[dg] = ux
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--unix-users-map %s: %w", path, err)
	}
	return out, nil
}

// ValidName reports whether name may be passed to id(1), getent(1) and the
// cgroup tree: 1 to 32 characters of [A-Za-z0-9._-], not starting with '-'
// and not "." or "..".
func ValidName(name string) bool {
	if name == "" || len(name) > 32 || name[0] == '-' || name == "." || name == ".." {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// Lookup returns the Unix account dashgate user u runs as. It fails with a
// *RefusedError (errors.Is ErrRefused) when u has no account, is not in
// the map file, has a name that is not a valid account name (refused
// before any command runs), or maps to uid 0 without AllowRoot; other
// errors are the databases' (a hung NSS backend, after 5 s). The result is
// the caller's: its Groups is a copy.
//
// Groups come from `id -G -- <name>` (coreutils, through NSS, so LDAP and
// sssd groups are seen); when id cannot run, from os/user's GroupIds,
// which without cgo reads only /etc/group. The shell comes from `getent
// passwd -- <name>` (NSS), falling back to /etc/passwd.
func (m *Map) Lookup(u string) (*Account, error) {
	m.mu.Lock()
	c, ok := m.cache[u]
	m.mu.Unlock()
	if ok && time.Since(c.at) < m.opts.TTL {
		return clone(c.acct), nil
	}
	a, err := m.lookup(u)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.cache[u] = cached{acct: *a, at: time.Now()}
	m.mu.Unlock()
	return clone(*a), nil
}

func clone(a Account) *Account {
	a.Groups = slices.Clone(a.Groups)
	return &a
}

func (m *Map) lookup(u string) (*Account, error) {
	name := u
	if m.mapping != nil {
		var ok bool
		if name, ok = m.mapping[u]; !ok {
			return nil, &RefusedError{User: u, Reason: fmt.Sprintf("dashgate user %q is not in the Unix users map (--unix-users-map)", u)}
		}
	}
	if !ValidName(name) {
		return nil, &RefusedError{User: u, Reason: fmt.Sprintf("no Unix account for dashgate user %q: %q is not a valid account name", u, name)}
	}
	pw, err := user.Lookup(name)
	if errors.As(err, new(user.UnknownUserError)) {
		if name != u {
			return nil, &RefusedError{User: u, Reason: fmt.Sprintf("no Unix account %q for dashgate user %q", name, u)}
		}
		return nil, &RefusedError{User: u, Reason: fmt.Sprintf("no Unix account for dashgate user %q", u)}
	}
	if err != nil {
		return nil, fmt.Errorf("look up Unix account %q: %w", name, err)
	}
	uid, err := strconv.ParseUint(pw.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("unix account %q: uid %q: %w", name, pw.Uid, err)
	}
	gid, err := strconv.ParseUint(pw.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("unix account %q: gid %q: %w", name, pw.Gid, err)
	}
	if uid == 0 && !m.opts.AllowRoot {
		return nil, &RefusedError{User: u, Reason: fmt.Sprintf("dashgate user %q maps to uid 0: refused (--allow-root-users)", u)}
	}
	a := &Account{Name: name, UID: uint32(uid), GID: uint32(gid), Home: pw.HomeDir}
	if a.Groups, err = groups(name, pw, m.opts.Output); err != nil {
		return nil, err
	}
	a.Shell = shell(name, m.opts.Output)
	if a.Shell == "" {
		a.Shell = "/bin/sh"
	}
	return a, nil
}

// groups is the account's group list: id -G (run by output), or os/user's
// when id cannot run. The primary group comes first.
func groups(name string, pw *user.User, output func(*exec.Cmd) ([]byte, error)) ([]uint32, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	var ids []string
	out, err := output(exec.CommandContext(ctx, "id", "-G", "--", name))
	if err == nil {
		ids = strings.Fields(string(out))
	} else if ids, err = pw.GroupIds(); err != nil {
		return nil, fmt.Errorf("groups of Unix account %q: %w", name, err)
	}
	gs := make([]uint32, 0, len(ids)+1)
	if g, err := strconv.ParseUint(pw.Gid, 10, 32); err == nil {
		gs = append(gs, uint32(g))
	}
	for _, s := range ids {
		g, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("groups of Unix account %q: %q: %w", name, s, err)
		}
		if !slices.Contains(gs, uint32(g)) {
			gs = append(gs, uint32(g))
		}
	}
	return gs, nil
}

// shell is passwd field 7 of name: from getent (NSS, run by output), else
// /etc/passwd; "" when neither has it.
func shell(name string, output func(*exec.Cmd) ([]byte, error)) string {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	if out, err := output(exec.CommandContext(ctx, "getent", "passwd", "--", name)); err == nil {
		if sh, ok := passwdShell(string(out), name); ok {
			return sh
		}
	}
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return ""
	}
	sh, _ := passwdShell(string(b), name)
	return sh
}

// passwdShell finds name's line in passwd(5) text and returns field 7.
func passwdShell(text, name string) (string, bool) {
	for line := range strings.Lines(text) {
		f := strings.Split(strings.TrimRight(line, "\n"), ":")
		if len(f) == 7 && f[0] == name {
			if f[6] == "" {
				return "", true
			}
			return filepath.Clean(f[6]), true
		}
	}
	return "", false
}
