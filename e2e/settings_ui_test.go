package e2e_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/dashgate/dashgate/internal/testkit"
)

// Per-user settings (issue 42): the Settings dialog of the dashboard, kept
// in the store across a restart and in every browser, and what they do.

// settingsState describes the settings as the page has them, for failure
// messages.
const settingsState = `JSON.stringify({settings: window.dashgate && window.dashgate.settings(),
	dialog: document.querySelector('[data-testid="settings-dialog"]')?.open,
	error: document.querySelector('[data-testid="settings-error"]')?.textContent,
	theme: document.documentElement.dataset.theme ?? null, stored: localStorage.getItem('dashgate.theme'),
	unsaved: localStorage.getItem('dashgate.theme.unsaved'),
	font: window.dashgate && [window.dashgate.term.options.fontSize, window.dashgate.term.options.fontFamily],
	picker: document.querySelector('[data-testid="agent-picker"]')?.value,
	agent: window.dashgate && window.dashgate.currentAgent(), model: window.dashgate && window.dashgate.currentModel(),
	chat: [...document.querySelectorAll('[data-testid="chat-message"]')].map(e => e.dataset.role + ': ' + e.textContent)})`

// settingsFields reads the dialog's fields.
const settingsFields = `(() => {
	const v = (id) => document.querySelector('[data-testid="' + id + '"]').value;
	return {agent: v('settings-agent'), model: v('settings-model'), prompt: v('settings-system-prompt'), theme: v('settings-theme'),
		size: v('settings-font-size'), family: v('settings-font-family'),
		agents: [...document.querySelectorAll('[data-testid="settings-agent"] option')].map(o => o.value).join(','),
		models: [...document.querySelectorAll('[data-testid="settings-model"] option')].map(o => o.value).join(',')};
})()`

// startSettingsDashgate starts dashgate on state (and addr, "" for any)
// with the model stand-in m behind the built-in worker and the test ACP
// agent as --agent show; the built-in worker stays the server's default.
func startSettingsDashgate(t *testing.T, m *modelServer, agent, state, addr string) *dashgate {
	t.Helper()
	args := []string{
		"--worker-grace", workerGrace.String(), "--log-level", "debug", "--pty-cmd", "/bin/bash --noprofile --norc",
		"--state-dir", state, "--llm-url", m.URL + "/v1", "--llm-api-key-env", "E2E_MODEL_KEY",
		"--agent", "show=" + agent, "--default-agent", "dashgate",
	}
	if addr != "" {
		args = append(args, "--addr", addr)
	}
	return launch(t, testkit.Options{Sub: "serve", Dir: t.TempDir(), Env: append(testkit.CleanEnv(), "E2E_MODEL_KEY="+agentKey), Args: args})
}

// openSettings opens the Settings dialog from the top bar and waits for
// its fields, filled from the server.
func openSettings(t *testing.T, tb *tab) {
	t.Helper()
	tb.Do("open the settings", chromedp.Click(chromedp.CSS(byTestID("settings-open"))))
	tb.mustWaitJS(15*time.Second, "the settings dialog open, with the agents and models",
		`document.querySelector('[data-testid="settings-dialog"]').open && document.querySelector('[data-testid="settings-model"] option[value="fake-2"]') !== null`, settingsState)
}

// setField sets a field of the dialog as a person does: a select's
// option (its change event), or text typed into the emptied field.
func setField(tb *tab, id, value string) {
	el := `document.querySelector('` + byTestID(id) + `')`
	if id == "settings-agent" || id == "settings-model" || id == "settings-theme" {
		tb.Do("choose "+value+" in "+id, chromedp.Evaluate[chromedp.Void](`(s => { s.value = `+js(value)+`; s.dispatchEvent(new Event('change', {bubbles: true})); })(`+el+`)`))
		return
	}
	tb.Do("type "+value+" in "+id, chromedp.Evaluate[chromedp.Void](`(e => { e.value = ''; e.focus(); })(`+el+`)`), chromedp.SendKeys(chromedp.CSS(byTestID(id)), value))
}

