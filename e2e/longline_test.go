package e2e_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestLongLineRefusedBeforeSending: a message over the gateway's
// max_prompt_bytes (gateway.ready) is refused in the page before it is
// sent, in words under the input, and stays in the box; nothing shows as
// sent. A new user's 70,000 characters showed as a sent message, then an
// "Invalid params" error, and were gone after a reload. Shortened, it
// sends, and the refusal is taken back.
func TestLongLineRefusedBeforeSending(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)

	long := strings.Repeat("x", 70000)
	sendChat(t, tb, long)
	const refusal = "A message may be at most 64 KiB: this one is 68.4 KiB."
	tb.mustWaitJS(15*time.Second, "the refusal under the input",
		`document.querySelector('[data-testid="attach-error"]').textContent === `+js(refusal)+
			` && document.querySelector('[data-testid="attach-error"]').checkVisibility()`, dashboardState)
	if n := mustEval[int](tb, `document.querySelector('[data-testid="chat-input"]').value.length`); n != len(long) {
		t.Errorf("the box holds %d characters after the refusal; want the %d typed", n, len(long))
	}
	if n := mustEval[int](tb, `document.querySelectorAll('[data-testid="chat-log"] [data-testid="entry"]').length`); n != 0 {
		t.Errorf("%d entries in the chat after the refusal; want none", n)
	}

	tb.Do("empty the box", chromedp.Evaluate[chromedp.Void](`document.querySelector('[data-testid="chat-input"]').value = ''`))
	sendChat(t, tb, "/echo fits")
	waitEntryCount(t, tb, "slash_output", "fits", 1)
	if mustEval[bool](tb, `document.querySelector('[data-testid="attach-error"]').checkVisibility()`) {
		t.Errorf("the refusal still shows after a line that fits was sent: %q",
			mustEval[string](tb, `document.querySelector('[data-testid="attach-error"]').textContent`))
	}
}
