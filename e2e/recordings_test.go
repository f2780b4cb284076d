package e2e_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/dashgate/dashgate/internal/testkit"
)

// recordingsState describes a recordings page or the admin page's list for
// failure messages.
const recordingsState = `JSON.stringify({
	url: location.href,
	rows: [...document.querySelectorAll('[data-testid="recording-row"]')].map(e => e.dataset.user + '/' + e.dataset.file + (e.dataset.active === 'true' ? ' (active)' : '')),
	player: document.querySelector('[data-testid="player"]')?.dataset.state,
	playerText: document.querySelector('[data-testid="player"]')?.innerText.slice(-400),
	error: document.querySelector('[data-testid="player-error"]')?.textContent,
})`

// recordingRow selects the row of the recording named file.
func recordingRow(file string) string {
	return fmt.Sprintf(`tr[data-testid="recording-row"][data-file=%s]`, js(file))
}

// playerShows holds once the player on the page has drawn text matching re.
func playerShows(re string) string {
	return fmt.Sprintf(`new RegExp(%s).test(document.querySelector('[data-testid="player"]')?.innerText ?? '')`, js(re))
}

// download fetches the href of the link sel in the page (its cookies, as a
// click would) and returns its Content-Disposition and body.
func download(t *testing.T, tb *tab, sel string) (disposition, body string) {
	t.Helper()
	var got struct {
		Status      int    `json:"status"`
		Disposition string `json:"disposition"`
		Body        string `json:"body"`
	}
	s := mustEval[string](tb, fmt.Sprintf(`(async () => {
		const r = await fetch(document.querySelector(%s).href);
		return JSON.stringify({status: r.status, disposition: r.headers.get('content-disposition'), body: await r.text()});
	})()`, js(sel)))
	if err := json.Unmarshal([]byte(s), &got); err != nil || got.Status != http.StatusOK {
		t.Fatalf("download %s: %s (%v)", sel, s, err)
	}
	return got.Disposition, got.Body
}

