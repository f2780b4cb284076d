package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/store"
)

// The first prompts of the sessions of titledCluster: each is the title
// its session takes (nobody titled one by hand; each is short enough to be
// taken whole), and every word of each is one no admin view has of its
// own, so its absence from a body means something. aliceTyped is also the
// hand title of alice's session on node a (a store row: a title as
// another node stored it).
const (
	aliceTyped = "zanzibar pelican marmalade quokka"
	carolTyped = "carols lighthouse tangerine"
	anonTyped  = "walrus accordion pomegranate"
)

// titledCluster is node b of a cluster, a real registry on a real SQLite
// store, whose sessions all took their titles from their first prompts
// (over the chat socket, the built-in worker answering each with its
// words): alice's, carol's (an admin user's) and the anonymous user's
// (every session's owner without users; the admin token's User). Node a
// holds another of alice's, titled aliceTyped, with a worker in its
// heartbeat.
type titledCluster struct {
	e               *env
	alice, aliceOnA string
	carol, anon     string
	aliceChat       *chatClient
	nodes           func(context.Context) ([]store.Node, error)
	titles          map[string]string // session id -> its title, as its owner's session.list gives it
}

func newTitledCluster(t *testing.T) *titledCluster {
	t.Helper()
	st := openStore(t)
	e := storeEnv(t, st)
	if _, err := e.reg.Claim(t.Context(), "b", time.Hour); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	c := &titledCluster{e: e, aliceOnA: "s-alice-on-a", titles: map[string]string{}}
	if err := st.Apply(t.Context(), store.Batch{Sessions: []store.Session{{
		ID: c.aliceOnA, Owner: "alice", Title: aliceTyped, State: "detached", CreatedAt: now, LastActive: now,
		Node: "a", LeaseUntil: now.Add(time.Hour), Epoch: 1,
	}}}); err != nil {
		t.Fatal(err)
	}

	// The principal comes from a header, as web's auth would put it in
	// the request.
	mux := http.NewServeMux()
	mux.Handle("/ws/chat", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := sessions.Principal{User: r.Header.Get("X-Test-User")}
		chat := &handlers.Chat{Registry: e.reg, Log: e.log, Version: "test"}
		chat.ServeHTTP(w, r.WithContext(handlers.WithPrincipal(r.Context(), p)))
	}))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	prompted := func(user, text string) (*chatClient, string) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		conn, _, err := testkit.DialChat(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/ws/chat",
			testkit.DialOptions{Header: http.Header{"X-Test-User": {user}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		cc := &chatClient{Chat: conn, t: t}
		sid := cc.create()
		cc.call("prompt.submit", map[string]any{"session_id": sid, "text": text})
		if p := cc.waitEvent("message.complete", sid)["payload"].(map[string]any); !strings.Contains(p["text"].(string), text) {
			t.Fatalf("the worker's reply to %q is %v: the replies would not carry the words", text, p)
		}
		for _, s := range cc.call("session.list", nil)["sessions"].([]any) {
			if s := s.(map[string]any); s["session_id"] == sid {
				c.titles[sid], _ = s["title"].(string)
			}
		}
		return cc, sid
	}
	c.aliceChat, c.alice = prompted("alice", aliceTyped)
	_, c.carol = prompted("carol", carolTyped)
	_, c.anon = prompted("", anonTyped)

	c.nodes = func(context.Context) ([]store.Node, error) {
		return []store.Node{
			{ID: "a", Live: true, LastSeen: now, Load: store.NodeLoad{Sessions: 1, Workers: 1, List: []store.NodeWorker{
				{PID: 4242, SessionID: c.aliceOnA, User: "alice", Kind: "chat", StartedAt: now}}}},
			{ID: "b", Live: true, LastSeen: now},
		}, nil
	}
	return c
}

// admin serves node b's admin routes to p (adminAs), a handler of its own.
func (c *titledCluster) admin(t *testing.T, p sessions.Principal) *httptest.Server {
	t.Helper()
	return adminAs(t, &handlers.Admin{Sessions: c.e.reg.Admin(), Procs: c.e.mgr, Log: c.e.log, Version: "test", Nodes: c.nodes}, p)
}

// adminGets is every GET route of the admin's router, under /admin, with
// the queries that change what they show: a new GET route is read by
// TestAdminSeesNoOtherUsersWords without a word here.
func adminGets(t *testing.T, h *handlers.Admin) []string {
	t.Helper()
	r := chi.NewRouter()
	r.Route("/admin", h.Routes)
	var out []string
	err := chi.Walk(r, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if method == http.MethodGet {
			for _, q := range []string{"", "?fragment=1", "?user=alice", "?user=carol", "?user="} {
				out = append(out, route+q)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 7*5 {
		t.Fatalf("the admin's GET routes: %v; want the page and six APIs at least", out)
	}
	return out
}

// noWordOf fails when body has a word of typed.
func noWordOf(t *testing.T, what, body, typed string) {
	t.Helper()
	for _, w := range strings.Fields(typed) {
		if strings.Contains(body, w) {
			t.Errorf("%s has %q, a word of %q that its user typed", what, w, typed)
		}
	}
}

// TestAdminSeesNoOtherUsersWords: admins list and reap, they do not read.
// A session's title (here each taken from its first prompt) is its
// owner's words: the admin page (whole, its fragment, filtered by user),
// every GET of /admin/api, the other nodes' sessions and the reap's
// answers and log records have no word of another user's, while every
// session is still listed by id, with "title":"" and "title_hidden":true.
// An admin sees the titles of their own sessions: the admin token (User
// "") the anonymous user's, the one user's without users; an admin user
// theirs. The owner's own session.list still has the title.
func TestAdminSeesNoOtherUsersWords(t *testing.T) {
	t.Parallel()
	c := newTitledCluster(t)
	for sid, typed := range map[string]string{c.alice: aliceTyped, c.carol: carolTyped, c.anon: anonTyped} {
		if c.titles[sid] != typed {
			t.Fatalf("its owner's session.list titles session %s %q; want %q, its first prompt (else this test proves nothing)", sid, c.titles[sid], typed)
		}
	}
	gets := adminGets(t, &handlers.Admin{})

	tests := []struct {
		name   string
		by     sessions.Principal
		shown  map[string]string // session id -> its title, shown to by
		hidden []string          // the words by must not see
	}{
		{"admin token", sessions.AdminPrincipal, map[string]string{c.anon: anonTyped}, []string{aliceTyped, carolTyped}},
		{"admin user", sessions.Principal{User: "carol", Admin: true}, map[string]string{c.carol: carolTyped}, []string{aliceTyped, anonTyped}},
	}
	// The views are read in parallel, all before the reaps below.
	t.Run("views", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				srv := c.admin(t, tt.by)
				for _, path := range gets {
					code, body := get(t, srv, srv.URL+path)
					if code != http.StatusOK {
						t.Errorf("GET %s: %d %s", path, code, body)
					}
					for _, typed := range tt.hidden {
						noWordOf(t, "GET "+path, body, typed)
					}
				}

				ids := []string{c.alice, c.aliceOnA, c.carol, c.anon}
				_, page := get(t, srv, srv.URL+"/admin")
				for _, id := range ids {
					if !strings.Contains(page, `data-session-id="`+id+`"`) {
						t.Errorf("the page does not list session %s", id)
					}
				}
				for _, title := range tt.shown {
					if !strings.Contains(page, `<td data-testid="session-title">`+title+`</td>`) {
						t.Errorf("the page does not show %v its own session's title %q", tt.by, title)
					}
				}
				if n := strings.Count(page, `<td data-testid="session-title" class="none" title="a session&#39;s title is its user&#39;s words: only they see it">hidden</td>`); n != len(ids)-len(tt.shown) {
					t.Errorf("the page says %d titles are hidden; want %d", n, len(ids)-len(tt.shown))
				}

				var api struct {
					Sessions []struct {
						ID     string  `json:"session_id"`
						Title  *string `json:"title"`
						Hidden bool    `json:"title_hidden"`
					} `json:"sessions"`
				}
				if _, body := get(t, srv, srv.URL+"/admin/api/sessions"); json.Unmarshal([]byte(body), &api) != nil {
					t.Fatalf("/admin/api/sessions: %s", body)
				}
				listed := map[string]bool{}
				for _, s := range api.Sessions {
					listed[s.ID] = true
					want, shown := tt.shown[s.ID]
					if s.Title == nil || *s.Title != want || s.Hidden == shown {
						t.Errorf("/admin/api/sessions has %s with title %v, title_hidden %v; want %q, %v", s.ID, s.Title, s.Hidden, want, !shown)
					}
				}
				for _, id := range ids {
					if !listed[id] {
						t.Errorf("/admin/api/sessions does not list %s", id)
					}
				}
			})
		}
	})
	if t.Failed() {
		return
	}

	// The reaps, by a form (back to the page) and asked for JSON: their
	// answers, the page after them and every record in the log (the
	// audit's "admin reap", the registry's "session closed") have no word
	// anyone typed.
	srv := c.admin(t, sessions.AdminPrincipal)
	if code, _ := post(t, srv, srv.URL+"/admin/sessions/"+c.alice+"/reap?user=alice", false); code != http.StatusSeeOther {
		t.Fatalf("reap of alice's session by a form: %d; want 303", code)
	}
	code, body := post(t, srv, srv.URL+"/admin/sessions/"+c.carol+"/reap", true)
	if code != http.StatusOK || body["reaped"] != true {
		t.Fatalf("reap of carol's session: %d %v", code, body)
	}
	raw, _ := json.Marshal(body)
	noWordOf(t, "the reap's answer", string(raw), carolTyped)
	_, page := get(t, srv, srv.URL+"/admin")
	noWordOf(t, "the page after the reaps", page, aliceTyped)
	if len(c.e.logs.Records("admin reap")) < 2 || len(c.e.logs.Records("session closed")) < 2 {
		t.Fatalf("the reaps' records: %v; want an admin reap and a session closed record of each", c.e.logs.String())
	}
	log := c.e.logs.String()
	for _, typed := range []string{aliceTyped, carolTyped, anonTyped} {
		noWordOf(t, "the log", log, typed)
	}

	// The owner's own view still has it.
	var title any = "(not listed)"
	for _, s := range c.aliceChat.call("session.list", map[string]any{"include_closed": true})["sessions"].([]any) {
		if s := s.(map[string]any); s["session_id"] == c.alice {
			title = s["title"]
		}
	}
	if title != aliceTyped {
		t.Errorf("alice's session.list titles her reaped session %v; want %q", title, aliceTyped)
	}
}
