package e2e_test

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"
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
