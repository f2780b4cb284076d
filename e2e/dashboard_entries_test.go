package e2e_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
)

// What people expect of a chat log (issue 27): each entry says when it
// was written, a reply can be copied whole, the last one regenerated.

// entryTimesJS lists every entry's time element: its seq, datetime, short
// text, title and rendered width (its words are drawn by CSS).
const entryTimesJS = `[...document.querySelectorAll('[data-testid="chat-log"] [data-testid="entry"]')].map(e => {
	const t = e.querySelector(':scope > .entry-meta > [data-testid="entry-time"]');
	return t ? {seq: Number(e.dataset.seq || 0), kind: e.dataset.kind, datetime: t.dateTime, short: t.dataset.short, title: t.title, width: t.getBoundingClientRect().width,
		local: (d => String(d.getHours()).padStart(2, '0') + ':' + String(d.getMinutes()).padStart(2, '0'))(new Date(t.dateTime))} : {seq: Number(e.dataset.seq || 0), kind: e.dataset.kind};
})`

type entryTime struct {
	Seq      int     `json:"seq"`
	Kind     string  `json:"kind"`
	Datetime string  `json:"datetime"`
	Short    string  `json:"short"`
	Title    string  `json:"title"`
	Width    float64 `json:"width"`
	Local    string  `json:"local"` // the datetime's hour and minute, as the page's clock reads them
}

// checkTimes checks that every entry shows a time, short (HH:MM of its
// datetime, drawn) with the exact time in its title, and returns them.
func checkTimes(t *testing.T, tb *tab, when string) []entryTime {
	t.Helper()
	times := mustEval[[]entryTime](tb, entryTimesJS)
	if len(times) == 0 {
		t.Fatalf("%s: no entries", when)
	}
	for _, e := range times {
		if e.Datetime == "" {
			t.Errorf("%s: the %s entry (seq %d) shows no time", when, e.Kind, e.Seq)
			continue
		}
		if _, err := time.Parse(time.RFC3339Nano, e.Datetime); err != nil {
			t.Errorf("%s: the %s entry's datetime %q: %v", when, e.Kind, e.Datetime, err)
		}
		// (Another day's entry, as one written before midnight, has its day first.)
		if e.Short != e.Local && !strings.HasSuffix(e.Short, " "+e.Local) {
			t.Errorf("%s: the %s entry reads %q, want %q (the hour and minute of %s)", when, e.Kind, e.Short, e.Local, e.Datetime)
		}
		if e.Width <= 0 {
			t.Errorf("%s: the %s entry's time %q is not drawn", when, e.Kind, e.Short)
		}
		// The exact time: to the second, with the year.
		at, _ := time.Parse(time.RFC3339Nano, e.Datetime)
		if exact := e.Local + at.Format(":05"); !strings.Contains(e.Title, exact) || !strings.Contains(e.Title, at.Format("2006")) {
			t.Errorf("%s: the %s entry's time has title %q, want the exact time (%s, with the year)", when, e.Kind, e.Title, exact)
		}
	}
	return times
}

