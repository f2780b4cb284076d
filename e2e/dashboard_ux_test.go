package e2e_test

// Issue 17: the defects a new user hit in the dashboard, each driven as a
// person would (clicks and keys on data-testid elements).

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"golang.org/x/sys/unix"
)

// visible is a JavaScript expression: the element sel is rendered (not
// display:none, not hidden) with a size.
func visible(sel string) string {
	return fmt.Sprintf(`(e => !!e && !e.closest('[hidden]') && e.getClientRects().length > 0 && e.getBoundingClientRect().width > 0)(document.querySelector(%s))`, js(sel))
}

func byTestID(id string) string { return fmt.Sprintf(`[data-testid=%q]`, id) }

// A command that runs shows that it runs: a pending line and Stop, with
// Send disabled; Stop (and Escape) interrupt it, and it ends at once.
func TestRunningCommandShowsPendingAndStop(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)

	running := visible(byTestID("pending")) + " && " + visible(byTestID("chat-stop")) +
		` && document.querySelector('[data-testid="chat-send"]').disabled === true`
	idle := "!" + visible(byTestID("pending")) + " && !" + visible(byTestID("chat-stop")) +
		` && document.querySelector('[data-testid="chat-send"]').disabled === false`
	tb.mustWaitJS(5*time.Second, "idle at first: no pending line, no Stop, Send enabled", idle, dashboardState)

	sendChat(t, tb, "/sleep 60")
	tb.mustWaitJS(5*time.Second, "while /sleep runs: the pending line, Stop, Send disabled", running, dashboardState)
	tb.Do("click Stop", chromedp.Click(chromedp.CSS(byTestID("chat-stop"))))
	tb.mustWaitJS(10*time.Second, "/sleep stopped: its entry, marked interrupted (not a failure), idle again",
		idle+` && [...document.querySelectorAll('[data-testid="entry"][data-kind="error"]')].some(e => e.querySelector('[data-testid="error-sentence"]')?.textContent === 'Sleep cancelled.' && !!e.querySelector('[data-testid="interrupted"]') && e.querySelector('.msg').dataset.interrupted === 'true')`,
		dashboardState)

	// Escape in the input stops it too.
	sendChat(t, tb, "/sleep 60")
	tb.mustWaitJS(5*time.Second, "/sleep runs again", running, dashboardState)
	tb.Do("press Escape in the chat input", chromedp.SendKeys(chromedp.CSS(byTestID("chat-input")), kb.Escape))
	tb.mustWaitJS(10*time.Second, "the second /sleep stopped by Escape",
		idle+` && document.querySelectorAll('[data-testid="entry"][data-kind="error"]').length === 2`, dashboardState)

	// A prompt's turn shows the same until its reply completes.
	sendChat(t, tb, "a prompt"+strings.Repeat(" word", 150))
	tb.mustWaitJS(5*time.Second, "while the reply streams: pending and Stop", running, dashboardState)
	tb.Do("click Stop during the reply", chromedp.Click(chromedp.CSS(byTestID("chat-stop"))))
	tb.mustWaitJS(10*time.Second, "the reply interrupted, idle again",
		idle+` && !!document.querySelector('[data-testid="entry"][data-kind="reply"] [data-testid="interrupted"]')`, dashboardState)

	// Reloaded, the stopped commands still read as stopped (the history
	// keeps it).
	tb.Do("reload", chromedp.Reload())
	tb.mustWaitJS(10*time.Second, "after a reload both stopped commands are marked interrupted",
		`(es => es.length === 2 && es.every(e => !!e.querySelector('[data-testid="interrupted"]')))([...document.querySelectorAll('[data-testid="entry"][data-kind="error"]')])`,
		dashboardState)
}

