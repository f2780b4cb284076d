package web_test

import (
	"strings"
	"testing"

	"github.com/dashgate/dashgate/web"
)

// FuzzNormalizePrefix: an accepted prefix is a plain absolute path with no
// "..", "//", quotes, spaces or query, at most 256 characters.
func FuzzNormalizePrefix(f *testing.F) {
	for _, s := range []string{"/dashgate", "/a/b/", "/", "//evil", "/a/../b", `/a"b`, "/a b", "/%2e%2e", "/a?b=c", "/é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got, err := web.NormalizePrefix(p)
		if err != nil {
			return
		}
		if len(p) > 256 || (got != "" && !strings.HasPrefix(got, "/")) || strings.HasSuffix(got, "/") ||
			strings.Contains(got, "..") || strings.Contains(got, "//") || strings.ContainsAny(got, "\"' ?#%\\") {
			t.Fatalf("NormalizePrefix(%q) accepted %q", p, got)
		}
		if b, err := web.NormalizeBasePath(p); err != nil || !strings.HasSuffix(b, "/") || !strings.HasPrefix(b, "/") {
			t.Fatalf("NormalizeBasePath(%q) = %q, %v", p, b, err)
		}
	})
}
