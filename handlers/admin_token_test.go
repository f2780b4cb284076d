package handlers_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/sessions"
)

// TestAdminTokenOwnsNothingWithUsers: with users on, the admin token
// (sessions.AdminPrincipal, User "" like the anonymous user) is no user:
// it lists every session and sees no one's title, the anonymous user's
// (sessions made before users) included. Without users it is the one
// user's and sees them (TestAdminSeesNoOtherUsersWords).
func TestAdminTokenOwnsNothingWithUsers(t *testing.T) {
	t.Parallel()
	c := newTitledCluster(t)
	if c.titles[c.anon] != anonTyped {
		t.Fatalf("the anonymous user's session.list titles its session %q; want %q (else this test proves nothing)", c.titles[c.anon], anonTyped)
	}
	srv := adminAs(t, &handlers.Admin{Sessions: c.e.reg.Admin(), Procs: c.e.mgr, Log: c.e.log, Version: "test", Nodes: c.nodes, Users: true},
		sessions.AdminPrincipal)
	for _, path := range []string{"/admin", "/admin/api/sessions", "/admin?user="} {
		code, body := get(t, srv, srv.URL+path)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		for _, typed := range []string{aliceTyped, carolTyped, anonTyped} {
			noWordOf(t, "GET "+path, body, typed)
		}
	}
	var api struct {
		Sessions []struct {
			ID     string `json:"session_id"`
			Hidden bool   `json:"title_hidden"`
		} `json:"sessions"`
	}
	if _, body := get(t, srv, srv.URL+"/admin/api/sessions"); json.Unmarshal([]byte(body), &api) != nil {
		t.Fatalf("/admin/api/sessions: %s", body)
	}
	seen := false
	for _, s := range api.Sessions {
		seen = seen || s.ID == c.anon
		if !s.Hidden {
			t.Errorf("/admin/api/sessions shows the admin token the title of %s", s.ID)
		}
	}
	if !seen {
		t.Errorf("/admin/api/sessions does not list the anonymous user's session %s", c.anon)
	}
}
