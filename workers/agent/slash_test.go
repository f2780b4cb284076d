package agent_test

import (
	"strings"
	"testing"
)

// Issue 27: agent mode invites /help; the agent worker answers its own
// commands without the model server, and an unknown one names /help.
func TestSlashCommands(t *testing.T) {
	t.Parallel()
	f := newFakeLLM(t, replay(chunk("ok"), done))
	cfg := cfgFor(f)
	cfg.Model = ""
	cfg.ShellTool = true
	w := start(t, cfg)
	for i, tc := range []struct {
		command string
		want    string // in the output, or in the error when fail
		fail    bool
	}{
		{"/help", "/model", false},
		{"/echo  hello there ", "hello there", false},
		{"/model", "listed-model", false},
		{"/tools", "shell", false},
		{"/nope", "try /help", true},
	} {
		w.send(i+1, "slash", map[string]any{"command": tc.command})
		r := w.reply(i + 1)
		switch {
		case tc.fail && *r.OK:
			t.Errorf("%s: answered %v; want an error", tc.command, r.Result)
		case tc.fail && !strings.Contains(r.Error, tc.want):
			t.Errorf("%s: error %q; want it to hold %q", tc.command, r.Error, tc.want)
		case !tc.fail && !*r.OK:
			t.Errorf("%s: error %q", tc.command, r.Error)
		case !tc.fail && !strings.Contains(r.Result["output"].(string), tc.want):
			t.Errorf("%s: output %q; want it to hold %q", tc.command, r.Result["output"], tc.want)
		}
	}
	w.send(9, "slash", map[string]any{"command": "/model", "model": "picked-model"})
	if r := w.reply(9); !*r.OK || !strings.Contains(r.Result["output"].(string), "picked-model") {
		t.Errorf("/model of a session with a model: %+v; want picked-model", r)
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("%d chat requests to the model server; slash commands never ask it", n)
	}
}