// TestSettingsKeptAndApplied: settings chosen in the dialog (Save; Esc
// closes it without saving; a value the server refuses is said in the
// dialog, which stays open) apply at once (theme, terminal font), are
// kept across a restart of dashgate on the same state directory and a
// reload, and hold in another browser, whose own localStorage knows
// nothing of them; a new session takes the default agent (the picker
// starts there) and, for the built-in worker, the default model; the
// system prompt reaches the model server as the system message, and an
// ACP agent as the first block of its first prompt; a theme chosen in
// the top bar is stored too, one chosen on the admin page by the next
// dashboard.
func TestSettingsKeptAndApplied(t *testing.T) {
	m := newModelServer(t)
	agent := buildAgent(t, "github.com/dashgate/dashgate/internal/testkit/acpagent")
	state := t.TempDir()
	d := startSettingsDashgate(t, m, agent, state, "")
	b := newBrowser(t)
	tb := b.newTab(t, "settings")
	// The second dashgate starts after the browser: close the browser
	// before the cleanups (see TestHistoryCompleteAfterReloadAndRestart).
	defer func() {
		if t.Failed() {
			tb.saveArtifacts()
		}
		tb.closed = true
		b.close()
	}()
	openDashboard(t, d, tb)
	const prompt = "Answer like a pirate."
	const family = `"DejaVu Sans Mono", monospace`
	if got := mustEval[float64](tb, `window.dashgate.term.options.fontSize`); got != 13 {
		t.Fatalf("the terminal's font size before any setting: %v, want the default 13", got)
	}

	openSettings(t, tb)
	f := mustEval[map[string]string](tb, settingsFields)
	if f["agents"] != ",dashgate,show" || f["models"] != ",fake-1,fake-2" || f["agent"] != "" || f["model"] != "" || f["prompt"] != "" || f["theme"] != "" || f["size"] != "" {
		t.Fatalf("the dialog before any setting: %v; want the server's defaults and its agents and models", f)
	}
	// Esc closes the dialog; what was typed is not saved.
	setField(tb, "settings-system-prompt", "not this one")
	tb.Do("press Esc", chromedp.KeyEvent(kb.Escape))
	tb.mustWaitJS(15*time.Second, "Esc closed the dialog", `!document.querySelector('[data-testid="settings-dialog"]').open`, settingsState)
	if got := mustEval[string](tb, `window.dashgate.call('settings.get', {}).then(s => s.system_prompt)`); got != "" {
		t.Fatalf("after Esc the stored system prompt is %q, want none", got)
	}

	openSettings(t, tb)
	if got := mustEval[string](tb, `document.querySelector('[data-testid="settings-system-prompt"]').value`); got != "" {
		t.Fatalf("the dialog opened again shows the system prompt %q typed before Esc", got)
	}
	setField(tb, "settings-agent", "show")
	setField(tb, "settings-model", "fake-2")
	setField(tb, "settings-system-prompt", prompt)
	setField(tb, "settings-theme", "light")
	setField(tb, "settings-font-size", "20")
	setField(tb, "settings-font-family", "Fira; color: red")
	tb.Do("save", chromedp.Click(chromedp.CSS(byTestID("settings-save"))))
	tb.mustWaitJS(15*time.Second, "the dialog says why the font is refused and stays open",
		`document.querySelector('[data-testid="settings-dialog"]').open && document.querySelector('[data-testid="settings-error"]').textContent.includes('terminal_font_family')`, settingsState)
	if got := mustEval[string](tb, `window.dashgate.call('settings.get', {}).then(s => s.theme + '|' + s.terminal_font_size)`); got != "|0" {
		t.Fatalf("after a refused save the stored settings read %s, want nothing of it", got)
	}
	setField(tb, "settings-font-family", family)
	tb.Do("save", chromedp.Click(chromedp.CSS(byTestID("settings-save"))))
	applied := `!document.querySelector('[data-testid="settings-dialog"]').open && document.documentElement.dataset.theme === 'light' &&
		window.dashgate.term.options.fontSize === 20 && window.dashgate.term.options.fontFamily === ` + js(family)
	tb.mustWaitJS(15*time.Second, "saved: the dialog closed, the light theme and the terminal font applied", applied, settingsState)
	waitBg(tb, "the dashboard is light", dashLightBg)

	// Restart dashgate on the same state directory and address, reload.
	_, port, err := net.SplitHostPort(d.Addr)
	if err != nil {
		t.Fatal(err)
	}
	stopForRestart(t, d)
	d = startSettingsDashgate(t, m, agent, state, net.JoinHostPort("127.0.0.1", port))
	tb.Do("reload", chromedp.Reload())
	waitDashboard(t, tb)
	tb.mustWaitJS(15*time.Second, "after the restart and a reload: the theme and the terminal font", applied, settingsState)
	tb.mustWaitJS(15*time.Second, "the agent picker starts at the default agent", `document.querySelector('[data-testid="agent-picker"]').value === 'show'`, settingsState)
	openSettings(t, tb)
	f = mustEval[map[string]string](tb, settingsFields)
	if f["agent"] != "show" || f["model"] != "fake-2" || f["prompt"] != prompt || f["theme"] != "light" || f["size"] != "20" || f["family"] != family {
		t.Fatalf("the dialog after the restart: %v", f)
	}
	tb.Do("close the dialog", chromedp.Click(chromedp.CSS(byTestID("settings-cancel"))))
	tb.mustWaitJS(15*time.Second, "Cancel closed the dialog", `!document.querySelector('[data-testid="settings-dialog"]').open`, settingsState)

	// A new session talks to the default agent; the system prompt is the
	// first block of its first prompt (the test agent echoes that block).
	tb.Do("new session", chromedp.Click(chromedp.CSS(byTestID("new-session"))))
	tb.mustWaitJS(15*time.Second, "the new session is the show agent's", `window.dashgate.currentAgent() === 'show'`, settingsState)
	sendChat(t, tb, "ahoy")
	tb.mustWaitJS(15*time.Second, "the agent got the system prompt first", chatCount("assistant", "echo: "+prompt)+` >= 1`, settingsState)

	// A new session of the built-in worker gets the default model, and
	// the model server the system prompt as its system message.
	tb.Do("pick the built-in worker", chromedp.Evaluate[chromedp.Void](`(s => { s.value = 'dashgate'; s.dispatchEvent(new Event('change', {bubbles: true})); })(document.querySelector('[data-testid="agent-picker"]'))`))
	tb.Do("new session", chromedp.Click(chromedp.CSS(byTestID("new-session"))))
	tb.mustWaitJS(15*time.Second, "the new session has the default model", `window.dashgate.currentAgent() === '' && window.dashgate.currentModel() === 'fake-2'`, settingsState)
	m.then(reply("Arr, matey."))
	sendChat(t, tb, "hello there")
	tb.mustWaitJS(15*time.Second, "the model's reply", chatCount("assistant", "Arr, matey.")+` >= 1`, settingsState)
	reqs := m.got()
	if len(reqs) == 0 {
		t.Fatal("the model server got no request")
	}
	last := reqs[len(reqs)-1]
	if last.Model != "fake-2" || len(last.Messages) == 0 || last.Messages[0].Role != "system" || last.Messages[0].Content != prompt {
		t.Fatalf("the model server's request: model %q, messages %+v; want fake-2 and the system prompt first", last.Model, last.Messages)
	}

	// Another browser, which never saw them: the same settings.
	b2 := newBrowser(t)
	defer b2.close()
	tb2 := b2.newTab(t, "another browser")
	openDashboard(t, d, tb2)
	tb2.mustWaitJS(15*time.Second, "another browser: the theme and the terminal font", applied, settingsState)

	// A theme chosen in the top bar is the user's setting too: the first
	// browser has it after a reload.
	chooseTheme(tb2, "dark")
	tb2.mustWaitJS(15*time.Second, "the chosen theme stored", `window.dashgate.call('settings.get', {}).then(s => s.theme === 'dark')`, settingsState)
	tb.Do("reload", chromedp.Reload())
	waitDashboard(t, tb)
	tb.mustWaitJS(15*time.Second, "the first browser follows the theme chosen in the other", `document.documentElement.dataset.theme === 'dark'`, settingsState)
	waitBg(tb, "the dashboard is dark", dashDarkBg)
	if s := mustEval[string](tb, settingsState); !strings.Contains(s, `"stored":"dark"`) {
		t.Errorf("the first browser's own theme did not follow the stored one: %s", s)
	}

	// A theme chosen where no chat socket stores it (the admin page) is
	// stored by the dashboard opened next, not lost to the older one.
	tb2.Do("open the admin page", chromedp.Navigate(d.URL("/admin")))
	tb2.mustWaitJS(15*time.Second, "the admin page", adminLoaded, "")
	chooseTheme(tb2, "light")
	tb2.Do("back to the dashboard", chromedp.Navigate(d.URL("/")))
	waitDashboard(t, tb2)
	tb2.mustWaitJS(15*time.Second, "the theme chosen on the admin page stored", `window.dashgate.call('settings.get', {}).then(s => s.theme === 'light')`, settingsState)
	tb2.mustWaitJS(15*time.Second, "and kept in the page", `document.documentElement.dataset.theme === 'light' && localStorage.getItem('dashgate.theme.unsaved') === null`, settingsState)
}
