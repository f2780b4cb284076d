package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/dashgate/dashgate/internal/testkit"
)

// Issue 27, "What people expect from a tool like this": keyboard shortcuts
// and their dialog (static/js/shortcuts.js), notifications and the title
// count of a hidden tab (static/js/notify.js), the phone's key row of the
// terminal (static/js/terminal.js).

// chord presses key (its KeyboardEvent.code and key, and Windows virtual
// key code) with Alt and Shift held, as a keyboard does.
func chord(code, key string, vk int64) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		const mods = 1 | 8 // Alt, Shift (input.DispatchKeyEventParams.Modifiers)
		for _, typ := range []input.DispatchKeyEventType{input.DispatchKeyEventTypeRawKeyDown, input.DispatchKeyEventTypeKeyUp} {
			if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, input.DispatchKeyEventParams{
				Type: typ, Modifiers: mods, Key: key, Code: code,
				WindowsVirtualKeyCode: vk, NativeVirtualKeyCode: vk,
			}); err != nil {
				return fmt.Errorf("Alt+Shift+%s: %w", key, err)
			}
		}
		return nil
	})
}

// activeIs is true when the focus is in the terminal ("terminal") or on
// the element of that data-testid.
func activeIs(what string) string {
	if what == "terminal" {
		return `!!document.activeElement?.closest('.xterm')`
	}
	return fmt.Sprintf(`document.activeElement?.dataset.testid === %s`, js(what))
}

const dialogOpen = `document.querySelector('[data-testid="shortcuts-dialog"]').open`

