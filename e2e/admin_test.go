package e2e_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// adminState describes the admin page for failure messages.
const adminState = `JSON.stringify({
	url: location.href,
	generated: document.querySelector('[data-testid="admin-body"]')?.dataset.generatedAt,
	sessions: [...document.querySelectorAll('[data-testid="session-row"]')].map(e => e.dataset.sessionId + ':' + e.dataset.state),
	workers: [...document.querySelectorAll('[data-testid="worker-row"]')].map(e => e.dataset.pid + ':' + e.dataset.sessionId),
})`

// adminLoaded holds once the whole body of the admin page is parsed (the
// workers table comes after the sessions table), so that a missing row is
// missing and not merely not parsed yet.
const adminLoaded = `!!document.querySelector('[data-testid="admin-body"] [data-testid="unowned-table"]')`

func sessionRow(sid string) string {
	return fmt.Sprintf(`tr[data-testid="session-row"][data-session-id=%s]`, js(sid))
}

func workerRow(pid int) string {
	return fmt.Sprintf(`tr[data-testid="worker-row"][data-pid="%d"]`, pid)
}

func exists(sel string) string { return fmt.Sprintf(`!!document.querySelector(%s)`, js(sel)) }

// confirmReap clicks the reap button sel, waits for the question and
// confirms it; it returns the question.
func confirmReap(t *testing.T, admin *tab, what, sel string) string {
	t.Helper()
	admin.Do(what+": click reap", chromedp.Click(chromedp.CSS(sel)))
	admin.mustWaitJS(5*time.Second, what+": the question is asked",
		`document.querySelector('[data-testid="confirm-dialog"]')?.open === true`, adminState)
	q := mustEval[string](admin, `document.querySelector('[data-testid="confirm-text"]').textContent`)
	admin.Do(what+": confirm", chromedp.Click(chromedp.CSS(`[data-testid="confirm-yes"]`)))
	return q
}

