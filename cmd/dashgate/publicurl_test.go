package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
)

// TestConfigPublicURL (issue 27, defect 11): --public-url, or
// DASHGATE_PUBLIC_URL, is taken when it is an absolute http(s) URL and
// refused otherwise, naming the flag.
func TestConfigPublicURL(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DASHGATE_PUBLIC_URL": "https://env.example/dg/", "HOME": "/home/t"}
	getenv := func(k string) string { return env[k] }
	if cfg, err := parseConfig(nil, getenv, io.Discard); err != nil || cfg.PublicURL != "https://env.example/dg/" {
		t.Fatalf("DASHGATE_PUBLIC_URL: PublicURL %q, %v", cfg.PublicURL, err)
	}
	if cfg, err := parseConfig([]string{"--public-url", "http://flag.example:8080/x"}, getenv, io.Discard); err != nil || cfg.PublicURL != "http://flag.example:8080/x" {
		t.Fatalf("--public-url over the env: PublicURL %q, %v", cfg.PublicURL, err)
	}
	none := func(k string) string { return map[string]string{"HOME": "/home/t"}[k] }
	for _, bad := range []string{"dash.example/dg/", "/dg/", "ftp://dash.example/", "https://", "https://dash.example/?a=1", "https://dash.example/#x", "https://u:p@dash.example/", "https://dash example/"} {
		t.Run(bad, func(t *testing.T) {
			if _, err := parseConfig([]string{"--public-url", bad}, none, io.Discard); err == nil || !strings.Contains(err.Error(), "--public-url") {
				t.Errorf("--public-url %q: %v; want refused, naming --public-url", bad, err)
			}
		})
	}
}

// TestPrintURLs: the URLs printed at start are under --public-url when it
// is given, http://<addr><base> otherwise; a Unix socket prints them only
// with --public-url.
func TestPrintURLs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		cfg       config
		addr      string
		usersFile bool
		want      string
	}{
		{"token made", config{}, "127.0.0.1:8787", false, "dashgate: open http://127.0.0.1:8787/dg/?token=TOK\n"},
		{"token made, public URL", config{PublicURL: "https://dash.example/dg"}, "127.0.0.1:8787", false, "dashgate: open https://dash.example/dg/?token=TOK\n"},
		{"token given, public URL", config{PublicURL: "https://dash.example/dg/", TokenExplicit: true}, "127.0.0.1:8787", false,
			"dashgate: open https://dash.example/dg/?token=<your token> (once; a cookie keeps you logged in)\n"},
		{"users, public URL", config{PublicURL: "https://dash.example/dg/", UsersFile: "/u"}, "127.0.0.1:8787", true,
			"dashgate: users log in with the URL `dashgate user add --public-url https://dash.example/dg/ NAME` prints\n" +
				"dashgate: admin at https://dash.example/dg/admin?token=TOK\n"},
		{"unix socket", config{}, "unix:/run/dg.sock", false, "dashgate: listening on unix:/run/dg.sock (for a proxy on this host)\n"},
		{"unix socket, public URL", config{PublicURL: "https://dash.example/"}, "unix:/run/dg.sock", false,
			"dashgate: listening on unix:/run/dg.sock (for a proxy on this host)\ndashgate: open https://dash.example/?token=TOK\n"},
		{"admin token, public URL", config{PublicURL: "https://dash.example/", TokenExplicit: true, AdminToken: "ADM"}, "127.0.0.1:8787", false,
			"dashgate: open https://dash.example/?token=<your token> (once; a cookie keeps you logged in)\n" +
				"dashgate: admin at https://dash.example/admin?token=<the admin token>\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			printURLs(&out, tc.cfg, tc.addr, "/dg/", "TOK", tc.usersFile)
			if out.String() != tc.want {
				t.Errorf("printed\n%s\nwant\n%s", out.String(), tc.want)
			}
		})
	}
}

// TestServePrintsPublicURL: the real binary, started with --public-url,
// prints its login URL under it.
func TestServePrintsPublicURL(t *testing.T) {
	t.Parallel()
	in := startInstance(t, "public-url", t.TempDir(), "--public-url", "https://dash.example/team")
	want := "dashgate: open https://dash.example/team/?token=<your token>"
	var out []byte
	testkit.WaitFor(t, 10*time.Second, "the login URL on stdout", func() bool {
		out, _ = os.ReadFile(filepath.Join(in.Dir, "stdout"))
		return bytes.Contains(out, []byte("dashgate: open "))
	})
	if !strings.Contains(string(out), want) || strings.Contains(string(out), in.Addr) {
		t.Errorf("stdout %q: want %q, and not the backend's address %s", out, want, in.Addr)
	}
}

// TestUserAddPublicURL: `dashgate user add` prints the login URL under
// --public-url (or --url), else $DASHGATE_PUBLIC_URL, else $DASHGATE_URL.
func TestUserAddPublicURL(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "users")
	for i, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"the flag", nil, []string{"--public-url", "https://dash.example/a"}, "https://dash.example/a/"},
		{"the flag over the env", map[string]string{"DASHGATE_PUBLIC_URL": "https://env.example/"}, []string{"--public-url", "https://dash.example/b/"}, "https://dash.example/b/"},
		{"the old flag", nil, []string{"--url", "https://dash.example/c"}, "https://dash.example/c/"},
		{"the server's variable", map[string]string{"DASHGATE_PUBLIC_URL": "https://env.example/d", "DASHGATE_URL": "https://old.example/"}, nil, "https://env.example/d/"},
		{"the old variable", map[string]string{"DASHGATE_URL": "https://old.example/e"}, nil, "https://old.example/e/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("user%d", i)
			code, stdout, stderr := runUser(t, tc.env, append([]string{"add", "--users-file", path + "-" + name}, append(tc.args, name)...)...)
			if code != 0 {
				t.Fatalf("exit %d, stderr %q", code, stderr)
			}
			loginToken(t, stdout, tc.want)
		})
	}
	code, _, stderr := runUser(t, nil, "add", "--users-file", path, "--public-url", "dash.example/x", "zed")
	if code != 2 || !strings.Contains(stderr, "--public-url") || !strings.Contains(stderr, "absolute http or https URL") {
		t.Errorf("a relative --public-url: exit %d, %q; want 2 naming the flag", code, stderr)
	}
}
