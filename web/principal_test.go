package web_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/web"
)

// TestPrincipalResolvedAtTheEdge: the auth middleware hands every request
// its principal, once: the dashboard token is the anonymous user (owner ""
// of every stored session), the admin token on the admin routes the admin.
func TestPrincipalResolvedAtTheEdge(t *testing.T) {
	t.Parallel()
	who := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := handlers.PrincipalFrom(r.Context())
		fmt.Fprintf(w, "user=%q admin=%v", p.User, p.Admin)
	})
	s, err := web.New(web.Config{Token: "secret-token", AdminToken: "admin-token"},
		web.Handlers{Chat: who, Terminal: who, Metrics: who, Admin: &handlers.Admin{}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	tests := []struct {
		name, path, token, want string
	}{
		{"chat socket", "/ws/chat", "secret-token", `user="" admin=false`},
		{"terminal socket", "/ws/pty", "secret-token", `user="" admin=false`},
		{"admin route", "/metrics", "admin-token", `user="" admin=true`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, _ := http.NewRequest("GET", srv.URL+tt.path, nil)
			req.Header.Set("Authorization", "Bearer "+tt.token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || string(body) != tt.want {
				t.Fatalf("%s: %d %q, want 200 %q", tt.path, resp.StatusCode, body, tt.want)
			}
		})
	}
}
