package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// axeViolation is one serious or critical axe-core finding.
type axeViolation struct {
	ID     string   `json:"id"`
	Impact string   `json:"impact"`
	Help   string   `json:"help"`
	Nodes  []string `json:"nodes"`
}

// axeSource is the vendored axe-core (scripts/vendor-axe.sh; test only).
func axeSource(t *testing.T) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "e2e", "testdata", "axe", "axe.min.js"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// seriousViolations runs axe-core on the tab's page and returns its
// serious and critical violations.
func seriousViolations(t *testing.T, tb *tab, axe string) []axeViolation {
	t.Helper()
	if _, err := eval[bool](tb, axe+"\n;true"); err != nil {
		t.Fatalf("inject axe-core: %v", err)
	}
	return mustEval[[]axeViolation](tb, `axe.run(document, {resultTypes: ['violations']}).then(r => r.violations
		.filter(v => v.impact === 'serious' || v.impact === 'critical')
		.map(v => ({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 5).map(n => n.target.join(' '))})))`)
}

// The dashboard, login and admin pages have no serious or critical
// accessibility violations (axe-core), and every control of the dashboard
// is reachable with Tab, the terminal last (it keeps Tab for the shell).
func TestAccessibility(t *testing.T) {
	axe := axeSource(t)
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "pages")
	// axe-core is injected by the test, past the page's CSP (it is not
	// part of dashgate).
	if _, err := chromedp.Call(tb.ctx, page.SetBypassCSP, page.SetBypassCSPParams{Enabled: true}); err != nil {
		t.Fatal(err)
	}
	check := func(name string) {
		t.Helper()
		if v := seriousViolations(t, tb, axe); len(v) > 0 {
			t.Errorf("%s: %d serious or critical accessibility violations: %+v", name, len(v), v)
		}
	}

	tb.Do("open the login page", chromedp.Navigate(d.URL("/")))
	tb.mustWaitJS(10*time.Second, "the login page", exists(byTestID("login")), "")
	check("login page")

	openDashboard(t, d, tb)
	sendChat(t, tb, "/nosuchcommand")
	waitEntryCount(t, tb, "error", "", 1)
	sendChat(t, tb, "hello **world**")
	waitAssistant(t, tb, "(echo agent) hello world", 1)
	check("dashboard")

	// Keyboard: Tab from the top reaches every control, the terminal last.
	tb.Do("focus the top bar", chromedp.Evaluate[chromedp.Void](`(h => { h.tabIndex = -1; h.focus(); h.removeAttribute('tabindex'); })(document.querySelector('header'))`))
	var seen []string
	for i := 0; i < 40; i++ {
		tb.Do("Tab", chromedp.KeyEvent(kb.Tab))
		id := mustEval[string](tb, `(e => e ? (e.dataset.testid || (e.classList.contains('xterm-helper-textarea') ? 'terminal' : e.tagName.toLowerCase())) : '')(document.activeElement)`)
		seen = append(seen, id)
		if id == "terminal" {
			break
		}
	}
	for _, want := range []string{"sidebar-toggle", "new-session", "search-input", "session-close", "chat-input", "chat-send", "divider", "terminal"} {
		if !slices.Contains(seen, want) {
			t.Errorf("Tab never reaches %s; it went through %v", want, seen)
		}
	}

	tb.Do("open the admin page", chromedp.Navigate(d.LoginURL("/admin")))
	tb.mustWaitJS(10*time.Second, "the admin page", adminLoaded, "")
	check("admin page")
	tb.Do("open a missing page", chromedp.Navigate(d.URL("/missing")))
	tb.mustWaitJS(10*time.Second, "the 404 page", exists(byTestID("not-found")), "")
	check(fmt.Sprintf("404 page (%s)", d.URL("/missing")))
}
