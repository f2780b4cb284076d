package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
)

// A link in the terminal's output opens in a new tab when clicked, without
// the dashboard as its opener (xterm's web-links addon, issue 42).
func TestTerminalLinkOpens(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)
	// printf builds the URL, so the echo of the typed command holds none.
	typeInTerminal(t, tb, `printf 'see %s here\n' "https://example.test/docs/$((6*7))"`)
	if _, err := waitTerminalOutput(t, tb, `printf 'see %s here\n' "https://example.test/docs/$((6*7))"`, exactly("see https://example.test/docs/42 here"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// window.open is observed, not followed: the test has no such site.
	tb.Do("observe window.open", chromedp.Evaluate[chromedp.Void](`window.__opened = []; window.open = (...a) => { window.__opened.push(a); return null; }`))

	// The link's cell: its row in the buffer, as a viewport row, times the
	// cell size the screen element gives.
	type cell struct{ X, Y float64 }
	at := mustEval[cell](tb, `(() => {
		const term = window.dashgate.term, buf = term.buffer.active;
		for (let y = 0; y < buf.length; y++) {
			const text = buf.getLine(y)?.translateToString(true) ?? '';
			const x = text.indexOf('https://example.test/docs/42');
			if (x < 0 || text.startsWith('$') || text.includes('printf')) continue;
			const screen = document.querySelector('[data-testid="terminal"] .xterm-screen').getBoundingClientRect();
			const w = screen.width / term.cols, h = screen.height / term.rows;
			return {x: screen.left + (x + 5) * w + w / 2, y: screen.top + (y - buf.viewportY) * h + h / 2};
		}
		return {x: -1, y: -1};
	})()`)
	if at.X < 0 {
		t.Fatalf("the link is not in the terminal: %q", mustEval[string](tb, `window.dashgate.terminalText()`))
	}
	tb.Do("hover and click the link", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		for _, ev := range []input.DispatchMouseEventType{input.DispatchMouseEventTypeMouseMoved, input.DispatchMouseEventTypeMousePressed, input.DispatchMouseEventTypeMouseReleased} {
			p := input.DispatchMouseEventParams{Type: ev, X: at.X, Y: at.Y}
			if ev != input.DispatchMouseEventTypeMouseMoved {
				p.Button, p.Buttons, p.ClickCount = input.MouseButtonLeft, 1, 1
			}
			if _, err := cdp.Call(ctx, tg, input.DispatchMouseEvent, p); err != nil {
				return err
			}
		}
		return nil
	}))
	tb.mustWaitJS(10*time.Second, "the link opened in a new tab, without opener",
		`window.__opened.length === 1 && window.__opened[0][0] === 'https://example.test/docs/42' && window.__opened[0][1] === '_blank' && /noopener/.test(window.__opened[0][2] ?? '')`,
		`JSON.stringify(window.__opened)`)
}

// Alt+Shift+F opens a search of the terminal's scrollback: the match is
// selected, a miss says "no match", Esc closes it and gives the keyboard
// back to the terminal (xterm's search addon, issue 42).
func TestTerminalSearch(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)
	typeInTerminal(t, tb, "echo needle-$((40+2))-end")
	if _, err := waitTerminalOutput(t, tb, "echo needle-$((40+2))-end", exactly("needle-42-end"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// Output after it, so that the match is found by searching, not by
	// being the last thing on screen.
	typeInTerminal(t, tb, "seq 1 200")
	if _, err := waitTerminalOutput(t, tb, "seq 1 200", exactly("200"), 10*time.Second); err != nil {
		t.Fatal(err)
	}

	bar := byTestID("terminal-search")
	tb.Do("Alt+Shift+F in the terminal", chord("KeyF", "F", 70))
	tb.mustWaitJS(10*time.Second, "the search row open, its input focused", visible(bar)+` && `+activeIs("terminal-search-input"), dashboardState)
	tb.Do("search needle-42", chromedp.SendKeys(chromedp.CSS(byTestID("terminal-search-input")), "needle-42\r"))
	selection := `window.dashgate.term.getSelection()`
	tb.mustWaitJS(10*time.Second, "the match selected", selection+` === 'needle-42'`,
		fmt.Sprintf(`JSON.stringify({selection: %s, status: document.querySelector('[data-testid="terminal-search-status"]').textContent})`, selection))

	tb.Do("search a miss", chromedp.Evaluate[chromedp.Void](`document.querySelector('[data-testid="terminal-search-input"]').value = ''`),
		chromedp.SendKeys(chromedp.CSS(byTestID("terminal-search-input")), "absent-zq\r"))
	tb.mustWaitJS(10*time.Second, "a miss says no match",
		`document.querySelector('[data-testid="terminal-search-status"]').textContent === 'no match'`, dashboardState)

	tb.Do("Esc", chromedp.SendKeys(chromedp.CSS(byTestID("terminal-search-input")), "\x1b"))
	tb.mustWaitJS(10*time.Second, "the search row closed, the terminal focused", `!`+visible(bar)+` && `+activeIs("terminal"), dashboardState)
}
