package e2e_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// phoneLayout measures the admin page at its viewport: the page's own
// width, each table's box (the nearest ancestor that scrolls it
// horizontally, or the table itself: a plot's legend, a table that fits)
// and each reap button, as laid out, with the page scrolled to its left
// edge.
const phoneLayout = `(() => {
	scrollTo(0, scrollY);
	const vw = document.documentElement.clientWidth;
	const out = {viewport: vw, page: document.documentElement.scrollWidth, tables: [], buttons: []};
	for (const t of document.querySelectorAll('table')) {
		let box = t.parentElement;
		while (box && box !== document.body && !/^(auto|scroll)$/.test(getComputedStyle(box).overflowX)) box = box.parentElement;
		const scrolls = !!box && box !== document.body;
		const r = (scrolls ? box : t).getBoundingClientRect();
		out.tables.push({id: t.dataset.testid, scrolls, left: r.left, right: r.right});
	}
	for (const b of document.querySelectorAll('button[data-testid^="reap"]')) {
		const r = b.getBoundingClientRect();
		out.buttons.push({id: b.dataset.testid, left: r.left, right: r.right});
	}
	return JSON.stringify(out);
})()`

// reachable scrolls each reap button into view vertically and reports
// those that are not the element under their own centre (hidden behind
// another, or off screen).
const reachable = `(() => {
	const bad = [];
	for (const b of document.querySelectorAll('button[data-testid^="reap"]')) {
		b.scrollIntoView({block: 'center', inline: 'nearest'});
		const r = b.getBoundingClientRect();
		const at = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
		if (!b.contains(at)) bad.push(b.dataset.testid + ' under ' + (at ? at.outerHTML.slice(0, 80) : 'nothing'));
	}
	scrollTo(0, 0);
	return JSON.stringify(bad);
})()`

type phoneBox struct {
	ID          string
	Scrolls     bool
	Left, Right float64
}

// TestAdminFitsAPhone (issue 27, defect 10): at a 390 px viewport the admin
// page is as wide as the viewport (it was 965 px), every table fits or
// scrolls inside its own box, and every reap button is on screen without
// scrolling sideways and can be clicked.
func TestAdminFitsAPhone(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	dash := b.newTab(t, "dashboard")
	sid := openDashboard(t, d, dash)
	sendChat(t, dash, "/echo a session with a worker, shown in every table")
	waitAssistant(t, dash, "a session with a worker, shown in every table", 1)
	w, ok := d.Worker(sid, "chat")
	if !ok {
		t.Fatalf("session %s has no chat worker: %+v", sid, d.Workers())
	}

	admin := b.newTab(t, "admin")
	admin.Do("a phone's viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulatePortrait, chromedp.EmulateMobile, chromedp.EmulateTouch))
	admin.Do("open the admin page", chromedp.Navigate(d.LoginURL("/admin")))
	admin.mustWaitJS(10*time.Second, "the session, its worker and its user listed",
		adminLoaded+" && "+exists(sessionRow(sid))+" && "+exists(workerRow(w.PID))+` && !!document.querySelector('[data-testid="user-row"]')`, adminState)

	var got struct {
		Viewport, Page float64
		Tables         []phoneBox
		Buttons        []phoneBox
	}
	if err := json.Unmarshal([]byte(mustEval[string](admin, phoneLayout)), &got); err != nil {
		t.Fatal(err)
	}
	if got.Viewport != 390 || got.Page > got.Viewport {
		t.Errorf("the page is %v px wide at a %v px viewport; want 390 and 390", got.Page, got.Viewport)
	}
	if len(got.Tables) < 4 {
		t.Errorf("%d tables measured; want the users, sessions, workers and unowned tables", len(got.Tables))
	}
	for _, tb := range got.Tables {
		if tb.Left < 0 || tb.Right > got.Viewport {
			t.Errorf("table %q (scrolls in its own box: %v) from %v to %v px; want it, or the box it scrolls in, inside 0..%v", tb.ID, tb.Scrolls, tb.Left, tb.Right, got.Viewport)
		}
	}
	want := map[string]bool{"reap-detached": false, "reap-session": false, "reap-worker": false, "reap-user": false}
	for _, bt := range got.Buttons {
		want[bt.ID] = true
		if bt.Left < 0 || bt.Right > got.Viewport {
			t.Errorf("button %s from %v to %v px: off a %v px screen", bt.ID, bt.Left, bt.Right, got.Viewport)
		}
	}
	for id, seen := range want {
		if !seen {
			t.Errorf("no %s button measured", id)
		}
	}
	if bad := mustEval[string](admin, reachable); bad != "[]" {
		t.Errorf("reap buttons not under their own centre: %s", bad)
	}

	// One word per thing (defect 12): the sessions table counts "tabs"
	// (the API's pages) and "sockets" (the API's viewers), each header
	// titled with what it counts and its API field; the tab here has a
	// chat and a terminal socket, so the two differ.
	admin.mustWaitJS(15*time.Second, "the tabs and sockets columns show the API's pages and viewers, 1 and 2",
		fmt.Sprintf(`(async () => {
	const api = (await (await fetch(document.body.dataset.basePath + 'admin/api/sessions')).json()).sessions.find(s => s.session_id === %[1]s);
	const heads = [...document.querySelectorAll('[data-testid="sessions-table"] thead th')].map(th => th.textContent.trim());
	const cells = document.querySelector(%[2]s)?.children;
	const cell = word => cells?.[heads.indexOf(word)]?.textContent;
	return api?.pages === 1 && api?.viewers === 2 && cell('tabs') === '1' && cell('sockets') === '2';
})()`, js(sid), js(sessionRow(sid))),
		`JSON.stringify([...document.querySelectorAll('[data-testid="sessions-table"] tr')].map(tr => tr.textContent))`)
	heads := mustEval[map[string]string](admin, `Object.fromEntries([...document.querySelectorAll('[data-testid="sessions-table"] thead th')].map(th => [th.textContent.trim(), th.title]))`)
	for word, field := range map[string]string{"tabs": "pages", "sockets": "viewers"} {
		if title, ok := heads[word]; !ok || !strings.HasPrefix(title, word+":") || !strings.Contains(title, field+" in the API") {
			t.Errorf("sessions table header %q titled %q (present %v); want a title saying what it counts, %q in the API", word, title, ok, field)
		}
	}
	if _, ok := heads["viewers"]; ok {
		t.Errorf("the sessions table still has a viewers column: %v", heads)
	}

	// The session's reap asks, in a dialog on screen; Cancel keeps it.
	admin.Do("click reap", chromedp.Click(chromedp.CSS(sessionRow(sid)+` [data-testid="reap-session"]`)))
	admin.mustWaitJS(5*time.Second, "the question, on screen",
		`(d => d?.open && d.getBoundingClientRect().left >= 0 && d.getBoundingClientRect().right <= document.documentElement.clientWidth)(document.querySelector('[data-testid="confirm-dialog"]'))`, adminState)
	admin.Do("cancel", chromedp.Click(chromedp.CSS(`[data-testid="confirm-no"]`)))
	admin.mustWaitJS(5*time.Second, "the dialog closed", `document.querySelector('[data-testid="confirm-dialog"]')?.open === false`, adminState)
	if _, ok := d.Session(sid); !ok {
		t.Errorf("session %s went away after Cancel", sid)
	}
}
