package e2e_test

// Issue 42, item 7: the defects a new-user trial found.

import (
	"fmt"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"

	"github.com/dashgate/dashgate/internal/testkit"
)

// TestTrialSearchPrefixMarkedSnippetPlain: a search for the start of a
// word (pomegran) marks that start in the hit of "pomegranate", and a
// reply's snippet reads as the reply does, without its Markdown marks
// (they showed raw: **, backticks, [text](url)); a prompt's snippet stays
// as it was typed, as the chat shows it.
func TestTrialSearchPrefixMarkedSnippetPlain(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)
	const prompt = "a **Pomegranate** sorbet, `granita` and [a link](http://example.com/x)"
	sendChat(t, tb, prompt)
	waitAssistant(t, tb, "(echo agent) a Pomegranate sorbet, granita and a link", 1)

	// The store writes behind the chat: wait until it finds the reply.
	c := openChat(t, "client", d.WSURL("ws/chat"), bearer())
	var hits struct {
		Hits []struct {
			Kind string `json:"kind"`
		} `json:"hits"`
	}
	if !testkit.Until(10*time.Second, func() bool {
		c.mustCall("session.search", map[string]any{"query": "pomegran"}, &hits)
		return len(hits.Hits) == 2
	}) {
		t.Fatalf("session.search pomegran: %+v, want the prompt and the reply", hits.Hits)
	}

	tb.Do("search pomegran", chromedp.SendKeys(chromedp.CSS(byTestID("search-input")), "pomegran\r"))
	snippet := func(kind string) string {
		return fmt.Sprintf(`document.querySelector('[data-testid="search-hit"][data-kind=%s] [data-testid="search-snippet"]')`, js(kind))
	}
	tb.mustWaitJS(10*time.Second, "both hits listed", fmt.Sprintf(`!!%s && !!%s`, snippet("prompt"), snippet("reply")), searchState)

	type shown struct {
		Text  string   `json:"text"`
		Marks []string `json:"marks"`
	}
	for kind, want := range map[string]string{
		"reply":  "(echo agent) a Pomegranate sorbet, granita and a link",
		"prompt": prompt,
	} {
		got := mustEval[shown](tb, fmt.Sprintf(`(s => ({text: s.textContent, marks: [...s.querySelectorAll('mark')].map(m => m.textContent)}))(%s)`, snippet(kind)))
		if got.Text != want {
			t.Errorf("the %s's snippet reads %q, want %q", kind, got.Text, want)
		}
		if len(got.Marks) != 1 || got.Marks[0] != "Pomegran" {
			t.Errorf("the %s's snippet marks %q, want the matched start of Pomegranate, [Pomegran]", kind, got.Marks)
		}
	}

	// The same in place (the page's own module): what a cut snippet keeps.
	for _, c := range []struct{ in, want string }{
		{"…pomegranate** sorbet, `*args`, snake_case and 2 * 3", "…pomegranate sorbet, *args, snake_case and 2 * 3"},
		{"# Title\n- one _item_\n> ~~old~~ quote\n```go\nx := 1\n```\n**`code`** ![alt](i.png) see](http://x) `cut", "Title one item old quote x := 1 code alt see cut"},
	} {
		got := mustEval[string](tb, fmt.Sprintf(`import('/static/js/sessions.js').then(m => m.plainSnippet(%s))`, js(c.in)))
		if got != c.want {
			t.Errorf("plainSnippet(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestTrialNotifyBlockedSaysSo: while the browser blocks notifications for
// the site, the Notify button says so on its face and in its title (a
// click on it did nothing visible), and again after a reload.
func TestTrialNotifyBlockedSaysSo(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)
	const button = `document.querySelector('[data-testid="notify-toggle"]')`
	const state = `(b => JSON.stringify({text: b.textContent, state: b.dataset.state, title: b.title, pressed: b.getAttribute('aria-pressed'), permission: Notification.permission}))(` + button + `)`
	tb.mustWaitJS(5*time.Second, "the Notify button offers notifications", visible(byTestID("notify-toggle"))+` && `+button+`.textContent === 'Notify'`, state)

	origin := mustEval[string](tb, `location.origin`)
	if _, err := chromedp.CallBrowser(tb.ctx, cdpbrowser.SetPermission, cdpbrowser.SetPermissionParams{
		Permission: &cdpbrowser.PermissionDescriptor{Name: "notifications"}, Setting: cdpbrowser.PermissionSettingDenied, Origin: origin,
	}); err != nil {
		t.Fatalf("block notifications: %v", err)
	}
	blocked := `(b => b.textContent === 'Notify: blocked' && b.dataset.state === 'blocked' && b.title.includes('blocked') && b.getAttribute('aria-pressed') === 'false')(` + button + `)`
	tb.Do("click Notify", chromedp.Click(chromedp.CSS(byTestID("notify-toggle"))))
	tb.mustWaitJS(10*time.Second, "the button says notifications are blocked", blocked, state)
	tb.Do("reload", chromedp.Reload())
	waitDashboard(t, tb)
	tb.mustWaitJS(10*time.Second, "after a reload, the button says so from the start", blocked, state)
}

// TestTrialToolCardCountsLines: a command that prints two lines (each
// ended by a newline) is "output (2 lines)" on its card, live and after a
// reload (the last newline was counted as a third line).
func TestTrialToolCardCountsLines(t *testing.T) {
	m := newModelServer(t)
	d := startAgent(t, m, t.TempDir())
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)
	m.then(toolCall("printf 'one\\ntwo\\n'"), reply("Printed."))
	sendChat(t, tb, "print two lines")
	waitCard(t, tb, "the approval card is pending", "pending:  buttons=2")
	tb.Do("approve", chromedp.Click(chromedp.CSS(approvalCard+` [data-testid="approve"]`)))

	const output = `(c => c && c.dataset.state === 'done' ? JSON.stringify({summary: c.querySelector('[data-testid="tool-output"] summary').textContent, text: c.querySelector('[data-testid="tool-output"] pre').textContent}) : '')(document.querySelector('[data-testid="chat-log"] [data-testid="tool-card"]'))`
	want := `{"summary":"output (2 lines)","text":"one\ntwo\n"}`
	tb.mustWaitJS(15*time.Second, "the tool card counts two lines", output+` === `+js(want), output)
	waitAssistant(t, tb, "Printed.", 1)
	tb.Do("reload", chromedp.Reload())
	waitDashboard(t, tb)
	tb.mustWaitJS(15*time.Second, "after a reload, two lines still", output+` === `+js(want), output)
}
