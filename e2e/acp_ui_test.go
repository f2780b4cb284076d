package e2e_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The dashboard with an agent of the Agent Client Protocol (issue 40): the
// demo agent of github.com/coder/acp-go-sdk behind dashgate's bridge
// (`dashgate serve --agent demo=...`). Its turn, as it sends it: two
// message chunks; tool call call_1 "Reading project files" (kind read,
// pending, at /project/README.md), a second later its update (completed,
// text content "# My Project..."); a chunk; tool call call_2 "Modifying
// critical configuration file" (kind edit, pending) and a permission
// request with the options "Allow this change" (allow_once) and "Skip
// this change" (reject_once); once allowed, call_2 completed and a last
// chunk; end_turn. It sends no thought, plan or commands. startACP
// (acp_test.go) starts dashgate with it as --agent demo, the default.

// agentPickerJS describes the agent picker: hidden, its value and options.
const agentPickerJS = `(s => ({hidden: s.hidden || getComputedStyle(s).display === 'none', value: s.value, options: [...s.options].map(o => o.value)}))(document.querySelector('[data-testid="agent-picker"]'))`

type agentPicker struct {
	Hidden  bool     `json:"hidden"`
	Value   string   `json:"value"`
	Options []string `json:"options"`
}

// agentShownJS says which agent the current session's row and the chat
// header name ("" each when none is shown).
const agentShownJS = `(() => {
	const row = document.querySelector('[data-testid="session-item"].current [data-testid="session-agent"]');
	const head = document.querySelector('[data-testid="chat-agent"]');
	return {row: row ? row.textContent : '', head: head && !head.hidden && getComputedStyle(head).display !== 'none' ? head.textContent : ''};
})()`

type agentShown struct {
	Row  string `json:"row"`
	Head string `json:"head"`
}

// waitAgentShown waits until the current session's row and the header
// name want ("" for none).
func waitAgentShown(t *testing.T, tb *tab, what, want string) {
	t.Helper()
	tb.mustWaitJS(15*time.Second, what,
		`(a => a.row === `+js(want)+` && a.head === `+js(want)+`)(`+agentShownJS+`)`,
		`JSON.stringify({shown: `+agentShownJS+`, state: `+dashboardState+`})`)
}

// pickAgent chooses name in the agent picker as a person does (a change event).
func pickAgent(t *testing.T, tb *tab, name string) {
	t.Helper()
	ok := mustEval[bool](tb, `(s => { if (s.hidden || ![...s.options].some(o => o.value === `+js(name)+`)) return false; s.value = `+js(name)+`; s.dispatchEvent(new Event('change', {bubbles: true})); return true; })(document.querySelector('[data-testid="agent-picker"]'))`)
	if !ok {
		t.Fatalf("the agent picker cannot pick %q: %+v", name, mustEval[agentPicker](tb, agentPickerJS))
	}
}

