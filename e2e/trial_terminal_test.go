package e2e_test

// Issue 42: the terminal pane's defects a new-user trial found.

import (
	"fmt"
	"os"
	"path/filepath"
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

// TestTrialTransferLineIsTheTabs: "Downloaded shadow (669 B)." stayed
// under every terminal tab until its × was pressed. The transfer line is
// the tab's it concerns: hidden while another tab is shown, back with its
// tab; a success goes by itself, an error stays until dismissed.
func TestTrialTransferLineIsTheTabs(t *testing.T) {
	file := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(file, []byte("twelve bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)
	tb.mustWaitJS(20*time.Second, "one tab, its terminal up", tabsReady(1), tabsState)
	tb.Do("press +", chromedp.Click(chromedp.CSS(byTestID("terminal-tab-new"))))
	tb.mustWaitJS(20*time.Second, "two tabs, the second shown", tabsReady(2)+` && window.dashgate.terminalTabs()[1].active`, tabsState)
	tabs := termTabs(tb)
	show := func(i int) {
		t.Helper()
		tb.Do(fmt.Sprintf("show tab %d", i+1), chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-terminal-id=%q] [data-testid="terminal-tab-select"]`, tabs[i].ID))))
		tb.mustWaitJS(5*time.Second, fmt.Sprintf("tab %d shown", i+1), fmt.Sprintf(`window.dashgate.terminalTabs()[%d].active`, i), tabsState)
	}
	download := func(path string) {
		t.Helper()
		tb.Do("download "+path, chromedp.Click(chromedp.CSS(byTestID("terminal-download-open"))),
			chromedp.SetValue(chromedp.CSS(byTestID("terminal-download-path")), path),
			chromedp.Click(chromedp.CSS(byTestID("terminal-download-go"))))
	}
	line := `JSON.stringify({shown: ` + visible(byTestID("terminal-transfer")) + `, text: ` + transferText + `})`
	says := func(text string) string { return line + ` === ` + js(fmt.Sprintf(`{"shown":true,"text":%q}`, text)) }
	hidden := `!` + visible(byTestID("terminal-transfer"))

	// An error in the second tab: it is that tab's.
	download("/nonexistent/file")
	tb.mustWaitJS(15*time.Second, "the refusal said in the second tab", visible(byTestID("terminal-transfer"))+` && `+transferText+`.startsWith('Not downloaded: ')`, line)
	refusal := mustEval[string](tb, transferText)
	tb.Do("close the download row", chromedp.Evaluate[chromedp.Void](`document.querySelector('[data-testid="terminal-download"]').hidden || document.querySelector('[data-testid="terminal-download-close"]').click()`))
	show(0)
	tb.mustWaitJS(5*time.Second, "no transfer line in the first tab", hidden, line)

	// A success in the first tab: the second shows its own line again.
	download(file)
	tb.mustWaitJS(15*time.Second, "the download said in the first tab", says("Downloaded notes.txt (12 B)."), line)
	show(1)
	tb.mustWaitJS(5*time.Second, "the second tab's refusal back", says(refusal), line)

	// The success goes by itself; the error, older, stays.
	show(0)
	tb.mustWaitJS(30*time.Second, "the first tab's success gone by itself", hidden, line)
	show(1)
	tb.mustWaitJS(5*time.Second, "the second tab's refusal still there", says(refusal), line)
	tb.Do("dismiss it", chromedp.Click(chromedp.CSS(byTestID("terminal-transfer-close"))))
	tb.mustWaitJS(5*time.Second, "the refusal dismissed", hidden, line)
	show(0)
	show(1)
	if got := mustEval[string](tb, line); got != `{"shown":false,"text":""}` {
		t.Errorf("a dismissed line came back with its tab: %s", got)
	}
}