// A failed command reads as one sentence; the code, the exact message and
// the worker's stderr (its "dashgate worker: ready" line) are folded away.
func TestErrorsReadAsOneSentence(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)

	sendChat(t, tb, "/nosuchcommand")
	sendChat(t, tb, "") // nothing: an empty line is not sent
	tb.mustWaitJS(10*time.Second, "the error of /nosuchcommand",
		`document.querySelectorAll('[data-testid="entry"][data-kind="error"]').length === 1`, dashboardState)
	tb.mustWaitJS(5*time.Second, "idle", `document.querySelector('[data-testid="chat-send"]').disabled === false`, dashboardState)
	sendChat(t, tb, "/exit 3")
	tb.mustWaitJS(10*time.Second, "the error of /exit 3",
		`document.querySelectorAll('[data-testid="entry"][data-kind="error"]').length === 2`, dashboardState)

	type shown struct {
		Sentence string `json:"sentence"`
		Open     bool   `json:"open"`
		Details  string `json:"details"`
		Visible  string `json:"visible"`
	}
	errs := mustEval[[]shown](tb, `[...document.querySelectorAll('[data-testid="entry"][data-kind="error"]')].map(e => ({
		sentence: e.querySelector('[data-testid="error-sentence"]')?.textContent ?? '',
		open: e.querySelector('[data-testid="error-details"]')?.open ?? true,
		details: e.querySelector('[data-testid="error-details"]')?.textContent ?? '',
		visible: e.innerText,
	}))`)
	if n := mustEval[int](tb, `document.querySelectorAll('[data-testid="entry"][data-kind="error"] [data-testid="interrupted"]').length`); n != 0 {
		t.Errorf("%d failed commands are marked interrupted; nobody stopped them", n)
	}
	want := []string{"Unknown command /nosuchcommand (try /help).", "The worker stopped before it answered."}
	for i, e := range errs {
		if e.Sentence != want[i] {
			t.Errorf("error %d reads %q, want %q", i, e.Sentence, want[i])
		}
		if e.Open {
			t.Errorf("error %d: its details are open (or missing)", i)
		}
		if !strings.Contains(e.Details, "5004") {
			t.Errorf("error %d: the details %q do not hold the code", i, e.Details)
		}
		for _, leak := range []string{"5004", "dashgate worker", "worker reply", "exited (exited"} {
			if strings.Contains(e.Visible, leak) {
				t.Errorf("error %d shows %q: %q", i, leak, e.Visible)
			}
		}
	}
	// The worker's stderr tail, when the error carries one, is behind the
	// disclosure. Whether it does is a race: stderr is drained by its own
	// goroutine, and a CI run once saw /exit's error built before the
	// "ready" line was read; so only its place is asserted, below and by
	// the leak check above.
	if tail := "dashgate worker: ready"; strings.Contains(errs[1].Visible, tail) && !strings.Contains(errs[1].Details, tail) {
		t.Errorf("the stderr tail shows outside the disclosure: %q", errs[1].Visible)
	}
	// Nothing outside the entries carries the worker's stderr.
	if n := mustEval[int](tb, `[...document.querySelectorAll('[data-testid="chat-log"] [data-testid="chat-message"]')].filter(m => !m.closest('[data-testid="error-details"]') && m.innerText.includes('dashgate worker')).length`); n != 0 {
		t.Errorf("%d chat lines show the worker's stderr", n)
	}
}

