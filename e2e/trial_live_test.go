package e2e_test

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/dashgate/dashgate/internal/testkit"
)

// Found trying the dashboard as a new user would (issue 27's last step).

// resumedNote counts the chat's "a reply is still being written" lines.
const resumedNote = `[...document.querySelectorAll('[data-testid="chat-log"] > [data-testid="chat-message"][data-role="system"]')].filter(m => m.textContent === 'a reply is still being written').length`

// TestTrialResumedNoteGoesWithTheReply: a tab that comes back while a
// reply runs says "a reply is still being written", and stops saying it
// when the reply ended (the line stayed under the finished reply, for
// good, and told the user a reply was running when none was).
func TestTrialResumedNoteGoesWithTheReply(t *testing.T) {
	m := newModelServer(t)
	release := make(chan struct{})
	m.then(halted([]string{"Half of ", "the answer "}, release, "and the rest."))
	d := startAgent(t, m, t.TempDir())
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)

	sendChat(t, tb, "tell me")
	tb.mustWaitJS(15*time.Second, "the first half streams", streamingReply+`.startsWith('Half of the answer')`, entriesState)
	tb.Do("reload mid-reply", chromedp.Reload())
	waitDashboard(t, tb)
	tb.mustWaitJS(15*time.Second, "after the reload: the text so far and the note", streamingReply+`.startsWith('Half of the answer') && `+resumedNote+` === 1`, entriesState)
	close(release)
	waitEntries(t, tb, "the rest streamed in", []entry{{"prompt", "tell me"}, {"reply", "Half of the answer and the rest."}})
	tb.mustWaitJS(10*time.Second, "the note went with the reply, and the pending line", resumedNote+` === 0 && document.querySelector('[data-testid="pending"]').hidden`,
		`document.querySelector('[data-testid="chat-log"]').innerText`)
}

// TestTrialReplyInterruptedBeforeTextShowsNoEmptyBubble: a turn stopped
// while an approval waited; a tab that comes back finds the card
// ("denied") and its reply marked [interrupted]: with no text, that reply
// showed an empty bubble and a Copy of nothing; now only its marker, time
// and Regenerate.
func TestTrialReplyInterruptedBeforeTextShowsNoEmptyBubble(t *testing.T) {
	m := newModelServer(t)
	d := startAgent(t, m, t.TempDir())
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	sid := openDashboard(t, d, tb)
	m.then(toolCall("echo never"))
	sendChat(t, tb, "run it")
	waitCard(t, tb, "the approval card is pending", "pending:  buttons=2")
	// Stop while it waits: the approval is denied and the reply
	// interrupted before any text. (A tab that goes while an approval
	// waits no longer denies it: the turn's grace keeps it.)
	tb.Do("stop the turn", chromedp.Click(chromedp.CSS(`[data-testid="chat-stop"]`)))
	tb.mustWaitJS(15*time.Second, "the card denied", `(c => c && c.dataset.state === 'denied')(document.querySelector('`+approvalCard+`'))`, entriesState)
	tb.Close()
	testkit.WaitFor(t, 15*time.Second, "the session detached", func() bool { s, ok := d.Session(sid); return ok && s.State == "detached" })

	tb2 := b.newTab(t, "again")
	tb2.Do("open the dashboard", chromedp.Navigate(d.URL("/")))
	waitDashboard(t, tb2)
	reply := `document.querySelector('[data-testid="chat-log"] [data-testid="entry"][data-kind="reply"]')`
	tb2.mustWaitJS(15*time.Second, "the card denied, the reply interrupted", `(c => c && c.dataset.state === 'denied')(document.querySelector('`+approvalCard+`')) && !!`+reply+`?.querySelector('[data-testid="interrupted"]')`, entriesState)
	got := mustEval[map[string]any](tb2, `(e => ({text: e.querySelector('[data-testid="chat-message"]').textContent, bubble: e.querySelector('[data-testid="chat-message"]').offsetHeight, copy: e.querySelector('[data-testid="copy-reply"]')?.offsetHeight ?? 0, regenerate: e.querySelector('[data-testid="regenerate"]')?.offsetHeight ?? 0}))(`+reply+`)`)
	if got["text"] != "" || got["bubble"] != float64(0) || got["copy"] != float64(0) || got["regenerate"] == float64(0) {
		t.Errorf("the reply interrupted before any text: %v, want no bubble, no Copy, a Regenerate", got)
	}
}

// TestTrialPendingLineSaysDisconnected: when dashgate dies (SIGKILL) while
// a reply streams, the pending line no longer says "writing…" (nothing
// was being written to this tab any more): it says the page is
// disconnected and retrying, as the banner does.
func TestTrialPendingLineSaysDisconnected(t *testing.T) {
	m := newModelServer(t)
	release := make(chan struct{})
	defer close(release)
	m.then(halted([]string{"Half of ", "the answer "}, release, "and the rest."))
	d := startAgent(t, m, t.TempDir())
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)
	sendChat(t, tb, "tell me")
	pending := `document.querySelector('[data-testid="pending-text"]').textContent`
	tb.mustWaitJS(15*time.Second, "the reply streams, the pending line says writing", streamingReply+`.startsWith('Half of the answer') && `+pending+` === 'writing…'`, entriesState)
	d.kill()
	tb.mustWaitJS(15*time.Second, "the pending line says disconnected",
		`document.querySelector('[data-testid="conn-status"]').dataset.state !== 'connected' && `+pending+` === 'disconnected, retrying…'`,
		`JSON.stringify({pending: `+pending+`, status: document.querySelector('[data-testid="conn-status"]').textContent})`)
}
