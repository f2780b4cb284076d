package static

import (
	"regexp"
	"testing"
	"testing/fstest"
	"time"
)

// TestHashFS: the version follows every file's path and bytes, and only
// them.
func TestHashFS(t *testing.T) {
	t.Parallel()
	tree := func(files map[string]string) fstest.MapFS {
		m := fstest.MapFS{}
		for name, data := range files {
			m[name] = &fstest.MapFile{Data: []byte(data)}
		}
		return m
	}
	base := map[string]string{"css/app.css": "body{}", "js/app.js": "import './rpc.js';", "js/rpc.js": "export {};"}
	with := func(edit func(map[string]string)) fstest.MapFS {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		edit(m)
		return tree(m)
	}
	want, err := hashFS(tree(base))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{12}$`).MatchString(want) {
		t.Fatalf("hashFS = %q, want 12 lowercase hex characters", want)
	}
	for _, tc := range []struct {
		name string
		fsys fstest.MapFS
		same bool
	}{
		{"the same bytes", tree(base), true},
		{"the same bytes, other modes and times", func() fstest.MapFS {
			m := tree(base)
			m["js/app.js"].Mode, m["js/app.js"].ModTime = 0o600, time.Unix(1, 0)
			return m
		}(), true},
		{"a file's content changed", with(func(m map[string]string) { m["js/rpc.js"] = "export { x };" }), false},
		{"a byte changed, the length kept", with(func(m map[string]string) { m["js/rpc.js"] = "export [];" }), false},
		{"a file's bytes spelling the next file", with(func(m map[string]string) {
			m["js/app.js"] += "js/rpc.js\x00" + m["js/rpc.js"]
			delete(m, "js/rpc.js")
		}), false},
		{"a byte moved between files", with(func(m map[string]string) { m["js/app.js"] += "e"; m["js/rpc.js"] = "xport {};" }), false},
		{"a file added", with(func(m map[string]string) { m["js/new.js"] = "" }), false},
		{"a file removed", with(func(m map[string]string) { delete(m, "css/app.css") }), false},
		{"a file renamed", with(func(m map[string]string) { m["js/rpc2.js"] = m["js/rpc.js"]; delete(m, "js/rpc.js") }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := hashFS(tc.fsys)
			if err != nil {
				t.Fatal(err)
			}
			if (got == want) != tc.same {
				t.Errorf("hashFS = %q, the base tree's %q; want same=%v", got, want, tc.same)
			}
		})
	}
}

// TestVersion: Version is the hash of the embedded tree, the same on every
// call, and URL builds the versioned prefix from it.
func TestVersion(t *testing.T) {
	t.Parallel()
	want, err := hashFS(FS)
	if err != nil {
		t.Fatal(err)
	}
	if got := Version(); got != want || Version() != got {
		t.Errorf("Version() = %q, hashFS(FS) = %q", got, want)
	}
	if got, want := URL("/dg/", "js/app.js"), "/dg/static/v/"+want+"/js/app.js"; got != want {
		t.Errorf("URL = %q, want %q", got, want)
	}
}
