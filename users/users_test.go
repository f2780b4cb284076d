package users

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/crypto/bcrypt"
)

func TestMain(m *testing.M) {
	// Lines made by tests hash at the lowest cost: Verify does not care,
	// and the default costs ~50 ms a line. cmd/dashgate's test checks that
	// `dashgate user add` writes the default cost.
	hashCost = bcrypt.MinCost
	goleak.VerifyTestMain(m) // nothing here starts a goroutine that outlives a call
}

// newUser returns a token and its line for name.
func newUser(t testing.TB, name string) (token, line string) {
	t.Helper()
	token, line, err := NewToken(name)
	if err != nil {
		t.Fatal(err)
	}
	return token, line
}

func writeFile(t testing.TB, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func mode(t testing.TB, path string) os.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode()
}

func TestNewToken(t *testing.T) {
	t.Parallel()
	token, line := newUser(t, "a.b@c")
	if !regexp.MustCompile(`^a\.b@c\.[0-9a-f]{48}$`).MatchString(token) {
		t.Errorf("token %q: not NAME.SECRET with 48 hex", token)
	}
	name, hash, ok := strings.Cut(line, ":")
	if !ok || name != "a.b@c" {
		t.Fatalf("line %q: not a.b@c:HASH", line)
	}
	secret := token[strings.LastIndexByte(token, '.')+1:]
	if err := bcrypt.CompareHashAndPassword([]byte(hash), []byte(secret)); err != nil {
		t.Errorf("hash of the line does not match the token's secret: %v", err)
	}
	other, _ := newUser(t, "a.b@c")
	if other == token {
		t.Error("two tokens for one name are equal")
	}
	for _, bad := range []string{"", ".a", "-a", "a b", "a:b", strings.Repeat("a", 65), "a\n"} {
		if _, _, err := NewToken(bad); err == nil {
			t.Errorf("NewToken(%q): no error", bad)
		}
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	_, alice := newUser(t, "alice")
	_, bob := newUser(t, "bob.smith@example.com")
	_, zed := newUser(t, "Zed-9_x")
	in := "# users of dashgate\n\n" + zed + "\n   # indented comment\n" + bob + "\r\n\t\n" + alice // no final newline
	s, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Names(), []string{"Zed-9_x", "alice", "bob.smith@example.com"}; !slices.Equal(got, want) {
		t.Errorf("Names() = %q, want %q", got, want)
	}
	if s.Len() != 3 {
		t.Errorf("Len() = %d, want 3", s.Len())
	}
	s.Names()[0] = "mallory"
	if s.Names()[0] != "Zed-9_x" {
		t.Error("Names() shares the Set's slice")
	}
	empty, err := Parse(strings.NewReader(""))
	if err != nil || empty.Len() != 0 {
		t.Errorf("Parse(\"\") = %v users, %v; want 0, nil", empty.Len(), err)
	}
}

func TestParseMalformed(t *testing.T) {
	t.Parallel()
	_, good := newUser(t, "alice")
	hash := good[len("alice:"):]
	tests := []struct {
		name   string
		line   string // at line 3, after a comment and a good line
		reason string
	}{
		{"no colon", "bob" + hash, "no colon"},
		{"empty name", ":" + hash, "bad name"},
		{"name starts with dot", ".bob:" + hash, "bad name"},
		{"name with space", "bo b:" + hash, "bad name"},
		{"name too long", strings.Repeat("b", 65) + ":" + hash, "bad name"},
		{"empty hash", "bob:", "not a bcrypt hash"},
		{"plain text", "bob:hunter2hunter2", "not a bcrypt hash"},
		{"hash cut short", "bob:" + hash[:59], "not a bcrypt hash"},
		{"hash with a space", "bob:" + hash[:40] + " " + hash[41:], "not a bcrypt hash"},
		{"wrong version", "bob:$2x$" + hash[4:], "not a bcrypt hash"},
		{"cost out of range", "bob:$2a$99" + hash[6:], "not a bcrypt hash"},
		{"trailing blank", "bob:" + hash + " ", "not a bcrypt hash"},
		{"duplicate name", "alice:" + hash, `duplicate name "alice"`},
		{"too long", "bob:" + strings.Repeat("x", maxLine), "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(strings.NewReader("# c\n" + good + "\n" + tt.line + "\n"))
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("Parse: %v, want a *ParseError", err)
			}
			if pe.Line != 3 || !strings.Contains(pe.Reason, tt.reason) {
				t.Errorf("Parse: %v, want line 3: %s", err, tt.reason)
			}
			if !strings.HasPrefix(err.Error(), "line 3: ") {
				t.Errorf("error %q does not start with its line", err)
			}
			if strings.Contains(err.Error(), hash[7:]) {
				t.Errorf("error %q echoes the hash", err)
			}
		})
	}
}

