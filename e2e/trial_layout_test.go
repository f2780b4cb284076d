package e2e_test

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// cutStates lists the session rows whose state is cut (its text wider than
// what shows of it) or whose buttons stick out of the row.
const cutStates = `JSON.stringify([...document.querySelectorAll('[data-testid="session-item"]')].flatMap(li => {
	const info = li.querySelector('.session-info'), state = li.querySelector('.session-state');
	const r = li.getBoundingClientRect(), a = li.querySelector('.session-actions').getBoundingClientRect();
	const out = [];
	if (state && (state.getBoundingClientRect().right > info.getBoundingClientRect().right + 0.5 || info.scrollWidth > info.clientWidth + 0.5)) out.push(li.querySelector('.session-title').textContent + ': state cut to ' + Math.round(info.clientWidth) + ' of ' + info.scrollWidth + ' px');
	if (a.right > r.right + 0.5) out.push(li.querySelector('.session-title').textContent + ': buttons out of the row');
	return out;
}))`

// TestTrialSessionRowsShowTheirWholeState: in the desktop sidebar a
// detached session's row (Resume, Rename, Close) showed its state as
// "deta": the buttons now wrap under the state rather than cut it.
func TestTrialSessionRowsShowTheirWholeState(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	first := openDashboard(t, d, tb)
	sendChat(t, tb, "a first conversation")
	tb.Do("click New", chromedp.Click(chromedp.CSS(byTestID("new-session"))))
	tb.mustWaitJS(15*time.Second, "a second session is current", `window.dashgate.currentSession() && window.dashgate.currentSession() !== `+js(first), dashboardState)
	row := `document.querySelector('[data-testid="session-item"][data-session-id=` + js(first) + `]')`
	tb.mustWaitJS(15*time.Second, "the first session is detached, with Resume", row+`?.querySelector('.session-state')?.textContent === 'detached' && !!`+row+`.querySelector('[data-testid="session-resume"]')`,
		`document.querySelector('[data-testid="session-list"]').innerText`)
	if cut := mustEval[string](tb, cutStates); cut != "[]" {
		t.Errorf("session rows: %s", cut)
	}
}

// TestTrialKeyRowKeepsOffTheEdge: on a phone the key row's last key (→)
// touched the screen's right edge, its border cut: the row now ends 8 px
// inside the screen as it starts 8 px inside it.
func TestTrialKeyRowKeepsOffTheEdge(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	tb.Do("a phone's viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulatePortrait, chromedp.EmulateMobile, chromedp.EmulateTouch))
	openDashboard(t, d, tb)
	tb.Do("tap the Terminal tab", chromedp.Click(chromedp.CSS(byTestID("tab-terminal"))))
	tb.mustWaitJS(5*time.Second, "the key row shows", visible(byTestID("term-keys")), dashboardState)
	gap := mustEval[float64](tb, `document.documentElement.clientWidth - document.querySelector('[data-testid="term-key-right"]').getBoundingClientRect().right`)
	left := mustEval[float64](tb, `document.querySelector('[data-testid="term-key-esc"]').getBoundingClientRect().left`)
	if gap < left-0.5 {
		t.Errorf("the → key ends %.1f px from the screen's right edge, the Esc key starts %.1f px from its left: want the same margin", gap, left)
	}
}

// TestTrialLongPlaceholderStaysOnOneLine: with a long model name the chat
// box's placeholder ("Ask <model> (or /help)") wrapped on a phone, its
// second line cut in half by the one-line box; it stays on one line.
func TestTrialLongPlaceholderStaysOnOneLine(t *testing.T) {
	m := newModelServer(t)
	d := startAgent(t, m, t.TempDir(), "--llm-model", "a-model-with-a-rather-long-name-v2")
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	tb.Do("a phone's viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulatePortrait, chromedp.EmulateMobile, chromedp.EmulateTouch))
	openDashboard(t, d, tb)
	input := `document.querySelector('[data-testid="chat-input"]')`
	tb.mustWaitJS(10*time.Second, "the placeholder names the model", input+`.placeholder.includes('a-model-with-a-rather-long-name-v2')`, input+`.placeholder`)
	if ws := mustEval[string](tb, `getComputedStyle(`+input+`, '::placeholder').whiteSpace`); ws != "nowrap" {
		t.Errorf("the placeholder's white-space is %q: it wraps in the one-line box, want nowrap", ws)
	}
}