// The input takes several lines (Shift+Enter), Enter sends, Up and Down go
// through what was sent; the current session is not offered "Resume".
func TestChatInputLinesHistoryAndCurrentSession(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	first := openDashboard(t, d, tb)

	in := chromedp.CSS(byTestID("chat-input"))
	tb.Do("type two lines with Shift+Enter, then Enter",
		chromedp.Focus(in),
		typeKeys("first line"),
		chromedp.KeyEvent(kb.Enter, chromedp.KeyModifiers(chromedp.ModifierShift)),
		typeKeys("second line\r"),
	)
	waitEntryCount(t, tb, "prompt", "first line\nsecond line", 1)
	// The echo agent keeps the prompt's lines (Markdown stays Markdown).
	waitEntryCount(t, tb, "reply", "(echo agent)", 1)
	if reply := mustEval[string](tb, `document.querySelector('[data-testid="chat-log"] [data-testid="entry"][data-kind="reply"]').textContent`); !strings.Contains(reply, "first line") || !strings.Contains(reply, "second line") {
		t.Errorf("the reply %q does not echo both lines", reply)
	}
	if n := mustEval[int](tb, `document.querySelectorAll('[data-testid="entry"][data-kind="prompt"]').length`); n != 1 {
		t.Errorf("%d prompts sent, want one of two lines", n)
	}
	sendChat(t, tb, "/echo third")
	waitAssistant(t, tb, "third", 1)

	value := func() string {
		return mustEval[string](tb, `document.querySelector('[data-testid="chat-input"]').value`)
	}
	tb.Do("Up", chromedp.SendKeys(in, kb.ArrowUp))
	if v := value(); v != "/echo third" {
		t.Errorf("after Up the input holds %q, want the last line sent", v)
	}
	tb.Do("Up again", chromedp.SendKeys(in, kb.ArrowUp))
	if v := value(); v != "first line\nsecond line" {
		t.Errorf("after Up twice the input holds %q, want the prompt before", v)
	}
	tb.Do("Down twice", chromedp.SendKeys(in, kb.ArrowDown+kb.ArrowDown))
	if v := value(); v != "" {
		t.Errorf("after Down past the last line sent the input holds %q, want the empty draft", v)
	}

	// Two sessions: only the other one offers Resume.
	tb.Do("click New", chromedp.Click(chromedp.CSS(byTestID("new-session"))))
	tb.mustWaitJS(10*time.Second, "a second session is current",
		fmt.Sprintf(`(s => s && s !== %s)(window.dashgate.currentSession())`, js(first)), dashboardState)
	tb.mustWaitJS(5*time.Second, "both sessions listed",
		`document.querySelectorAll('[data-testid="session-item"]').length === 2`, dashboardState)
	if n := mustEval[int](tb, `document.querySelectorAll('[data-testid="session-item"].current [data-testid="session-resume"]').length`); n != 0 {
		t.Errorf("the current session offers Resume (%d buttons)", n)
	}
	tb.Do("click Resume on the first session", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-testid="session-item"][data-session-id=%s] [data-testid="session-resume"]`, js(first)))))
	tb.mustWaitJS(10*time.Second, "the first session is current again",
		fmt.Sprintf(`window.dashgate.currentSession() === %s && !document.querySelector('[data-testid="session-item"].current [data-testid="session-resume"]')`, js(first)), dashboardState)
}

// A session an administrator reaps leaves every dashboard's list at once
// (session.changed); the reap asks first and says what it did; the admin
// page counts a tab as one viewer, its sockets apart.
func TestSessionListFollowsAdminReap(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	dash := b.newTab(t, "dashboard")
	one := openDashboard(t, d, dash)
	dash.Do("click New", chromedp.Click(chromedp.CSS(byTestID("new-session"))))
	dash.mustWaitJS(10*time.Second, "a second session is current",
		fmt.Sprintf(`(s => s && s !== %s)(window.dashgate.currentSession())`, js(one)), dashboardState)
	two := currentSession(t, dash)
	liveItem := fmt.Sprintf(`[data-testid="session-list"] [data-testid="session-item"][data-session-id=%s]`, js(one))
	dash.mustWaitJS(10*time.Second, "session one listed, detached", exists(liveItem), dashboardState)

	admin := b.newTab(t, "admin")
	admin.Do("open the admin page", chromedp.Navigate(d.LoginURL("/admin")))
	admin.mustWaitJS(10*time.Second, "both sessions on the admin page, two viewed by one tab on two sockets",
		adminLoaded+" && "+exists(sessionRow(one))+" && "+
			fmt.Sprintf(`document.querySelector(%s)?.textContent === '1' && document.querySelector(%s)?.textContent === '2'`,
				js(sessionRow(two)+` [data-testid="session-viewers"]`), js(sessionRow(two)+` [data-testid="session-sockets"]`)),
		adminState)

	// Cancel first: nothing happens.
	admin.Do("click reap all detached", chromedp.Click(chromedp.CSS(byTestID("reap-detached"))))
	admin.mustWaitJS(5*time.Second, "the question", `document.querySelector('[data-testid="confirm-dialog"]')?.open === true`, adminState)
	admin.Do("cancel", chromedp.Click(chromedp.CSS(byTestID("confirm-no"))))
	admin.mustWaitJS(5*time.Second, "cancelled, said so",
		`document.querySelector('[data-testid="admin-result"]')?.dataset.state === 'cancelled'`, adminState)
	if _, ok := d.Session(one); !ok {
		t.Fatal("cancelling the question reaped session one")
	}

	q := confirmReap(t, admin, "reap all detached", byTestID("reap-detached"))
	if !strings.Contains(q, "detached") {
		t.Errorf("the question reads %q", q)
	}
	admin.mustWaitJS(10*time.Second, "the result says one session was reaped, with the logged reason",
		`(r => r && r.dataset.state === 'ok' && r.textContent.includes('Reaped 1 detached session') && r.textContent.includes('end_reason=admin_reap'))(document.querySelector('[data-testid="admin-result"]'))`,
		adminState)

	// The dashboard, never reloaded, lists it no more among the live ones.
	dash.mustWaitJS(10*time.Second, "the reaped session left the dashboard's live list",
		"!"+exists(liveItem)+" && "+exists(fmt.Sprintf(`[data-testid="closed-session"][data-session-id=%s]`, js(one))), dashboardState)
	if got := currentSession(t, dash); got != two {
		t.Errorf("the current session is %s, want %s", got, two)
	}
}

// A terminal an administrator reaps says so, keeps its scrollback, and
// offers a new one, which starts below it.
func TestTerminalEndedByAdministratorKeepsScrollback(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	sid := openDashboard(t, d, tb)

	typeInTerminal(t, tb, "echo before-$((6*7))")
	if _, err := waitTerminalOutput(t, tb, "echo before-$((6*7))", exactly("before-42"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	pty, ok := d.Worker(sid, "pty")
	if !ok {
		t.Fatalf("no terminal for %s: %+v", sid, d.Workers())
	}
	admin := b.newTab(t, "admin")
	admin.Do("open the admin page", chromedp.Navigate(d.LoginURL("/admin")))
	admin.mustWaitJS(10*time.Second, "the terminal listed", adminLoaded+" && "+exists(workerRow(pty.PID)), adminState)
	if q, want := confirmReap(t, admin, "reap the terminal", workerRow(pty.PID)+` [data-testid="reap-worker"]`),
		fmt.Sprintf("Reap terminal %d? Its whole process tree ends; its session stays.", pty.PID); q != want {
		t.Errorf("the question reads %q, want %q", q, want)
	}
	admin.mustWaitJS(10*time.Second, "the result names the logged reason",
		`document.querySelector('[data-testid="admin-result"]')?.textContent.includes('reason=admin_reap')`, adminState)

	tb.mustWaitJS(10*time.Second, "the terminal says an administrator ended it and offers a new one",
		visible(byTestID("terminal-status"))+` && document.querySelector('[data-testid="terminal-status-text"]').textContent.includes('administrator') && `+visible(byTestID("terminal-restart")),
		dashboardState)
	if text := mustEval[string](tb, `window.dashgate.terminalText()`); !strings.Contains(text, "before-42") {
		t.Fatalf("the old scrollback is gone:\n%s", text)
	}
	tb.Do("click Start a new terminal", chromedp.Click(chromedp.CSS(byTestID("terminal-restart"))))
	tb.mustWaitJS(10*time.Second, "a new terminal runs", `window.dashgate.ptySocketState() === 'open'`, dashboardState)
	typeInTerminal(t, tb, "echo after-$((6*7))")
	if _, err := waitTerminalOutput(t, tb, "echo after-$((6*7))", exactly("after-42"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if text := mustEval[string](tb, `window.dashgate.terminalText()`); !strings.Contains(text, "before-42") {
		t.Errorf("the old scrollback went when the new terminal started:\n%s", text)
	}
	if np, ok := d.Worker(sid, "pty"); !ok || np.PID == pty.PID {
		t.Errorf("no new terminal program: %+v", np)
	}
}

// A terminal says "starting…" until its first byte (a shell with a slow rc
// file), and says so when it cannot start at all.
func TestTerminalStartingAndFailure(t *testing.T) {
	t.Run("slow start", func(t *testing.T) {
		dir := t.TempDir()
		fifo := dir + "/go"
		if err := mkfifo(fifo); err != nil {
			t.Fatal(err)
		}
		// The shell waits for the test before it prints anything.
		shell := writeScript(t, dir+"/slow-shell", "read -r _ < "+fifo+"\nexec /bin/bash --noprofile --norc\n")
		d := startDashgate(t, "--pty-cmd", shell)
		b := newBrowser(t)
		tb := b.newTab(t, "dashboard")
		tb.Do("open the dashboard", chromedp.Navigate(d.LoginURL("/")))
		tb.mustWaitJS(15*time.Second, "no session open", noSessionShown, dashboardState)
		startSession(tb)
		tb.mustWaitJS(15*time.Second, "the terminal says it is starting",
			`window.dashgate?.ptySocketState() === 'open' && `+visible(byTestID("terminal-status"))+
				` && document.querySelector('[data-testid="terminal-status"]').dataset.state === 'starting'`, dashboardState)
		release(t, fifo)
		tb.mustWaitJS(15*time.Second, "the shell's prompt, and the status line gone",
			`window.dashgate.terminalText().trim() !== '' && !`+visible(byTestID("terminal-status")), dashboardState)
	})
	t.Run("spawn fails", func(t *testing.T) {
		// A shell that is there at start and gone when the terminal starts.
		shell := writeScript(t, t.TempDir()+"/gone-shell", "exec /bin/bash --noprofile --norc\n")
		d := startDashgate(t, "--pty-cmd", shell)
		if err := os.Remove(shell); err != nil {
			t.Fatal(err)
		}
		d.allowErrors = []string{"internal error"} // the terminal could not start: logged once per attempt
		b := newBrowser(t)
		tb := b.newTab(t, "dashboard")
		tb.Do("open the dashboard", chromedp.Navigate(d.LoginURL("/")))
		tb.mustWaitJS(15*time.Second, "no session open", noSessionShown, dashboardState)
		startSession(tb)
		tb.mustWaitJS(15*time.Second, "the terminal says it could not start",
			visible(byTestID("terminal-status"))+` && document.querySelector('[data-testid="terminal-status"]').dataset.state === 'error' && document.querySelector('[data-testid="terminal-status-text"]').textContent.includes('could not start')`,
			dashboardState)
	})
	t.Run("at capacity", func(t *testing.T) {
		// One child at a time: the first session's terminal, parked when
		// the page moves to a second session, holds it.
		d := startDashgate(t, "--max-workers", "1", "--pty-spare=false")
		b := newBrowser(t)
		tb := b.newTab(t, "dashboard")
		tb.Do("open the dashboard", chromedp.Navigate(d.LoginURL("/")))
		waitDashboard(t, tb)
		first := currentSession(t, tb)
		tb.mustWaitJS(15*time.Second, "the first terminal's prompt", `window.dashgate.terminalText().trim() !== ''`, dashboardState)
		startSession(tb)
		tb.mustWaitJS(15*time.Second, "a second session", `(window.dashgate.currentSession() || '') !== `+js(first), dashboardState)
		tb.mustWaitJS(20*time.Second, "the terminal says which cap it met, and retries",
			visible(byTestID("terminal-status"))+` && document.querySelector('[data-testid="terminal-status"]').dataset.state === 'error' && document.querySelector('[data-testid="terminal-status-text"]').textContent === 'The terminal could not start: worker capacity reached: --max-workers (1); retrying…'`,
			dashboardState)
	})
}

type box struct {
	X, Y, W, H float64
}

func rect(tb *tab, sel string) box {
	tb.t.Helper()
	return mustEval[box](tb, fmt.Sprintf(`(r => ({x: r.x, y: r.y, w: r.width, h: r.height}))(document.querySelector(%s).getBoundingClientRect())`, js(sel)))
}

// The dashboard fits small screens: at 900x600 the chat is tall enough to
// read, the divider between chat and terminal moves and is remembered, the
// sidebar collapses; at 420 px (a phone) the chat takes the width and tabs
// switch between chat and terminal.
func TestSmallScreens(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	viewport := func(w, h int64) {
		tb.t.Helper()
		if _, err := chromedp.Call(tb.ctx, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{
			Width: w, Height: h, DeviceScaleFactor: 1,
		}); err != nil {
			t.Fatalf("emulation.setDeviceMetricsOverride: %v", err)
		}
		tb.mustWaitJS(5*time.Second, "the window is resized", fmt.Sprintf(`innerWidth === %d && innerHeight === %d`, w, h), "")
	}
	viewport(900, 600)
	openDashboard(t, d, tb)
	chatLog := byTestID("chat-log")
	if h := rect(tb, chatLog).H; h < 240 {
		t.Errorf("at 900x600 the chat log is %.0f px tall, want at least 240", h)
	}

	// Drag the divider down: the chat grows; a reload keeps it.
	div := rect(tb, byTestID("divider"))
	before := rect(tb, chatLog).H
	x, y := div.X+div.W/2, div.Y+div.H/2
	tb.Do("drag the divider 80 px down",
		chromedp.MouseEvent(chromedp.MousePressed, x, y, chromedp.ButtonLeft, chromedp.ClickCount(1)),
		chromedp.MouseEvent(chromedp.MouseMoved, x, y+40, chromedp.ButtonLeft),
		chromedp.MouseEvent(chromedp.MouseMoved, x, y+80, chromedp.ButtonLeft),
		chromedp.MouseEvent(chromedp.MouseReleased, x, y+80, chromedp.ButtonLeft, chromedp.ClickCount(1)),
	)
	grown := rect(tb, chatLog).H
	if grown < before+60 {
		t.Errorf("after dragging the divider 80 px down the chat log is %.0f px tall, was %.0f", grown, before)
	}
	tb.Do("reload", chromedp.Reload())
	waitDashboard(t, tb)
	if h := rect(tb, chatLog).H; h < grown-5 || h > grown+5 {
		t.Errorf("after a reload the chat log is %.0f px tall, want the dragged %.0f", h, grown)
	}

	// Collapse the sidebar: the chat takes its width.
	wide := rect(tb, chatLog).W
	tb.Do("collapse the sidebar", chromedp.Click(chromedp.CSS(byTestID("sidebar-toggle"))))
	tb.mustWaitJS(5*time.Second, "the sessions pane is hidden", "!"+visible(byTestID("sessions-pane")), dashboardState)
	if w := rect(tb, chatLog).W; w < wide+150 {
		t.Errorf("with the sidebar collapsed the chat is %.0f px wide, was %.0f", w, wide)
	}
	tb.Do("open the sidebar again", chromedp.Click(chromedp.CSS(byTestID("sidebar-toggle"))))
	tb.mustWaitJS(5*time.Second, "the sessions pane is back", visible(byTestID("sessions-pane")), dashboardState)

	// A phone.
	viewport(420, 800)
	tb.mustWaitJS(5*time.Second, "the sidebar is out of the way and the tabs show",
		"!"+visible(byTestID("sessions-pane"))+" && "+visible(byTestID("tab-chat"))+" && "+visible(byTestID("tab-terminal")), dashboardState)
	if w := rect(tb, chatLog).W; w < 380 {
		t.Errorf("at 420 px the chat log is %.0f px wide, want nearly all of it", w)
	}
	if h := rect(tb, chatLog).H; h < 400 {
		t.Errorf("at 420x800 the chat log is %.0f px tall, want most of the height", h)
	}
	if visibleNow := mustEval[bool](tb, visible(byTestID("terminal"))); visibleNow {
		t.Errorf("on a phone the terminal shows beside the chat")
	}
	tb.Do("tap the Terminal tab", chromedp.Click(chromedp.CSS(byTestID("tab-terminal"))))
	tb.mustWaitJS(5*time.Second, "the terminal shows, the chat not",
		visible(byTestID("terminal"))+" && !"+visible(chatLog), dashboardState)
	if w := rect(tb, byTestID("terminal")).W; w < 380 {
		t.Errorf("on a phone the terminal is %.0f px wide", w)
	}
	typeInTerminal(t, tb, "echo phone-$((6*7))")
	if _, err := waitTerminalOutput(t, tb, "echo phone-$((6*7))", exactly("phone-42"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	tb.Do("open the sessions", chromedp.Click(chromedp.CSS(byTestID("sidebar-toggle"))))
	tb.mustWaitJS(5*time.Second, "the sessions open over the page", visible(byTestID("sessions-pane")), dashboardState)
	tb.Do("tap the Chat tab", chromedp.Click(chromedp.CSS(byTestID("tab-chat"))))
	tb.mustWaitJS(5*time.Second, "the chat shows again", visible(chatLog), dashboardState)
}

// The login and "not found" pages look like the app, and 404 links home.
func TestLoginAndNotFoundPages(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "pages")

	styled := `(() => {
		const bg = getComputedStyle(document.body).backgroundColor;
		const card = document.querySelector('.card-page');
		return bg === 'rgb(20, 22, 27)' && !!card && getComputedStyle(card).borderTopStyle === 'solid';
	})()`
	tb.Do("open the dashboard without a token", chromedp.Navigate(d.URL("/")))
	tb.mustWaitJS(10*time.Second, "the login page, styled", exists(byTestID("login"))+" && "+styled, "document.documentElement.outerHTML")

	tb.Do("open a page that does not exist", chromedp.Navigate(d.URL("/no/such/page")))
	tb.mustWaitJS(10*time.Second, "the 404 page, styled", exists(byTestID("not-found"))+" && "+styled, "document.documentElement.outerHTML")
	tb.Do("follow its link home", chromedp.Click(chromedp.CSS(byTestID("home-link"))))
	tb.mustWaitJS(10*time.Second, "back at the dashboard's address (its login, without a token)",
		fmt.Sprintf(`location.href === %s && !!document.querySelector('[data-testid="login"]')`, js(d.URL("/"))), "location.href")

	// Logged in, a wrong address is the same page, and home is the dashboard.
	tb.Do("log in", chromedp.Navigate(d.LoginURL("/")))
	waitDashboard(t, tb)
	tb.Do("open a page that does not exist", chromedp.Navigate(d.URL("/nope")))
	tb.mustWaitJS(10*time.Second, "the 404 page", exists(byTestID("not-found"))+" && "+styled, "")
	tb.Do("follow its link home", chromedp.Click(chromedp.CSS(byTestID("home-link"))))
	waitDashboard(t, tb)
}

// The admin page says when a table is empty.
func TestAdminEmptyStates(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	admin := b.newTab(t, "admin")
	admin.Do("open the admin page", chromedp.Navigate(d.LoginURL("/admin")))
	admin.mustWaitJS(10*time.Second, "every table says it is empty",
		adminLoaded+" && "+visible(byTestID("sessions-empty"))+" && "+visible(byTestID("workers-empty"))+" && "+visible(byTestID("unowned-empty")),
		adminState)
}

// The Closed list says why and when in words, not raw reasons or a
// clipped date; search marks the words it found.
func TestClosedListAndSearchReadable(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	one := openDashboard(t, d, tb)
	const word = "zebrafinch"
	sendChat(t, tb, "tell me about the "+word)
	waitAssistant(t, tb, "(echo agent) tell me about the "+word, 1)
	tb.Do("close the session", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-testid="session-item"][data-session-id=%s] [data-testid="session-close"]`, js(one)))))
	closed := fmt.Sprintf(`[data-testid="closed-session"][data-session-id=%s]`, js(one))
	tb.mustWaitJS(10*time.Second, "the session is under Closed", exists(closed), dashboardState)
	tb.Do("open the Closed section", chromedp.Click(chromedp.CSS(`[data-testid="closed-sessions"] > summary`)))
	tb.Do("closed session visible", chromedp.WaitVisible(chromedp.CSS(closed)))

	type row struct {
		Reason  string `json:"reason"`
		When    string `json:"when"`
		Clipped bool   `json:"clipped"`
	}
	r := mustEval[row](tb, fmt.Sprintf(`(li => {
		const w = li.querySelector('[data-testid="closed-when"]');
		const info = w.parentElement;
		const wr = w.getBoundingClientRect(), ir = info.getBoundingClientRect(), lr = li.getBoundingClientRect();
		return {
			reason: li.querySelector('[data-testid="closed-reason"]').textContent,
			when: w.textContent,
			clipped: w.scrollWidth > w.clientWidth + 1 || wr.right > ir.right + 1 || wr.right > lr.right + 1 || info.scrollWidth > info.clientWidth + 1,
		};
	})(document.querySelector(%s))`, js(closed)))
	if r.Reason != "closed" || strings.Contains(r.Reason, "_") {
		t.Errorf("the closed session's reason reads %q, want words (\"closed\")", r.Reason)
	}
	if r.When == "" || r.Clipped {
		t.Errorf("the closed session's date reads %q, clipped: %v", r.When, r.Clipped)
	}

	tb.Do("search "+word, chromedp.SendKeys(chromedp.CSS(byTestID("search-input")), word+"\r"))
	tb.mustWaitJS(10*time.Second, "a hit with the word marked",
		fmt.Sprintf(`[...document.querySelectorAll('[data-testid="search-hit"] mark[data-testid="search-mark"]')].some(m => m.textContent.toLowerCase() === %s)`, js(word)),
		dashboardState)
}

