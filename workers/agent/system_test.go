package agent_test

import (
	"testing"
)

// TestUserSystemPromptReachesModel: a prompt's system (the user's system
// prompt, issue 42) reaches the model server's request as its first
// message, a system one: alone, or after --agent-system-prompt's in the
// same message; a prompt without one sends the operator's alone, or no
// system message at all.
func TestUserSystemPromptReachesModel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, operator, user string
		want                 string // the system message; "" for none
	}{
		{"user's alone", "", "Answer in French.", "Answer in French."},
		{"after the operator's", "You run on dashgate.", "Answer in French.", "You run on dashgate.\n\nAnswer in French."},
		{"operator's alone", "You run on dashgate.", "", "You run on dashgate."},
		{"none", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeLLM(t, replay(chunk("ok"), done))
			cfg := cfgFor(f)
			cfg.SystemPrompt = tc.operator
			w := start(t, cfg)
			params := map[string]any{"text": "bonjour", "turn_id": "t1",
				"history": []map[string]string{{"role": "user", "kind": "prompt", "text": "earlier"}}}
			if tc.user != "" {
				params["system"] = tc.user
			}
			w.send(1, "prompt", params)
			w.until(isReply(1))
			reqs := f.requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			got := reqs[0].messages(t)
			want := []message{{Role: "user", Content: "earlier"}, {Role: "user", Content: "bonjour"}}
			if tc.want != "" {
				want = append([]message{{Role: "system", Content: tc.want}}, want...)
			}
			if len(got) != len(want) {
				t.Fatalf("messages %+v, want %+v", got, want)
			}
			for i := range want {
				if got[i].Role != want[i].Role || got[i].Content != want[i].Content {
					t.Errorf("message %d: %+v, want %+v", i, got[i], want[i])
				}
			}
		})
	}
}
