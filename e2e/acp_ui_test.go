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
	// After a reload the cards come from the history alone: each keeps
	// its kind and its final status (the result's), and shows no exit
	// code (no process ran).
	tb2.Do("reload tab 2 after the turn", chromedp.Reload())
	waitDashboard(t, tb2)
	for _, title := range []string{"Reading project files", edit} {
		if c := waitToolBadge(t, tb2, title, "completed"); c.Kind == "" {
			t.Errorf("tab 2 after a reload: the tool card %s shows no kind: %+v", title, c)
		}
	}
	if exits := mustEval[[]string](tb2, `[...document.querySelectorAll('[data-testid="tool-status"]')].map(s => s.textContent).filter(t => t.includes('exit'))`); len(exits) > 0 {
		t.Errorf("tab 2 after a reload: the agent's tool cards show exit codes %q", exits)
	}
}

// startShowAgent starts dashgate with the test agent as --agent show
// (the default): its "show" turn sends what the SDK's demo agent does
// not (thinking, a plan, slash commands, a diff and a terminal in a tool
// call, the four permission option kinds), with markup in every text.
func startShowAgent(t *testing.T) *dashgate {
	t.Helper()
	return startDashgate(t, "--agent", "show="+buildAgent(t, "github.com/dashgate/dashgate/internal/testkit/acpagent"))
}

// What the show turn sends (internal/testkit/acpagent).
const (
	showThought = "Let me <b>think</b> about it."
	showTitle   = `Edit <img src=x onerror="window.__pwned=1">`
	showPath    = "/src/<x>.go"
)

// showJS describes what the show agent's turn left in the chat pane.
const showJS = `(() => {
	const log = document.querySelector('[data-testid="chat-log"]');
	const thought = log.querySelector('[data-testid="thought"]');
	const reply = log.querySelector('[data-testid="entry"][data-kind="reply"]');
	const card = log.querySelector('[data-testid="tool-card"]');
	const plan = document.querySelector('[data-testid="plan"]');
	return {
		thought: thought?.querySelector('.thought-text')?.textContent ?? '',
		thoughtOpen: !!thought?.querySelector('details')?.open,
		thoughtAbove: !!(thought && reply && (thought.compareDocumentPosition(reply) & Node.DOCUMENT_POSITION_FOLLOWING)),
		plan: plan.hidden ? [] : [...plan.querySelectorAll('[data-testid="plan-entry"]')].map(e => e.dataset.status + ' ' + e.textContent),
		title: card?.querySelector('.card-tool')?.textContent ?? '',
		locations: [...(card?.querySelectorAll('[data-testid="tool-locations"] li') ?? [])].map(l => l.textContent),
		diffPath: card?.querySelector('[data-testid="tool-diff-path"]')?.textContent ?? '',
		diff: [...(card?.querySelectorAll('[data-testid="tool-diff"] .diff-line') ?? [])].map(l => l.textContent.replace(/\n$/, '')),
		terminal: card?.querySelector('[data-testid="tool-terminal"]')?.textContent ?? '',
	};
})()`

type showView struct {
	Thought      string   `json:"thought"`
	ThoughtOpen  bool     `json:"thoughtOpen"`
	ThoughtAbove bool     `json:"thoughtAbove"`
	Plan         []string `json:"plan"`
	Title        string   `json:"title"`
	Locations    []string `json:"locations"`
	DiffPath     string   `json:"diffPath"`
	Diff         []string `json:"diff"`
	Terminal     string   `json:"terminal"`
}

// slashListJS lists the slash commands shown ("" each when the list is hidden).
const slashListJS = `(l => l.hidden ? [] : [...l.querySelectorAll('[data-testid="slash-command"]')].map(c => c.textContent))(document.querySelector('[data-testid="slash-list"]'))`