// With a model server, the picker lists the default model once, and the
// input invites a question to that model.
func TestModelPickerAndAgentPlaceholder(t *testing.T) {
	m := newModelServer(t)
	d := startAgent(t, m, t.TempDir())
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)
	tb.mustWaitJS(10*time.Second, "the models are listed", `document.querySelector('[data-testid="model-picker"]').options.length > 1`, dashboardState)
	labels := mustEval[[]string](tb, `[...document.querySelector('[data-testid="model-picker"]').options].map(o => o.textContent)`)
	n := 0
	for _, l := range labels {
		if strings.Contains(l, "fake-1") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the picker names the default model fake-1 %d times: %q", n, labels)
	}
	if p := mustEval[string](tb, `document.querySelector('[data-testid="chat-input"]').placeholder`); !strings.Contains(p, "fake-1") {
		t.Errorf("the input's placeholder reads %q: want it to invite a question to the model", p)
	}
}

func mkfifo(path string) error { return unix.Mkfifo(path, 0o600) }

// writeScript writes an executable /bin/sh script and returns its path.
func writeScript(t *testing.T, path, body string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// release writes a line into the fifo a program waits on (its open for
// reading returns once the test opens it for writing), within 10 s.
func release(t *testing.T, fifo string) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err == nil {
			_, err = f.Write([]byte("go\n"))
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("release %s: %v", fifo, err)
		}
	case <-time.After(10 * time.Second):
		// Unblock the goroutine: a reader that never came.
		if f, err := os.OpenFile(fifo, os.O_RDONLY|unix.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		t.Fatalf("release %s: nobody read it within 10s", fifo)
	}
}

