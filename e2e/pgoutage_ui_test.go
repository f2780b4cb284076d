package e2e_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/dashgate/dashgate/internal/testkit"
)

// A new-user trial of issue 41: while this node cannot prove it holds the
// session (PostgreSQL stopped past the lease), a command typed in the
// dashboard is refused (5006: nothing was done). The page says why, shows
// the line as not sent (no entry of the history) and puts it back into the
// chat input, where the trial found it gone, to be typed again. Once
// PostgreSQL is back, Enter sends it again and it is answered.
func TestRefusedLineBackInTheInput(t *testing.T) {
	if os.Getenv(testkit.EnvE2E) != "1" {
		t.Skip("stops PostgreSQL for seconds: set DASHGATE_E2E=1 to run it")
	}
	storeURL := testkit.Postgres(t)
	d := startLeasedNode(t, storeURL, "a", filepath.Join(t.TempDir(), "state"), "", "--node-expiry", "3s", "--node-heartbeat", "1s")
	d.allowErrors = []string{"store write failed"}
	br := newBrowser(t)
	tb := br.newTab(t, "dashboard")
	openDashboard(t, d, tb)
	sendChat(t, tb, "/echo before")
	waitAssistant(t, tb, "before", 1)

	resume := pausePostgres(t)
	chatSays := func(s string) string {
		return `document.querySelector('[data-testid="chat-log"]').textContent.includes(` + js(s) + `)`
	}
	tb.mustWaitJS(30*time.Second, "the chat says new work is refused", chatSays("cannot reach the store"), dashboardState)

	const line = "/echo again"
	sendChat(t, tb, line)
	tb.mustWaitJS(10*time.Second, "the refusal said, the line back in the input",
		chatSays("nothing was done")+` && document.querySelector('[data-testid="chat-input"]').value === `+js(line), dashboardState)
	if n := mustEval[int](tb, `[...document.querySelectorAll('[data-testid="chat-log"] [data-testid="entry"][data-kind="slash"]')].filter(e => e.textContent.includes(`+js(line)+`)).length`); n != 0 {
		t.Errorf("the refused %q is shown as %d entries of the history, want none (it was not kept)", line, n)
	}

	resume()
	tb.mustWaitJS(30*time.Second, "the chat says new work is taken again", chatSays("takes new work again"), dashboardState)
	tb.Do("send the line again", chromedp.SendKeys(chromedp.CSS(`[data-testid="chat-input"]`), "\r"))
	waitAssistant(t, tb, "again", 1)
}
