package e2e_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The dashboard with the agent (dashgate serve --llm-url): Markdown replies
// that cannot run anything, approval cards answered in one tab and seen in
// another, tool cards. The model server is agent_test.go's modelServer, in
// the test process.

// replyEntry is the CSS of the reply entries of the chat log.
const replyEntry = `[data-testid="chat-log"] [data-testid="entry"][data-kind="reply"]`

// markdownState describes the rendered replies for failure messages.
const markdownState = `JSON.stringify([...document.querySelectorAll('[data-testid="chat-log"] [data-testid="entry"]')].map(e => e.dataset.kind + ': ' + e.innerHTML))`

// inertJS lists what in the chat log could run script or leave the page
// from a model's Markdown; [] when nothing.
const inertJS = `(() => {
	const log = document.querySelector('[data-testid="chat-log"]');
	const bad = [];
	for (const n of log.querySelectorAll('*')) {
		for (const a of n.attributes) {
			const v = a.value.replace(/[\s\u0000-\u001f]/g, '').toLowerCase();
			if (a.name.startsWith('on')) bad.push(n.tagName + ' ' + a.name);
			if ((a.name === 'href' || a.name === 'src' || a.name === 'action' || a.name === 'formaction') && v.startsWith('javascript:')) bad.push(n.tagName + ' ' + a.name + '=' + a.value);
		}
		if (['SCRIPT', 'IFRAME', 'OBJECT', 'EMBED', 'IMG', 'STYLE', 'FORM'].includes(n.tagName)) bad.push(n.tagName);
	}
	return bad;
})()`

// TestMarkdownReplyIsRenderedAndInert: the model's Markdown is shown as
// HTML (a heading, a code block with a copy button), while its raw HTML
// and a javascript: link do nothing, live and after a reload.
func TestMarkdownReplyIsRenderedAndInert(t *testing.T) {
	m := newModelServer(t)
	d := startAgent(t, m, t.TempDir())
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)

	const md = "# Plan of record\n\n" +
		"Some *text* with <img src=x onerror=\"window.__pwned=1\"> and a [x](javascript:window.__pwned=2) link, " +
		"and a [safe one](https://example.com/docs).\n\n" +
		"<script>window.__pwned=3</script>\n\n" +
		"```sh\necho hello markdown\n```\n"
	m.then(reply(md))
	sendChat(t, tb, "show me markdown")

	check := func(when string) {
		t.Helper()
		tb.mustWaitJS(15*time.Second, when+": the reply is rendered",
			`!!document.querySelector('`+replyEntry+` .msg:not([data-streaming="true"]) h1')`, markdownState)
		if got := mustEval[string](tb, `document.querySelector('`+replyEntry+` h1').textContent`); got != "Plan of record" {
			t.Errorf("%s: the heading reads %q", when, got)
		}
		if got := mustEval[string](tb, `document.querySelector('`+replyEntry+` pre > code')?.textContent ?? ''`); got != "echo hello markdown\n" {
			t.Errorf("%s: the code block reads %q, want %q", when, got, "echo hello markdown\n")
		}
		if n := mustEval[int](tb, `document.querySelectorAll('`+replyEntry+` [data-testid="copy-code"]').length`); n != 1 {
			t.Errorf("%s: %d copy buttons, want 1 (one code block)", when, n)
		}
		if bad := mustEval[[]string](tb, inertJS); len(bad) > 0 {
			t.Errorf("%s: the chat log holds live markup from the model: %v", when, bad)
		}
		// The raw HTML is shown as text.
		text := mustEval[string](tb, `document.querySelector('`+replyEntry+` .msg').textContent`)
		for _, want := range []string{`<img src=x onerror="window.__pwned=1">`, `<script>window.__pwned=3</script>`} {
			if !strings.Contains(text, want) {
				t.Errorf("%s: the reply does not show %q as text: %q", when, want, text)
			}
		}
		safe := mustEval[map[string]string](tb, `(a => a ? {href: a.getAttribute('href'), target: a.target, rel: a.rel} : {})([...document.querySelectorAll('`+replyEntry+` a')].find(a => a.textContent === 'safe one'))`)
		if safe["href"] != "https://example.com/docs" || safe["target"] != "_blank" || safe["rel"] != "noopener noreferrer" {
			t.Errorf("%s: the safe link is %v, want its href, target _blank and rel \"noopener noreferrer\"", when, safe)
		}
		// A click on the javascript: link runs nothing.
		mustEval[bool](tb, `(a => { if (!a) return false; a.dataset.e2e = 'jslink'; return true; })([...document.querySelectorAll('`+replyEntry+` a')].find(a => a.textContent === 'x'))`)
		tb.Do(when+": click the javascript: link", chromedp.Click(chromedp.CSS(`[data-e2e="jslink"]`)))
		// Any navigation it started would have replaced the page; the
		// dashboard answering an RPC after the click shows it is still
		// the same document.
		if got := mustEval[string](tb, `window.dashgate.call('model.list', {}).then(() => String(window.__pwned))`); got != "undefined" {
			t.Errorf("%s: window.__pwned is %s after the reply and a click on its link", when, got)
		}
		if got := mustEval[string](tb, `location.pathname`); got != "/" {
			t.Errorf("%s: the page went to %s", when, got)
		}
		// The copy button copies the code (to the clipboard, or says it could not).
		tb.Do(when+": click the copy button", chromedp.Click(chromedp.CSS(replyEntry+` [data-testid="copy-code"]`)))
		tb.mustWaitJS(5*time.Second, when+": the copy button reacts",
			`['copied', 'failed'].includes(document.querySelector('`+replyEntry+` [data-testid="copy-code"]').dataset.state)`, markdownState)
	}
	check("live")
	live := entries(tb)

	tb.Do("reload", chromedp.Reload())
	waitDashboard(t, tb)
	check("after a reload")
	waitEntries(t, tb, "after a reload", live)
}

