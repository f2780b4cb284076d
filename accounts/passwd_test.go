package accounts

import "testing"

// TestPasswdShell: field 7 of the named user's passwd(5) line; an empty
// field is found as "" (Lookup makes it /bin/sh).
func TestPasswdShell(t *testing.T) {
	t.Parallel()
	text := "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:\nbob:x:1001:1001::/home/bob:/usr/bin/zsh\nbroken:x\n"
	for _, tc := range []struct {
		name, want string
		ok         bool
	}{{"root", "/bin/bash", true}, {"alice", "", true}, {"bob", "/usr/bin/zsh", true}, {"carol", "", false}, {"broken", "", false}} {
		if got, ok := passwdShell(text, tc.name); got != tc.want || ok != tc.ok {
			t.Errorf("passwdShell(%s) = %q, %v; want %q, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
