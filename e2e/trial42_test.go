package e2e_test

// Issue 42, item 7: the defects a new-user trial found.

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/dashgate/dashgate/internal/testkit"
)

// TestTrialSearchPrefixMarkedSnippetPlain: a search for the start of a
// word (pomegran) marks that start in the hit of "pomegranate", and a
// reply's snippet reads as the reply does, without its Markdown marks
// (they showed raw: **, backticks, [text](url)); a prompt's snippet stays
// as it was typed, as the chat shows it.
func TestTrialSearchPrefixMarkedSnippetPlain(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)
	const prompt = "a **Pomegranate** sorbet, `granita` and [a link](http://example.com/x)"
	sendChat(t, tb, prompt)
	waitAssistant(t, tb, "(echo agent) a Pomegranate sorbet, granita and a link", 1)

	// The store writes behind the chat: wait until it finds the reply.
	c := openChat(t, "client", d.WSURL("ws/chat"), bearer())
	var hits struct {
		Hits []struct {
			Kind string `json:"kind"`
		} `json:"hits"`
	}
	if !testkit.Until(10*time.Second, func() bool {
		c.mustCall("session.search", map[string]any{"query": "pomegran"}, &hits)
		return len(hits.Hits) == 2
	}) {
		t.Fatalf("session.search pomegran: %+v, want the prompt and the reply", hits.Hits)
	}

	tb.Do("search pomegran", chromedp.SendKeys(chromedp.CSS(byTestID("search-input")), "pomegran\r"))
	snippet := func(kind string) string {
		return fmt.Sprintf(`document.querySelector('[data-testid="search-hit"][data-kind=%s] [data-testid="search-snippet"]')`, js(kind))
	}
	tb.mustWaitJS(10*time.Second, "both hits listed", fmt.Sprintf(`!!%s && !!%s`, snippet("prompt"), snippet("reply")), searchState)

	type shown struct {
		Text  string   `json:"text"`
		Marks []string `json:"marks"`
	}
	for kind, want := range map[string]string{
		"reply":  "(echo agent) a Pomegranate sorbet, granita and a link",
		"prompt": prompt,
	} {
		got := mustEval[shown](tb, fmt.Sprintf(`(s => ({text: s.textContent, marks: [...s.querySelectorAll('mark')].map(m => m.textContent)}))(%s)`, snippet(kind)))
		if got.Text != want {
			t.Errorf("the %s's snippet reads %q, want %q", kind, got.Text, want)
		}
		if len(got.Marks) != 1 || got.Marks[0] != "Pomegran" {
			t.Errorf("the %s's snippet marks %q, want the matched start of Pomegranate, [Pomegran]", kind, got.Marks)
		}
	}

	// The same in place (the page's own module): what a cut snippet keeps.
	for _, c := range []struct{ in, want string }{
		{"…pomegranate** sorbet, `*args`, snake_case and 2 * 3", "…pomegranate sorbet, *args, snake_case and 2 * 3"},
		{"# Title\n- one _item_\n> ~~old~~ quote\n```go\nx := 1\n```\n**`code`** ![alt](i.png) see](http://x) `cut", "Title one item old quote x := 1 code alt see cut"},
	} {
		got := mustEval[string](tb, fmt.Sprintf(`import('/static/js/sessions.js').then(m => m.plainSnippet(%s))`, js(c.in)))
		if got != c.want {
			t.Errorf("plainSnippet(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestTrialNotifyBlockedSaysSo: while the browser blocks notifications for
// the site, the Notify button says so on its face and in its title (a
// click on it did nothing visible), and again after a reload.
func TestTrialNotifyBlockedSaysSo(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)
	const button = `document.querySelector('[data-testid="notify-toggle"]')`
	const state = `(b => JSON.stringify({text: b.textContent, state: b.dataset.state, title: b.title, pressed: b.getAttribute('aria-pressed'), permission: Notification.permission}))(` + button + `)`
	tb.mustWaitJS(5*time.Second, "the Notify button offers notifications", visible(byTestID("notify-toggle"))+` && `+button+`.textContent === 'Notify'`, state)

	origin := mustEval[string](tb, `location.origin`)
	if _, err := chromedp.CallBrowser(tb.ctx, cdpbrowser.SetPermission, cdpbrowser.SetPermissionParams{
		Permission: &cdpbrowser.PermissionDescriptor{Name: "notifications"}, Setting: cdpbrowser.PermissionSettingDenied, Origin: origin,
	}); err != nil {
		t.Fatalf("block notifications: %v", err)
	}
	blocked := `(b => b.textContent === 'Notify: blocked' && b.dataset.state === 'blocked' && b.title.includes('blocked') && b.getAttribute('aria-pressed') === 'false')(` + button + `)`
	tb.Do("click Notify", chromedp.Click(chromedp.CSS(byTestID("notify-toggle"))))
	tb.mustWaitJS(10*time.Second, "the button says notifications are blocked", blocked, state)
	tb.Do("reload", chromedp.Reload())
	waitDashboard(t, tb)
	tb.mustWaitJS(10*time.Second, "after a reload, the button says so from the start", blocked, state)
}

// TestTrialToolCardCountsLines: a command that prints two lines (each
// ended by a newline) is "output (2 lines)" on its card, live and after a
// reload (the last newline was counted as a third line).
func TestTrialToolCardCountsLines(t *testing.T) {
	m := newModelServer(t)
	d := startAgent(t, m, t.TempDir())
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)
	m.then(toolCall("printf 'one\\ntwo\\n'"), reply("Printed."))
	sendChat(t, tb, "print two lines")
	waitCard(t, tb, "the approval card is pending", "pending:  buttons=2")
	tb.Do("approve", chromedp.Click(chromedp.CSS(approvalCard+` [data-testid="approve"]`)))

	const output = `(c => c && c.dataset.state === 'done' ? JSON.stringify({summary: c.querySelector('[data-testid="tool-output"] summary').textContent, text: c.querySelector('[data-testid="tool-output"] pre').textContent}) : '')(document.querySelector('[data-testid="chat-log"] [data-testid="tool-card"]'))`
	want := `{"summary":"output (2 lines)","text":"one\ntwo\n"}`
	tb.mustWaitJS(15*time.Second, "the tool card counts two lines", output+` === `+js(want), output)
	waitAssistant(t, tb, "Printed.", 1)
	tb.Do("reload", chromedp.Reload())
	waitDashboard(t, tb)
	tb.mustWaitJS(15*time.Second, "after a reload, two lines still", output+` === `+js(want), output)
}

// fakeSamples replaces GET /admin/api/samples in a page (before its
// scripts run) with n+1 samples 5 s apart, the last off seconds past the
// current minute: the server's ring takes 15 minutes to fill. The values
// vary; the RSS is in the thousands of MiB, and four reasons close
// sessions.
func fakeSamples(n, off int) string {
	return fmt.Sprintf(`(() => {
	const real = window.fetch;
	window.fetch = (url, o) => {
		if (!String(url).includes('admin/api/samples')) return real(url, o);
		const end = Math.floor(Date.now() / 60000) * 60000 + %d * 1000, out = [];
		for (let i = %d; i >= 0; i--) {
			const c = {};
			if (i %% 7 === 0) c.client_close = 2;
			if (i %% 11 === 0) c.detached_ttl = 1;
			if (i %% 13 === 0) c.close_on_disconnect = 3;
			if (i %% 17 === 0) c.admin_reap = 1;
			out.push({t: new Date(end - i * 5000).toISOString(), sessions: 20 + (i %% 9), workers: 40 + (i %% 5), rss_bytes: (1500 + i * 3) * 1048576, closes: c});
		}
		return Promise.resolve(new Response(JSON.stringify({samples: out}), {headers: {'Content-Type': 'application/json'}}));
	};
})()`, off, n)
}

// recordCanvasText makes a page (before its scripts run) keep, per canvas,
// the box of each text drawn on it since it was last cleared whole
// (window.__canvasTexts(canvas): [{text, left, right, top, bottom}], in
// the canvas's pixels): a plot's axis labels are drawn, not elements.
const recordCanvasText = `(() => {
	const P = CanvasRenderingContext2D.prototype;
	const texts = new WeakMap();
	window.__canvasTexts = (c) => texts.get(c) ?? [];
	const clear = P.clearRect;
	P.clearRect = function (x, y, w, h) {
		if (x <= 0 && y <= 0 && w >= this.canvas.width && h >= this.canvas.height) texts.set(this.canvas, []);
		return clear.apply(this, arguments);
	};
	const fill = P.fillText;
	P.fillText = function (text, x, y) {
		const m = this.measureText(text), t = this.getTransform();
		const l = x - m.actualBoundingBoxLeft, r = x + m.actualBoundingBoxRight, tp = y - m.actualBoundingBoxAscent, b = y + m.actualBoundingBoxDescent;
		const pts = [[l, tp], [r, tp], [l, b], [r, b]].map(([px, py]) => [t.a * px + t.c * py + t.e, t.b * px + t.d * py + t.f]);
		const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
		if (!texts.has(this.canvas)) texts.set(this.canvas, []);
		texts.get(this.canvas).push({text: String(text), left: Math.min(...xs), right: Math.max(...xs), top: Math.min(...ys), bottom: Math.max(...ys)});
		return fill.apply(this, arguments);
	};
})()`

// plotLabelClashes lists, per admin plot, the labels drawn on its canvas
// that reach past the canvas (cut), the caption and legend cells outside
// its figure, and every two of them (with the canvas, for the elements)
// whose boxes overlap.
const plotLabelClashes = `(() => {
	const out = [];
	const overlap = (a, b) => a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
	const inside = (a, b) => a.left >= b.left - 0.5 && a.right <= b.right + 0.5 && a.top >= b.top - 0.5 && a.bottom <= b.bottom + 0.5;
	const box = (text, r) => ({text, left: r.left, right: r.right, top: r.top, bottom: r.bottom});
	for (const fig of document.querySelectorAll('[data-testid="plots"] figure')) {
		const id = fig.dataset.testid, c = fig.querySelector('canvas');
		if (!c) { out.push(id + ': no canvas'); continue; }
		const cr = c.getBoundingClientRect(), k = cr.width / c.width;
		const drawn = window.__canvasTexts(c).map((b) => ({text: JSON.stringify(b.text), left: cr.left + b.left * k, right: cr.left + b.right * k, top: cr.top + b.top * k, bottom: cr.top + b.bottom * k}));
		if (drawn.length < 4) out.push(id + ': only ' + drawn.length + ' labels drawn');
		for (const b of drawn) if (!inside(b, cr)) out.push(id + ': ' + b.text + ' cut by the edge of the plot');
		const shown = [...fig.querySelectorAll('figcaption, .u-legend th, .u-legend td')].map((e) => box('<' + e.textContent.trim() + '>', e.getBoundingClientRect()));
		for (const b of shown) if (!inside(b, fig.getBoundingClientRect())) out.push(id + ': ' + b.text + ' outside the figure');
		const all = [...drawn, ...shown];
		for (let i = 0; i < all.length; i++) for (let j = i + 1; j < all.length; j++) if (overlap(all[i], all[j])) out.push(id + ': ' + all[i].text + ' overlaps ' + all[j].text);
		for (const b of shown) if (overlap(b, box('the plot', cr))) out.push(id + ': ' + b.text + ' overlaps the plot');
	}
	return out;
})()`

// TestTrialAdminPlotLabelsApart: on /admin no two labels of a plot
// overlap and none is cut, at the default width and a phone's, in the
// first minute (the date line under the first tick ran into the next
// minute's label) and with 15 minutes of samples (the value axis cut
// "1,500" to ",500").
func TestTrialAdminPlotLabelsApart(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	for _, c := range []struct {
		name   string
		n, off int
	}{
		{"the first minute, a minute turning at its second tick", 12, 45},
		{"15 minutes", 180, 5},
	} {
		for _, width := range []int64{0, 390} {
			what := fmt.Sprintf("%s, width %d", c.name, width)
			if width == 0 {
				what = c.name + ", the default width"
			}
			admin := b.newTab(t, "admin")
			for _, src := range []string{fakeSamples(c.n, c.off), recordCanvasText} {
				if _, err := chromedp.Call(admin.ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: src}); err != nil {
					t.Fatal(err)
				}
			}
			if width != 0 {
				if _, err := chromedp.Call(admin.ctx, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{Width: width, Height: 844, DeviceScaleFactor: 1, Mobile: true}); err != nil {
					t.Fatal(err)
				}
			}
			admin.Do("open the admin page", chromedp.Navigate(d.LoginURL("/admin")))
			admin.mustWaitJS(15*time.Second, what+": the samples plotted",
				fmt.Sprintf(`document.querySelector('[data-testid="plots"]').dataset.samples === '%d' && document.querySelectorAll('[data-testid="plot-closes"] .u-legend .u-series').length === 5`, c.n+1),
				`JSON.stringify(document.querySelector('[data-testid="plots"]').dataset)`)
			if clashes := mustEval[[]string](admin, plotLabelClashes); len(clashes) > 0 {
				t.Errorf("%s: %d label clashes:\n%s", what, len(clashes), strings.Join(clashes, "\n"))
			}
			admin.Close()
		}
	}
}

