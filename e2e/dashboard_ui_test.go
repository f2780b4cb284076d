package e2e_test

// Issue 27, the dashboard's page: renaming a session in place, the chat log
// that follows new entries (whatever the divider did) with a "new messages"
// button when scrolled up, a search hit that jumps to its entry, and the
// smaller defects (the model picker's label, the copy button over a narrow
// code block, the pending line during an approval, a link without its URL,
// a second tab that resumes the detached session). Each is driven as a
// person would: clicks, keys, the mouse wheel and the divider.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// sessionTitle is the CSS of the title of session sid in the live list.
func sessionTitle(sid string) string {
	return fmt.Sprintf(`[data-testid="session-item"][data-session-id=%s] [data-testid="session-title"]`, js(sid))
}

// titleIs holds when the live list shows session sid titled title (and no
// rename input).
func titleIs(sid, title string) string {
	return fmt.Sprintf(`document.querySelector(%s)?.textContent === %s && !document.querySelector('[data-testid="rename-input"]')`, js(sessionTitle(sid)), js(title))
}

// A session's title is renamed in place: a double-click on it, or its
// Rename button from the keyboard, turns it into an input; Escape cancels,
// Enter saves (session.rename), and every tab's list shows the new title.
func TestRenameSessionInPlace(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	one := b.newTab(t, "one")
	sid := openDashboard(t, d, one)
	two := b.newTab(t, "two")
	two.Do("open the dashboard in a second tab", chromedp.Navigate(d.URL("/")))
	waitDashboard(t, two)
	old := mustEval[string](one, fmt.Sprintf(`document.querySelector(%s).textContent`, js(sessionTitle(sid))))
	input := byTestID("rename-input")
	editing := fmt.Sprintf(`(i => !!i && document.activeElement === i && i.value === %s && i.selectionStart === 0 && i.selectionEnd === i.value.length)(document.querySelector(%s))`, js(old), js(input))

	one.Do("double-click the title", chromedp.DoubleClick(chromedp.CSS(sessionTitle(sid))))
	one.mustWaitJS(5*time.Second, "the title is an input holding it, focused and selected", editing, dashboardState)
	one.Do("type a title and press Escape", chromedp.KeyEvent("not this"), chromedp.KeyEvent(kb.Escape))
	one.mustWaitJS(5*time.Second, "Escape cancelled: the old title, the Rename button focused",
		titleIs(sid, old)+fmt.Sprintf(` && document.activeElement?.dataset.testid === 'session-rename' && !!document.activeElement.closest('[data-session-id=%s]')`, js(sid)), dashboardState)

	one.Do("double-click the title again", chromedp.DoubleClick(chromedp.CSS(sessionTitle(sid))))
	one.mustWaitJS(5*time.Second, "the input again", editing, dashboardState)
	one.Do("type a new title and press Enter", chromedp.KeyEvent("renamed by a double-click"), pressEnter())
	for _, tb := range []*tab{one, two} {
		tb.mustWaitJS(10*time.Second, "tab "+tb.name+": the new title in the list", titleIs(sid, "renamed by a double-click"), dashboardState)
	}

	// From the keyboard: focus the Rename button, Enter, type, Enter.
	rename := fmt.Sprintf(`[data-testid="session-item"][data-session-id=%s] [data-testid="session-rename"]`, js(sid))
	one.Do("press Enter on the Rename button", chromedp.Focus(chromedp.CSS(rename)), pressEnter())
	one.mustWaitJS(5*time.Second, "the input, focused", fmt.Sprintf(`document.activeElement === document.querySelector(%s)`, js(input)), dashboardState)
	one.Do("type a title and press Enter", chromedp.KeyEvent("renamed by keyboard"), pressEnter())
	for _, tb := range []*tab{one, two} {
		tb.mustWaitJS(10*time.Second, "tab "+tb.name+": the keyboard's title in the list", titleIs(sid, "renamed by keyboard"), dashboardState)
	}

	// The server has it (a reload, another client).
	c := openChat(t, "client", d.WSURL("ws/chat"), bearer())
	var list struct {
		Sessions []struct {
			ID    string `json:"session_id"`
			Title string `json:"title"`
		} `json:"sessions"`
	}
	c.mustCall("session.list", map[string]any{}, &list)
	for _, s := range list.Sessions {
		if s.ID == sid && s.Title != "renamed by keyboard" {
			t.Errorf("session.list gives the title %q, want %q", s.Title, "renamed by keyboard")
		}
	}
}

