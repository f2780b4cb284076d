package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/workers"
)

// settingsEnv serves /ws/chat over e's registry with the agents
// "dashgate" (built in, the default) and "claude" (the registry's
// --agent), and the models model.list lists (a and b; an error while
// down); the principal is the X-Test-User header's user, the admin
// token's with X-Test-Admin.
type settingsEnv struct {
	t      *testing.T
	e      *env
	url    string
	mu     sync.Mutex
	models []string
	down   bool
}

var settingsAgents = []handlers.AgentInfo{{Name: sessions.BuiltinAgent, Kind: "builtin", Default: true}, {Name: "claude", Kind: "acp"}}

func newSettingsEnv(t *testing.T, o envOpts) *settingsEnv {
	t.Helper()
	mod := o.reg
	o.reg = func(c *sessions.Config) {
		c.Agents = []string{"claude"}
		if mod != nil {
			mod(c)
		}
	}
	s := &settingsEnv{t: t, e: newEnv(t, o), models: []string{"a", "b"}}
	s.url = s.serve(func(c *handlers.Chat) {
		if o.chat != nil {
			o.chat(c)
		}
	})
	return s
}

// serve serves another /ws/chat over the registry, as mod makes it.
func (s *settingsEnv) serve(mod func(*handlers.Chat)) string {
	chat := &handlers.Chat{Registry: s.e.reg, Log: s.e.log, Version: "test", Agents: settingsAgents,
		Models: func(context.Context) ([]string, string, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.down {
				return nil, "", &workers.Error{Failure: "model_unreachable", Message: "cannot reach the model server at http://x/v1"}
			}
			return slices.Clone(s.models), "b", nil
		}}
	mod(chat)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := sessions.Principal{User: r.Header.Get("X-Test-User")}
		if r.Header.Get("X-Test-Admin") != "" {
			p = sessions.AdminPrincipal
		}
		chat.ServeHTTP(w, r.WithContext(handlers.WithPrincipal(r.Context(), p)))
	}))
	s.t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

// setModels sets what model.list lists, and whether it fails.
func (s *settingsEnv) setModels(models []string, down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.models, s.down = models, down
}

// dial is a chat socket of user's (the admin token's for admin).
func (s *settingsEnv) dial(user string, admin bool) *chatClient {
	s.t.Helper()
	return s.dialAt(s.url, user, admin)
}

func (s *settingsEnv) dialAt(url, user string, admin bool) *chatClient {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.t.Context(), 5*time.Second)
	defer cancel()
	h := http.Header{"X-Test-User": {user}}
	if admin {
		h.Set("X-Test-Admin", "1")
	}
	c, _, err := testkit.DialChat(ctx, url, testkit.DialOptions{Header: h})
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { c.Drop(false) })
	return &chatClient{Chat: c, t: s.t}
}

// noSettings are the settings of a user who chose nothing, as the wire
// says them: every field, zero.
var noSettings = map[string]any{"default_agent": "", "default_model": "", "system_prompt": "", "theme": "",
	"terminal_font_size": 0.0, "terminal_font_family": ""}

func sameSettings(t *testing.T, what string, got, want map[string]any) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %v; want %v", what, brief(got), brief(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s: %s = %v in %v; want %v", what, k, brief(got[k]), brief(got), brief(v))
		}
	}
}

