package web_test

import (
	"bytes"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/dashgate/dashgate/static"
	"github.com/dashgate/dashgate/web"
)

// assetRef finds a page's links to its assets.
var assetRef = regexp.MustCompile(`\s(?:href|src)="([^"]*static/[^"]*)"`)

// fetch GETs path on srv, with the dashboard token when auth is set, and
// returns the response with its body read.
func fetch(t *testing.T, srv string, path string, auth bool, accept string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", srv+path, nil)
	if auth {
		req.Header.Set("Authorization", "Bearer secret-token")
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

const immutable = "private, max-age=31536000, immutable"

// TestVersionedAssets (issue 41): the pages link their assets only under
// static/v/<static.Version>/, which answers each file's bytes cached for
// good; another version answers 404 (nginx then asks the next node); the
// unversioned URLs still answer, revalidated on each use.
func TestVersionedAssets(t *testing.T) {
	t.Parallel()
	for _, base := range []string{"/", "/dg/"} {
		t.Run("base "+base, func(t *testing.T) {
			t.Parallel()
			srv, _ := newServer(t, web.Config{BasePath: base})
			prefix := base + "static/v/" + static.Version() + "/"

			// Every asset the pages link, each fetched as the browser would.
			pages := []struct {
				name, path string
				auth       bool
				status     int
				min        int // at least that many asset links
			}{
				{"dashboard", "", true, 200, 7},
				{"login page", "", false, 401, 2}, // its stylesheet and icon (a new user's console showed /favicon.ico 404)
				{"not found page", "nowhere", true, 404, 2},
			}
			for _, p := range pages {
				resp, html := fetch(t, srv.URL, base+p.path, p.auth, "text/html")
				if resp.StatusCode != p.status {
					t.Fatalf("%s: %s, want %d", p.name, resp.Status, p.status)
				}
				refs := assetRef.FindAllStringSubmatch(string(html), -1)
				if len(refs) < p.min {
					t.Fatalf("%s links %d assets, want at least %d:\n%s", p.name, len(refs), p.min, html)
				}
				for _, m := range refs {
					ref := m[1]
					name, ok := strings.CutPrefix(ref, prefix)
					if !ok {
						t.Errorf("%s links %q, not under %q", p.name, ref, prefix)
						continue
					}
					want, err := static.FS.ReadFile(name)
					if err != nil {
						t.Fatalf("%s links %q: %v", p.name, ref, err)
					}
					// The login and "not found" pages' stylesheet and icon
					// answer without a token, as their visitors have none.
					resp, body := fetch(t, srv.URL, ref, p.auth, "")
					if resp.StatusCode != 200 || !bytes.Equal(body, want) {
						t.Errorf("%s: GET %s: %s, %d bytes, want 200 and the %d bytes of %s", p.name, ref, resp.Status, len(body), len(want), name)
					}
					if cc := resp.Header.Get("Cache-Control"); cc != immutable {
						t.Errorf("%s: GET %s: Cache-Control %q, want %q", p.name, ref, cc, immutable)
					}
				}
			}

			other := base + "static/v/000000000000/"
			for _, tc := range []struct {
				name   string
				path   string
				auth   bool
				status int
				cache  string // Cache-Control of a 200
			}{
				{"another release's version", other + "js/app.js", true, 404, ""},
				{"another release's page.css, without a token", other + "css/page.css", false, 404, ""},
				{"another release's page.css, with a token", other + "css/page.css", true, 404, ""},
				{"a version that is a prefix of this one", base + "static/v/" + static.Version()[:6] + "/js/app.js", true, 404, ""},
				{"no version", base + "static/v//js/app.js", true, 404, ""},
				{"a versioned script without a token", prefix + "js/app.js", false, 401, ""},
				{"a versioned missing file", prefix + "js/nothing.js", true, 404, ""},
				{"a versioned directory", prefix + "js/", true, 404, ""},
				{"the versioned root", prefix, true, 404, ""},
				{"unversioned script", base + "static/js/app.js", true, 200, "no-cache"},
				{"unversioned vendor file", base + "static/vendor/xterm/xterm.js", true, 200, "no-cache"},
				{"unversioned page.css, without a token", base + "static/css/page.css", false, 200, ""},
				{"unversioned icon, without a token", base + "static/css/icon.svg", false, 200, ""},
				{"unversioned directory", base + "static/js/", true, 404, ""},
			} {
				t.Run(tc.name, func(t *testing.T) {
					resp, body := fetch(t, srv.URL, tc.path, tc.auth, "")
					if resp.StatusCode != tc.status {
						t.Fatalf("GET %s: %s, want %d", tc.path, resp.Status, tc.status)
					}
					if tc.status != 200 {
						if len(body) > 100 {
							t.Errorf("GET %s: a %d body of %d bytes, not a short error", tc.path, tc.status, len(body))
						}
						return
					}
					if cc := resp.Header.Get("Cache-Control"); cc != tc.cache {
						t.Errorf("GET %s: Cache-Control %q, want %q", tc.path, cc, tc.cache)
					}
					name := strings.TrimPrefix(tc.path, base+"static/")
					if want, _ := static.FS.ReadFile(name); !bytes.Equal(body, want) {
						t.Errorf("GET %s: %d bytes, not %s's %d", tc.path, len(body), name, len(want))
					}
				})
			}
		})
	}
}