// TestRecordingsPlayback: with --record-terminals the dashboard says
// terminals are recorded, and the terminal pane that this one is; after the
// terminal closes its recording (named on its close record) is listed on
// /admin and on the owner's /recordings; it plays in the browser (the
// player draws the command's output) from both, and downloads as valid
// asciicast v2 holding that output.
func TestRecordingsPlayback(t *testing.T) {
	d := startDashgate(t, "--record-terminals")
	b := newBrowser(t)
	dash := b.newTab(t, "dashboard")
	sid := openDashboard(t, d, dash)

	dash.mustWaitJS(15*time.Second, "the banner and the terminal say it is recorded",
		`document.querySelector('[data-testid="recording-banner"]')?.checkVisibility() === true &&
		 document.querySelector('[data-testid="terminal-recorded"]')?.checkVisibility() === true`, dashboardState)
	// It says plainly what is kept: echoed typing is, a password is not.
	if banner := mustEval[string](dash, `document.querySelector('[data-testid="recording-banner"]').textContent`); !strings.Contains(banner, "what you type when it is echoed") ||
		!strings.Contains(banner, "(such as passwords)") {
		t.Errorf("the recording banner says %q; want it to say that echoed typing is recorded and passwords are not", banner)
	}
	typeInTerminal(t, dash, "echo rec-$((6*7))")
	if _, err := waitTerminalOutput(t, dash, "echo rec-$((6*7))", exactly("rec-42"), 15*time.Second); err != nil {
		t.Fatal(err)
	}
	typeInTerminal(t, dash, "exit")
	closed, ok := d.waitLog(15*time.Second, func(r logRecord) bool {
		return r.Msg() == "worker closed" && r.Str("kind") == "pty" && r.Str("sid") == sid
	})
	if !ok {
		t.Fatalf("no worker closed record of the terminal of %s:\n%s", sid, d.logText())
	}
	path := closed.Str("recording")
	if filepath.Dir(path) != filepath.Join(d.Dir, "state", "recordings", "_anonymous") || !strings.HasPrefix(filepath.Base(path), sid+"-") {
		t.Fatalf("close record %v: want recording=<state>/recordings/_anonymous/%s-<start>.cast", closed, sid)
	}
	file := filepath.Base(path)
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v, want mode 0600", path, fi, err)
	}

	// The admin page lists it, finished, and plays it.
	admin := b.newTab(t, "admin")
	admin.Do("open the admin page", chromedp.Navigate(d.LoginURL("/admin")))
	admin.mustWaitJS(15*time.Second, "the admin page lists the finished recording",
		exists(recordingRow(file)+`[data-user=""][data-active="false"]`), recordingsState)
	admin.Do("play it", chromedp.Click(chromedp.CSS(recordingRow(file)+` [data-testid="recording-play"]`)))
	admin.mustWaitJS(15*time.Second, "the player draws the command's output", playerShows(`rec-42`), recordingsState)
	// Its controls are in the window, whatever the recording's height
	// (a new-user trial found them below the fold).
	admin.mustWaitJS(15*time.Second, "the player's controls in the window",
		`(r => r && r.height > 0 && r.bottom <= innerHeight)(document.querySelector('.ap-control-bar')?.getBoundingClientRect())`,
		`JSON.stringify({bar: document.querySelector('.ap-control-bar')?.getBoundingClientRect(), h: innerHeight})`)

	// The owner's list from the banner's link: plays and downloads.
	dash.Do("open your recordings", chromedp.Click(chromedp.CSS(`[data-testid="recordings-link"]`)))
	dash.mustWaitJS(15*time.Second, "the owner's list has it", exists(recordingRow(file)), recordingsState)
	// Named by its session's title, not only by its file (a new-user
	// trial could not tell three of them apart).
	if s, ok := d.Session(sid); !ok || s.Title == "" {
		t.Fatalf("session %s: %+v", sid, s)
	} else if got := mustEval[string](dash, `document.querySelector(`+js(recordingRow(file)+` [data-testid="recording-session"]`)+`)?.textContent.trim() ?? ''`); got != s.Title {
		t.Errorf("the owner's list names the recording's session %q; want its title %q", got, s.Title)
	}
	disposition, body := download(t, dash, recordingRow(file)+` [data-testid="recording-download"]`)
	if disposition != `attachment; filename="`+file+`"` {
		t.Errorf("Content-Disposition %q", disposition)
	}
	c, err := testkit.ParseCast([]byte(body))
	if err != nil {
		t.Fatalf("the download: %v", err)
	}
	if out := c.Output(); !strings.Contains(out, "rec-42\r\n") {
		t.Errorf("the downloaded recording lacks the output:\n%q", out)
	}
	dash.Do("play it", chromedp.Click(chromedp.CSS(recordingRow(file)+` [data-testid="recording-play"]`)))
	dash.mustWaitJS(15*time.Second, "the player draws the command's output", playerShows(`rec-42`), recordingsState)

	// README's screenshot of a playback (DASHGATE_SCREENSHOTS=1, as
	// TestScreenshots): the page as a window shows it.
	if os.Getenv("DASHGATE_SCREENSHOTS") == "1" {
		shot, err := chromedp.Run(dash.ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("screenshot of the playback: %v", err)
		}
		root, err := repoRoot()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, screenshotDir, "recording.png"), shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRecordingsOffByDefault: without --record-terminals nothing is
// recorded and nothing says so: no banner, no line in the terminal pane,
// no hello.recorded, no recordings directory, no /recordings, no list on
// /admin.
func TestRecordingsOffByDefault(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	dash := b.newTab(t, "dashboard")
	openDashboard(t, d, dash)
	typeInTerminal(t, dash, "echo plain-$((6*7))")
	if _, err := waitTerminalOutput(t, dash, "echo plain-$((6*7))", exactly("plain-42"), 15*time.Second); err != nil {
		t.Fatal(err)
	}
	if shown := mustEval[bool](dash, `!!document.querySelector('[data-testid="recording-banner"]') ||
		document.querySelector('[data-testid="terminal-recorded"]')?.checkVisibility() === true`); shown {
		t.Fatal("the dashboard says terminals are recorded")
	}
	if _, err := os.Stat(filepath.Join(d.Dir, "state", "recordings")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a recordings directory without --record-terminals: %v", err)
	}
	var v any
	if err := d.getJSON("/recordings/", &v); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("GET /recordings/ without --record-terminals: %v", err)
	}
	admin := b.newTab(t, "admin")
	admin.Do("open the admin page", chromedp.Navigate(d.LoginURL("/admin")))
	admin.mustWaitJS(15*time.Second, "the admin page loaded", adminLoaded, adminState)
	if mustEval[bool](admin, exists(`[data-testid="recordings"]`)) {
		t.Fatal("the admin page lists recordings without --record-terminals")
	}
}