// Lists are updated in place: the dashboard's session list when another
// socket adds a session, and the admin page at its refresh, keep the node
// of a button a person is about to click or holds the focus on (it stays
// in the page, focused), instead of rebuilding every row.
func TestListsKeepTheirNodes(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	dash := b.newTab(t, "dashboard")
	openDashboard(t, d, dash)
	other := openChat(t, "other", d.WSURL("ws/chat"), bearer())
	two := other.createSession("two")
	resume := fmt.Sprintf(`[data-testid="session-item"][data-session-id=%s] [data-testid="session-resume"]`, js(two))
	dash.mustWaitJS(10*time.Second, "session two listed", exists(resume), dashboardState)
	dash.mustWaitJS(5*time.Second, "its Resume button focused",
		fmt.Sprintf(`(b => (window.held = b, b.focus(), document.activeElement === b))(document.querySelector(%s))`, js(resume)), dashboardState)
	three := other.createSession("three")
	dash.mustWaitJS(10*time.Second, "session three listed",
		exists(fmt.Sprintf(`[data-testid="session-item"][data-session-id=%s]`, js(three))), dashboardState)
	if ok := mustEval[bool](dash, `document.contains(window.held) && document.activeElement === window.held`); !ok {
		t.Error("the session list was rebuilt: the focused Resume button of session two left the page")
	}

	admin := b.newTab(t, "admin")
	admin.Do("open the admin page", chromedp.Navigate(d.LoginURL("/admin")))
	reap := sessionRow(two) + ` [data-testid="reap-session"]`
	admin.mustWaitJS(10*time.Second, "session two's reap button focused", adminLoaded+" && "+
		fmt.Sprintf(`(b => (window.held = b, window.at = document.querySelector('[data-testid="admin-body"]').dataset.generatedAt, b.focus(), document.activeElement === b))(document.querySelector(%s))`, js(reap)), adminState)
	admin.mustWaitJS(10*time.Second, "a refresh", `document.querySelector('[data-testid="admin-body"]').dataset.generatedAt !== window.at`, adminState)
	if ok := mustEval[bool](admin, `document.contains(window.held) && document.activeElement === window.held`); !ok {
		t.Error("the admin refresh rebuilt the page: the focused reap button left it")
	}
}

