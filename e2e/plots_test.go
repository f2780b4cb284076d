package e2e_test

import (
	"bytes"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// The admin page plots the last minutes, sampled by the server: live
// sessions and workers, their RSS, and closes per minute by reason.
func TestAdminPlots(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	dash := b.newTab(t, "dashboard")
	sid := openDashboard(t, d, dash)
	sendChat(t, dash, "/echo plotted")
	waitAssistant(t, dash, "plotted", 1)

	admin := b.newTab(t, "admin")
	admin.Do("open the admin page", chromedp.Navigate(d.LoginURL("/admin")))
	const last = `JSON.parse(document.querySelector('[data-testid="plots"]').dataset.last || '{}')`
	admin.mustWaitJS(20*time.Second, "a sample with the session, its worker and terminal, and their RSS",
		fmt.Sprintf(`(s => s.sessions >= 1 && s.workers >= 2 && s.rss_bytes > 0)(%s)`, last),
		`JSON.stringify(document.querySelector('[data-testid="plots"]').dataset)`)
	for _, name := range []string{"sessions", "workers", "rss", "closes"} {
		admin.mustWaitJS(5*time.Second, "plot "+name+" drawn",
			fmt.Sprintf(`(c => !!c && c.width > 100 && c.height > 50)(document.querySelector('[data-testid="plot-%s"] canvas'))`, name), "")
	}
	if visibleNow := mustEval[bool](admin, visible(byTestID("plots-empty"))); visibleNow {
		t.Errorf("the plots still say there are no samples")
	}

	// A close shows in the closes plot, by its reason.
	dash.Do("close the session", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-testid="session-item"][data-session-id=%s] [data-testid="session-close"]`, js(sid)))))
	admin.mustWaitJS(20*time.Second, "the closes plot has a client_close series",
		`[...document.querySelectorAll('[data-testid="plot-closes"] .u-legend .u-label')].some(e => e.textContent === 'client_close')`,
		`document.querySelector('[data-testid="plot-closes"]').innerText`)
	// One close is one close in the last minute, not a rate extrapolated
	// from one sample.
	admin.mustWaitJS(20*time.Second, "the closes plot peaks at 1",
		`document.querySelector('[data-testid="plot-closes"]').dataset.max === '1'`,
		`document.querySelector('[data-testid="plot-closes"]').dataset.max`)
}

// TestAdminPlotsAllZeroAxis: a plot whose series is all zeros (no closes
// yet, no sessions) has a small fixed axis, 0 to 5, not uPlot's 0–100.
func TestAdminPlotsAllZeroAxis(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	admin := b.newTab(t, "admin")
	admin.Do("open the admin page", chromedp.Navigate(d.LoginURL("/admin")))
	admin.mustWaitJS(20*time.Second, "a sample plotted",
		`Number(document.querySelector('[data-testid="plots"]').dataset.samples) >= 1`, "")
	for _, name := range []string{"closes", "sessions"} {
		sel := fmt.Sprintf(`document.querySelector('[data-testid="plot-%s"]')`, name)
		admin.mustWaitJS(10*time.Second, "plot "+name+" drawn, all zero",
			fmt.Sprintf(`(e => e.dataset.max === '0' && !!e.dataset.yMax && !!e.querySelector('canvas'))(%s)`, sel),
			fmt.Sprintf(`JSON.stringify(%s.dataset)`, sel))
		if got := mustEval[string](admin, sel+`.dataset.yMax`); got != "5" {
			t.Errorf("the all-zero %s plot's axis goes up to %s, want 5", name, got)
		}
	}
}

// screenshotDir is where TestScreenshots writes when DASHGATE_SCREENSHOTS=1
// (README shows them); otherwise it only checks that they can be made.
const screenshotDir = "docs/screenshots"

// The README's screenshots, made by the suite: the dashboard (dark, its
// terminal shared with a phone tab, and light), the admin page with its
// plots, the phone layout (chat, and the terminal with its key row) and an
// approval card.
func TestScreenshots(t *testing.T) {
	m := newModelServer(t)
	d := startAgent(t, m, t.TempDir())
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	sid := openDashboard(t, d, tb)
	typeInTerminal(t, tb, "ls -la / | head -5")

	m.then(reply("Here is a **Go** example:\n\n```go\nfmt.Println(\"hello\")\n```\n\n- one\n- two"))
	sendChat(t, tb, "show me some Go")
	tb.mustWaitJS(15*time.Second, "the Markdown reply", `!!document.querySelector('[data-testid="entry"][data-kind="reply"] pre') && !document.querySelector('[data-streaming="true"]')`, dashboardState)
	m.then(toolCall("uname -a"), reply("Done."))
	sendChat(t, tb, "what system is this?")
	waitCard(t, tb, "the approval card is pending", "pending:  buttons=2")

	phone := b.newTab(t, "phone")
	if _, err := chromedp.Call(phone.ctx, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{
		Width: 390, Height: 800, DeviceScaleFactor: 1, Mobile: true,
	}); err != nil {
		t.Fatal(err)
	}
	phone.Do("open the dashboard", chromedp.Navigate(d.URL("/")))
	waitDashboard(t, phone)
	if got := currentSession(t, phone); got != sid {
		t.Errorf("the phone shows session %s, want %s", got, sid)
	}
	tb.mustWaitJS(10*time.Second, "the terminal says it is shared with the phone",
		`!document.querySelector('[data-testid="terminal-shared"]').hidden`, dashboardState)

	shots := map[string][]byte{}
	shot := func(name string, tb *tab) {
		t.Helper()
		png, err := chromedp.Run(tb.ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		shots[name] = png
	}
	shot("dashboard.png", tb)
	card, err := chromedp.Run(tb.ctx, chromedp.Screenshot(chromedp.CSS(approvalCard)))
	if err != nil {
		t.Fatalf("screenshot of the approval card: %v", err)
	}
	shots["approval-card.png"] = card
	emulateScheme(t, tb, "light")
	tb.mustWaitJS(10*time.Second, "the light theme", `window.dashgateTheme?.theme === 'light'`, themeState)
	shot("dashboard-light.png", tb)

	admin := b.newTab(t, "admin")
	admin.Do("open the admin page", chromedp.Navigate(d.LoginURL("/admin")))
	admin.mustWaitJS(20*time.Second, "two samples plotted",
		`Number(document.querySelector('[data-testid="plots"]').dataset.samples) >= 2`, "")
	shot("admin.png", admin)

	shot("phone.png", phone)
	phone.Do("show the terminal", chromedp.Click(chromedp.CSS(`[data-testid="tab-terminal"]`)))
	phone.mustWaitJS(10*time.Second, "the terminal and its key row shown",
		`(k => k && k.offsetWidth > 0)(document.querySelector('[data-testid="term-keys"]')) && window.dashgate.terminalText().includes('head -5')`, dashboardState)
	shot("phone-terminal.png", phone)

	for name, b := range shots {
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s is not a PNG: %v", name, err)
		}
		if r := img.Bounds(); r.Dx() < 200 || r.Dy() < 100 {
			t.Errorf("%s is %v", name, r)
		}
	}
	if os.Getenv("DASHGATE_SCREENSHOTS") != "1" {
		return
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, screenshotDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range shots {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("wrote %d screenshots into %s", len(shots), dir)
}
