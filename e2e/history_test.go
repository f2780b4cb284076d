package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/dashgate/dashgate/internal/testkit"
)

// entry is a conversation entry as the dashboard renders it
// ([data-testid="entry"]): its kind and its whole text (an interrupted
// reply ends with its "[interrupted]" marker, an error entry reads as its
// sentence: the folded details, which hold the stderr tail only live, are
// left out).
type entry struct {
	Kind string `json:"kind"`
	Text string `json:"text"`
}

// entriesJS lists the entries of the chat log, in order.
const entriesJS = `[...document.querySelectorAll('[data-testid="chat-log"] [data-testid="entry"]')].map(e => ({kind: e.dataset.kind, text: ` + entryTextJS + `}))`

// entryTextJS is the text of the entry e without its error details.
const entryTextJS = `(c => { c.querySelectorAll('[data-testid="error-details"]').forEach(d => d.remove()); return c.textContent; })(e.cloneNode(true))`

func entries(tb *tab) []entry { return mustEval[[]entry](tb, entriesJS) }

func kinds(es []entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Kind
	}
	return out
}

// waitEntries waits until the chat log shows exactly want.
func waitEntries(t *testing.T, tb *tab, what string, want []entry) {
	t.Helper()
	b, _ := json.Marshal(want)
	expr := fmt.Sprintf(`JSON.stringify(%s) === JSON.stringify(%s) && !document.querySelector('[data-testid="chat-message"][data-streaming="true"]')`, entriesJS, b)
	if err := tb.waitJS(15*time.Second, what, expr, ""); err != nil {
		got, _ := eval[[]entry](tb, entriesJS)
		t.Fatalf("%s: the chat log does not show the same entries\n got: %+v\nwant: %+v\n%v", what, got, want, err)
	}
}

// waitEntryCount waits until the chat log has at least n entries of kind
// (whose text has the prefix, when not empty) and no reply streaming.
func waitEntryCount(t *testing.T, tb *tab, kind, prefix string, n int) {
	t.Helper()
	tb.mustWaitJS(15*time.Second, fmt.Sprintf("%d %s entries %q", n, kind, prefix),
		fmt.Sprintf(`[...document.querySelectorAll('[data-testid="chat-log"] [data-testid="entry"][data-kind=%s]')].filter(e => `+entryTextJS+`.startsWith(%s)).length >= %d && !document.querySelector('[data-testid="chat-message"][data-streaming="true"]')`,
			js(kind), js(prefix), n),
		dashboardState)
}

// startDashgateOn starts dashgate as startDashgate does, on the state
// directory state and, when addr is not empty, that address.
func startDashgateOn(t *testing.T, state, addr string) *dashgate {
	t.Helper()
	args := []string{
		"--worker-grace", workerGrace.String(),
		"--log-level", "debug",
		"--pty-cmd", "/bin/bash --noprofile --norc",
		"--state-dir", state,
	}
	if addr != "" {
		args = append(args, "--addr", addr)
	}
	return launch(t, testkit.Options{Sub: "serve", Dir: t.TempDir(), Args: args})
}

