package e2e_test

// Issue 42: the terminal pane's defects a new-user trial found.

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// toolsOverScreen lists the terminal's Download and Search buttons that
// are not shown, or that lie over the rows of the terminal shown (its
// .xterm-screen), "[]" when none.
const toolsOverScreen = `JSON.stringify((() => {
	const scr = document.querySelector('.terminal-screen[data-active="true"] .xterm-screen')?.getBoundingClientRect();
	if (!scr || scr.width === 0) return ['no terminal screen'];
	const out = [];
	for (const id of ['terminal-download-open', 'terminal-search-open']) {
		const b = document.querySelector('[data-testid="' + id + '"]');
		const r = b?.getBoundingClientRect();
		if (!r || r.width === 0 || b.closest('[hidden]')) out.push(id + ' not shown');
		else if (r.left < scr.right && r.right > scr.left && r.top < scr.bottom && r.bottom > scr.top) {
			out.push(id + ' ' + JSON.stringify(r) + ' over the screen ' + JSON.stringify(scr));
		}
	}
	return out;
})())`

// TestTrialTerminalToolsCoverNoText: the terminal's Download and Search
// buttons hung over its top right corner and hid the end of its first
// lines (echo https://example.com/do…). They lie over none of its rows,
// side by side (desktop) and stacked (900×700).
func TestTrialTerminalToolsCoverNoText(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)
	typeInTerminal(t, tb, "echo https://example.com/download/a-long-path/that-reaches-the-right-edge-of-the-terminal-$((6*7))")
	tb.mustWaitJS(10*time.Second, "the buttons over no row of the terminal (desktop)", toolsOverScreen+` === '[]'`, toolsOverScreen)

	tb.Do("a 900×700 window", chromedp.EmulateViewport(900, 700))
	tb.mustWaitJS(10*time.Second, "the layout stacked",
		`document.querySelector('.terminal-pane').getBoundingClientRect().top >= document.querySelector('.chat-pane').getBoundingClientRect().bottom`, dashboardState)
	tb.mustWaitJS(10*time.Second, "the buttons over no row of the terminal (stacked)", toolsOverScreen+` === '[]'`, toolsOverScreen)
}

// terminalChrome lists which of the terminal pane's tab strip, Download,
// Search, search row and Download row show.
const terminalChrome = `JSON.stringify(['terminal-tabs', 'terminal-download-open', 'terminal-search-open', 'terminal-search', 'terminal-download'].filter(id =>
	(e => !!e && !e.closest('[hidden]') && e.getClientRects().length > 0 && e.getBoundingClientRect().width > 0)(document.querySelector('[data-testid="' + id + '"]'))))`

// TestTrialNoSessionHidesTerminalTools: with no session open (a first
// visit: "Start a session") the terminal pane still showed its tab strip,
// Download and Search, with nothing to act on. They show with a session,
// and go again, the search and Download rows too, when its last session
// closes.
func TestTrialNoSessionHidesTerminalTools(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	tb.Do("open the dashboard", chromedp.Navigate(d.LoginURL("/")))
	tb.mustWaitJS(15*time.Second, "no session open", noSessionShown+` && `+visible(byTestID("terminal-restart")), dashboardState)
	if got := mustEval[string](tb, terminalChrome); got != "[]" {
		t.Errorf("with no session open the terminal pane shows %s, want none of them", got)
	}

	startSession(tb)
	tb.mustWaitJS(15*time.Second, "dashboard ready", dashboardReady, dashboardState)
	sid := currentSession(t, tb)
	tb.mustWaitJS(5*time.Second, "the strip, Download and Search shown",
		terminalChrome+` === '["terminal-tabs","terminal-download-open","terminal-search-open"]'`, terminalChrome)
	tb.Do("open the search and Download rows", chromedp.Click(chromedp.CSS(byTestID("terminal-search-open"))), chromedp.Click(chromedp.CSS(byTestID("terminal-download-open"))))
	tb.mustWaitJS(5*time.Second, "both rows open", visible(byTestID("terminal-search"))+` && `+visible(byTestID("terminal-download")), terminalChrome)

	tb.Do("close the session", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-testid="session-item"][data-session-id=%s] [data-testid="session-close"]`, js(sid)))))
	tb.mustWaitJS(15*time.Second, "no session open again", noSessionShown, dashboardState)
	if got := mustEval[string](tb, terminalChrome); got != "[]" {
		t.Errorf("after the last session closed the terminal pane shows %s, want none of them", got)
	}
}
