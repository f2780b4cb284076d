package web

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dashgate/dashgate/handlers"
)

type stampUsers map[string]string

func (u stampUsers) Verify(string) (string, bool) { return "", false }
func (u stampUsers) Stamp(user string) (string, bool) {
	s, ok := u[user]
	return s, ok
}

// TestCookieRefused: only a cookie signed with this key, for this
// instance and kind, over the user's current stamp, issued within 30 days
// and not in the future, lets in.
func TestCookieRefused(t *testing.T) {
	t.Parallel()
	key := []byte(strings.Repeat("k", 32))
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(handlers.PrincipalFrom(r.Context()).User))
	})
	s, err := New(Config{Token: "t", AdminToken: "a", Users: stampUsers{"alice": "s1", "bob": "s2"}, CookieKey: key, Instance: "i"},
		Handlers{Chat: ok, Terminal: ok, Metrics: ok, Admin: &handlers.Admin{}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	now := time.Now()
	good := signCookie(key, "i", kindDashboard, "alice", now, "s1")
	parts := strings.Split(good, ".")
	for _, tt := range []struct {
		name, path, cookie, value string
		want                      int
	}{
		{"good", "/ws/chat", "dashgate_login_i", good, 200},
		{"29 days old", "/ws/chat", "dashgate_login_i", signCookie(key, "i", kindDashboard, "alice", now.Add(-29*24*time.Hour), "s1"), 200},
		{"another user's name on alice's MAC", "/ws/chat", "dashgate_login_i",
			strings.Join([]string{parts[0], base64.RawURLEncoding.EncodeToString([]byte("bob")), parts[2], parts[3]}, "."), 401},
		{"issue time changed", "/ws/chat", "dashgate_login_i", strings.Join([]string{parts[0], parts[1], "1", parts[3]}, "."), 401},
		{"MAC changed", "/ws/chat", "dashgate_login_i", good[:len(good)-2] + "AA", 401},
		{"31 days old", "/ws/chat", "dashgate_login_i", signCookie(key, "i", kindDashboard, "alice", now.Add(-31*24*time.Hour), "s1"), 401},
		{"issued in the future", "/ws/chat", "dashgate_login_i", signCookie(key, "i", kindDashboard, "alice", now.Add(time.Hour), "s1"), 401},
		{"other instance's", "/ws/chat", "dashgate_login_i", signCookie(key, "j", kindDashboard, "alice", now, "s1"), 401},
		{"other key's", "/ws/chat", "dashgate_login_i", signCookie([]byte(strings.Repeat("x", 32)), "i", kindDashboard, "alice", now, "s1"), 401},
		{"old stamp", "/ws/chat", "dashgate_login_i", signCookie(key, "i", kindDashboard, "alice", now, "s0"), 401},
		{"admin kind as the login cookie", "/ws/chat", "dashgate_login_i", signCookie(key, "i", kindAdmin, "alice", now, "s1"), 401},
		{"admin cookie", "/metrics", "dashgate_admin_i", signCookie(key, "i", kindAdmin, "", now, tokenDigest("a")), 200},
		{"admin cookie of another admin token", "/metrics", "dashgate_admin_i", signCookie(key, "i", kindAdmin, "", now, tokenDigest("b")), 401},
		{"dashboard kind as the admin cookie", "/metrics", "dashgate_admin_i", signCookie(key, "i", kindDashboard, "", now, tokenDigest("a")), 401},
		{"not a cookie of ours", "/ws/chat", "dashgate_login_i", "v1.garbage", 401},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", srv.URL+tt.path, nil)
			req.Header.Set("Origin", srv.URL)
			req.AddCookie(&http.Cookie{Name: tt.cookie, Value: tt.value})
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.want)
			}
		})
	}
}
