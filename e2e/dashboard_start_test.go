package e2e_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// A visit with no session to show creates none (issue 41: an empty
// "session 1" per visit piled up): the chat says how to start one and the
// terminal offers to; reloads create none either. The first prompt starts
// a session and is answered in it; closing the last session goes back to
// no session, not to a new empty one; the terminal's Start a session
// starts one with its shell.
func TestFirstVisitCreatesNoSession(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")

	noneOpen := func(what string) {
		t.Helper()
		tb.mustWaitJS(15*time.Second, what, noSessionShown+` && `+visible(byTestID("terminal-restart"))+
			` && document.querySelector('[data-testid="terminal-status-text"]').textContent.includes('No session is open')`+
			` && document.querySelectorAll('[data-testid="session-list"] [data-testid="session-item"]').length === 0`, dashboardState)
		if n := len(d.Sessions()); n != 0 {
			t.Fatalf("%s: dashgate holds %d live sessions, want none", what, n)
		}
		// One line says how to start, not two (a new-user trial saw the
		// empty log's "No messages yet" beside it).
		if c := mustEval[string](tb, `getComputedStyle(document.querySelector('[data-testid="chat-log"]'), '::before').content`); c != "none" && c != "normal" {
			t.Errorf("%s: the empty chat log says %s beside the no-session line", what, c)
		}
	}
	tb.Do("open the dashboard", chromedp.Navigate(d.LoginURL("/")))
	noneOpen("a first visit shows that no session is open")
	for i := range 2 {
		tb.Do("reload", chromedp.Reload())
		noneOpen(fmt.Sprintf("reload %d shows that no session is open", i+1))
	}

	sendChat(t, tb, "hello before any session")
	waitAssistant(t, tb, "(echo agent) hello before any session", 1)
	tb.mustWaitJS(15*time.Second, "the new session's dashboard ready", dashboardReady+` && !`+visible(byTestID("no-session")), dashboardState)
	sid := currentSession(t, tb)
	if s := d.Sessions(); len(s) != 1 || s[0].SessionID != sid {
		t.Fatalf("after the first prompt dashgate holds %+v, want the one session %s", s, sid)
	}

	tb.Do("close the session", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-testid="session-item"][data-session-id=%s] [data-testid="session-close"]`, js(sid)))))
	noneOpen("after the last session closed no session is open")

	tb.Do("start a session from the terminal", chromedp.Click(chromedp.CSS(byTestID("terminal-restart"))))
	tb.mustWaitJS(15*time.Second, "the started session's dashboard ready", dashboardReady, dashboardState)
	if s := d.Sessions(); len(s) != 1 || s[0].SessionID == sid {
		t.Fatalf("after Start a session dashgate holds %+v, want one new session", s)
	}
}