// Two tabs of one session share its terminal: each sees what the other
// typed, live, and says it is shared. "Take over" in one closes it in the
// other, which says so; typing there takes it back, and what was typed goes
// into it: the key that takes it back is not lost.
func TestTerminalSharedAndTakenBack(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	one := b.newTab(t, "one")
	sid := openDashboard(t, d, one)
	typeInTerminal(t, one, "echo first-$((6*7))")
	if _, err := waitTerminalOutput(t, one, "echo first-$((6*7))", exactly("first-42"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	two := b.newTab(t, "two")
	two.Do("open the dashboard", chromedp.Navigate(d.URL("/")))
	waitDashboard(t, two)
	if got := currentSession(t, two); got != sid {
		t.Fatalf("the second tab shows session %s, want %s", got, sid)
	}
	shared := `(e => e && !e.hidden && e.textContent.includes('Shared with 1 other tab'))(document.querySelector('[data-testid="terminal-shared"]'))`
	for _, tb := range []*tab{one, two} {
		tb.mustWaitJS(10*time.Second, "the tab says the terminal is shared", shared+` && window.dashgate.ptySocketState() === 'open'`, dashboardState)
	}
	typeInTerminal(t, two, "echo from-two-$((6*7))")
	if out, err := waitTerminalOutput(t, one, "echo from-two-$((6*7))", exactly("from-two-42"), 10*time.Second); err != nil {
		t.Fatalf("tab one does not see what tab two typed: %v\n%s", err, out)
	}
	typeInTerminal(t, one, "echo from-one-$((6*7))")
	if out, err := waitTerminalOutput(t, two, "echo from-one-$((6*7))", exactly("from-one-42"), 10*time.Second); err != nil {
		t.Fatalf("tab two does not see what tab one typed: %v\n%s", err, out)
	}

	two.Do("take the terminal over", chromedp.Click(chromedp.CSS(`[data-testid="terminal-takeover"]`)))
	one.mustWaitJS(10*time.Second, "tab one says its terminal was taken over",
		`document.querySelector('[data-testid="terminal-status-text"]')?.textContent.includes('Another tab took this terminal over') && window.dashgate.ptySocketState() !== 'open'`, dashboardState)
	two.mustWaitJS(10*time.Second, "tab two no longer says it is shared",
		`document.querySelector('[data-testid="terminal-shared"]').hidden && window.dashgate.ptySocketState() === 'open'`, dashboardState)
	typeInTerminal(t, one, "echo takenback-$((6*7))")
	if out, err := waitTerminalOutput(t, one, "echo takenback-$((6*7))", exactly("takenback-42"), 10*time.Second); err != nil {
		t.Fatalf("typing in the taken-over terminal: %v\n%s", err, out)
	}
	two.mustWaitJS(10*time.Second, "tab two was taken over in turn",
		`document.querySelector('[data-testid="terminal-status-text"]')?.textContent.includes('Another tab took this terminal over')`, dashboardState)
}
