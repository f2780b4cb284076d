package e2e_test

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/dashgate/dashgate/internal/testkit"
)

// Issue 42: several terminals per session, as tabs of the terminal pane.

// termTab is a tab of the terminal pane as window.dashgate.terminalTabs()
// gives it.
type termTab struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Active bool   `json:"active"`
	State  string `json:"state"` // its socket's
	Text   string `json:"text"`
}

func termTabs(tb *tab) []termTab { return mustEval[[]termTab](tb, `window.dashgate.terminalTabs()`) }

// tabsReady holds once the pane has n tabs, each socket open and each
// terminal showing something (its shell's prompt at least).
func tabsReady(n int) string {
	return fmt.Sprintf(`(ts => ts.length === %d && ts.every(t => t.state === 'open' && t.text.trim() !== ''))(window.dashgate.terminalTabs())`, n)
}

// tabHas holds once the text of tab id has a line that is exactly line.
func tabHas(id, line string) string {
	return fmt.Sprintf(`(t => !!t && t.text.split('\n').includes(%s))(window.dashgate.terminalTabs().find(t => t.id === %s))`, js(line), js(id))
}

const tabsState = `JSON.stringify(window.dashgate.terminalTabs().map(t => ({id: t.id, name: t.name, active: t.active, state: t.state, text: t.text.split('\n').slice(-4)})))`

// ptyPIDs are the pids of session sid's terminals, as the admin API lists
// its workers (sorted).
func ptyPIDs(d *dashgate, sid string) []int {
	var pids []int
	for _, w := range d.Workers() {
		if w.SessionID == sid && w.Kind == "pty" {
			pids = append(pids, w.PID)
		}
	}
	slices.Sort(pids)
	return pids
}

