package handlers_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/recordings"
	"github.com/dashgate/dashgate/sessions"
)

// recordingsServer serves /recordings and /admin/recordings over a store
// holding one finished recording of alice's and one of bob's, the
// principal taken from the X-Test-User header ("admin-token": the admin
// token's), as the web middleware would put it. It returns the files.
func recordingsServer(t *testing.T) (srv *httptest.Server, alice, bob recordings.Info) {
	t.Helper()
	st, err := recordings.Open(recordings.Config{Dir: filepath.Join(t.TempDir(), "recordings")})
	if err != nil {
		t.Fatal(err)
	}
	for _, who := range []string{"alice", "bob"} {
		r := st.Start(who, "s"+who, 80, 24)
		r.Output([]byte("hello from " + who + "\r\n"))
		r.Close()
		testkit.Recv(t, 10*time.Second, "recording written", r.Done())
	}
	h := &handlers.Recordings{Store: st, BasePath: func(*http.Request) string { return "/" }}
	r := chi.NewRouter()
	r.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			p := sessions.Principal{User: req.Header.Get("X-Test-User")}
			if p.User == "admin-token" {
				p = sessions.AdminPrincipal
			}
			w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:")
			next.ServeHTTP(w, req.WithContext(handlers.WithPrincipal(req.Context(), p)))
		})
	})
	r.Route("/recordings", h.Routes)
	r.Route("/admin/recordings", h.AdminRoutes)
	srv = httptest.NewServer(r)
	t.Cleanup(srv.Close)
	all, err := st.ListAll()
	if err != nil || len(all) != 2 {
		t.Fatalf("ListAll = %v, %v", all, err)
	}
	for _, in := range all {
		if in.User == "alice" {
			alice = in
		} else {
			bob = in
		}
	}
	return srv, alice, bob
}

func getAs(t *testing.T, srv *httptest.Server, user, path string, hdr ...string) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
	req.Header.Set("X-Test-User", user)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// TestRecordingsOwnerAndAdmin: an owner lists, downloads (an attachment,
// valid asciicast) and plays their own recordings; another user's, a
// made-up one and every path-like name answer the same 404; the admin
// token owns none; admins list, download and play every user's; the player
// page's CSP allows WebAssembly and nothing inline.
func TestRecordingsOwnerAndAdmin(t *testing.T) {
	t.Parallel()
	srv, alice, bob := recordingsServer(t)

	res, body := getAs(t, srv, "alice", "/recordings/", "Accept", "application/json")
	var list struct{ Recordings []handlers.RecordingJSON }
	if res.StatusCode != 200 || json.Unmarshal([]byte(body), &list) != nil || len(list.Recordings) != 1 || list.Recordings[0].File != alice.File {
		t.Fatalf("alice's list: %d %s", res.StatusCode, body)
	}
	if got := list.Recordings[0]; got.URL != "/recordings/"+alice.File || got.PlayURL != "/recordings/"+alice.File+"/play" {
		t.Fatalf("alice's URLs: %+v", got)
	}
	res, body = getAs(t, srv, "alice", "/recordings/")
	if res.StatusCode != 200 || !strings.Contains(body, `data-file="`+alice.File+`"`) || strings.Contains(body, bob.File) {
		t.Fatalf("alice's page: %d\n%s", res.StatusCode, body)
	}

	res, body = getAs(t, srv, "alice", "/recordings/"+alice.File)
	if res.StatusCode != 200 || res.Header.Get("Content-Disposition") != `attachment; filename="`+alice.File+`"` ||
		res.Header.Get("Content-Type") != "application/x-asciicast" {
		t.Fatalf("download: %d %v", res.StatusCode, res.Header)
	}
	c, err := testkit.ParseCast([]byte(body))
	if err != nil || c.Output() != "hello from alice\r\n" {
		t.Fatalf("downloaded %q: %v", body, err)
	}

	res, body = getAs(t, srv, "alice", "/recordings/"+alice.File+"/play")
	csp := res.Header.Get("Content-Security-Policy")
	if res.StatusCode != 200 || !strings.Contains(body, `data-src="/recordings/`+alice.File+`"`) ||
		!strings.Contains(csp, "script-src 'self' 'wasm-unsafe-eval'") || strings.Contains(csp, "unsafe-inline") || !strings.HasPrefix(csp, "default-src 'self';") {
		t.Fatalf("player: %d CSP %q\n%s", res.StatusCode, csp, body)
	}
	if res, _ := getAs(t, srv, "alice", "/recordings/"); strings.Contains(res.Header.Get("Content-Security-Policy"), "wasm") {
		t.Fatalf("the list page's CSP allows WebAssembly: %q", res.Header.Get("Content-Security-Policy"))
	}

	// Not found, all alike: another user's, a made-up name, a path.
	_, missing := getAs(t, srv, "alice", "/recordings/sbob-20260101T000000.000Z.cast")
	for _, path := range []string{
		"/recordings/" + bob.File, "/recordings/" + bob.File + "/play",
		"/recordings/..%2Fbob%2F" + bob.File, "/recordings/%2E%2E", "/recordings/x.cast",
		"/admin/recordings/bob/..%2F..%2Fetc%2Fpasswd",
	} {
		user := "alice"
		if strings.HasPrefix(path, "/admin/") {
			user = "root"
		}
		res, body := getAs(t, srv, user, path)
		if res.StatusCode != 404 || body != missing {
			t.Errorf("GET %s as %s: %d %q, want 404 %q (as a missing one)", path, user, res.StatusCode, body, missing)
		}
	}
	// The admin token owns no recording.
	if res, _ := getAs(t, srv, "admin-token", "/recordings/"+alice.File); res.StatusCode != 404 {
		t.Errorf("the admin token's own download: %d, want 404", res.StatusCode)
	}

	// Admins: every user's.
	res, body = getAs(t, srv, "root", "/admin/recordings/")
	if res.StatusCode != 200 || json.Unmarshal([]byte(body), &list) != nil || len(list.Recordings) != 2 {
		t.Fatalf("admin list: %d %s", res.StatusCode, body)
	}
	res, body = getAs(t, srv, "root", "/admin/recordings/bob/"+bob.File)
	if c, err := testkit.ParseCast([]byte(body)); res.StatusCode != 200 || err != nil || c.Output() != "hello from bob\r\n" {
		t.Fatalf("admin download: %d %q %v", res.StatusCode, body, err)
	}
	res, body = getAs(t, srv, "root", "/admin/recordings/bob/"+bob.File+"/play")
	if res.StatusCode != 200 || !strings.Contains(body, `data-src="/admin/recordings/bob/`+bob.File+`"`) {
		t.Fatalf("admin player: %d\n%s", res.StatusCode, body)
	}
	if res, _ := getAs(t, srv, "root", "/admin/recordings/alice/"+bob.File); res.StatusCode != 404 {
		t.Errorf("bob's file under alice: %d, want 404", res.StatusCode)
	}
}