func TestLoadRefuses(t *testing.T) {
	t.Parallel()
	_, line := newUser(t, "alice")
	tests := []struct {
		name  string
		setup func(t *testing.T, path string)
		want  string
	}{
		{"symlink", func(t *testing.T, path string) {
			writeFile(t, path+".real", line+"\n")
			if err := os.Symlink(path+".real", path); err != nil {
				t.Fatal(err)
			}
		}, "is a symlink"},
		{"group writable", func(t *testing.T, path string) {
			writeFile(t, path, line+"\n")
			os.Chmod(path, 0o620)
		}, "writable by group or others (mode 0620)"},
		{"world writable", func(t *testing.T, path string) {
			writeFile(t, path, line+"\n")
			os.Chmod(path, 0o602)
		}, "writable by group or others (mode 0602)"},
		{"directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, "is not a regular file"},
		{"fifo", func(t *testing.T, path string) {
			if err := mkfifo(path); err != nil {
				t.Fatal(err)
			}
		}, "is not a regular file"},
		{"another uid's", func(t *testing.T, path string) {
			writeFile(t, path, line+"\n")
			if os.Geteuid() != 0 {
				t.Skip("needs root to give a file away")
			}
			if err := os.Chown(path, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, "is owned by uid 65534"},
		{"missing", func(t *testing.T, path string) {}, "no such file"},
		{"malformed", func(t *testing.T, path string) { writeFile(t, path, "# ok\nbob\n") }, "line 2: no colon"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "users")
			tt.setup(t, path)
			_, err := Load(path)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("Load: %v, want an error naming %s and saying %q", err, path, tt.want)
			}
			if _, err := Add(path, "carol"); (err == nil) != (tt.name == "missing") {
				t.Errorf("Add to it: %v", err) // refused, but for a missing file, which Add makes
			}
		})
	}
	t.Run("mode 0644 is fine", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "users")
		writeFile(t, path, line+"\n")
		os.Chmod(path, 0o644)
		if s, err := Load(path); err != nil || s.Len() != 1 {
			t.Errorf("Load: %v", err)
		}
	})
}

