package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/dashgate/dashgate/internal/testkit"
)

// js quotes s as a JavaScript string literal.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// dashboardState describes the dashboard for failure messages.
const dashboardState = `JSON.stringify({
	url: location.href,
	session: window.dashgate && window.dashgate.currentSession(),
	chat: window.dashgate && window.dashgate.chatSocketState(),
	pty: window.dashgate && window.dashgate.ptySocketState(),
	status: document.querySelector('[data-testid="conn-status"]')?.dataset.state,
	sessions: [...document.querySelectorAll('[data-testid="session-item"]')].map(e => e.dataset.sessionId + (e.classList.contains('current') ? '*' : '')),
	titles: [...document.querySelectorAll('[data-testid="session-item"]')].map(e => e.querySelector('[data-testid="session-title"]')?.textContent ?? ('editing: ' + e.querySelector('[data-testid="rename-input"]')?.value)),
	sessionErrors: [...document.querySelectorAll('[data-testid="session-error"]')].map(e => e.textContent),
	focus: (document.hasFocus() ? '' : 'page not focused, ') + (document.activeElement?.dataset?.testid || document.activeElement?.tagName),
	chatLog: [...document.querySelectorAll('[data-testid="chat-message"]')].map(e => e.dataset.role + ': ' + e.textContent),
	terminal: window.dashgate ? window.dashgate.terminalText().split('\n').slice(-8) : null,
})`

// dashboardReady holds once the dashboard has a current session, both
// sockets open and the shell's first output on screen.
const dashboardReady = `!!(window.dashgate &&
	window.dashgate.currentSession() &&
	window.dashgate.chatSocketState() === 'open' &&
	window.dashgate.ptySocketState() === 'open' &&
	document.querySelector('[data-testid="conn-status"]')?.dataset.state === 'connected' &&
	document.querySelector('[data-testid="session-item"].current') &&
	window.dashgate.terminalText().trim() !== '')`

// openDashboard logs in with the token URL and waits for the dashboard; it
// returns the current session.
func openDashboard(t *testing.T, d *dashgate, tb *tab) string {
	t.Helper()
	tb.Do("open the dashboard", chromedp.Navigate(d.LoginURL("/")))
	waitDashboard(t, tb)
	return currentSession(t, tb)
}

// waitDashboard waits until the dashboard shows a session, both sockets
// open. A page with no session to show (a first visit, every session
// closed) creates none by itself (issue 41): then it presses New session,
// as a person would, and waits for that one.
func waitDashboard(t *testing.T, tb *tab) {
	t.Helper()
	tb.mustWaitJS(15*time.Second, "dashboard ready or no session open", dashboardReady+` || (`+noSessionShown+`)`, dashboardState)
	if mustEval[bool](tb, noSessionShown) {
		startSession(tb)
	}
	tb.mustWaitJS(15*time.Second, "dashboard ready", dashboardReady, dashboardState)
}

// startSession presses New session (by script: on a phone the session
// list that holds it is folded away).
func startSession(tb *tab) {
	tb.Do("start a session", chromedp.Evaluate[chromedp.Void](`document.querySelector('[data-testid="new-session"]').click()`))
}

// noSessionShown holds while the dashboard says no session is open (its
// chat's no-session line shown, its chat socket open).
const noSessionShown = `!!(window.dashgate && !window.dashgate.currentSession() &&
	window.dashgate.chatSocketState() === 'open' &&
	document.querySelector('[data-testid="no-session"]')?.checkVisibility())`

func currentSession(t *testing.T, tb *tab) string {
	t.Helper()
	sid := mustEval[string](tb, `window.dashgate.currentSession() || ''`)
	if sid == "" {
		t.Fatal("the dashboard has no current session")
	}
	return sid
}

// sendChat types line into the chat input and presses Enter.
//
// A line longer than pasteOver goes in as one text insertion, as a paste
// does (then Enter as a key): typed key by key, 750 characters once took
// longer than an action's 20 s on a loaded CI machine.
func sendChat(t *testing.T, tb *tab, line string) {
	t.Helper()
	in := chromedp.CSS(`[data-testid="chat-input"]`)
	if len(line) <= pasteOver {
		tb.Do("type "+line+" in the chat", chromedp.SendKeys(in, line+"\r"))
		return
	}
	tb.Do(fmt.Sprintf("paste %.40q… (%d bytes) into the chat", line, len(line)),
		chromedp.Focus(in),
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := cdp.Call(ctx, t, input.InsertText, input.InsertTextParams{Text: line})
			return err
		}),
		chromedp.SendKeys(in, "\r"))
}