// stopForRestart stops d with SIGTERM as a restart does and checks what
// stop checks that still holds with a browser running: a clean exit, no
// ERROR record, nothing of d left. (stop itself also reaps every orphan of
// the test process, the running browser's helpers among them.)
func stopForRestart(t *testing.T, d *dashgate) {
	t.Helper()
	d.stopOnce.Do(func() {
		d.rememberTree()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		code, err := d.Stop(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if code != 0 {
			t.Errorf("dashgate exited with %v after SIGTERM, want exit code 0", d.WaitErr())
		}
		for _, r := range d.Log.Records("") {
			if r.Str("level") == "ERROR" {
				t.Errorf("dashgate logged an ERROR: %s", r)
			}
		}
		if left, _ := d.Procs(); len(left) > 0 {
			t.Errorf("processes of dashgate left after it exited: %v", left)
		}
		if t.Failed() {
			if b, err := os.ReadFile(d.Log.Path); err == nil {
				writeArtifact(t, "dashgate-before-restart.log", b)
			}
		}
	})
}

// Every kind of history entry is shown the same live, after a reload and
// after dashgate restarted (the conversation store keeps it): a prompt and
// its reply, a failing slash command and its error, /exit 3 with the
// worker's exit, and an interrupted reply.
func TestHistoryCompleteAfterReloadAndRestart(t *testing.T) {
	state := t.TempDir()
	d := startDashgateOn(t, state, "")
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	// The second dashgate starts after the browser, so its cleanup (whose
	// orphan check kills whatever is reparented to the test process) would
	// run first: close the browser before the cleanups.
	defer func() {
		if t.Failed() {
			tb.saveArtifacts()
		}
		tb.closed = true
		b.close()
	}()
	sid := openDashboard(t, d, tb)

	sendChat(t, tb, "hello history")
	waitAssistant(t, tb, "(echo agent) hello history", 1)

	sendChat(t, tb, "/nosuchcommand")
	waitEntryCount(t, tb, "error", "Unknown command /nosuchcommand", 1)

	sendChat(t, tb, "/exit 3")
	waitEntryCount(t, tb, "notice", "worker exited, code 3", 1)
	waitEntryCount(t, tb, "error", "", 2)
	// The reply of /exit and the worker's exit may come in either order;
	// the page then shows them in the order the history keeps.
	tb.mustWaitJS(10*time.Second, "the page settled the order after /exit", `window.dashgate.settled()`, dashboardState)

	// A long prompt, interrupted with Escape in the chat input while its
	// reply streams.
	long := "interrupt me" + strings.Repeat(" word", 200)
	sendChat(t, tb, long)
	tb.mustWaitJS(10*time.Second, "the long reply streams",
		`document.querySelector('[data-testid="chat-message"][data-streaming="true"]')?.textContent.startsWith('(echo agent) interrupt me word') === true`, dashboardState)
	tb.Do("press Escape in the chat input", chromedp.SendKeys(chromedp.CSS(`[data-testid="chat-input"]`), kb.Escape))
	tb.mustWaitJS(10*time.Second, "the long reply is interrupted",
		`!!document.querySelector('[data-testid="entry"][data-kind="reply"] [data-testid="interrupted"]')`, dashboardState)
	waitEntryCount(t, tb, "reply", "(echo agent) interrupt me", 1)

	live := entries(tb)
	// The worker's exit is kept before or after /exit's command and
	// error, depending on which the server saw first.
	wantKinds := []string{"prompt", "reply", "slash", "error", "slash", "error", "notice", "prompt", "reply"}
	exitFirst := []string{"prompt", "reply", "slash", "error", "notice", "slash", "error", "prompt", "reply"}
	if !slices.Equal(kinds(live), wantKinds) && !slices.Equal(kinds(live), exitFirst) {
		t.Fatalf("live entries have kinds %v, want %v (or the notice first: %v): %+v", kinds(live), wantKinds, exitFirst, live)
	}
	if last := live[len(live)-1]; !strings.HasSuffix(last.Text, "[interrupted]") || strings.Contains(last.Text, strings.Repeat(" word", 200)) {
		t.Errorf("the interrupted reply reads %q: want part of the text and the [interrupted] marker", last.Text)
	}
	if live[2].Text != "/nosuchcommand" || !strings.Contains(live[3].Text, "Unknown command /nosuchcommand") {
		t.Errorf("the failed slash command shows as %+v, %+v", live[2], live[3])
	}
	if n := slices.Index(live, entry{"notice", "worker exited, code 3"}); n < 0 {
		t.Errorf("the worker's exit is not shown as \"worker exited, code 3\": %+v", live)
	}

	tb.Do("reload", chromedp.Reload())
	waitDashboard(t, tb)
	if got := currentSession(t, tb); got != sid {
		t.Fatalf("after the reload the current session is %s, want %s", got, sid)
	}
	waitEntries(t, tb, "after a reload", live)

	// Restart dashgate on the same state directory and port; the open page
	// says it is restarting, not that its session closed, and comes back
	// to the same conversation.
	_, port, err := net.SplitHostPort(d.Addr)
	if err != nil {
		t.Fatal(err)
	}
	stopForRestart(t, d)
	tb.mustWaitJS(10*time.Second, "the page says dashgate is restarting",
		`document.querySelector('[data-testid="conn-status"]')?.dataset.state === 'restarting'`, dashboardState)
	if n := mustEval[int](tb, `document.querySelectorAll('[data-testid="closed-session"]').length`); n != 0 {
		t.Errorf("while dashgate restarts, %d sessions are listed as closed, want none (suspended)", n)
	}
	d2 := startDashgateOn(t, state, net.JoinHostPort("127.0.0.1", port))
	waitDashboard(t, tb)
	if got := currentSession(t, tb); got != sid {
		t.Fatalf("after the restart the open page's current session is %s, want %s", got, sid)
	}
	waitEntries(t, tb, "in the open page after the restart", live)

	tb.Do("load the page again", chromedp.Navigate(d2.URL("/")))
	waitDashboard(t, tb)
	if got := currentSession(t, tb); got != sid {
		t.Fatalf("after the restart and a reload the current session is %s, want %s", got, sid)
	}
	waitEntries(t, tb, "after the restart and a reload", live)
}

// A closed conversation is listed under Closed, found by search, reopened
// with its history by a click on the hit; a deleted one is gone for good.
func TestClosedSessionsReopenDeleteSearch(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	one := openDashboard(t, d, tb)

	const word = "quokkaflux"
	prompt := "tell me about " + word + " <b>bold</b>"
	sendChat(t, tb, prompt)
	waitAssistant(t, tb, "(echo agent) "+prompt, 1)

	tb.Do("click New", chromedp.Click(chromedp.CSS(`[data-testid="new-session"]`)))
	tb.mustWaitJS(10*time.Second, "a second session is current",
		fmt.Sprintf(`(s => s && s !== %s && !!document.querySelector('[data-testid="session-item"].current[data-session-id="' + s + '"]'))(window.dashgate.currentSession())`, js(one)),
		dashboardState)
	two := currentSession(t, tb)
	sendChat(t, tb, "/echo second")
	waitAssistant(t, tb, "second", 1)

	liveItem := func(sid string) string {
		return fmt.Sprintf(`[data-testid="session-list"] [data-testid="session-item"][data-session-id=%s]`, js(sid))
	}
	closedItem := func(sid string) string {
		return fmt.Sprintf(`[data-testid="closed-sessions"] [data-testid="closed-session"][data-session-id=%s]`, js(sid))
	}
	count := func(sel string) int {
		return mustEval[int](tb, fmt.Sprintf(`document.querySelectorAll(%s).length`, js(sel)))
	}

	// Close the first: it moves under Closed.
	tb.Do("close the first session", chromedp.Click(chromedp.CSS(liveItem(one)+` [data-testid="session-close"]`)))
	tb.mustWaitJS(10*time.Second, "the first session is listed under Closed only",
		fmt.Sprintf(`!!document.querySelector(%s) && !document.querySelector(%s)`, js(closedItem(one)), js(liveItem(one))),
		dashboardState)
	tb.Do("open the Closed section", chromedp.Click(chromedp.CSS(`[data-testid="closed-sessions"] > summary`)))
	tb.Do("closed session visible", chromedp.WaitVisible(chromedp.CSS(closedItem(one))))

	// Search the word: one hit, in the first session, shown as text.
	tb.Do("search "+word, chromedp.SendKeys(chromedp.CSS(`[data-testid="search-input"]`), word+"\r"))
	hit := fmt.Sprintf(`[data-testid="search-hit"][data-session-id=%s]`, js(one))
	tb.mustWaitJS(10*time.Second, "a search hit in the first session",
		fmt.Sprintf(`!!document.querySelector(%s)`, js(hit)), dashboardState)
	snippet := mustEval[string](tb, fmt.Sprintf(`document.querySelector(%s).textContent`, js(hit)))
	if !strings.Contains(snippet, word) {
		t.Errorf("the search hit reads %q, want it to hold %q", snippet, word)
	}
	// Only the matched words are elements (<mark>); the rest is text.
	if n := mustEval[int](tb, fmt.Sprintf(`[...document.querySelector(%s + ' [data-testid="search-snippet"]').querySelectorAll('*')].filter(e => e.tagName !== 'MARK').length`, js(hit))); n != 0 {
		t.Errorf("the search snippet has %d child elements other than <mark>: server text was parsed as HTML", n)
	}

	// Click the hit: the first session is reopened, current, with its history.
	tb.Do("click the hit", chromedp.Click(chromedp.CSS(hit)))
	tb.mustWaitJS(10*time.Second, "the first session is reopened and current",
		fmt.Sprintf(`window.dashgate.currentSession() === %s && !!document.querySelector(%s + '.current') && !document.querySelector(%s)`,
			js(one), js(liveItem(one)), js(closedItem(one))),
		dashboardState)
	waitEntries(t, tb, "the reopened session", []entry{
		{"prompt", prompt},
		{"reply", "(echo agent) " + prompt},
		{"notice", "session closed"},
	})
	if n := mustEval[int](tb, `[...document.querySelectorAll('[data-testid="chat-log"] *')].filter(e => e.tagName === 'B').length`); n != 0 {
		t.Errorf("the chat log holds %d <b> elements: user text was parsed as HTML", n)
	}
	if count(liveItem(one)) != 1 {
		t.Errorf("the reopened session is listed %d times among the live ones, want once", count(liveItem(one)))
	}

	// Close the second and delete it (confirming): gone, also after a reload.
	tb.Do("close the second session", chromedp.Click(chromedp.CSS(liveItem(two)+` [data-testid="session-close"]`)))
	tb.Do("the second session under Closed", chromedp.WaitVisible(chromedp.CSS(closedItem(two))))
	mustEval[bool](tb, `(() => { window.__e2eConfirms = []; window.confirm = (m) => { window.__e2eConfirms.push(m); return true; }; return true; })()`)
	tb.Do("delete the second session", chromedp.Click(chromedp.CSS(closedItem(two)+` [data-testid="delete"]`)))
	tb.mustWaitJS(10*time.Second, "the second session is gone from the lists",
		fmt.Sprintf(`!document.querySelector(%s) && !document.querySelector(%s)`, js(closedItem(two)), js(liveItem(two))),
		dashboardState)
	if n := mustEval[int](tb, `window.__e2eConfirms.length`); n != 1 {
		t.Errorf("delete asked for confirmation %d times, want once", n)
	}

	tb.Do("reload", chromedp.Reload())
	waitDashboard(t, tb)
	if got := currentSession(t, tb); got != one {
		t.Errorf("after the reload the current session is %s, want the reopened %s", got, one)
	}
	if n := count(liveItem(two)) + count(closedItem(two)); n != 0 {
		t.Errorf("the deleted session is listed %d times after the reload", n)
	}
	if n := count(liveItem(one)); n != 1 {
		t.Errorf("the reopened session is listed %d times after the reload, want once", n)
	}
	// Search no longer finds the deleted session's words.
	r := mustEval[int](tb, `window.dashgate.call('session.search', {query: 'second'}).then(r => r.hits.filter(h => h.session_id === `+js(two)+`).length)`)
	if r != 0 {
		t.Errorf("session.search still finds %d entries of the deleted session", r)
	}
}