// TestKeyboardShortcuts: ? opens the list of shortcuts (not while typing in
// the chat or the terminal) and Esc closes it; Alt+Shift+N makes a session,
// Alt+Shift+↑/↓ move through the list, Alt+Shift+C and T focus the chat
// and the terminal, from the terminal too, without typing into the shell.
func TestKeyboardShortcuts(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	first := openDashboard(t, d, tb)
	if mustEval[bool](tb, visible(byTestID("term-keys"))) {
		t.Error("the terminal's key row shows on a desktop screen (no touch)")
	}

	// ? typed into the chat box is a question mark.
	tb.Do("type ? in the chat", chromedp.Focus(chromedp.CSS(byTestID("chat-input"))), typeKeys("?"))
	if v := mustEval[string](tb, `document.querySelector('[data-testid="chat-input"]').value`); v != "?" {
		t.Errorf("the chat input holds %q after ?, want \"?\"", v)
	}
	if mustEval[bool](tb, dialogOpen) {
		t.Fatal("? typed into the chat box opened the shortcuts")
	}
	// ? typed into the terminal goes to the shell.
	typeInTerminal(t, tb, "echo q$((1+1))?")
	if _, err := waitTerminalOutput(t, tb, "echo q$((1+1))?", exactly("q2?"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if mustEval[bool](tb, dialogOpen) {
		t.Fatal("? typed into the terminal opened the shortcuts")
	}

	// Elsewhere ? opens the list; Esc closes it.
	tb.Do("focus the page", chromedp.Evaluate[chromedp.Void](`document.activeElement.blur()`), typeKeys("?"))
	tb.mustWaitJS(5*time.Second, "? opens the shortcuts", dialogOpen, dashboardState)
	if got := mustEval[string](tb, `document.querySelector('[data-testid="shortcuts-dialog"]').textContent`); !containsAll(got, "Alt", "Shift", "New session", "Previous / next session", "Focus the chat", "Focus the terminal") {
		t.Errorf("the shortcuts dialog reads %q", got)
	}
	tb.Do("Esc", chromedp.KeyEvent(kb.Escape))
	tb.mustWaitJS(5*time.Second, "Esc closes the shortcuts", "!"+dialogOpen, dashboardState)
	// The top bar's button opens it too.
	tb.Do("click the shortcuts button", chromedp.Click(chromedp.CSS(byTestID("shortcuts-open"))))
	tb.mustWaitJS(5*time.Second, "the button opens the shortcuts", dialogOpen, dashboardState)
	tb.Do("click Close", chromedp.Click(chromedp.CSS(byTestID("shortcuts-close"))))
	tb.mustWaitJS(5*time.Second, "Close closes the shortcuts", "!"+dialogOpen, dashboardState)

	// Alt+Shift+N, from the chat box: a second session, current.
	tb.Do("focus the chat", chromedp.Focus(chromedp.CSS(byTestID("chat-input"))), chord("KeyN", "N", 78))
	tb.mustWaitJS(10*time.Second, "Alt+Shift+N makes a session",
		fmt.Sprintf(`window.dashgate.currentSession() !== %s && document.querySelectorAll('[data-testid="session-item"]').length === 2`, js(first)), dashboardState)
	waitDashboard(t, tb)
	second := currentSession(t, tb)
	// The "?" typed into the chat box stays the first session's draft
	// (issue 42): the new session's box is empty, the first's holds it.
	input := `document.querySelector('[data-testid="chat-input"]').value`
	if v := mustEval[string](tb, input); v != "" {
		t.Errorf("the chat input holds %q in the new session, want it empty (the \"?\" is the first session's draft)", v)
	}

	// Alt+Shift+↓ and ↑ go through the list (two sessions: each goes to the other).
	tb.Do("Alt+Shift+Down", chord("ArrowDown", "ArrowDown", 40))
	tb.mustWaitJS(10*time.Second, "Alt+Shift+↓ goes to the other session", fmt.Sprintf(`window.dashgate.currentSession() === %s`, js(first)), dashboardState)
	waitDashboard(t, tb)
	if v := mustEval[string](tb, input); v != "?" {
		t.Errorf("the chat input holds %q back in the first session, want its draft \"?\"", v)
	}
	tb.Do("Alt+Shift+Up", chord("ArrowUp", "ArrowUp", 38))
	tb.mustWaitJS(10*time.Second, "Alt+Shift+↑ goes back", fmt.Sprintf(`window.dashgate.currentSession() === %s`, js(second)), dashboardState)
	waitDashboard(t, tb)

	// Alt+Shift+T focuses the terminal; Alt+Shift+C leaves it for the chat,
	// and the shell gets neither.
	tb.Do("Alt+Shift+T", chromedp.Focus(chromedp.CSS(byTestID("chat-input"))), chord("KeyT", "T", 84))
	tb.mustWaitJS(5*time.Second, "Alt+Shift+T focuses the terminal", activeIs("terminal"), dashboardState)
	tb.Do("type into the terminal, then Alt+Shift+C", typeKeys("echo k"), chord("KeyC", "C", 67))
	tb.mustWaitJS(5*time.Second, "Alt+Shift+C focuses the chat", activeIs("chat-input"), dashboardState)
	tb.Do("back to the terminal", chord("KeyT", "T", 84))
	tb.mustWaitJS(5*time.Second, "Alt+Shift+T focuses the terminal again", activeIs("terminal"), dashboardState)
	tb.Do("finish the line", typeKeys("ey-$((3*3))\r"))
	// The line is "echo key-9" only if the chords typed nothing into it
	// (readline would have capitalised or transposed a word).
	if _, err := waitTerminalOutput(t, tb, "echo key-$((3*3))", exactly("key-9"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// setWindowState minimizes tb's window (its page is hidden) or shows it
// again ("normal").
func setWindowState(t *testing.T, tb *tab, state cdpbrowser.WindowState) {
	t.Helper()
	w, err := chromedp.Call(tb.ctx, cdpbrowser.GetWindowForTarget, cdpbrowser.GetWindowForTargetParams{})
	if err != nil {
		t.Fatalf("the window of tab %s: %v", tb.name, err)
	}
	if _, err := chromedp.CallBrowser(tb.ctx, cdpbrowser.SetWindowBounds, cdpbrowser.SetWindowBoundsParams{
		WindowID: w.WindowID, Bounds: &cdpbrowser.Bounds{WindowState: state},
	}); err != nil {
		t.Fatalf("window of tab %s %s: %v", tb.name, state, err)
	}
}

// TestNotifyWhenHidden: a reply that finishes in a hidden tab counts in the
// tab's title, "(1) dashgate", cleared when the tab is visible again; once
// the Notify button is on (the permission granted), it is also a system
// notification. Nothing asks for the permission on load.
func TestNotifyWhenHidden(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	sid := openDashboard(t, d, tb)
	if got := mustEval[string](tb, `Notification.permission`); got != "default" {
		t.Fatalf("the permission is %q after load, want default (never asked on load)", got)
	}
	if got := mustEval[string](tb, `document.title`); got != "dashgate" {
		t.Fatalf("the title is %q", got)
	}
	origin := mustEval[string](tb, `location.origin`)
	if _, err := chromedp.CallBrowser(tb.ctx, cdpbrowser.SetPermission, cdpbrowser.SetPermissionParams{
		Permission: &cdpbrowser.PermissionDescriptor{Name: "notifications"}, Setting: cdpbrowser.PermissionSettingGranted, Origin: origin,
	}); err != nil {
		t.Fatalf("grant notifications: %v", err)
	}
	tb.Do("turn notifications on", chromedp.Click(chromedp.CSS(byTestID("notify-toggle"))))
	tb.mustWaitJS(5*time.Second, "the Notify button is on", `document.querySelector('[data-testid="notify-toggle"]').getAttribute('aria-pressed') === 'true'`, dashboardState)

	setWindowState(t, tb, cdpbrowser.WindowStateMinimized)
	tb.mustWaitJS(10*time.Second, "the dashboard is hidden", `document.visibilityState === 'hidden'`, dashboardState)
	// A prompt sent while the tab is hidden (by the page's own socket); the
	// echo agent answers at once.
	mustEval[bool](tb, fmt.Sprintf(`window.dashgate.call('prompt.submit', {session_id: %s, text: 'while away'}).then(() => true)`, js(sid)))
	tb.mustWaitJS(10*time.Second, "the title counts the reply", `document.title === '(1) dashgate'`, `document.title`)
	tb.mustWaitJS(5*time.Second, "a notification was shown",
		`window.dashgate.notifications().length === 1 && window.dashgate.notifications()[0].title === 'The reply is ready'`,
		`JSON.stringify(window.dashgate.notifications())`)

	// The tab comes to the front: the count goes.
	setWindowState(t, tb, cdpbrowser.WindowStateNormal)
	tb.mustWaitJS(10*time.Second, "the title is plain again", `document.visibilityState === 'visible' && document.title === 'dashgate'`, `document.title + ' ' + document.visibilityState`)

	// A reply in a visible tab neither counts nor notifies.
	sendChat(t, tb, "while here")
	waitAssistant(t, tb, "(echo agent) while here", 1)
	if got := mustEval[string](tb, `document.title`); got != "dashgate" {
		t.Errorf("the title is %q after a reply in the visible tab", got)
	}
	if n := mustEval[int](tb, `window.dashgate.notifications().length`); n != 1 {
		t.Errorf("%d notifications after a reply in the visible tab, want still 1", n)
	}
}

// TestTerminalKeyRowOnAPhone: at a phone's size the key row shows above
// the terminal; ← moves the cursor in the shell's line, ↑ recalls the last
// command, Ctrl then c interrupts sleep 100, and in application cursor
// mode ↑ sends ESC O A.
func TestTerminalKeyRowOnAPhone(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	tb.Do("a phone's viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulatePortrait, chromedp.EmulateMobile, chromedp.EmulateTouch))
	openDashboard(t, d, tb)
	row := byTestID("term-keys")
	tb.Do("tap the Terminal tab", chromedp.Click(chromedp.CSS(byTestID("tab-terminal"))))
	tb.mustWaitJS(5*time.Second, "the key row shows with the terminal", visible(row)+" && "+visible(byTestID("terminal")), dashboardState)
	key := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Click(chromedp.CSS(byTestID("term-key-" + name)))
	}

	// echo aXb: typed "echo ab", ← once, X.
	tb.Do("type echo ab, ← and X, Enter",
		chromedp.Evaluate[chromedp.Void](`window.dashgate.term.focus()`),
		typeKeys("echo ab"), key("left"), typeKeys("X\r"))
	if _, err := waitTerminalOutput(t, tb, "echo aXb", exactly("aXb"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if !mustEval[bool](tb, activeIs("terminal")) {
		t.Error("a tap on the key row took the focus from the terminal")
	}
	// ↑ recalls it; Enter runs it again.
	tb.Do("↑, Enter", key("up"), typeKeys("\r"))
	tb.mustWaitJS(10*time.Second, "↑ recalled echo aXb", `window.dashgate.terminalText().split('\n').filter(l => l === 'aXb').length === 2`, dashboardState)

	// Ctrl then c interrupts sleep 100 (once it runs: a ^C before it is
	// the foreground job would not reach it): the next command runs.
	sleeping := func() bool {
		ps, _ := d.Procs()
		for _, p := range ps {
			if p.Comm == "sleep" && !p.Exiting() {
				return true
			}
		}
		return false
	}
	typeInTerminal(t, tb, "sleep 100")
	if !testkit.Until(10*time.Second, sleeping) {
		t.Fatal("sleep 100 does not run")
	}
	tb.Do("Ctrl", key("ctrl"))
	if got := mustEval[string](tb, `document.querySelector('[data-testid="term-key-ctrl"]').getAttribute('aria-pressed')`); got != "true" {
		t.Errorf("Ctrl reads aria-pressed=%s once tapped", got)
	}
	tb.Do("c", typeKeys("c"))
	if !testkit.Until(10*time.Second, func() bool { return !sleeping() }) {
		t.Fatal("Ctrl then c did not interrupt sleep 100")
	}
	typeInTerminal(t, tb, "echo after-$((2+3))")
	if _, err := waitTerminalOutput(t, tb, "echo after-$((2+3))", exactly("after-5"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := mustEval[string](tb, `document.querySelector('[data-testid="term-key-ctrl"]').getAttribute('aria-pressed')`); got != "false" {
		t.Errorf("Ctrl reads aria-pressed=%s after the key it changed", got)
	}

	// Application cursor mode (DECCKM): ↑ is ESC O A, as cat -A shows it.
	typeInTerminal(t, tb, `printf '\e[?1h'; cat -A`)
	tb.mustWaitJS(10*time.Second, "the terminal is in application cursor mode", `window.dashgate.term.modes.applicationCursorKeysMode`, dashboardState)
	tb.Do("↑, Enter", key("up"), typeKeys("\r"))
	if _, err := waitTerminalOutput(t, tb, `printf '\e[?1h'; cat -A`, exactly("^[OA$"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// Esc and Tab: ESC then Tab reach cat as ^[ and ^I.
	tb.Do("Esc, Tab, Enter", key("esc"), key("tab"), typeKeys("\r"))
	if _, err := waitTerminalOutput(t, tb, `printf '\e[?1h'; cat -A`, exactly("^[^I$"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// At a phone's width the dashboard is no wider than the screen: every
// control of the top bar (the theme, the admin link) is on it.
func TestDashboardFitsAPhone(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	tb.Do("a phone's viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulatePortrait, chromedp.EmulateMobile, chromedp.EmulateTouch))
	openDashboard(t, d, tb)
	const fits = `(() => { const w = window.innerWidth;
		const out = [...document.querySelectorAll('.topbar > *')].filter(e => e.offsetWidth > 0 && e.getBoundingClientRect().right > w + 1).map(e => e.className);
		return JSON.stringify({w, scroll: document.documentElement.scrollWidth, out}); })()`
	got := mustEval[string](tb, fits)
	if !strings.Contains(got, `"w":390,`) || !strings.Contains(got, `"scroll":390,`) || !strings.Contains(got, `"out":[]`) {
		t.Fatalf("at 390 px the dashboard overflows: %s", got)
	}
}