// expectJS is waitJS that marks the test failed and goes on (so that one
// run shows every check that fails).
func expectJS(t *testing.T, tb *tab, timeout time.Duration, what, expr, diag string) {
	t.Helper()
	if err := tb.waitJS(timeout, what, expr, diag); err != nil {
		t.Error(err)
	}
}

// logAtEnd holds when the chat log is scrolled to its end.
const logAtEnd = `(l => l.scrollHeight - l.scrollTop - l.clientHeight < 2)(document.querySelector('[data-testid="chat-log"]'))`

// lastEntryInView holds when the last entry of the chat log is wholly
// inside the log's visible box (not under the pending line, not below).
const lastEntryInView = `(l => { const e = l.lastElementChild; if (!e) return false; const r = e.getBoundingClientRect(), b = l.getBoundingClientRect(); return r.bottom <= b.bottom + 0.5 && r.bottom > b.top; })(document.querySelector('[data-testid="chat-log"]'))`

const logState = `JSON.stringify((l => ({scrollTop: l.scrollTop, scrollHeight: l.scrollHeight, clientHeight: l.clientHeight, width: l.clientWidth, last: l.lastElementChild?.textContent.slice(0, 60), jump: !document.querySelector('[data-testid="jump-new"]').hidden}))(document.querySelector('[data-testid="chat-log"]')))`

// longText is a prompt of many long lines (tall, and taller when narrower).
func longText(tag string) string {
	var lines []string
	for i := range 12 {
		lines = append(lines, fmt.Sprintf("%s line %d: %s", tag, i, strings.Repeat("words that wrap ", 8)))
	}
	return strings.Join(lines, "\n")
}

// fill sends a tall /echo (many long lines) and waits for its output.
func fill(t *testing.T, tb *tab, tag string) {
	t.Helper()
	sendChat(t, tb, "/echo "+longText(tag))
	waitEntryCount(t, tb, "slash_output", tag+" line 0:", 1)
}

// wheel scrolls the mouse wheel by dy pixels over the middle of sel.
func wheel(tb *tab, sel string, dy float64) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		r := rect(tb, sel)
		_, err := cdp.Call(ctx, t, input.DispatchMouseEvent, input.DispatchMouseEventParams{
			// deltaX is required, and a zero would be left out (omitempty).
			Type: input.DispatchMouseEventTypeMouseWheel, X: r.X + r.W/2, Y: r.Y + r.H/2, DeltaX: 1e-6, DeltaY: dy,
		})
		return err
	})
}

// pressEnter presses Enter as a keyboard does: the keydown and the
// keypress (a button's click) in one input event. chromedp.KeyEvent(kb.Enter)
// sends them as two commands, and a page task can run between them: a
// rename saved on the keydown moves the focus to the Rename button, and the
// keypress that follows clicks it (a second edit no person could cause).
func pressEnter() chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for _, typ := range []input.DispatchKeyEventType{input.DispatchKeyEventTypeKeyDown, input.DispatchKeyEventTypeKeyUp} {
			p := input.DispatchKeyEventParams{Type: typ, Key: "Enter", Code: "Enter", WindowsVirtualKeyCode: 13, NativeVirtualKeyCode: 13}
			if typ == input.DispatchKeyEventTypeKeyDown {
				p.Text, p.UnmodifiedText = "\r", "\r"
			}
			if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, p); err != nil {
				return err
			}
		}
		return nil
	})
}