// TestACPAgentPicker: with an --agent the "New" control offers dashgate and
// demo, the default (demo) first; the session made on load is demo's and
// its row and the chat header say so; picking dashgate makes a built-in
// session, which shows no agent, and the choice survives a reload.
func TestACPAgentPicker(t *testing.T) {
	d := startACP(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	first := openDashboard(t, d, tb)

	p := mustEval[agentPicker](tb, agentPickerJS)
	if p.Hidden || strings.Join(p.Options, " ") != "dashgate demo" || p.Value != "demo" {
		t.Fatalf("the agent picker is %+v, want shown, with the options dashgate and demo, demo (the default) picked", p)
	}
	waitAgentShown(t, tb, "the session made on load names demo", "demo")

	pickAgent(t, tb, "dashgate")
	tb.Do("new session", chromedp.Click(chromedp.CSS(`[data-testid="new-session"]`)))
	tb.mustWaitJS(15*time.Second, "a new session is current", `window.dashgate.currentSession() !== `+js(first)+` && !!document.querySelector('[data-testid="session-item"].current')`, dashboardState)
	built := currentSession(t, tb)
	waitAgentShown(t, tb, "the built-in session names no agent", "")
	// The server agrees: the new session is the built-in worker's (no
	// agent), the first the demo agent's.
	rows := mustEval[map[string]string](tb, `window.dashgate.call('session.list', {}).then(r => Object.fromEntries(r.sessions.map(s => [s.session_id, s.agent ?? ''])))`)
	if rows[first] != "demo" || rows[built] != "" {
		t.Errorf("session.list gives the agents %v, want %s demo and %s none", rows, first, built)
	}
	firstRow := `[data-testid="session-item"][data-session-id=` + js(first) + `] [data-testid="session-agent"]`
	if got := mustEval[string](tb, `document.querySelector('`+firstRow+`')?.textContent ?? ''`); got != "demo" {
		t.Errorf("the demo session's row names %q, want demo", got)
	}

	tb.Do("reload", chromedp.Reload())
	waitDashboard(t, tb)
	if p := mustEval[agentPicker](tb, agentPickerJS); p.Hidden || p.Value != "dashgate" {
		t.Errorf("after a reload the agent picker is %+v, want dashgate picked (the last choice)", p)
	}
	pickAgent(t, tb, "demo")
	tb.Do("new session", chromedp.Click(chromedp.CSS(`[data-testid="new-session"]`)))
	tb.mustWaitJS(15*time.Second, "a third session is current", `![`+js(first)+`, `+js(built)+`].includes(window.dashgate.currentSession())`, dashboardState)
	waitAgentShown(t, tb, "the session made with demo picked names demo", "demo")
}

// TestACPOneAgentShowsNoPicker: without --agent (the built-in worker
// alone) there is nothing to pick and no agent to name.
func TestACPOneAgentShowsNoPicker(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)
	if p := mustEval[agentPicker](tb, agentPickerJS); !p.Hidden {
		t.Errorf("the agent picker shows with one agent: %+v", p)
	}
	waitAgentShown(t, tb, "the built-in session names no agent", "")
	if n := mustEval[int](tb, `document.querySelectorAll('[data-testid="session-agent"]').length`); n != 0 {
		t.Errorf("%d rows name an agent, want none", n)
	}
}

// toolCardJS describes the tool card titled title: its kind, status badge,
// locations and text content; null when there is none.
func toolCardJS(title string) string {
	return `(c => c ? {
		kind: c.querySelector('[data-testid="tool-kind"]')?.textContent ?? '',
		badge: c.querySelector('[data-testid="tool-badge"]')?.dataset.status ?? '',
		locations: [...c.querySelectorAll('[data-testid="tool-locations"] li')].map(l => l.textContent),
		text: [...c.querySelectorAll('[data-testid="tool-content"] [data-testid="tool-text"]')].map(p => p.textContent).join('\n'),
	} : null)([...document.querySelectorAll('[data-testid="chat-log"] [data-testid="tool-card"]')].find(c => c.querySelector('.card-tool')?.textContent === ` + js(title) + `))`
}

type toolCardView struct {
	Kind      string   `json:"kind"`
	Badge     string   `json:"badge"`
	Locations []string `json:"locations"`
	Text      string   `json:"text"`
}

// waitToolBadge waits until the card titled title shows the status badge want.
func waitToolBadge(t *testing.T, tb *tab, title, want string) toolCardView {
	t.Helper()
	card := toolCardJS(title)
	tb.mustWaitJS(15*time.Second, "tab "+tb.name+": the tool card "+title+" is "+want,
		`(c => !!c && c.badge === `+js(want)+`)(`+card+`)`, `JSON.stringify({card: `+card+`, log: `+markdownState+`})`)
	return mustEval[toolCardView](tb, card)
}

// approvalButtonsJS lists the pending approval card's buttons as
// "testid=choice:label".
const approvalButtonsJS = `[...document.querySelectorAll('` + approvalCard + `[data-state="pending"] .card-actions button')].map(b => b.dataset.testid + '=' + b.dataset.choice + ':' + b.textContent)`

