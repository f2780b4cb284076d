package e2e_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// Case 1: opening /?token=T sets the instance's login cookie
// (dashgate_login_<instance>, a signed user id, never the token; HttpOnly,
// SameSite=Strict), redirects to the URL without the token, and the
// dashboard works on the cookie alone.
func TestLoginSetsHttpOnlyCookieAndDropsTokenFromURL(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")

	tb.Do("open the login URL", chromedp.Navigate(d.LoginURL("/")))

	loc, err := chromedp.Run(tb.ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if loc != d.URL("/") {
		t.Errorf("after login the URL is %q, want %q (no token)", loc, d.URL("/"))
	}
	hist, err := chromedp.Run(tb.ctx, chromedp.NavigationEntries())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range hist.Entries {
		if strings.Contains(e.URL, testToken) {
			t.Errorf("the token is in the browser history: %q", e.URL)
		}
	}

	res, err := chromedp.Call(tb.ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{d.Base}})
	if err != nil {
		t.Fatalf("network.getCookies: %v", err)
	}
	var cookie *network.Cookie
	for _, c := range res.Cookies {
		if strings.HasPrefix(c.Name, "dashgate_login_") {
			cookie = c
		}
	}
	if cookie == nil {
		t.Errorf("no dashgate_login_* cookie for %s; cookies: %+v", d.Base, res.Cookies)
	} else {
		if strings.Contains(cookie.Value, testToken) {
			t.Errorf("login cookie %s = %q holds the token", cookie.Name, cookie.Value)
		}
		if !cookie.HTTPOnly {
			t.Errorf("%s is not HttpOnly", cookie.Name)
		}
		if cookie.SameSite != network.CookieSameSiteStrict {
			t.Errorf("%s SameSite = %q, want Strict", cookie.Name, cookie.SameSite)
		}
		if cookie.Path != "/" {
			t.Errorf("%s Path = %q, want /", cookie.Name, cookie.Path)
		}
	}
	if c := mustEval[string](tb, `document.cookie`); strings.Contains(c, "dashgate_login_") {
		t.Errorf("page script can read the token cookie: document.cookie = %q", c)
	}

	// The dashboard is visible and its sockets authenticate with the cookie.
	tb.Do("dashboard visible",
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="session-list"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="chat-log"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="chat-input"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="terminal"]`)),
	)
	waitDashboard(t, tb)
}

// Case 2: a slash command answers in the chat, and a prompt's reply is shown
// in pieces while it streams.
func TestChatSlashCommandAndStreamingReply(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	first := openDashboard(t, d, tb)

	tb.Do("click New", chromedp.Click(chromedp.CSS(`[data-testid="new-session"]`)))
	tb.mustWaitJS(10*time.Second, "new session current",
		fmt.Sprintf(`(s => s && s !== %s && !!document.querySelector('[data-testid="session-item"].current[data-session-id="' + s + '"]'))(window.dashgate.currentSession())`, js(first)),
		dashboardState)
	sid := currentSession(t, tb)

	sendChat(t, tb, "/echo hi")
	waitAssistant(t, tb, "hi", 1)
	if n := mustEval[int](tb, chatCount("user", "/echo hi")); n != 1 {
		t.Errorf("the user's line is shown %d times, want 1", n)
	}

	// Record, in the page, every text an assistant message has while it is
	// marked as streaming: a MutationObserver sees each delta's DOM change
	// as it happens, which a poll from the test could miss.
	mustEval[bool](tb, `(() => {
		const log = document.querySelector('[data-testid="chat-log"]');
		window.__e2eStreamed = [];
		new MutationObserver(() => {
			for (const m of log.querySelectorAll('[data-testid="chat-message"][data-role="assistant"][data-streaming="true"]')) {
				window.__e2eStreamed.push(m.textContent);
			}
		}).observe(log, { subtree: true, childList: true, characterData: true, attributes: true });
		return true;
	})()`)
	const prompt = "hello brave new world"
	const final = "(echo agent) hello brave new world"
	sendChat(t, tb, prompt)
	waitAssistant(t, tb, final, 1)

	var streamed []string
	for _, s := range mustEval[[]string](tb, `window.__e2eStreamed`) {
		if len(streamed) == 0 || streamed[len(streamed)-1] != s {
			streamed = append(streamed, s)
		}
	}
	pieces := 0
	for _, s := range streamed {
		if s == "" {
			continue
		}
		if !strings.HasPrefix(final, s) {
			t.Errorf("while streaming the reply read %q: not a prefix of the final %q", s, final)
			continue
		}
		if s != final { // the last delta completes the text before message.complete
			pieces++
		}
	}
	if pieces < 2 {
		t.Errorf("the reply was not shown in pieces before it completed: want at least 2 partial texts while streaming, saw %q", streamed)
	}
	if n := mustEval[int](tb, `document.querySelectorAll('[data-testid="chat-message"][data-streaming="true"]').length`); n != 0 {
		t.Errorf("%d messages still marked streaming after the reply completed", n)
	}
	if got := currentSession(t, tb); got != sid {
		t.Errorf("current session changed to %s while chatting in %s", got, sid)
	}
}

// Case 3: the terminal runs commands typed in the browser, and follows the
// browser's size.
func TestTerminalRunsCommandsAndFollowsResize(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)

	typeInTerminal(t, tb, "echo $((6*7))")
	if _, err := waitTerminalOutput(t, tb, "echo $((6*7))", exactly("42"), 10*time.Second); err != nil {
		t.Fatal(err)
	}

	type size struct {
		Cols int `json:"cols"`
		Rows int `json:"rows"`
	}
	termSize := func() size {
		return mustEval[size](tb, `({cols: window.dashgate.term.cols, rows: window.dashgate.term.rows})`)
	}
	before := termSize()
	if _, err := chromedp.Call(tb.ctx, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{
		Width: 900, Height: 560, DeviceScaleFactor: 1,
	}); err != nil {
		t.Fatalf("emulation.setDeviceMetricsOverride: %v", err)
	}
	tb.mustWaitJS(10*time.Second, "xterm refits to the new window size",
		fmt.Sprintf(`window.dashgate.term.cols !== %d || window.dashgate.term.rows !== %d`, before.Cols, before.Rows),
		`JSON.stringify({cols: window.dashgate.term.cols, rows: window.dashgate.term.rows, w: innerWidth, h: innerHeight})`)
	// Let pending refits (window resize, then ResizeObserver) land first.
	after := mustEval[size](tb, `new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() =>
		r({cols: window.dashgate.term.cols, rows: window.dashgate.term.rows}))))`)

	typeInTerminal(t, tb, "stty size")
	line, err := waitTerminalOutput(t, tb, "stty size", regexp.MustCompile(`^\d+ \d+$`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if now := termSize(); now != after {
		t.Fatalf("xterm changed size again while stty ran: %+v, then %+v", after, now)
	}
	if want := fmt.Sprintf("%d %d", after.Rows, after.Cols); line != want {
		t.Errorf("stty size after the resize prints %q, want %q (xterm's rows cols; before the resize xterm had %dx%d)",
			line, want, before.Rows, before.Cols)
	}
}

// Case 7: UTF-8 output of the terminal is decoded.
func TestTerminalShowsUTF8(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)

	const cmd = `printf 'caf\303\251 \342\200\224\n'`
	typeInTerminal(t, tb, cmd)
	if _, err := waitTerminalOutput(t, tb, cmd, exactly("café —"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// Case 4: closing the tab detaches the session, and its chat worker is
// closed (reason detach) within 1 s plus the grace.
func TestClosingTabClosesChatWorker(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	sid := openDashboard(t, d, tb)

	sendChat(t, tb, "/echo hi")
	waitAssistant(t, tb, "hi", 1)
	w, ok := d.Worker(sid, "chat")
	if !ok {
		t.Fatalf("no chat worker for session %s after /echo: %+v", sid, d.Workers())
	}
	start := d.startTime(w.PID)
	if !alive(w.PID, start) {
		t.Fatalf("chat worker %d is not running before the tab closes", w.PID)
	}

	promise := time.Second + workerGrace
	closedAt := time.Now()
	tb.Close()
	if !gone(w.PID, start, promise) {
		t.Fatalf("chat worker %d still there %v after the tab closed (promise: within %v)",
			w.PID, time.Since(closedAt).Round(time.Millisecond), promise)
	}
	t.Logf("chat worker %d gone %v after the tab closed", w.PID, time.Since(closedAt).Round(time.Millisecond))

	rec, ok := d.waitLog(5*time.Second, func(r logRecord) bool {
		pid, _ := r.Int("worker_pid")
		return r.Msg() == "worker closed" && pid == w.PID
	})
	if !ok {
		t.Fatalf("no \"worker closed\" record with worker_pid %d; log:\n%s", w.PID, d.logText())
	}
	if got := rec.Str("reason"); got != "detach" {
		t.Errorf("worker closed with reason %q, want detach: %s", got, rec)
	}
	if got := rec.Str("kind"); got != "chat" {
		t.Errorf("worker closed record has kind %q, want chat: %s", got, rec)
	}
	if got := rec.Str("sid"); got != sid {
		t.Errorf("worker closed record has sid %q, want %s: %s", got, sid, rec)
	}
	if rec.Str("level") != "INFO" {
		t.Errorf("worker closed record is not INFO: %s", rec)
	}
	// Detached, not closed: it can be resumed.
	if s, ok := d.Session(sid); !ok || s.State != "detached" {
		t.Errorf("session %s after the tab closed: %+v (listed: %v), want state detached", sid, s, ok)
	}
}

// Case 5: a reload resumes the session: listed, its history shown, and the
// same shell in the terminal.
func TestReloadResumesSessionHistoryAndShell(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	sid := openDashboard(t, d, tb)

	sendChat(t, tb, "/echo before-reload")
	waitAssistant(t, tb, "before-reload", 1)
	typeInTerminal(t, tb, "export DG_MARK=xyz; echo mark-set")
	if _, err := waitTerminalOutput(t, tb, "echo mark-set", exactly("mark-set"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	s, ok := d.Session(sid)
	if !ok || s.PTYPID == 0 {
		t.Fatalf("session %s has no terminal before the reload: %+v", sid, s)
	}
	ptyStart := d.startTime(s.PTYPID)

	tb.Do("reload", chromedp.Reload())
	waitDashboard(t, tb)

	if got := currentSession(t, tb); got != sid {
		t.Fatalf("after the reload the current session is %s, want the earlier %s", got, sid)
	}
	if n := mustEval[int](tb, fmt.Sprintf(`document.querySelectorAll('[data-testid="session-list"] [data-testid="session-item"][data-session-id=%s]').length`, js(sid))); n != 1 {
		t.Errorf("session %s listed %d times after the reload, want once", sid, n)
	}

	// The same shell: its variable survived, and its pid did not change.
	typeInTerminal(t, tb, "echo $DG_MARK")
	if _, err := waitTerminalOutput(t, tb, "echo $DG_MARK", exactly("xyz"), 10*time.Second); err != nil {
		t.Errorf("not the same shell after the reload: %v", err)
	}
	if now, ok := d.Session(sid); !ok || now.PTYPID != s.PTYPID || !alive(s.PTYPID, ptyStart) {
		t.Errorf("the terminal program changed across the reload: before pid %d, now %+v", s.PTYPID, now)
	}

	// The history: the earlier /echo and its output are in the chat log.
	if err := tb.waitJS(5*time.Second, "earlier /echo output in the chat log after the reload",
		chatCount("assistant", "before-reload")+` >= 1`, dashboardState); err != nil {
		t.Error(err)
	}
}