// brief is v as a failure says it: long strings cut.
func brief(v any) string {
	s := fmt.Sprintf("%#v", v)
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// with is want with the fields of set in place.
func with(want map[string]any, set map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range want {
		out[k] = v
	}
	for k, v := range set {
		out[k] = v
	}
	return out
}

// TestSettingsGetSet: a user who chose nothing gets every field zero;
// settings.set changes the fields it names and keeps the others (null
// and absent alike), "" and 0 go back to the default, and answers what
// settings.get answers then, on another socket of the user's too; each
// user, the anonymous one too, has their own; the admin token has none.
func TestSettingsGetSet(t *testing.T) {
	t.Parallel()
	s := newSettingsEnv(t, envOpts{})
	alice := s.dial("alice", false)
	sameSettings(t, "settings of a user who chose nothing", alice.call("settings.get", nil), noSettings)

	want := noSettings
	for _, step := range []map[string]any{
		{"default_agent": "claude", "theme": "dark"},
		{"default_model": "a", "system_prompt": "Answer in French.\nBriefly.", "terminal_font_size": 18.0,
			"terminal_font_family": `"Fira Code", monospace`},
		{"default_agent": sessions.BuiltinAgent, "theme": "system", "terminal_font_size": 8.0},
		{"default_agent": "", "default_model": "", "terminal_font_size": 32.0, "theme": "light"},
		{},
	} {
		params := map[string]any{"system_prompt": nil} // null keeps a field, as absence does
		for k, v := range step {
			params[k] = v
		}
		want = with(want, step)
		sameSettings(t, "settings.set's answer", alice.call("settings.set", params), want)
		sameSettings(t, "settings.get after settings.set", alice.call("settings.get", nil), want)
	}
	sameSettings(t, "settings.get on alice's other socket", s.dial("alice", false).call("settings.get", nil), want)
	sameSettings(t, "bob's settings", s.dial("bob", false).call("settings.get", nil), noSettings)

	anon := s.dial("", false)
	sameSettings(t, "the anonymous user's settings", anon.call("settings.get", nil), noSettings)
	sameSettings(t, "the anonymous user sets a theme", anon.call("settings.set", map[string]any{"theme": "dark"}), with(noSettings, map[string]any{"theme": "dark"}))
	sameSettings(t, "alice's after the anonymous user's", alice.call("settings.get", nil), want)

	admin := s.dial("", true)
	for _, m := range []string{"settings.get", "settings.set"} {
		r := admin.callRaw(m, map[string]any{"theme": "light"})
		if errCode(r) != handlers.CodeNotFound || !strings.Contains(r["error"].(map[string]any)["message"].(string), "admin token has no settings") {
			t.Fatalf("%s by the admin token: %v; want 4001 saying it has no settings", m, r)
		}
	}
	sameSettings(t, "the anonymous user's after the admin token's", anon.call("settings.get", nil), with(noSettings, map[string]any{"theme": "dark"}))
}

// TestSettingsSetValidates: settings.set refuses, with -32602 and a
// message naming the field, every value out of bounds, an agent
// agent.list does not give and a model model.list does not list (none
// without a model server), and then writes nothing, not even its valid
// fields; a model server that cannot list answers its 5004.
func TestSettingsSetValidates(t *testing.T) {
	t.Parallel()
	s := newSettingsEnv(t, envOpts{})
	cc := s.dial("alice", false)
	kept := map[string]any{"default_agent": "claude", "default_model": "b", "system_prompt": "be brief", "theme": "dark",
		"terminal_font_size": 14.0, "terminal_font_family": "monospace"}
	sameSettings(t, "settings.set", cc.call("settings.set", kept), kept)
	for _, tc := range []struct {
		name   string
		params map[string]any
		says   string // in the message
	}{
		{"theme", map[string]any{"theme": "blue"}, "theme"},
		{"theme case", map[string]any{"theme": "Dark"}, "theme"},
		{"font too small", map[string]any{"terminal_font_size": 7}, "terminal_font_size"},
		{"font too large", map[string]any{"terminal_font_size": 33}, "terminal_font_size"},
		{"font negative", map[string]any{"terminal_font_size": -12}, "terminal_font_size"},
		{"font a string", map[string]any{"terminal_font_size": "16"}, "terminal_font_size"},
		{"font a fraction", map[string]any{"terminal_font_size": 16.5}, "terminal_font_size"},
		{"font family CSS", map[string]any{"terminal_font_family": "monospace; color: red"}, "terminal_font_family"},
		{"font family braces", map[string]any{"terminal_font_family": "a}b{"}, "terminal_font_family"},
		{"font family long", map[string]any{"terminal_font_family": strings.Repeat("a", handlers.MaxFontFamily+1)}, "terminal_font_family"},
		{"system prompt long", map[string]any{"system_prompt": strings.Repeat("x", handlers.MaxSystemPrompt+1)}, "system_prompt"},
		{"system prompt NUL", map[string]any{"system_prompt": "a\x00b"}, "system_prompt"},
		{"system prompt a number", map[string]any{"system_prompt": 3}, "system_prompt"},
		{"agent unknown", map[string]any{"default_agent": "gemini"}, "default_agent"},
		{"model unknown", map[string]any{"default_model": "c"}, "default_model"},
		{"model long", map[string]any{"default_model": strings.Repeat("m", handlers.MaxModel+1)}, "default_model"},
		{"valid fields beside a bad one", map[string]any{"theme": "light", "terminal_font_size": 20, "default_agent": "gemini"}, "default_agent"},
		{"valid fields beside a bad model", map[string]any{"theme": "light", "system_prompt": "x", "default_model": "c"}, "default_model"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cc.callRaw("settings.set", tc.params)
			rpc, _ := r["error"].(map[string]any)
			msg, _ := rpc["message"].(string)
			if errCode(r) != handlers.CodeInvalidParams || !strings.Contains(msg, tc.says) {
				t.Fatalf("settings.set %s: %s; want -32602 naming %s", brief(tc.params), brief(r), tc.says)
			}
			sameSettings(t, "settings after a refused settings.set", cc.call("settings.get", nil), kept)
		})
	}
	// The largest system prompt and the bounds of the font size are valid.
	edge := with(kept, map[string]any{"system_prompt": strings.Repeat("é", handlers.MaxSystemPrompt/2), "terminal_font_size": 32.0})
	sameSettings(t, "settings.set at the bounds", cc.call("settings.set", edge), edge)

	s.setModels([]string{"a", "b"}, true)
	r := cc.callRaw("settings.set", map[string]any{"default_model": "a", "theme": "light"})
	if errCode(r) != handlers.CodeWorkerFailed || r["error"].(map[string]any)["message"] != "cannot reach the model server at http://x/v1" {
		t.Fatalf("settings.set of a model with the model server down: %v; want its 5004", r)
	}
	// A model need not be listed to be put back to the default.
	edge = with(edge, map[string]any{"default_model": ""})
	sameSettings(t, "settings.set default_model \"\" with the model server down", cc.call("settings.set", map[string]any{"default_model": ""}), edge)

	none := newSettingsEnv(t, envOpts{chat: func(c *handlers.Chat) { c.Models, c.Agents = nil, nil }}).dial("alice", false)
	for _, p := range []map[string]any{{"default_model": "a"}, {"default_agent": "claude"}} {
		if r := none.callRaw("settings.set", p); errCode(r) != handlers.CodeInvalidParams {
			t.Fatalf("settings.set %v without a model server and agents: %v; want -32602", p, r)
		}
	}
	if r := none.call("settings.set", map[string]any{"default_agent": sessions.BuiltinAgent}); r["default_agent"] != sessions.BuiltinAgent {
		t.Fatalf("settings.set of the built-in worker without --agent: %v", r)
	}
}