func TestVerify(t *testing.T) {
	t.Parallel()
	alice, aliceLine := newUser(t, "alice")
	dotted, dottedLine := newUser(t, "a.b.c")
	bob, bobLine := newUser(t, "bob")
	s, err := Parse(strings.NewReader(aliceLine + "\n" + dottedLine + "\n" + bobLine + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	aliceSecret := alice[len("alice."):]
	bobSecret := bob[len("bob."):]
	tests := []struct {
		name, token, user string
	}{
		{"good", alice, "alice"},
		{"good, dotted name", dotted, "a.b.c"},
		{"good again (cached)", alice, "alice"},
		{"another user's secret", "alice." + bobSecret, ""},
		{"wrong secret", "alice." + strings.Repeat("0", 48), ""},
		{"unknown user", "carol." + aliceSecret, ""},
		{"secret in upper case", "alice." + strings.ToUpper(aliceSecret), ""},
		{"secret one short", alice[:len(alice)-1], ""},
		{"secret one long", alice + "0", ""},
		{"no dot", "alice" + aliceSecret, ""},
		{"empty", "", ""},
		{"only a dot", ".", ""},
		{"name only", "alice.", ""},
		{"secret only", aliceSecret, ""},
		{"dotted name cut at the first dot", "a." + dotted[len("a.b.c."):], ""},
		{"garbage", "\x00\xff.\n", ""},
	}
	// A secret outside the token form is refused before any bcrypt, even
	// when a line hashes it (a line made by hand).
	upper := strings.ToUpper(aliceSecret)
	upperHash, err := bcrypt.GenerateFromPassword([]byte(upper), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("ab", 30)
	longHash, err := bcrypt.GenerateFromPassword([]byte(long), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	hand, err := Parse(strings.NewReader("upper:" + string(upperHash) + "\nlong:" + string(longHash) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"upper." + upper, "long." + long} {
		if u, ok := hand.Verify(tok); ok {
			t.Errorf("Verify(%q) = %q: a secret not of 48 lowercase hex was accepted", tok, u)
		}
	}
	for _, tt := range tests {
		user, ok := s.Verify(tt.token)
		if user != tt.user || ok != (tt.user != "") {
			t.Errorf("%s: Verify(%q) = %q, %v; want %q, %v", tt.name, tt.token, user, ok, tt.user, tt.user != "")
		}
	}
}

func TestVerifyCache(t *testing.T) {
	t.Parallel()
	alice, line := newUser(t, "alice")
	s, err := Parse(strings.NewReader(line + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	wrong := "alice." + strings.Repeat("a", 48)
	if _, ok := s.Verify(wrong); ok {
		t.Fatal("wrong secret accepted before any good one")
	}
	if len(s.cache) != 0 {
		t.Errorf("a wrong token was cached (%d entries)", len(s.cache))
	}
	if u, ok := s.Verify(alice); !ok || u != "alice" {
		t.Fatalf("Verify(good) = %q, %v", u, ok)
	}
	if _, hit := s.cache[sha256.Sum256([]byte(alice))]; !hit || len(s.cache) != 1 {
		t.Errorf("the good token is not (only) in the cache: %d entries, hit %v", len(s.cache), hit)
	}
	for range 3 {
		if _, ok := s.Verify(wrong); ok {
			t.Fatal("wrong secret accepted after a good one")
		}
		if u, ok := s.Verify(alice); !ok || u != "alice" {
			t.Fatalf("Verify(good, cached) = %q, %v", u, ok)
		}
	}
	// The cache stays bounded.
	for i := range cacheSize + 10 {
		s.remember(sha256.Sum256(fmt.Appendf(nil, "t%d", i)), "alice")
	}
	if len(s.cache) != cacheSize {
		t.Errorf("cache holds %d entries, want at most %d", len(s.cache), cacheSize)
	}
}

func TestVerifyConcurrent(t *testing.T) {
	t.Parallel()
	alice, line := newUser(t, "alice")
	s, err := Parse(strings.NewReader(line + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			tok := alice
			if i%2 == 1 {
				tok = "alice." + strings.Repeat("b", 48)
			}
			if _, ok := s.Verify(tok); ok != (i%2 == 0) {
				t.Errorf("Verify #%d = %v", i, ok)
			}
		})
	}
	wg.Wait()
}

func TestStamp(t *testing.T) {
	t.Parallel()
	_, a1 := newUser(t, "alice")
	_, a2 := newUser(t, "alice")
	_, b := newUser(t, "bob")
	parse := func(in string) *Set {
		s, err := Parse(strings.NewReader(in))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s1, s1again, s2 := parse(a1+"\n"+b+"\n"), parse("# reordered\n"+b+"\n"+a1+"\n"), parse(a2+"\n"+b+"\n")
	st1, ok := s1.Stamp("alice")
	if !ok || !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(st1) {
		t.Fatalf("Stamp(alice) = %q, %v; want 16 hex characters", st1, ok)
	}
	if st, _ := s1again.Stamp("alice"); st != st1 {
		t.Errorf("Stamp changed with the same line: %q then %q", st1, st)
	}
	if st, _ := s2.Stamp("alice"); st == st1 {
		t.Errorf("Stamp did not change with a new line: %q", st)
	}
	if sb1, _ := s1.Stamp("bob"); sb1 == st1 {
		t.Error("alice and bob have one stamp")
	} else if sb2, _ := s2.Stamp("bob"); sb2 != sb1 {
		t.Error("bob's stamp changed when alice's line did")
	}
	if st, ok := s1.Stamp("carol"); ok || st != "" {
		t.Errorf("Stamp(carol) = %q, %v; want \"\", false", st, ok)
	}
}

func TestReload(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "users")
	alice1, a1 := newUser(t, "alice")
	bob, b := newUser(t, "bob")
	_, c := newUser(t, "carol")
	_, d := newUser(t, "dave")
	writeFile(t, path, a1+"\n"+b+"\n"+c+"\n"+d+"\n")
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Path() != path || f.Current().Len() != 4 {
		t.Fatalf("Open: %s, %d users", f.Path(), f.Current().Len())
	}
	if u, ok := f.Verify(alice1); !ok || u != "alice" {
		t.Fatalf("File.Verify(alice) = %q, %v", u, ok)
	}
	stampBob, _ := f.Stamp("bob")

	// alice gets a new token, carol goes, erin comes, dave's line moves.
	alice2, a2 := newUser(t, "alice")
	_, e := newUser(t, "erin")
	writeFile(t, path, "# edited\n"+d+"\n"+b+"\n"+a2+"\n"+e+"\n")
	changed, err := f.Reload()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"alice", "carol"}; !slices.Equal(changed, want) {
		t.Errorf("Reload() changed = %q, want %q", changed, want)
	}
	if got, want := f.Current().Names(), []string{"alice", "bob", "dave", "erin"}; !slices.Equal(got, want) {
		t.Errorf("after Reload, Names() = %q, want %q", got, want)
	}
	if _, ok := f.Verify(alice1); ok {
		t.Error("alice's old token still verifies after Reload")
	}
	if _, ok := f.Verify(alice2); !ok {
		t.Error("alice's new token does not verify after Reload")
	}
	if _, ok := f.Verify(bob); !ok {
		t.Error("bob's token stopped verifying")
	}
	if st, ok := f.Stamp("bob"); !ok || st != stampBob {
		t.Errorf("bob's stamp changed on a reload that kept his line")
	}
	if _, ok := f.Stamp("carol"); ok {
		t.Error("carol still has a stamp after her removal")
	}

	// A malformed file keeps the set in force.
	before := f.Current()
	writeFile(t, path, "# broken\n"+a1+"\nnot a line\n")
	changed, err = f.Reload()
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "line 3: no colon") {
		t.Errorf("Reload of a malformed file: %v, want an error naming %s line 3", err, path)
	}
	if changed != nil || f.Current() != before {
		t.Errorf("Reload of a malformed file changed the set (changed %q)", changed)
	}
	if _, ok := f.Verify(alice2); !ok {
		t.Error("after a failed Reload alice's token stopped verifying")
	}
	os.Remove(path)
	if _, err := f.Reload(); err == nil || f.Current() != before {
		t.Errorf("Reload of a missing file: %v; the set must stay", err)
	}
}

func TestAddRemoveKeepLines(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "users")
	_, a := newUser(t, "alice")
	_, b := newUser(t, "bob")
	orig := "# dashgate users\n\n" + a + "\r\n  # bob is away\r\n" + b // no final newline
	writeFile(t, path, orig)
	os.Chmod(path, 0o640)

	carol, err := Add(path, "carol")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(data), orig+"\n") {
		t.Errorf("Add changed the lines before its own:\n%q", data)
	}
	line := strings.TrimSuffix(strings.TrimPrefix(string(data), orig+"\n"), "\n")
	if !strings.HasPrefix(line, "carol:$2") || strings.Contains(line, "\n") || !strings.HasSuffix(string(data), "\n") {
		t.Errorf("Add appended %q, want one carol:HASH line", line)
	}
	if strings.Contains(string(data), carol[len("carol."):]) {
		t.Error("the file holds the token's secret")
	}
	if s, err := Load(path); err != nil {
		t.Fatal(err)
	} else if u, ok := s.Verify(carol); !ok || u != "carol" {
		t.Errorf("Verify(Add's token) = %q, %v", u, ok)
	}
	if _, err := Add(path, "alice"); !errors.Is(err, ErrExists) {
		t.Errorf("Add of an existing name: %v, want ErrExists", err)
	}
	if _, err := Add(path, "bad name"); err == nil {
		t.Error("Add of a bad name: no error")
	}

	if err := Remove(path, "alice"); err != nil {
		t.Fatal(err)
	}
	data, _ = os.ReadFile(path)
	if want := "# dashgate users\n\n  # bob is away\r\n" + b + "\n" + line + "\n"; string(data) != want {
		t.Errorf("after Remove(alice):\n%q\nwant\n%q", data, want)
	}
	if m := mode(t, path); m != 0o600 {
		t.Errorf("after Remove, mode %v, want 0600", m)
	}
	if err := Remove(path, "alice"); !errors.Is(err, ErrNoUser) {
		t.Errorf("Remove of an absent name: %v, want ErrNoUser", err)
	}
	if err := Remove(path, "carol"); err != nil {
		t.Fatal(err)
	}
	data, _ = os.ReadFile(path)
	if want := "# dashgate users\n\n  # bob is away\r\n" + b + "\n"; string(data) != want {
		t.Errorf("after Remove(carol):\n%q\nwant\n%q", data, want)
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Errorf("the directory holds %d files, want only the users file (a temporary file left?)", len(ents))
	}
}

func TestAddCreates(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "users")
	tok, err := Add(path, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if m := mode(t, path); m != 0o600 {
		t.Errorf("new users file has mode %v, want 0600", m)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if u, ok := f.Verify(tok); !ok || u != "alice" {
		t.Errorf("Verify = %q, %v", u, ok)
	}
	if err := Remove(filepath.Join(t.TempDir(), "users"), "alice"); err == nil {
		t.Error("Remove from a missing file: no error")
	}
}

func TestRemoveRefusesSymlink(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, a := newUser(t, "alice")
	writeFile(t, filepath.Join(dir, "real"), a+"\n")
	path := filepath.Join(dir, "users")
	os.Symlink("real", path)
	if err := Remove(path, "alice"); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("Remove through a symlink: %v", err)
	}
	if _, err := Add(path, "bob"); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("Add through a symlink: %v", err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "real")); string(data) != a+"\n" {
		t.Errorf("the symlink's target changed: %q", data)
	}
}

func TestConcurrentEdits(t *testing.T) {
	t.Parallel()
	const n = 8
	path := filepath.Join(t.TempDir(), "users")
	var old []string
	for i := range n {
		if _, err := Add(path, fmt.Sprintf("old%d", i)); err != nil {
			t.Fatal(err)
		}
		old = append(old, fmt.Sprintf("old%d", i))
	}
	tokens := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			tok, err := Add(path, fmt.Sprintf("new%d", i))
			if err != nil {
				t.Error(err)
			}
			tokens[i] = tok
		})
		wg.Go(func() {
			if err := Remove(path, old[i]); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	s, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range n {
		want = append(want, fmt.Sprintf("new%d", i))
	}
	if got := s.Names(); !slices.Equal(got, want) {
		t.Fatalf("after concurrent adds and removes, Names() = %q, want %q", got, want)
	}
	for i, tok := range tokens {
		if u, ok := s.Verify(tok); !ok || u != want[i] {
			t.Errorf("Verify(token of %s) = %q, %v", want[i], u, ok)
		}
	}
}

// BenchmarkVerify: a token verified once (the cache's hit: one SHA-256)
// and a token never seen (one bcrypt at bcrypt.DefaultCost, as the files
// `dashgate user add` writes).
func BenchmarkVerify(b *testing.B) {
	secret := strings.Repeat("5a", 24)
	hash, err := bcrypt.GenerateFromPassword([]byte(secret), bcrypt.DefaultCost)
	if err != nil {
		b.Fatal(err)
	}
	var lines strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&lines, "user%d:%s\n", i, hash)
	}
	s, err := Parse(strings.NewReader(lines.String()))
	if err != nil {
		b.Fatal(err)
	}
	token := "user500." + secret
	b.Run("cached", func(b *testing.B) {
		if _, ok := s.Verify(token); !ok {
			b.Fatal("token refused")
		}
		b.ReportAllocs()
		for b.Loop() {
			s.Verify(token)
		}
	})
	b.Run("uncached", func(b *testing.B) {
		for b.Loop() {
			s.mu.Lock()
			clear(s.cache)
			s.mu.Unlock()
			if _, ok := s.Verify(token); !ok {
				b.Fatal("token refused")
			}
		}
	})
}