// The chat log follows new entries while the reader is at its end, also
// after the divider was dragged (the log narrower, its text taller) and
// while the pending line takes room; scrolled up, the reader stays put and
// a "new messages" button appears that jumps to the end.
func TestChatFollowsAndNewMessagesButton(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	sid := openDashboard(t, d, tb)
	for i := range 3 {
		fill(t, tb, fmt.Sprint("first ", i))
	}
	tb.mustWaitJS(5*time.Second, "the log overflows and is at its end",
		`(l => l.scrollHeight > 2 * l.clientHeight)(document.querySelector('[data-testid="chat-log"]')) && `+logAtEnd+` && `+lastEntryInView, logState)

	// The pending line never covers the last entry.
	sendChat(t, tb, "/sleep 60")
	expectJS(t, tb, 5*time.Second, "the pending line shows, the command's entry above it",
		visible(byTestID("pending"))+` && `+lastEntryInView, logState)
	tb.Do("click Stop", chromedp.Click(chromedp.CSS(byTestID("chat-stop"))))
	tb.mustWaitJS(10*time.Second, "stopped, the last entry in view", `!`+visible(byTestID("pending"))+` && `+lastEntryInView, logState)

	// Another viewer's /exit makes an entry (the worker's exit) that
	// nobody here typed.
	other := openChat(t, "other", d.WSURL("ws/chat"), bearer())
	exit := func(code int) {
		t.Helper()
		other.slash(sid, fmt.Sprintf("/exit %d", code)) // fails: the worker exits
		waitEntryCount(t, tb, "notice", fmt.Sprintf("worker exited, code %d", code), 1)
	}

	// Drag the divider left: the chat narrows, its text rewraps taller.
	chatLog := byTestID("chat-log")
	wide := rect(tb, chatLog).W
	div := rect(tb, byTestID("divider"))
	x, y := div.X+div.W/2, div.Y+div.H/2
	tb.Do("drag the divider 300 px left",
		chromedp.MouseEvent(chromedp.MousePressed, x, y, chromedp.ButtonLeft, chromedp.ClickCount(1)),
		chromedp.MouseEvent(chromedp.MouseMoved, x-150, y, chromedp.ButtonLeft),
		chromedp.MouseEvent(chromedp.MouseMoved, x-300, y, chromedp.ButtonLeft),
		chromedp.MouseEvent(chromedp.MouseReleased, x-300, y, chromedp.ButtonLeft, chromedp.ClickCount(1)),
	)
	if w := rect(tb, chatLog).W; w > wide-150 {
		t.Fatalf("after the drag the chat log is %.0f px wide, was %.0f", w, wide)
	}
	expectJS(t, tb, 5*time.Second, "narrowed by the divider, the log keeps its end in view", logAtEnd+` && `+lastEntryInView, logState)
	// And back: wider, its text shorter.
	narrow := rect(tb, chatLog).W
	div = rect(tb, byTestID("divider"))
	x = div.X + div.W/2
	tb.Do("drag the divider 200 px right",
		chromedp.MouseEvent(chromedp.MousePressed, x, y, chromedp.ButtonLeft, chromedp.ClickCount(1)),
		chromedp.MouseEvent(chromedp.MouseMoved, x+100, y, chromedp.ButtonLeft),
		chromedp.MouseEvent(chromedp.MouseMoved, x+200, y, chromedp.ButtonLeft),
		chromedp.MouseEvent(chromedp.MouseReleased, x+200, y, chromedp.ButtonLeft, chromedp.ClickCount(1)),
	)
	if w := rect(tb, chatLog).W; w < narrow+100 {
		t.Fatalf("after the drag back the chat log is %.0f px wide, was %.0f", w, narrow)
	}
	expectJS(t, tb, 5*time.Second, "widened by the divider, the log keeps its end in view", logAtEnd+` && `+lastEntryInView, logState)
	// Stacked (chat above terminal): the divider drag makes the log
	// shorter; nothing scrolls, the end must still show.
	if _, err := chromedp.Call(tb.ctx, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{Width: 900, Height: 700, DeviceScaleFactor: 1}); err != nil {
		t.Fatal(err)
	}
	tb.mustWaitJS(5*time.Second, "stacked", `innerWidth === 900`, "")
	div = rect(tb, byTestID("divider"))
	x, y = div.X+div.W/2, div.Y+div.H/2
	high := rect(tb, chatLog).H
	tb.Do("drag the stacked divider 120 px up",
		chromedp.MouseEvent(chromedp.MousePressed, x, y, chromedp.ButtonLeft, chromedp.ClickCount(1)),
		chromedp.MouseEvent(chromedp.MouseMoved, x, y-60, chromedp.ButtonLeft),
		chromedp.MouseEvent(chromedp.MouseMoved, x, y-120, chromedp.ButtonLeft),
		chromedp.MouseEvent(chromedp.MouseReleased, x, y-120, chromedp.ButtonLeft, chromedp.ClickCount(1)),
	)
	if h := rect(tb, chatLog).H; h > high-80 {
		t.Fatalf("after the drag up the chat log is %.0f px tall, was %.0f", h, high)
	}
	expectJS(t, tb, 5*time.Second, "shortened by the divider, the log keeps its end in view", logAtEnd+` && `+lastEntryInView, logState)
	if _, err := chromedp.Call(tb.ctx, emulation.ClearDeviceMetricsOverride, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	tb.mustWaitJS(5*time.Second, "back to the window's size", `innerWidth === 1280`, "")
	exit(3)
	expectJS(t, tb, 5*time.Second, "after the drag the log still follows: the worker's exit in view", logAtEnd+` && `+lastEntryInView, logState)

	// Scrolled up: the reader stays; "new messages" appears, and jumps.
	tb.Do("scroll the log up with the wheel", wheel(tb, chatLog, -1200))
	tb.mustWaitJS(5*time.Second, "scrolled up", `!`+logAtEnd, logState)
	jump := byTestID("jump-new")
	if mustEval[bool](tb, visible(jump)) {
		t.Errorf("the new messages button shows before anything new arrived")
	}
	top := mustEval[float64](tb, `document.querySelector('[data-testid="chat-log"]').scrollTop`)
	exit(4)
	expectJS(t, tb, 5*time.Second, "the new messages button shows", visible(jump), logState)
	if now := mustEval[float64](tb, `document.querySelector('[data-testid="chat-log"]').scrollTop`); now < top-1 || now > top+1 {
		t.Errorf("the log moved from %.0f to %.0f while the reader was scrolled up", top, now)
	}
	tb.Do("click new messages", chromedp.Click(chromedp.CSS(jump)))
	expectJS(t, tb, 5*time.Second, "at the end, the newest entry in view, the button gone",
		logAtEnd+` && `+lastEntryInView+` && !`+visible(jump), logState)

}

// entryShown holds when the entry with seq is in the log, wholly in the
// log's visible box, and highlighted.
func entryShown(seq int) string {
	return fmt.Sprintf(`(l => { const e = l.querySelector('[data-testid="entry"][data-seq="%d"]'); if (!e) return false; const r = e.getBoundingClientRect(), b = l.getBoundingClientRect(); return r.top >= b.top - 0.5 && r.bottom <= b.bottom + 0.5 && e.classList.contains('hit-flash'); })(document.querySelector('[data-testid="chat-log"]'))`, seq)
}

const searchState = `JSON.stringify({session: window.dashgate.currentSession(), hits: [...document.querySelectorAll('[data-testid="search-hit"]')].map(h => h.dataset.sessionId + '#' + h.dataset.seq), seqs: [...document.querySelectorAll('[data-testid="entry"]')].slice(0, 3).map(e => e.dataset.seq), count: document.querySelectorAll('[data-testid="entry"]').length})`

// A click on a search hit opens its session, loads older history until
// the entry is there, scrolls it into view and highlights it; in the
// current session too, for an entry shown live.
func TestSearchHitJumpsToEntry(t *testing.T) {
	d := startDashgate(t)
	c := openChat(t, "client", d.WSURL("ws/chat"), bearer())
	long := c.createSession("long")
	c.mustEcho(long, "quetzalcoatl")
	for i := range 130 { // 262 entries: the first is beyond session.resume's 200
		c.mustEcho(long, fmt.Sprint("filler ", i))
	}
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)

	search := func(word string) {
		t.Helper()
		// Escape empties the box first.
		tb.Do("search "+word, chromedp.SendKeys(chromedp.CSS(byTestID("search-input")), kb.Escape+word+"\r"))
	}
	search("quetzalcoatl")
	// The slash entry (seq 1) and its output (seq 2).
	hit := fmt.Sprintf(`[data-testid="search-hit"][data-session-id=%s][data-seq="1"]`, js(long))
	tb.mustWaitJS(10*time.Second, "the hit of the first entry", exists(hit), searchState)
	tb.Do("click the hit", chromedp.Click(chromedp.CSS(hit)))
	expectJS(t, tb, 15*time.Second, "its session current, the entry loaded, in view and highlighted",
		fmt.Sprintf(`window.dashgate.currentSession() === %s && %s`, js(long), entryShown(1)), searchState)

	// In the current session, an entry shown live (sent from this page),
	// then scrolled away by tall ones.
	sendChat(t, tb, "/echo zanzibar")
	waitEntryCount(t, tb, "slash_output", "zanzibar", 1)
	for i := range 3 {
		fill(t, tb, fmt.Sprint("after ", i))
	}
	var hits struct {
		Hits []struct {
			SID  string `json:"session_id"`
			Seq  int    `json:"seq"`
			Kind string `json:"kind"`
		} `json:"hits"`
	}
	c.mustCall("session.search", map[string]any{"query": "zanzibar"}, &hits)
	seq := 0
	for _, h := range hits.Hits {
		if h.SID == long && h.Kind == "slash_output" {
			seq = h.Seq
		}
	}
	if seq == 0 {
		t.Fatalf("session.search zanzibar: no slash_output hit in %s: %+v", long, hits.Hits)
	}
	search("zanzibar")
	hit = fmt.Sprintf(`[data-testid="search-hit"][data-session-id=%s][data-seq="%d"]`, js(long), seq)
	tb.mustWaitJS(10*time.Second, "the hit of the live entry", exists(hit), searchState)
	tb.Do("click the hit", chromedp.Click(chromedp.CSS(hit)))
	tb.mustWaitJS(15*time.Second, "the live entry in view and highlighted", entryShown(seq), searchState)
}