// TestEntryTimestamps: every entry shows its time; live entries (a prompt,
// a streamed reply, a command and its output) the time they arrived, and
// after a reload the history's at, to the millisecond.
func TestEntryTimestamps(t *testing.T) {
	m := newModelServer(t)
	d := startAgent(t, m, t.TempDir())
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	sid := openDashboard(t, d, tb)

	before := mustEval[float64](tb, `Date.now()`)
	m.then(reply("It is **now**."))
	sendChat(t, tb, "what time is it")
	tb.mustWaitJS(15*time.Second, "the reply", `!!document.querySelector('`+replyEntry+` .msg:not([data-streaming="true"]) strong')`, markdownState)
	sendChat(t, tb, "/help")
	waitEntryCount(t, tb, "slash_output", "", 1)
	after := mustEval[float64](tb, `Date.now()`)

	live := checkTimes(t, tb, "live")
	if got := kinds(entries(tb)); strings.Join(got, ",") != "prompt,reply,slash,slash_output" {
		t.Fatalf("entries %v", got)
	}
	for _, e := range live {
		at, _ := time.Parse(time.RFC3339Nano, e.Datetime)
		if ms := float64(at.UnixMilli()); ms < before || ms > after {
			t.Errorf("live: the %s entry says %s, not while it arrived (%v..%v)", e.Kind, e.Datetime, time.UnixMilli(int64(before)).UTC(), time.UnixMilli(int64(after)).UTC())
		}
	}

	tb.Do("reload", chromedp.Reload())
	waitDashboard(t, tb)
	waitEntryCount(t, tb, "slash_output", "", 1)
	stored := checkTimes(t, tb, "after a reload")
	type hist struct {
		Seq int    `json:"seq"`
		At  string `json:"at"`
	}
	h := mustEval[[]hist](tb, fmt.Sprintf(`window.dashgate.call('session.history', {session_id: %s, limit: 50}).then(r => r.entries.map(e => ({seq: e.seq, at: e.at})))`, js(sid)))
	at := map[int]time.Time{}
	for _, e := range h {
		v, err := time.Parse(time.RFC3339Nano, e.At)
		if err != nil {
			t.Fatalf("history entry %d: at %q: %v", e.Seq, e.At, err)
		}
		at[e.Seq] = v
	}
	for _, e := range stored {
		want, ok := at[e.Seq]
		got, _ := time.Parse(time.RFC3339Nano, e.Datetime)
		if d := got.Sub(want); !ok || d <= -time.Millisecond || d >= time.Millisecond {
			t.Errorf("after a reload: the %s entry (seq %d) says %s, its history entry %s", e.Kind, e.Seq, e.Datetime, want.Format(time.RFC3339Nano))
		}
	}
}

// copyReply is the CSS of a reply's copy button.
const copyReply = replyEntry + ` [data-testid="copy-reply"]`

// TestCopyWholeReply: a finished reply has a copy button that puts its
// Markdown source on the clipboard (a reply being written has none).
func TestCopyWholeReply(t *testing.T) {
	m := newModelServer(t)
	d := startAgent(t, m, t.TempDir())
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)
	for _, name := range []string{"clipboard-read", "clipboard-write"} {
		if _, err := chromedp.CallBrowser(tb.ctx, cdpbrowser.SetPermission, cdpbrowser.SetPermissionParams{
			Permission: &cdpbrowser.PermissionDescriptor{Name: name, AllowWithoutSanitization: true}, Setting: cdpbrowser.PermissionSettingGranted, Origin: strings.TrimSuffix(d.URL("/"), "/"),
		}); err != nil {
			t.Fatalf("grant %s: %v", name, err)
		}
	}

	// While it streams, no copy button.
	m.then(m.slow)
	sendChat(t, tb, "go on forever")
	tb.mustWaitJS(15*time.Second, "the reply streams", `!!document.querySelector('`+replyEntry+` .msg[data-streaming="true"]')`, markdownState)
	if mustEval[bool](tb, visible(copyReply)) {
		t.Errorf("a reply being written has a visible copy button")
	}
	tb.Do("click Stop", chromedp.Click(chromedp.CSS(byTestID("chat-stop"))))
	tb.mustWaitJS(15*time.Second, "the stopped reply can be copied", visible(copyReply), markdownState)

	const md = "# Steps\n\nRun **this**:\n\n```sh\necho copied whole\n```\n\n- and *that*"
	m.then(reply(md))
	sendChat(t, tb, "give me steps")
	const second = `document.querySelectorAll('` + replyEntry + `')[1]`
	tb.mustWaitJS(15*time.Second, "the second reply", `!!`+second+`?.querySelector('.msg:not([data-streaming="true"]) h1')`, markdownState)
	label := mustEval[string](tb, second+`.querySelector('[data-testid="copy-reply"]').getAttribute('aria-label')`)
	if !strings.Contains(strings.ToLower(label), "copy") {
		t.Errorf("the copy button is labelled %q", label)
	}
	mustEval[bool](tb, `(`+second+`.querySelector('[data-testid="copy-reply"]').dataset.e2e = 'copy2', true)`)
	tb.Do("copy the second reply", chromedp.Click(chromedp.CSS(`[data-e2e="copy2"]`)))
	tb.mustWaitJS(5*time.Second, "the copy button says copied",
		`document.querySelector('[data-e2e="copy2"]').dataset.state === 'copied'`,
		`document.querySelector('[data-e2e="copy2"]').dataset.state || 'no state'`)
	if got := mustEval[string](tb, `navigator.clipboard.readText()`); got != md {
		t.Errorf("the clipboard holds %q, want the reply's Markdown %q", got, md)
	}
	// The code block's own button still copies the code only.
	mustEval[bool](tb, `(`+second+`.querySelector('[data-testid="copy-code"]').dataset.e2e = 'code2', true)`)
	tb.Do("copy the code", chromedp.Click(chromedp.CSS(`[data-e2e="code2"]`)))
	tb.mustWaitJS(5*time.Second, "the clipboard holds the code",
		`navigator.clipboard.readText().then(t => t.trimEnd() === 'echo copied whole')`, `navigator.clipboard.readText()`)

	// After a reload (from the history) too.
	tb.Do("reload", chromedp.Reload())
	waitDashboard(t, tb)
	tb.mustWaitJS(15*time.Second, "the replies after a reload", `document.querySelectorAll('`+replyEntry+` h1').length === 1`, markdownState)
	mustEval[bool](tb, `(`+second+`.querySelector('[data-testid="copy-reply"]').dataset.e2e = 'copy3', true)`)
	mustEval[bool](tb, `navigator.clipboard.writeText('').then(() => true)`)
	tb.Do("copy it after the reload", chromedp.Click(chromedp.CSS(`[data-e2e="copy3"]`)))
	tb.mustWaitJS(5*time.Second, "after a reload: the clipboard holds the reply's Markdown",
		fmt.Sprintf(`navigator.clipboard.readText().then(t => t === %s)`, js(md)), `navigator.clipboard.readText()`)
}