// approvalCard is the CSS of the approval card of the chat log.
const approvalCard = `[data-testid="chat-log"] [data-testid="approval-card"]`

// cardState is the state and the status line of the approval card.
const cardState = `(c => c ? c.dataset.state + ': ' + (c.querySelector('[data-testid="approval-status"]')?.textContent ?? '') + ' buttons=' + c.querySelectorAll('[data-testid="approve"], [data-testid="deny"]').length : 'none')(document.querySelector('` + approvalCard + `'))`

// waitCard waits until the approval card reads want (cardState).
func waitCard(t *testing.T, tb *tab, what, want string) {
	t.Helper()
	tb.mustWaitJS(15*time.Second, what, cardState+` === `+js(want), `JSON.stringify({card: `+cardState+`, state: `+dashboardState+`})`)
}

// fileLines reads path's lines; nil when it does not exist.
func fileLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// TestApprovalInTwoTabs: two tabs view a session whose agent asks to run a
// command; the card shows in both, the approval in one resolves it in the
// other, the command runs once and its card shows the output.
func TestApprovalInTwoTabs(t *testing.T) {
	m := newModelServer(t)
	dir := t.TempDir()
	d := startAgent(t, m, dir)
	b := newBrowser(t)
	tb1 := b.newTab(t, "tab1")
	sid := openDashboard(t, d, tb1)
	tb2 := b.newTab(t, "tab2")
	tb2.Do("open the dashboard", chromedp.Navigate(d.URL("/")))
	waitDashboard(t, tb2)
	if got := currentSession(t, tb2); got != sid {
		t.Fatalf("the second tab shows session %s, want %s", got, sid)
	}

	const command = "echo ran >> ran.txt; echo ran-$((40+2))"
	m.then(toolCall(command), reply("The command ran."))
	sendChat(t, tb1, "run it")

	for _, tb := range []*tab{tb1, tb2} {
		waitCard(t, tb, "tab "+tb.name+": the approval card is pending", "pending:  buttons=2")
		c := mustEval[map[string]string](tb, `(c => ({tool: c.querySelector('.card-tool').textContent, command: c.querySelector('[data-testid="approval-command"]').textContent, id: c.dataset.requestId}))(document.querySelector('`+approvalCard+`'))`)
		if c["command"] != command || c["tool"] != "shell" || c["id"] == "" {
			t.Errorf("tab %s: the approval card shows %v, want the tool shell and the command %q", tb.name, c, command)
		}
	}
	ran := filepath.Join(dir, "ran.txt")
	if l := fileLines(t, ran); l != nil {
		t.Fatalf("ran.txt exists before the approval: %q", l)
	}

	tb1.Do("approve in tab 1", chromedp.Click(chromedp.CSS(approvalCard+` [data-testid="approve"]`)))
	waitCard(t, tb1, "tab 1: the card says approved", "approved: approved buttons=0")
	waitCard(t, tb2, "tab 2: the card says approved in another tab", "approved: approved in another tab buttons=0")

	toolDone := `(c => c && c.dataset.state === 'done' ? c.querySelector('[data-testid="tool-output"] pre').textContent : '')(document.querySelector('[data-testid="chat-log"] [data-testid="tool-card"]'))`
	for _, tb := range []*tab{tb1, tb2} {
		tb.mustWaitJS(15*time.Second, "tab "+tb.name+": the tool card shows the output", toolDone+` === 'ran-42\n'`,
			`JSON.stringify([`+toolDone+`, `+markdownState+`])`)
		if got := mustEval[string](tb, `document.querySelector('[data-testid="tool-card"] [data-testid="tool-command"]').textContent`); got != command {
			t.Errorf("tab %s: the tool card's command reads %q, want %q", tb.name, got, command)
		}
		if got := mustEval[string](tb, `document.querySelector('[data-testid="tool-card"] [data-testid="tool-status"]').textContent`); !strings.HasPrefix(got, "exit 0 · ") {
			t.Errorf("tab %s: the tool card's status reads %q, want exit 0 and a duration", tb.name, got)
		}
		waitAssistant(t, tb, "The command ran.", 1)
	}
	if l := fileLines(t, ran); len(l) != 1 || l[0] != "ran" {
		t.Errorf("ran.txt holds %q, want exactly one line \"ran\"", l)
	}
	// The follow-up request carried the tool's output.
	var sawOutput bool
	for _, r := range m.got() {
		for _, msg := range r.Messages {
			if msg.Role == "tool" && strings.Contains(fmt.Sprint(msg.Content), "ran-42") {
				sawOutput = true
			}
		}
	}
	if !sawOutput {
		t.Errorf("no request to the model carried the tool's output: %+v", m.got())
	}

	// From the history: the card resolved, the tool card with its output.
	tb2.Do("reload tab 2", chromedp.Reload())
	waitDashboard(t, tb2)
	waitCard(t, tb2, "tab 2 after a reload: the card is approved", "approved: approved buttons=0")
	tb2.mustWaitJS(15*time.Second, "tab 2 after a reload: the tool card shows the output", toolDone+` === 'ran-42\n'`, markdownState)
	waitAssistant(t, tb2, "The command ran.", 1)
	// The reply had no text before the tool ran: it comes after its cards,
	// live as after a reload.
	got := kinds(entries(tb2))
	want := []string{"prompt", "approval_request", "tool_call", "reply"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("after a reload the entries are %v, want %v", got, want)
	}
	if live := kinds(entries(tb1)); strings.Join(live, " ") != strings.Join(want, " ") {
		t.Errorf("the live entries are %v, want %v as after a reload", live, want)
	}
}