// TestTrialUserCgroupNotMeasured: /admin with Unix accounts in cgroup
// mode shows a user's cgroup memory and pids as measured where the host's
// cgroup v2 has their controller, and as "not measured", the reason as
// the title, where it has not (a hybrid host, whose cgroup v2 offers only
// hugetlb, showed "0 B" and "0", as if measured).
func TestTrialUserCgroupNotMeasured(t *testing.T) {
	requireCgroups(t)
	alice := makeUnixUser(t, "alice")
	u := startUnixUsers(t, []string{alice.Name}, nil)
	_, _, pty := u.terminal(t, alice.Name)
	pty.out("READY:", "echo READY:$$")
	offered := strings.Fields(readFile(t, filepath.Join(cgroupMount(), "cgroup.controllers")))

	b := newBrowser(t)
	admin := b.newTab(t, "admin")
	admin.Do("open the admin page", chromedp.Navigate(u.LoginURL("/admin")))
	cell := func(figure string) string {
		return fmt.Sprintf(`document.querySelector('[data-testid="user-row"][data-user=%s] [data-testid="user-cgroup-%s"]')`, js(alice.Name), figure)
	}
	admin.mustWaitJS(15*time.Second, "alice's row with her cgroup's CPU time",
		fmt.Sprintf(`(c => !!c && c.textContent !== '–')(%s)`, cell("cpu")),
		`document.querySelector('[data-testid="users-table"]')?.innerText`)
	type shown struct {
		Text  string `json:"text"`
		Title string `json:"title"`
		State string `json:"state"`
	}
	for _, f := range []struct {
		figure, controller string
		measured           *regexp.Regexp
	}{
		{"memory", "memory", regexp.MustCompile(`^[1-9][0-9.]* [KMG]iB$`)},
		{"pids", "pids", regexp.MustCompile(`^[1-9][0-9]*$`)},
	} {
		got := mustEval[shown](admin, fmt.Sprintf(`(c => ({text: c.textContent, title: c.title, state: c.dataset.state ?? ''}))(%s)`, cell(f.figure)))
		if slices.Contains(offered, f.controller) {
			if !f.measured.MatchString(got.Text) || got.State != "" {
				t.Errorf("with the %s controller, alice's cgroup %s reads %+v, want a measured figure", f.controller, f.figure, got)
			}
			continue
		}
		t.Logf("cgroup v2 offers %q: no %s controller", offered, f.controller)
		if got.Text != "not measured" || got.State != "not-measured" || !strings.Contains(got.Title, "no "+f.controller+" controller") {
			t.Errorf("without the %s controller, alice's cgroup %s reads %+v, want \"not measured\" and why", f.controller, f.figure, got)
		}
	}
}