// TestSessionCreateTakesUserDefaults: a session.create that names no
// agent gets the user's default agent, and a session of the built-in
// worker the user's default model, each while the server still offers
// it (agent.list, model.list), else the server's default; its answer,
// session.resume and session.list say which; an agent asked for is
// taken as asked; another user gets the server's defaults; a model
// server that cannot list leaves the server's default, and so does a
// store that cannot read the settings.
func TestSessionCreateTakesUserDefaults(t *testing.T) {
	t.Parallel()
	s := newSettingsEnv(t, envOpts{})
	alice := s.dial("alice", false)
	type made struct{ agent, model string }
	create := func(cc *chatClient, params map[string]any) made {
		t.Helper()
		r := cc.call("session.create", params)
		sid := r["session_id"].(string)
		got := made{model: r["model"].(string)}
		if a, ok := r["agent"]; ok {
			got.agent = a.(string)
		}
		res := cc.call("session.resume", map[string]any{"session_id": sid})
		ra, _ := res["agent"].(string)
		if res["model"] != got.model || ra != got.agent {
			t.Fatalf("session.create answered %+v; session.resume says agent %q, model %v", got, ra, res["model"])
		}
		return got
	}
	if got := create(alice, map[string]any{}); got != (made{}) {
		t.Fatalf("a session of a user without settings: %+v; want the server's defaults", got)
	}
	alice.call("settings.set", map[string]any{"default_model": "a"})
	if got := create(alice, map[string]any{}); got != (made{model: "a"}) {
		t.Fatalf("with default_model a: %+v", got)
	}
	alice.call("settings.set", map[string]any{"default_agent": "claude"})
	for _, c := range []struct {
		name   string
		params map[string]any
		want   made
	}{
		{"no agent: the user's", map[string]any{}, made{agent: "claude"}},
		{"the built-in worker asked for: the user's model", map[string]any{"agent": sessions.BuiltinAgent}, made{model: "a"}},
		{"the agent asked for", map[string]any{"agent": "claude", "title": "x"}, made{agent: "claude"}},
	} {
		if got := create(alice, c.params); got != c.want {
			t.Fatalf("%s: %+v; want %+v", c.name, got, c.want)
		}
	}
	if got := create(s.dial("bob", false), map[string]any{}); got != (made{}) {
		t.Fatalf("bob's session after alice's settings: %+v; want the server's defaults", got)
	}

	// The server's flags stay the limits: what it no longer offers is
	// not taken.
	alice.call("settings.set", map[string]any{"default_agent": ""})
	s.setModels([]string{"b"}, false)
	if got := create(alice, map[string]any{}); got != (made{}) {
		t.Fatalf("default_model a, which model.list no longer lists: %+v; want the server's default", got)
	}
	s.setModels([]string{"a", "b"}, true)
	if got := create(alice, map[string]any{}); got != (made{}) {
		t.Fatalf("default_model a with the model server down: %+v; want the server's default", got)
	}
	s.setModels([]string{"a", "b"}, false)
	alice.call("settings.set", map[string]any{"default_agent": "claude"})
	builtinOnly := s.dialAt(s.serve(func(c *handlers.Chat) { c.Agents = settingsAgents[:1] }), "alice", false)
	if got := create(builtinOnly, map[string]any{}); got != (made{model: "a"}) {
		t.Fatalf("default_agent claude on a server that no longer offers it: %+v; want the built-in worker with model a", got)
	}
}