// TestACPTurnInTwoTabs: two tabs view a session of the demo agent. A
// prompt streams its reply; the tool cards show their kind, locations and
// status badge, which follows tool.update (pending, then completed with
// the text content); the approval card offers the agent's two options
// under its names (also after a reload); allowing in one tab resolves the
// card in the other; the turn completes in both, with nothing of the
// agent's text made markup.
func TestACPTurnInTwoTabs(t *testing.T) {
	d := startACP(t)
	b := newBrowser(t)
	tb1 := b.newTab(t, "tab1")
	sid := openDashboard(t, d, tb1)
	waitAgentShown(t, tb1, "tab 1: the session is demo's", "demo")
	tb2 := b.newTab(t, "tab2")
	tb2.Do("open the dashboard", chromedp.Navigate(d.URL("/")))
	waitDashboard(t, tb2)
	if got := currentSession(t, tb2); got != sid {
		t.Fatalf("the second tab shows session %s, want %s", got, sid)
	}

	sendChat(t, tb1, "improve the config")
	const firstWords = "ACP Go Example Agent — demo only (no AI model)."
	for _, tb := range []*tab{tb1, tb2} {
		tb.mustWaitJS(15*time.Second, "tab "+tb.name+": the reply streams",
			`!!document.querySelector('`+replyEntry+` .msg[data-streaming="true"]') && document.querySelector('`+replyEntry+` .msg').textContent.startsWith(`+js(firstWords)+`)`, markdownState)
	}

	// call_1: pending, then completed by its tool.update, with its text.
	for _, tb := range []*tab{tb1, tb2} {
		c := waitToolBadge(t, tb, "Reading project files", "completed")
		if c.Kind != "read" || strings.Join(c.Locations, " ") != "/project/README.md" || !strings.HasPrefix(c.Text, "# My Project") {
			t.Errorf("tab %s: the read tool card shows %+v, want kind read, /project/README.md and its text content", tb.name, c)
		}
	}

	// call_2 waits, pending, for the approval: the agent's options.
	const edit = "Modifying critical configuration file"
	want := []string{"approve=once:Allow this change", "deny=deny:Skip this change"}
	for _, tb := range []*tab{tb1, tb2} {
		c := waitToolBadge(t, tb, edit, "pending")
		if c.Kind != "edit" || strings.Join(c.Locations, " ") != "/project/config.json" {
			t.Errorf("tab %s: the edit tool card shows %+v, want kind edit at /project/config.json", tb.name, c)
		}
		waitCard(t, tb, "tab "+tb.name+": the approval card is pending", "pending:  buttons=2")
		if got := mustEval[[]string](tb, approvalButtonsJS); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("tab %s: the approval card's buttons are %q, want %q", tb.name, got, want)
		}
	}
	// A reload while it waits: the card's options come back (session.resume's pending_approvals).
	tb2.Do("reload tab 2", chromedp.Reload())
	waitDashboard(t, tb2)
	waitCard(t, tb2, "tab 2 after a reload: the approval card is pending", "pending:  buttons=2")
	if got := mustEval[[]string](tb2, approvalButtonsJS); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("tab 2 after a reload: the approval card's buttons are %q, want %q", got, want)
	}

	tb1.Do("allow in tab 1", chromedp.Click(chromedp.CSS(approvalCard+` [data-testid="approve"]`)))
	waitCard(t, tb1, "tab 1: the card says approved", "approved: approved buttons=0")
	waitCard(t, tb2, "tab 2: the card says approved in another tab", "approved: approved in another tab buttons=0")

	const done = firstWords + "I'll help you with that. Let me start by reading some files to understand the current situation." +
		" Now I understand the project structure. I need to make some changes to improve it." +
		" Perfect! I've successfully updated the configuration. The changes have been applied."
	for _, tb := range []*tab{tb1, tb2} {
		// In tab 2 the card came back from the history (which keeps no
		// kind or status): the live tool.update gives it its badge.
		waitToolBadge(t, tb, edit, "completed")
		waitAssistant(t, tb, done, 1)
		tb.mustWaitJS(15*time.Second, "tab "+tb.name+": the turn is over (no pending line, Send enabled)",
			`document.querySelector('[data-testid="pending"]').hidden && !document.querySelector('[data-testid="chat-send"]').disabled`, dashboardState)
		if bad := mustEval[[]string](tb, inertJS); len(bad) > 0 {
			t.Errorf("tab %s: the chat log holds live markup from the agent: %v", tb.name, bad)
		}
	}
}