// regenerateState lists, per reply, whether its regenerate button shows
// and its title.
const regenerateState = `JSON.stringify([...document.querySelectorAll('` + replyEntry + `')].map(e => (b => (b && !b.closest('[hidden]') && b.getClientRects().length > 0 ? 'shown: ' + b.title : 'hidden'))(e.querySelector('[data-testid="regenerate"]'))))`

// shownOn is the JavaScript for: exactly the reply at index i (-1: none)
// of n replies shows its regenerate button.
func shownOn(i, n int) string {
	return fmt.Sprintf(`(s => s.length === %d && s.every((v, j) => (j === %d) === v.startsWith('shown')))(JSON.parse(%s))`, n, i, regenerateState)
}

// clickRegenerate clicks the last reply's regenerate button.
func clickRegenerate(t *testing.T, tb *tab, what string) {
	t.Helper()
	mustEval[bool](tb, `([...document.querySelectorAll('`+replyEntry+`')].at(-1).querySelector('[data-testid="regenerate"]').dataset.e2e = 'regenerate', true)`)
	tb.Do(what, chromedp.Click(chromedp.CSS(`[data-e2e="regenerate"]`)))
	mustEval[bool](tb, `(b => { delete b.dataset.e2e; return true; })(document.querySelector('[data-e2e="regenerate"]'))`)
}

// lastUserMessage is the text of the last user message the model got.
func lastUserMessage(m *modelServer) string {
	reqs := m.got()
	if len(reqs) == 0 {
		return ""
	}
	msgs := reqs[len(reqs)-1].Messages
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			return fmt.Sprint(msgs[i].Content)
		}
	}
	return ""
}