// TestTrialDraftSurvivesReload: what is typed in the chat input and not
// sent is there again after a reload (it was lost), per session (another
// session has its own), until it is sent.
func TestTrialDraftSurvivesReload(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	one := openDashboard(t, d, tb)
	const input = `document.querySelector('[data-testid="chat-input"]').value`
	inputIs := func(what, want string) {
		t.Helper()
		tb.mustWaitJS(10*time.Second, what, input+` === `+js(want), dashboardState+` + ' input: ' + `+input)
	}
	reload := func() {
		t.Helper()
		tb.Do("reload", chromedp.Reload())
		waitDashboard(t, tb)
	}

	tb.Do("type a draft", chromedp.SendKeys(chromedp.CSS(byTestID("chat-input")), "half a thought"))
	reload()
	inputIs("after a reload the draft is in the input", "half a thought")

	// Another session has its own draft; back in the first, its own.
	tb.Do("click New session", chromedp.Click(chromedp.CSS(byTestID("new-session"))))
	tb.mustWaitJS(10*time.Second, "a second session current", fmt.Sprintf(`(s => !!s && s !== %s)(window.dashgate.currentSession())`, js(one)), dashboardState)
	inputIs("the new session's input is empty", "")
	tb.Do("type the second draft", chromedp.SendKeys(chromedp.CSS(byTestID("chat-input")), "second draft"))
	tb.Do("resume the first session", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-testid="session-item"][data-session-id=%s] [data-testid="session-resume"]`, js(one)))))
	tb.mustWaitJS(10*time.Second, "the first session current", `window.dashgate.currentSession() === `+js(one), dashboardState)
	inputIs("the first session's draft is back", "half a thought")

	// Sent, it is no draft any more.
	tb.Do("send the draft", chromedp.SendKeys(chromedp.CSS(byTestID("chat-input")), " done\r"))
	waitAssistant(t, tb, "(echo agent) half a thought done", 1)
	reload()
	inputIs("after sending and a reload the input is empty", "")
}