// Case 6: the admin page reaps a session (its row goes, its worker is gone)
// and a worker (its session stays and respawns a worker on the next call).
func TestAdminReapsSessionAndWorker(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	dash := b.newTab(t, "dashboard")

	// Session one, with a worker, viewed by the first tab; session two, with
	// a worker, made in a second tab (a tab that switches sessions lets go of
	// the one it left, so each tab keeps its own session alive).
	one := openDashboard(t, d, dash)
	sendChat(t, dash, "/echo one")
	waitAssistant(t, dash, "one", 1)
	dash2 := b.newTab(t, "dashboard 2")
	openDashboard(t, d, dash2)
	dash2.Do("click New", chromedp.Click(chromedp.CSS(`[data-testid="new-session"]`)))
	dash2.mustWaitJS(10*time.Second, "second session current",
		fmt.Sprintf(`(s => s && s !== %s)(window.dashgate.currentSession())`, js(one)), dashboardState)
	two := currentSession(t, dash2)
	sendChat(t, dash2, "/echo two")
	waitAssistant(t, dash2, "two", 1)
	w1, ok := d.Worker(one, "chat")
	if !ok {
		t.Fatalf("session one has no chat worker: %+v", d.Workers())
	}
	w2, ok := d.Worker(two, "chat")
	if !ok {
		t.Fatalf("session two has no chat worker: %+v", d.Workers())
	}
	s1, _ := d.Session(one)
	w1Start, w2Start, pty1Start := d.startTime(w1.PID), d.startTime(w2.PID), d.startTime(s1.PTYPID)

	admin := b.newTab(t, "admin")
	admin.Do("open the admin page", chromedp.Navigate(d.LoginURL("/admin")))
	admin.mustWaitJS(10*time.Second, "admin page lists both sessions and workers",
		adminLoaded+" && "+exists(sessionRow(one))+" && "+exists(sessionRow(two))+" && "+exists(workerRow(w1.PID))+" && "+exists(workerRow(w2.PID)),
		adminState)

	// Reap session one. The question names it as its row does (made in the
	// page from the row: the button carries none).
	title := mustEval[string](admin, fmt.Sprintf(`(c => c && !c.classList.contains('none') ? c.textContent : '')(document.querySelector(%s))`,
		js(sessionRow(one)+` [data-testid="session-title"]`)))
	name := one
	if title != "" {
		name = fmt.Sprintf("%q (%s)", title, one)
	}
	if q, want := confirmReap(t, admin, "reap session one", sessionRow(one)+` [data-testid="reap-session"]`),
		"Reap session "+name+"? Its worker and terminal end; the conversation is kept."; q != want {
		t.Errorf("the question reads %q, want %q", q, want)
	}
	admin.mustWaitJS(3*time.Second, "session one's row gone",
		adminLoaded+" && !"+exists(sessionRow(one))+" && "+exists(sessionRow(two)), adminState)
	if !gone(w1.PID, w1Start, time.Second+workerGrace) {
		t.Errorf("worker %d of the reaped session is still there", w1.PID)
	}
	if s1.PTYPID != 0 && !gone(s1.PTYPID, pty1Start, time.Second+workerGrace) {
		t.Errorf("terminal %d of the reaped session is still there", s1.PTYPID)
	}
	if _, ok := d.Session(one); ok {
		t.Errorf("reaped session %s is still listed by /admin/api/sessions", one)
	}
	if rec, ok := d.waitLog(5*time.Second, func(r logRecord) bool {
		return r.Msg() == "session closed" && r.Str("sid") == one
	}); !ok {
		t.Errorf("no \"session closed\" record for %s", one)
	} else if got := rec.Str("end_reason"); got != "admin_reap" {
		t.Errorf("session %s closed with end_reason %q, want admin_reap", one, got)
	}

	// Reap session two's worker: the session stays.
	admin.mustWaitJS(5*time.Second, "worker two listed", adminLoaded+" && "+exists(workerRow(w2.PID)), adminState)
	if q, want := confirmReap(t, admin, "reap worker two", workerRow(w2.PID)+` [data-testid="reap-worker"]`),
		fmt.Sprintf("Reap worker %d? Its whole process tree ends; its session stays.", w2.PID); q != want {
		t.Errorf("the question reads %q, want %q", q, want)
	}
	admin.mustWaitJS(3*time.Second, "worker two's row gone, session two's row kept",
		adminLoaded+" && !"+exists(workerRow(w2.PID))+" && "+exists(sessionRow(two)), adminState)
	if !gone(w2.PID, w2Start, time.Second+workerGrace) {
		t.Errorf("reaped worker %d is still there", w2.PID)
	}
	if s, ok := d.Session(two); !ok {
		t.Fatalf("session %s went away with its worker", two)
	} else if s.State != "attached" {
		t.Errorf("session %s is %s after its worker was reaped, want attached", two, s.State)
	}
	if rec, ok := d.waitLog(5*time.Second, func(r logRecord) bool {
		pid, _ := r.Int("worker_pid")
		return r.Msg() == "worker closed" && pid == w2.PID
	}); !ok {
		t.Errorf("no \"worker closed\" record for %d", w2.PID)
	} else if got := rec.Str("reason"); got != "admin_reap" {
		t.Errorf("worker %d closed with reason %q, want admin_reap", w2.PID, got)
	}

	// The next command in the dashboard works, in a new worker.
	sendChat(t, dash2, "/echo again")
	waitAssistant(t, dash2, "again", 1)
	if got := currentSession(t, dash2); got != two {
		t.Errorf("the dashboard moved to session %s, want %s", got, two)
	}
	w3, ok := d.Worker(two, "chat")
	switch {
	case !ok:
		t.Errorf("session two has no chat worker after /echo again: %+v", d.Workers())
	case w3.PID == w2.PID:
		t.Errorf("session two still has worker %d after it was reaped", w2.PID)
	}
}

// Switching sessions in the dashboard lets go of the one left behind: its
// worker is closed at once, the session stays resumable.
func TestSwitchingSessionsClosesTheLeftWorker(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	dash := b.newTab(t, "dashboard")
	one := openDashboard(t, d, dash)
	sendChat(t, dash, "/echo one")
	waitAssistant(t, dash, "one", 1)
	w1, ok := d.Worker(one, "chat")
	if !ok {
		t.Fatalf("session one has no chat worker: %+v", d.Workers())
	}
	w1Start := d.startTime(w1.PID)
	dash.Do("click New", chromedp.Click(chromedp.CSS(`[data-testid="new-session"]`)))
	dash.mustWaitJS(10*time.Second, "second session current",
		fmt.Sprintf(`(s => s && s !== %s)(window.dashgate.currentSession())`, js(one)), dashboardState)
	if !gone(w1.PID, w1Start, time.Second+workerGrace) {
		t.Fatalf("the left session's worker %d is still there", w1.PID)
	}
	if s, ok := d.Session(one); !ok || s.State != "detached" {
		t.Fatalf("the left session: %+v (listed %v), want detached", s, ok)
	}
}