// TestRecordingsRetention: at start, recordings last written before
// --record-retention are deleted (one INFO record counts them); newer
// ones and other files stay.
func TestRecordingsRetention(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	dir := filepath.Join(state, "recordings", "alice")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(state, 0o700); err != nil {
		t.Fatal(err)
	}
	header := `{"version":2,"width":80,"height":24,"timestamp":1767225600}` + "\n"
	old := filepath.Join(dir, "abc-20260101T000000.000Z.cast")
	recent := filepath.Join(dir, "abc-20260102T000000.000Z.cast")
	other := filepath.Join(dir, "notes.txt")
	for _, p := range []string{old, recent, other} {
		if err := os.WriteFile(p, []byte(header), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	longAgo := time.Now().Add(-48 * time.Hour)
	for _, p := range []string{old, other} {
		if err := os.Chtimes(p, longAgo, longAgo); err != nil {
			t.Fatal(err)
		}
	}
	d := startDashgate(t, "--record-terminals", "--record-retention", "24h", "--state-dir", state)
	if _, ok := d.waitLog(15*time.Second, func(r logRecord) bool {
		n, _ := r.Int("removed")
		return r.Msg() == "recordings expired" && n == 1
	}); !ok {
		t.Fatalf("no recordings expired record with removed=1:\n%s", d.logText())
	}
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the recording older than the retention is still there: %v", err)
	}
	for _, p := range []string{recent, other} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	var list struct {
		Recordings []struct {
			User string `json:"user"`
			File string `json:"file"`
		} `json:"recordings"`
	}
	if err := d.getJSON("/admin/recordings/", &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Recordings) != 1 || list.Recordings[0].File != filepath.Base(recent) || list.Recordings[0].User != "alice" {
		t.Fatalf("/admin/recordings/ = %+v, want alice's recent one", list)
	}
}

// TestRecordingsAccessibility: with --record-terminals the dashboard (its
// banner and the terminal's line), the owner's list, the player page and
// the admin page's list have no serious or critical accessibility
// violations (axe-core, as TestAccessibility).
func TestRecordingsAccessibility(t *testing.T) {
	axe := axeSource(t)
	d := startDashgate(t, "--record-terminals")
	b := newBrowser(t)
	tb := b.newTab(t, "pages")
	if _, err := chromedp.Call(tb.ctx, page.SetBypassCSP, page.SetBypassCSPParams{Enabled: true}); err != nil {
		t.Fatal(err)
	}
	check := func(name string) {
		t.Helper()
		if v := seriousViolations(t, tb, axe); len(v) > 0 {
			t.Errorf("%s: %d serious or critical accessibility violations: %+v", name, len(v), v)
		}
	}
	sid := openDashboard(t, d, tb)
	tb.mustWaitJS(15*time.Second, "the terminal says it is recorded",
		`document.querySelector('[data-testid="terminal-recorded"]')?.checkVisibility() === true`, dashboardState)
	check("dashboard, recorded")
	typeInTerminal(t, tb, "exit")
	closed, ok := d.waitLog(15*time.Second, func(r logRecord) bool {
		return r.Msg() == "worker closed" && r.Str("kind") == "pty" && r.Str("sid") == sid
	})
	if !ok {
		t.Fatalf("no worker closed record of the terminal:\n%s", d.logText())
	}
	file := filepath.Base(closed.Str("recording"))
	tb.Do("open your recordings", chromedp.Click(chromedp.CSS(`[data-testid="recordings-link"]`)))
	tb.mustWaitJS(15*time.Second, "the owner's list", exists(recordingRow(file)), recordingsState)
	check("your recordings")
	tb.Do("play it", chromedp.Click(chromedp.CSS(recordingRow(file)+` [data-testid="recording-play"]`)))
	tb.mustWaitJS(15*time.Second, "the player draws", playerShows(`exit`), recordingsState)
	check("player")
	tb.Do("open the admin page", chromedp.Navigate(d.LoginURL("/admin")))
	tb.mustWaitJS(15*time.Second, "the admin page lists it", exists(recordingRow(file)), recordingsState)
	check("admin, recordings")
}