// TestTerminalTabs: the terminal pane's + opens a second terminal of the
// session in a tab of its own; a command typed in each shows in that one
// alone, and each runs as a pty child of its own. A rename sticks. After
// a reload both tabs come back, each with its output (resumed: the same
// two programs). The × of one (confirmed) ends its program; the other
// goes on. Closing the session reaps every terminal it had.
func TestTerminalTabs(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	sid := openDashboard(t, d, tb)
	tb.mustWaitJS(20*time.Second, "one tab, its terminal up", tabsReady(1), tabsState)
	first := termTabs(tb)[0].ID
	if first != "1" {
		t.Fatalf("the first tab is terminal %q, want the session's first, 1", first)
	}
	if visibleNow := mustEval[bool](tb, visible(byTestID("terminal-tab-close"))); visibleNow {
		t.Error("a lone tab offers to close it")
	}
	typeInTerminal(t, tb, "echo one-$((1+1))")
	tb.mustWaitJS(20*time.Second, "one-2 in the first tab", tabHas(first, "one-2"), tabsState)

	tb.Do("press +", chromedp.Click(chromedp.CSS(byTestID("terminal-tab-new"))))
	tb.mustWaitJS(20*time.Second, "two tabs, both terminals up", tabsReady(2), tabsState)
	tabs := termTabs(tb)
	second := tabs[1].ID
	if tabs[0].Active || !tabs[1].Active || second == first {
		t.Fatalf("after +: %+v, want the new tab shown", tabs)
	}
	typeInTerminal(t, tb, "echo two-$((2+2))")
	tb.mustWaitJS(20*time.Second, "two-4 in the second tab", tabHas(second, "two-4"), tabsState)
	tabs = termTabs(tb)
	if strings.Contains(tabs[0].Text, "two-4") || strings.Contains(tabs[1].Text, "one-2") {
		t.Fatalf("a tab shows the other's output: %s", mustEval[string](tb, tabsState))
	}
	pids := ptyPIDs(d, sid)
	if len(pids) != 2 {
		t.Fatalf("session %s has pty workers %v, want two", sid, pids)
	}
	starts := map[int]uint64{}
	for _, pid := range pids {
		starts[pid] = d.remember(pid)
	}

	// A hidden tab keeps its socket: output that comes while the first is
	// shown is in the second's when it is shown again.
	typeInTerminal(t, tb, "sleep 1; echo late-$((5+5))")
	tb.Do("show the first tab", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-terminal-id=%q] [data-testid="terminal-tab-select"]`, first))))
	tb.mustWaitJS(20*time.Second, "late-10 in the hidden second tab",
		`window.dashgate.terminalTabs()[0].active && `+tabHas(second, "late-10"), tabsState)
	if strings.Contains(termTabs(tb)[0].Text, "late-10") {
		t.Fatal("the second tab's output shows in the first")
	}
	// The search row searches the tab shown: late-10 is not in the first;
	// once the second is shown, the same search selects it there.
	searchStatus := `document.querySelector('[data-testid="terminal-search-status"]').textContent`
	tb.Do("open the search", chromedp.Click(chromedp.CSS(byTestID("terminal-search-open"))))
	tb.Do("search late-10", chromedp.SendKeys(chromedp.CSS(byTestID("terminal-search-input")), "late-10\r"))
	tb.mustWaitJS(10*time.Second, "no match in the first tab", searchStatus+` === 'no match'`, tabsState)
	tb.Do("show the second tab", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-terminal-id=%q] [data-testid="terminal-tab-select"]`, second))))
	tb.Do("search again", chromedp.SendKeys(chromedp.CSS(byTestID("terminal-search-input")), "\r"))
	tb.mustWaitJS(10*time.Second, "late-10 selected in the second tab",
		`window.dashgate.terminalTabs()[1].active && window.dashgate.term.getSelection() === 'late-10' && `+searchStatus+` === ''`, tabsState)
	tb.Do("close the search", chromedp.Click(chromedp.CSS(byTestID("terminal-search-close"))))

	// Rename the second tab: a double-click, a name, Enter.
	tb.Do("double-click the second tab",
		chromedp.DoubleClick(chromedp.CSS(fmt.Sprintf(`[data-testid="terminal-tab"][data-terminal-id=%q] [data-testid="terminal-tab-select"]`, second))))
	tb.mustWaitJS(10*time.Second, "the rename field", visible(byTestID("terminal-tab-rename")), tabsState)
	tb.Do("name it build", chromedp.SendKeys(chromedp.CSS(byTestID("terminal-tab-rename")), "build\r"))
	tb.mustWaitJS(10*time.Second, "the tab is called build", fmt.Sprintf(`window.dashgate.terminalTabs()[1].name === 'build' && document.querySelector('[data-terminal-id=%q] .terminal-tab-name').textContent === 'build'`, second), tabsState)

	// A name cleared gives the tab back its own number, not the next free
	// one (a new-user trial's "Terminal 1" became "Terminal 2").
	firstName := termTabs(tb)[0].Name
	tb.Do("double-click the first tab",
		chromedp.DoubleClick(chromedp.CSS(fmt.Sprintf(`[data-testid="terminal-tab"][data-terminal-id=%q] [data-testid="terminal-tab-select"]`, first))))
	tb.mustWaitJS(10*time.Second, "the rename field", visible(byTestID("terminal-tab-rename")), tabsState)
	tb.Do("clear its name", chromedp.Evaluate[chromedp.Void](`document.querySelector('[data-testid="terminal-tab-rename"]').value = ''`),
		chromedp.SendKeys(chromedp.CSS(byTestID("terminal-tab-rename")), "\r"))
	tb.mustWaitJS(10*time.Second, "the first tab keeps its own name", fmt.Sprintf(`!document.querySelector('[data-testid="terminal-tab-rename"]') && window.dashgate.terminalTabs()[0].name === %s`, js(firstName)), tabsState)
	tb.Do("show the second tab again",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-testid="terminal-tab"][data-terminal-id=%q] [data-testid="terminal-tab-select"]`, second))))
	tb.mustWaitJS(10*time.Second, "the second tab shown", `window.dashgate.terminalTabs()[1].active`, tabsState)

	// Reload: both tabs come back, each with its own output, over the same
	// two programs (resumed, not started again).
	tb.Do("reload", chromedp.Reload())
	waitDashboard(t, tb)
	tb.mustWaitJS(20*time.Second, "both tabs back with their output",
		tabsReady(2)+" && "+tabHas(first, "one-2")+" && "+tabHas(second, "two-4"), tabsState)
	tabs = termTabs(tb)
	if tabs[0].ID != first || tabs[1].ID != second || tabs[1].Name != "build" || !tabs[1].Active {
		t.Fatalf("after the reload: %s; want %s then %s (build, shown)", mustEval[string](tb, tabsState), first, second)
	}
	if strings.Contains(tabs[0].Text, "two-4") || strings.Contains(tabs[1].Text, "one-2") {
		t.Fatalf("after the reload a tab shows the other's output: %s", mustEval[string](tb, tabsState))
	}
	if got := ptyPIDs(d, sid); !slices.Equal(got, pids) {
		t.Fatalf("after the reload the session's terminals are %v, were %v: not resumed", got, pids)
	}
	// What is typed goes to the tab shown: the first, once picked.
	tb.Do("show the first tab", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-terminal-id=%q] [data-testid="terminal-tab-select"]`, first))))
	tb.mustWaitJS(10*time.Second, "the first tab shown", `window.dashgate.terminalTabs()[0].active`, tabsState)
	typeInTerminal(t, tb, "echo again-$((3+3))")
	tb.mustWaitJS(20*time.Second, "again-6 in the first tab", tabHas(first, "again-6"), tabsState)
	if strings.Contains(termTabs(tb)[1].Text, "again-6") {
		t.Fatal("a command typed in the first tab shows in the second")
	}

	// Close the second tab (confirmed): its program is ended and reaped.
	secondPID := terminalPID(t, tb, sid, second)
	if !slices.Contains(pids, secondPID) {
		t.Fatalf("session.list names pid %d for the second terminal, not one of %v", secondPID, pids)
	}
	mark := d.logMark()
	mustEval[bool](tb, `(() => { window.__e2eConfirms = []; window.confirm = (m) => { window.__e2eConfirms.push(m); return true; }; return true; })()`)
	tb.Do("close the second tab", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-terminal-id=%q] [data-testid="terminal-tab-close"]`, second))))
	tb.mustWaitJS(10*time.Second, "one tab left", `window.dashgate.terminalTabs().length === 1 && !document.querySelector('[data-testid="terminal-tab"][data-terminal-id=`+js(second)+`]')`, tabsState)
	if n := mustEval[int](tb, `window.__e2eConfirms.length`); n != 1 {
		t.Errorf("closing a tab asked %d times, want once", n)
	}
	if !gone(secondPID, starts[secondPID], 15*time.Second) {
		t.Fatalf("the closed tab's terminal (pid %d) is still there", secondPID)
	}
	if _, ok := d.waitLogSince(mark, 15*time.Second, func(r logRecord) bool {
		return r["msg"] == "worker closed" && r["worker_pid"] == float64(secondPID) && r["reason"] == "terminal_closed"
	}); !ok {
		t.Fatalf("no worker closed record with reason terminal_closed for pid %d:\n%s", secondPID, d.logText())
	}
	if !testkit.Until(15*time.Second, func() bool { got := ptyPIDs(d, sid); return len(got) == 1 && got[0] != secondPID }) {
		t.Fatalf("after closing the second tab the session's terminals are %v", ptyPIDs(d, sid))
	}
	typeInTerminal(t, tb, "echo still-$((4+4))")
	tb.mustWaitJS(20*time.Second, "the first tab goes on", tabHas(first, "still-8"), tabsState)

	// A third terminal, then the session closes: every terminal it had is reaped.
	tb.Do("press + again", chromedp.Click(chromedp.CSS(byTestID("terminal-tab-new"))))
	tb.mustWaitJS(20*time.Second, "two tabs again", tabsReady(2), tabsState)
	last := ptyPIDs(d, sid)
	if len(last) != 2 {
		t.Fatalf("session %s has pty workers %v, want two", sid, last)
	}
	for _, pid := range last {
		starts[pid] = d.remember(pid)
	}
	tb.Do("close the session", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`window.dashgate.call('session.close', {session_id: %s})`, js(sid))))
	for _, pid := range last {
		if !gone(pid, starts[pid], 15*time.Second) {
			t.Errorf("terminal pid %d outlived its session", pid)
		}
	}
	// The admin API lists a worker until its close is done, a moment after
	// its reap.
	if !testkit.Until(15*time.Second, func() bool { return len(ptyPIDs(d, sid)) == 0 }) {
		t.Fatalf("after the session closed the admin API lists its terminals %v", ptyPIDs(d, sid))
	}
}

// terminalPID is the pid of terminal tid of session sid, as session.list
// gives its terminals.
func terminalPID(t *testing.T, tb *tab, sid, tid string) int {
	t.Helper()
	pid := mustEval[int](tb, fmt.Sprintf(`window.dashgate.call('session.list', {}).then(r => ((r.sessions.find(s => s.session_id === %s)?.terminals ?? []).find(x => x.terminal === %s)?.pid) ?? 0)`, js(sid), js(tid)))
	if pid == 0 {
		t.Fatalf("session.list names no terminal %s of %s", tid, sid)
	}
	return pid
}

// TestTerminalTabsKeepTheirOrderAfterRestart: after a restart of dashgate
// a new-user trial's tabs came back as "build | Terminal 1 | Terminal 3":
// session.resume lists the terminals in the order they started, and after
// a restart that is the order the page's sockets came back in. The page
// keeps the order it had (and the tab it showed). Here the terminals are
// started again in the reverse order, with the page away, so that
// session.resume's order is not the page's.
func TestTerminalTabsKeepTheirOrderAfterRestart(t *testing.T) {
	state := t.TempDir()
	d := startDashgateOn(t, state, "")
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	// The second dashgate starts after the browser: close the browser
	// before the cleanups (see TestHistoryCompleteAfterReloadAndRestart).
	defer func() {
		if t.Failed() {
			tb.saveArtifacts()
		}
		tb.closed = true
		b.close()
	}()
	sid := openDashboard(t, d, tb)
	tb.mustWaitJS(20*time.Second, "one tab, its terminal up", tabsReady(1), tabsState)
	for n := 2; n <= 3; n++ {
		tb.Do("press +", chromedp.Click(chromedp.CSS(byTestID("terminal-tab-new"))))
		tb.mustWaitJS(20*time.Second, fmt.Sprintf("%d tabs, each terminal up", n), tabsReady(n), tabsState)
	}
	var ids []string
	for _, tab := range termTabs(tb) {
		ids = append(ids, tab.ID)
	}
	tb.Do("show the second tab", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-terminal-id=%q] [data-testid="terminal-tab-select"]`, ids[1]))))
	tb.mustWaitJS(10*time.Second, "the second tab shown", `window.dashgate.terminalTabs()[1].active`, tabsState)

	_, port, err := net.SplitHostPort(d.Addr)
	if err != nil {
		t.Fatal(err)
	}
	tb.Do("leave the page", chromedp.Navigate("about:blank"))
	stopForRestart(t, d)
	d = startDashgateOn(t, state, net.JoinHostPort("127.0.0.1", port))
	// The terminals start again last first, and park (keepalive=1).
	reversed := slices.Clone(ids)
	slices.Reverse(reversed)
	for _, id := range reversed {
		path := "ws/pty?keepalive=1&session_id=" + sid
		if id != "1" {
			path += "&terminal=" + id
		}
		openPTY(t, "terminal "+id, d.WSURL(path), bearer()).Close()
	}
	var listed struct {
		Sessions []struct {
			SessionID string `json:"session_id"`
			Terminals []struct {
				Terminal string `json:"terminal"`
			} `json:"terminals"`
		} `json:"sessions"`
	}
	openChat(t, "client", d.WSURL("ws/chat"), bearer()).mustCall("session.list", map[string]any{}, &listed)
	var order []string
	for _, s := range listed.Sessions {
		if s.SessionID == sid {
			for _, term := range s.Terminals {
				order = append(order, term.Terminal)
			}
		}
	}
	if !slices.Equal(order, reversed) {
		t.Fatalf("after the restart session.list has the terminals %v, want %v", order, reversed)
	}

	tb.Do("come back", chromedp.Navigate(d.LoginURL("/")))
	waitDashboard(t, tb)
	tb.mustWaitJS(20*time.Second, "three tabs back", tabsReady(3), tabsState)
	var got []string
	for _, tab := range termTabs(tb) {
		got = append(got, tab.ID)
	}
	if !slices.Equal(got, ids) || !termTabs(tb)[1].Active {
		t.Fatalf("after the restart the tabs are %s, want %v in that order, the second shown", mustEval[string](tb, tabsState), ids)
	}
}