// TestRegenerateLastReply: the last finished reply (only it, and not while
// a turn runs) has a regenerate button that sends its prompt again as a
// new turn, saying so in its title.
func TestRegenerateLastReply(t *testing.T) {
	m := newModelServer(t)
	d := startAgent(t, m, t.TempDir())
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)

	m.then(reply("first answer"))
	sendChat(t, tb, "tell me a joke")
	waitAssistant(t, tb, "first answer", 1)
	tb.mustWaitJS(10*time.Second, "regenerate on the only reply", shownOn(0, 1), regenerateState)
	title := mustEval[string](tb, `document.querySelector('`+replyEntry+` [data-testid="regenerate"]').title`)
	if !strings.Contains(title, `"tell me a joke"`) || !strings.Contains(title, "new turn") {
		t.Errorf("the regenerate button's title is %q, want it to name the prompt and say it is sent again as a new turn", title)
	}

	m.then(reply("second answer"))
	sendChat(t, tb, "another one")
	waitAssistant(t, tb, "second answer", 1)
	tb.mustWaitJS(10*time.Second, "regenerate on the last reply only", shownOn(1, 2), regenerateState)

	// Regenerate: the same prompt, a new turn; while it runs, no button,
	// also before its reply's first word (the last reply shown is then
	// the finished one before).
	asked := make(chan struct{}, 1)
	m.then(func(w http.ResponseWriter, r *http.Request) {
		asked <- struct{}{}
		<-r.Context().Done()
	})
	clickRegenerate(t, tb, "regenerate")
	select {
	case <-asked:
	case <-time.After(15 * time.Second):
		t.Fatal("the regenerated turn never reached the model")
	}
	tb.mustWaitJS(10*time.Second, "the new turn runs", visible(byTestID("chat-stop"))+` && document.querySelectorAll('[data-testid="entry"][data-kind="prompt"]').length === 3`, markdownState)
	if !mustEval[bool](tb, shownOn(-1, 2)) {
		t.Errorf("while a turn runs (no word of it yet) a regenerate button shows: %s", mustEval[string](tb, regenerateState))
	}
	if got := lastUserMessage(m); got != "another one" {
		t.Errorf("the regenerated turn asked the model %q, want the prompt again", got)
	}
	if p := mustEval[string](tb, `[...document.querySelectorAll('[data-testid="entry"][data-kind="prompt"]')].at(-1).textContent`); p != "another one" {
		t.Errorf("the regenerated prompt reads %q", p)
	}
	tb.Do("click Stop", chromedp.Click(chromedp.CSS(byTestID("chat-stop"))))
	tb.mustWaitJS(15*time.Second, "stopped", `!`+visible(byTestID("chat-stop")), markdownState)

	// While its reply streams, no button; stopped, it is finished: the
	// button is back on it.
	m.then(m.slow)
	clickRegenerate(t, tb, "regenerate again")
	tb.mustWaitJS(15*time.Second, "the new turn streams", `!!document.querySelector('`+replyEntry+` .msg[data-streaming="true"]')`, markdownState)
	n := mustEval[int](tb, `document.querySelectorAll('`+replyEntry+`').length`)
	if !mustEval[bool](tb, shownOn(-1, n)) {
		t.Errorf("while a reply streams a regenerate button shows: %s", mustEval[string](tb, regenerateState))
	}
	tb.Do("click Stop", chromedp.Click(chromedp.CSS(byTestID("chat-stop"))))
	tb.mustWaitJS(15*time.Second, "regenerate on the stopped reply", shownOn(n-1, n), regenerateState)

	m.then(reply("third answer"))
	clickRegenerate(t, tb, "regenerate a third time")
	waitAssistant(t, tb, "third answer", 1)
	tb.mustWaitJS(10*time.Second, "regenerate on the newest reply", shownOn(n, n+1), regenerateState)
	if got := len(m.got()); got != 5 {
		t.Errorf("the model got %d requests, want 5 (one per turn)", got)
	}
	if got := kinds(entries(tb)); strings.Count(strings.Join(got, ","), "prompt") != 5 {
		t.Errorf("entries %v: want five prompts (each regenerate one)", got)
	}

	// After a reload, from the history alike.
	tb.Do("reload", chromedp.Reload())
	waitDashboard(t, tb)
	tb.mustWaitJS(15*time.Second, "after a reload: regenerate on the last reply", shownOn(n, n+1), regenerateState)
}