// The smaller defects with the agent: the model picker shows its whole
// label, the copy button leaves a narrow code block's text readable, a
// link whose URL was dropped reads as text, and the pending line says
// the turn waits for the user's approval.
func TestDashboardSmallDefects(t *testing.T) {
	m := newModelServer(t)
	const model = "fake-1-with-a-rather-long-name"
	d := startAgent(t, m, t.TempDir(), "--llm-model", model)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)

	// The picker's label ("default (<model>)") fits, wide and on a phone.
	picker := byTestID("model-picker")
	fits := fmt.Sprintf(`(s => { const cs = getComputedStyle(s); const c = document.createElement('canvas').getContext('2d'); c.font = cs.font; const label = s.options[s.selectedIndex].textContent; return label.includes(%s) && c.measureText(label).width + parseFloat(cs.paddingLeft) + parseFloat(cs.paddingRight) + 16 <= s.clientWidth; })(document.querySelector(%s))`, js(model), js(picker))
	pickerState := fmt.Sprintf(`JSON.stringify((s => ({width: s.clientWidth, label: s.options[s.selectedIndex]?.textContent}))(document.querySelector(%s)))`, js(picker))
	tb.mustWaitJS(10*time.Second, "the models are listed", fmt.Sprintf(`document.querySelector(%s).options.length > 1`, js(picker)), dashboardState)
	expectJS(t, tb, 5*time.Second, "the picker's label fits", fits, pickerState)
	if _, err := chromedp.Call(tb.ctx, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{Width: 420, Height: 800, DeviceScaleFactor: 1}); err != nil {
		t.Fatal(err)
	}
	expectJS(t, tb, 5*time.Second, "on a phone the picker's label fits", `innerWidth === 420 && `+fits, pickerState)
	if _, err := chromedp.Call(tb.ctx, emulation.ClearDeviceMetricsOverride, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	tb.mustWaitJS(5*time.Second, "back to the window's size", `innerWidth === 1280`, "")

	// A narrow code block and a link without its URL.
	// The block is the widest thing of its reply: the bubble is as
	// narrow as the code.
	m.then(reply("```\nls -la\n```\n\n[docs](javascript:alert(1))"))
	sendChat(t, tb, "a narrow block")
	tb.mustWaitJS(15*time.Second, "the reply with its code block", `!!document.querySelector('`+replyEntry+` .msg:not([data-streaming="true"]) pre code')`, markdownState)
	type overlap struct {
		Overlap bool       `json:"overlap"`
		Button  [4]float64 `json:"button"`
		Text    [4]float64 `json:"text"`
	}
	o := mustEval[overlap](tb, `(() => {
		const e = document.querySelector('`+replyEntry+`');
		const b = e.querySelector('[data-testid="copy-code"]').getBoundingClientRect();
		const r = document.createRange(); r.selectNodeContents(e.querySelector('pre code'));
		const t = r.getBoundingClientRect();
		return {overlap: !(b.right <= t.left || t.right <= b.left || b.bottom <= t.top || t.bottom <= b.top), button: [b.left, b.top, b.right, b.bottom], text: [t.left, t.top, t.right, t.bottom]};
	})()`)
	if o.Overlap {
		t.Errorf("the copy button %v covers the code's text %v", o.Button, o.Text)
	}
	type link struct {
		Found      bool   `json:"found"`
		Color      string `json:"color"`
		Text       string `json:"text"`
		Decoration string `json:"decoration"`
	}
	l := mustEval[link](tb, `(a => a ? {found: true, color: getComputedStyle(a).color, text: getComputedStyle(a.closest('p')).color, decoration: getComputedStyle(a).textDecorationLine} : {found: false})(document.querySelector('`+replyEntry+` a:not([href])'))`)
	if !l.Found {
		t.Logf("the dropped link is not an <a> at all: nothing to check")
	} else if l.Color != l.Text || l.Decoration != "none" {
		t.Errorf("a link whose URL was dropped looks like a link: color %s (text %s), decoration %q", l.Color, l.Text, l.Decoration)
	}

	// The pending line during an approval.
	m.then(toolCall("echo approved-$((6*7))"), reply("It ran."))
	sendChat(t, tb, "run something")
	waitCard(t, tb, "the approval card is pending", "pending:  buttons=2")
	expectJS(t, tb, 5*time.Second, "the pending line asks for the approval",
		visible(byTestID("pending"))+` && document.querySelector('[data-testid="pending-text"]').textContent === 'waiting for your approval…'`,
		`document.querySelector('[data-testid="pending-text"]').textContent`)
	tb.Do("approve", chromedp.Click(chromedp.CSS(approvalCard+` [data-testid="approve"]`)))
	waitAssistant(t, tb, "It ran.", 1)
}

