package e2e_test

// Issue 42: the terminal pane's defects a new-user trial found.

import (
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
