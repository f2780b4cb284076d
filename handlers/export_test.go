package handlers_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/sessions"
)

// exportServer serves Export over e's registry as /sessions/{id}/export,
// for the principal named by the X-Test-User header ("admin": an admin
// user).
func exportServer(t *testing.T, e *env) *httptest.Server {
	r := chi.NewRouter()
	exp := &handlers.Export{Registry: e.reg, Log: e.log}
	r.Get("/sessions/{id}/export", func(w http.ResponseWriter, r *http.Request) {
		p := sessions.Principal{User: r.Header.Get("X-Test-User")}
		if p.User == "admin" {
			p.Admin = true // an admin user of --admin-users
		}
		exp.ServeHTTP(w, r.WithContext(handlers.WithPrincipal(r.Context(), p)))
	})
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv
}

func exportGet(t *testing.T, url, user string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if user != "" {
		req.Header.Set("X-Test-User", user)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(b)
}

// Issue 27: a conversation exports as Markdown and as JSON, live and
// once closed (from the store), to its owner only.
func TestExport(t *testing.T) {
	st := openStore(t)
	e := newEnv(t, envOpts{reg: func(c *sessions.Config) { c.Store = st }})
	srv := exportServer(t, e)
	cc := e.chat()
	sid := cc.create()
	cc.call("slash.exec", map[string]any{"session_id": sid, "command": "/echo ```fenced``` hi"})
	cc.call("session.rename", map[string]any{"session_id": sid, "title": "Plans / for *today*"})
	url := srv.URL + "/sessions/" + sid + "/export"

	check := func(when string) {
		t.Helper()
		code, h, md := exportGet(t, url, "")
		if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/markdown") {
			t.Fatalf("%s: markdown export %d %s: %s", when, code, h.Get("Content-Type"), md)
		}
		for _, want := range []string{"# Plans / for *today*\n", "### You (command) · ", "`/echo '''fenced''' hi`", "````\n```fenced``` hi\n````\n"} {
			if !strings.Contains(md, want) {
				t.Errorf("%s: the Markdown lacks %q:\n%s", when, want, md)
			}
		}
		if cd := h.Get("Content-Disposition"); cd != `attachment; filename="Plans-for-today.md"` {
			t.Errorf("%s: Content-Disposition %q", when, cd)
		}
		code, _, js := exportGet(t, url+"?format=json", "")
		var tr sessions.Transcript
		if code != 200 || json.Unmarshal([]byte(js), &tr) != nil {
			t.Fatalf("%s: json export %d: %s", when, code, js)
		}
		if tr.ID != sid || len(tr.Entries) < 2 || tr.Entries[0].Kind != "slash" || tr.Entries[1].Text != "```fenced``` hi" {
			t.Errorf("%s: json export %+v; want the command and its output", when, tr)
		}
		for _, who := range []string{"bob", "admin"} {
			if code, _, body := exportGet(t, url, who); code != http.StatusNotFound {
				t.Errorf("%s: %s's export of another's session: %d %s; want 404", when, who, code, body)
			}
		}
	}
	check("live")
	cc.call("session.close", map[string]any{"session_id": sid})
	check("closed")
	if code, _, _ := exportGet(t, url+"?format=pdf", ""); code != http.StatusBadRequest {
		t.Errorf("format=pdf: %d; want 400", code)
	}
	if code, _, _ := exportGet(t, srv.URL+"/sessions/nope/export", ""); code != http.StatusNotFound {
		t.Errorf("an unknown session: %d; want 404", code)
	}
}