// TestACPShowsThoughtPlanDiffAndOptions: an agent's thinking shows folded
// above its reply, its plan as a checklist, its tool call's diff as
// -/+ lines and its terminal by id, its four permission options as four
// buttons (one without a name in the button's own words), and "Always
// allow" answers with its allow_always option; its slash commands show
// when "/" is typed; plan and commands come back after a reload; none of
// its markup becomes markup.
func TestACPShowsThoughtPlanDiffAndOptions(t *testing.T) {
	d := startShowAgent(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)
	waitAgentShown(t, tb, "the session is show's", "show")
	sendChat(t, tb, "show")

	waitCard(t, tb, "the approval card is pending", "pending:  buttons=2") // Allow once and Reject: cardState counts approve and deny
	wantButtons := []string{"approve=once:Yes", "approve-always=always:Yes, <b>always</b>", "deny=deny:No", "deny-always=deny_always:Always reject"}
	if got := mustEval[[]string](tb, approvalButtonsJS); strings.Join(got, "|") != strings.Join(wantButtons, "|") {
		t.Errorf("the approval card's buttons are %q, want %q", got, wantButtons)
	}
	want := showView{
		Thought: showThought, ThoughtAbove: true,
		Plan:  []string{"completed Read the <i>code</i>", "in_progress Edit it", "pending Run the tests"},
		Title: showTitle, Locations: []string{showPath + ":3"},
		DiffPath: "/src/a.go", Diff: []string{" a", "-b", "+<B>", " c"},
		Terminal: "terminal term-1",
	}
	check := func(what string, v showView, want showView) {
		t.Helper()
		if strings.Join(v.Plan, "|") != strings.Join(want.Plan, "|") || v.Thought != want.Thought || v.ThoughtOpen || v.ThoughtAbove != want.ThoughtAbove ||
			v.Title != want.Title || strings.Join(v.Locations, "|") != strings.Join(want.Locations, "|") ||
			v.DiffPath != want.DiffPath || strings.Join(v.Diff, "|") != strings.Join(want.Diff, "|") || v.Terminal != want.Terminal {
			t.Errorf("%s: the chat pane shows\n %+v\nwant\n %+v", what, v, want)
		}
	}
	// When the socket is behind, its writer sends approval.* before the
	// events queued with it (docs/PROTOCOL.md, issue 43): the tool call's
	// card may show a moment after the approval card.
	tb.mustWaitJS(15*time.Second, "the tool call shows while the approval waits",
		`(v => v.title === `+js(showTitle)+` && v.diff.length === 4 && v.terminal !== "")(`+showJS+`)`, showJS)
	check("while the approval waits", mustEval[showView](tb, showJS), want)

	tb.Do("always allow", chromedp.Click(chromedp.CSS(approvalCard+` [data-testid="approve-always"]`)))
	waitCard(t, tb, "the card says always allowed", "approved: always allowed buttons=0")
	waitAssistant(t, tb, "Plan ready. Done: allow-always", 1)
	waitToolBadge(t, tb, showTitle, "completed")
	if bad := mustEval[[]string](tb, inertJS); len(bad) > 0 {
		t.Errorf("the chat log holds live markup from the agent: %v", bad)
	}
	if got := mustEval[string](tb, `String(window.__pwned)`); got != "undefined" {
		t.Errorf("window.__pwned is %s", got)
	}

	for _, when := range []string{"live", "after a reload"} {
		if when != "live" {
			tb.Do("reload", chromedp.Reload())
			waitDashboard(t, tb)
			// Thinking is not kept; the tool card comes from the history
			// (its title, no content): the plan stays.
			v := mustEval[showView](tb, showJS)
			if strings.Join(v.Plan, "|") != strings.Join(want.Plan, "|") {
				t.Errorf("after a reload the plan reads %q, want %q", v.Plan, want.Plan)
			}
		}
		tb.Do(when+": type /", chromedp.SendKeys(`[data-testid="chat-input"]`, "/"))
		tb.mustWaitJS(5*time.Second, when+": the agent's command is offered",
			slashListJS+`.length === 1`, `JSON.stringify(`+slashListJS+`)`)
		if got := mustEval[[]string](tb, slashListJS); len(got) != 1 || !strings.HasPrefix(got[0], "/review what to look at") || !strings.HasSuffix(got[0], "Review the <b>diff</b>") {
			t.Errorf("%s: the command list reads %q", when, got)
		}
		tb.Do(when+": pick it", chromedp.Click(chromedp.CSS(`[data-testid="slash-command"]`)))
		if got := mustEval[string](tb, `document.querySelector('[data-testid="chat-input"]').value`); got != "/review " {
			t.Errorf("%s: the input reads %q after picking the command, want %q", when, got, "/review ")
		}
		mustEval[bool](tb, `(i => { i.value = ''; i.dispatchEvent(new Event('input')); return true; })(document.querySelector('[data-testid="chat-input"]'))`)
	}
}