// TestDeniedApprovalNeverRuns: a denied command is never run, and its card
// says denied, also after a reload.
func TestDeniedApprovalNeverRuns(t *testing.T) {
	m := newModelServer(t)
	dir := t.TempDir()
	d := startAgent(t, m, dir)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)

	m.then(toolCall("echo ran >> ran.txt"), reply("Not run, then."))
	sendChat(t, tb, "run it")
	waitCard(t, tb, "the approval card is pending", "pending:  buttons=2")
	tb.Do("deny", chromedp.Click(chromedp.CSS(approvalCard+` [data-testid="deny"]`)))
	waitCard(t, tb, "the card says denied", "denied: denied buttons=0")
	// The turn ends: with the model's answer to the denial.
	waitAssistant(t, tb, "Not run, then.", 1)
	if n := mustEval[int](tb, `document.querySelectorAll('[data-testid="chat-log"] [data-testid="tool-card"]').length`); n != 0 {
		t.Errorf("%d tool cards after a denial, want none", n)
	}
	if l := fileLines(t, filepath.Join(dir, "ran.txt")); l != nil {
		t.Errorf("ran.txt exists after a denial: %q", l)
	}

	tb.Do("reload", chromedp.Reload())
	waitDashboard(t, tb)
	waitCard(t, tb, "after a reload the card says denied", "denied: denied buttons=0")
	if l := fileLines(t, filepath.Join(dir, "ran.txt")); l != nil {
		t.Errorf("ran.txt exists after a denial and a reload: %q", l)
	}
}

// Issue 27: the agent's empty chat invites /help; the agent worker answers
// it (its list of commands) instead of a red error, live and after a
// reload.
func TestAgentAnswersHelp(t *testing.T) {
	m := newModelServer(t)
	d := startAgent(t, m, t.TempDir())
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)
	if ph := mustEval[string](tb, `document.querySelector('[data-testid="chat-input"]').placeholder`); !strings.Contains(ph, "/help") {
		t.Fatalf("the placeholder %q no longer invites /help: this test checks the invitation is kept", ph)
	}
	sendChat(t, tb, "/help")
	const answered = `[...document.querySelectorAll('[data-testid="chat-log"] [data-testid="entry"][data-kind="slash_output"]')].some(e => e.textContent.includes('/model') && e.textContent.includes('/tools'))`
	const errors = `document.querySelectorAll('[data-testid="chat-log"] [data-testid="entry"][data-kind="error"]').length`
	for _, when := range []string{"live", "after a reload"} {
		if when != "live" {
			tb.Do("reload", chromedp.Reload())
			waitDashboard(t, tb)
		}
		tb.mustWaitJS(15*time.Second, when+": /help is answered with the agent's commands", answered, markdownState)
		if n := mustEval[int](tb, errors); n != 0 {
			t.Errorf("%s: %d error entries after /help; want none", when, n)
		}
	}
}

// TestApprovalSurvivesAReload: the only tab reloads while an approval
// waits (its session has no viewer for a moment): the card is pending
// again after the reload, and approving it there runs the command.
func TestApprovalSurvivesAReload(t *testing.T) {
	m := newModelServer(t)
	dir := t.TempDir()
	d := startAgent(t, m, dir)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)
	const command = "echo ran-$((40+2))"
	m.then(toolCall(command), reply("The command ran."))
	sendChat(t, tb, "run it")
	waitCard(t, tb, "the approval card is pending", "pending:  buttons=2")

	tb.Do("reload", chromedp.Reload())
	waitDashboard(t, tb)
	waitCard(t, tb, "after the reload the approval card is pending again", "pending:  buttons=2")
	tb.Do("approve", chromedp.Click(chromedp.CSS(approvalCard+` [data-testid="approve"]`)))
	waitCard(t, tb, "the card says approved", "approved: approved buttons=0")
	waitAssistant(t, tb, "The command ran.", 1)
}