// A second tab of the same browser, whose stored session closed, resumes
// the one detached session instead of starting a new one.
func TestSecondTabResumesDetachedSession(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	one := b.newTab(t, "one")
	first := openDashboard(t, d, one)
	one.Do("start a new session", chromedp.Click(chromedp.CSS(byTestID("new-session"))))
	one.mustWaitJS(10*time.Second, "a new current session, the first detached",
		fmt.Sprintf(`window.dashgate.currentSession() !== %s && document.querySelector('[data-testid="session-item"][data-session-id=%s] .session-state')?.dataset.state === 'detached'`, js(first), js(first)),
		dashboardState)
	second := currentSession(t, one)
	c := openChat(t, "client", d.WSURL("ws/chat"), bearer())
	c.mustCall("session.close", map[string]any{"session_id": second}, nil)
	one.mustWaitJS(10*time.Second, "tab one hears its session closed", exists(fmt.Sprintf(`[data-testid="closed-session"][data-session-id=%s]`, js(second))), dashboardState)

	two := b.newTab(t, "two")
	two.Do("open the dashboard in a second tab", chromedp.Navigate(d.URL("/")))
	waitDashboard(t, two)
	if got := currentSession(t, two); got != first {
		t.Errorf("the second tab shows session %s, want the detached %s (not a new one)", got, first)
	}
	if n := mustEval[int](two, `document.querySelectorAll('[data-testid="session-item"]').length`); n != 1 {
		t.Errorf("the second tab lists %d live sessions, want 1 (nothing new)", n)
	}
}