const pasteOver = 60

// chatCount counts the chat messages of role whose whole text is text.
func chatCount(role, text string) string {
	return fmt.Sprintf(`[...document.querySelectorAll('[data-testid="chat-log"] [data-testid="chat-message"][data-role=%s]')].filter(e => e.textContent === %s && e.dataset.streaming !== 'true').length`,
		js(role), js(text))
}

// waitAssistant waits until n assistant messages read exactly text.
func waitAssistant(t *testing.T, tb *tab, text string, n int) {
	t.Helper()
	tb.mustWaitJS(10*time.Second, fmt.Sprintf("assistant message %q shown", text),
		fmt.Sprintf("%s >= %d", chatCount("assistant", text), n), dashboardState)
}

// typeInTerminal focuses the xterm and types line followed by Enter, as key
// events (each key goes through xterm.js's keyboard handling).
func typeInTerminal(t *testing.T, tb *tab, line string) {
	t.Helper()
	tb.Do("type "+line+" in the terminal",
		chromedp.Evaluate[chromedp.Void](`window.dashgate.term.focus()`),
		typeKeys(line+"\r"),
	)
}

// typeKeys types s as a keyboard does: per key a keyDown that carries the
// key's text, then a keyUp. chromedp.KeyEvent sends the text as a separate
// "char" event instead, which Chrome delivers as a keypress even when the
// page cancelled the keydown; xterm.js handles a printable key on keydown
// and cancels it, so KeyEvent would type most characters twice.
func typeKeys(s string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for _, r := range s {
			var down, up *input.DispatchKeyEventParams
			var text, unmodified string
			for _, k := range kb.Encode(r) {
				switch k.Type {
				case input.DispatchKeyEventTypeKeyDown:
					down = k
				case input.DispatchKeyEventTypeChar:
					text, unmodified = k.Text, k.UnmodifiedText
				case input.DispatchKeyEventTypeKeyUp:
					up = k
				}
			}
			if down == nil || up == nil {
				return fmt.Errorf("no key events for %q", r)
			}
			if text == "" {
				down.Type = input.DispatchKeyEventTypeRawKeyDown
			}
			down.Text, down.UnmodifiedText = text, unmodified
			for _, k := range []*input.DispatchKeyEventParams{down, up} {
				if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, *k); err != nil {
					return fmt.Errorf("key %q: %w", r, err)
				}
			}
		}
		return nil
	})
}

// terminalLines returns the terminal's lines (wrapped rows joined, trailing
// spaces trimmed).
func terminalLines(tb *tab) ([]string, error) {
	s, err := eval[string](tb, `window.dashgate.terminalText()`)
	if err != nil {
		return nil, err
	}
	return strings.Split(s, "\n"), nil
}

// outputAfter returns the lines printed after the last line that ends
// with the command cmd (the shell's echo of it), or nil when the command is
// not on screen.
func outputAfter(lines []string, cmd string) []string {
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasSuffix(lines[i], cmd) {
			return lines[i+1:]
		}
	}
	return nil
}

// waitTerminalOutput waits until, after the echo of cmd, a line matches
// want, and returns that line.
func waitTerminalOutput(t *testing.T, tb *tab, cmd string, want *regexp.Regexp, timeout time.Duration) (string, error) {
	t.Helper()
	var got string
	var last []string
	ok := testkit.Until(timeout, func() bool {
		lines, err := terminalLines(tb)
		if err != nil {
			return false
		}
		last = lines
		for _, l := range outputAfter(lines, cmd) {
			if want.MatchString(l) {
				got = l
				return true
			}
		}
		return false
	})
	if !ok {
		if len(last) > 15 {
			last = last[len(last)-15:]
		}
		return "", fmt.Errorf("%w: no line matching %q after %q within %v; terminal ends with:\n%s",
			errTimeout, want, cmd, timeout, strings.Join(last, "\n"))
	}
	return got, nil
}

// exactly matches a whole line.
func exactly(s string) *regexp.Regexp { return regexp.MustCompile("^" + regexp.QuoteMeta(s) + "$") }
