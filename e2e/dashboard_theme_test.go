package e2e_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// The page colours of each theme (static/css/app.css and admin.css, --bg).
const (
	dashLightBg  = "rgb(246, 247, 249)"
	dashDarkBg   = "rgb(20, 22, 27)"
	adminLightBg = "rgb(246, 247, 249)"
	adminDarkBg  = "rgb(17, 21, 28)"
)

// bodyBg is the computed background colour of <body>.
const bodyBg = `getComputedStyle(document.body).backgroundColor`

// themeState describes the theme of the page for failure messages.
const themeState = `JSON.stringify({theme: document.documentElement.dataset.theme ?? null, bg: getComputedStyle(document.body).backgroundColor,
	select: document.querySelector('[data-testid="theme-select"]')?.value, stored: localStorage.getItem('dashgate.theme'),
	js: window.dashgateTheme ? [window.dashgateTheme.choice, window.dashgateTheme.theme] : null, atBody: window.__themeAtBody})`

// emulateScheme makes the tab's prefers-color-scheme scheme ("light", "dark").
func emulateScheme(t *testing.T, tb *tab, scheme string) {
	t.Helper()
	if _, err := chromedp.Call(tb.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}},
	}); err != nil {
		t.Fatalf("emulate prefers-color-scheme %s: %v", scheme, err)
	}
}

// chooseTheme picks choice in the page's theme toggle, as a user does (the
// select's value, then its change event).
func chooseTheme(tb *tab, choice string) {
	tb.Do("choose the "+choice+" theme", chromedp.Evaluate[chromedp.Void](`(s => { s.focus(); s.value = `+js(choice)+`; s.dispatchEvent(new Event('input', {bubbles: true})); s.dispatchEvent(new Event('change', {bubbles: true})); })(document.querySelector('[data-testid="theme-select"]'))`))
}

// waitBg waits until <body>'s background is want.
func waitBg(tb *tab, what, want string) {
	tb.mustWaitJS(10*time.Second, what, bodyBg+` === `+js(want), themeState)
}

// The theme follows the system's (prefers-color-scheme) until one is
// chosen in the toggle; the choice is remembered by the browser, is in
// effect before the page's body is parsed (no flash of the other theme),
// holds on the admin page too, and the terminal's palette (for xterm.js,
// window.dashgateTheme.xterm()) agrees with the CSS's.
func TestThemeFollowsSystemAndIsRemembered(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "theme")
	// Records the theme in effect when <body> appears: a script that
	// set it later (a module, or one at the end of the body) would leave
	// the first paint in the other theme.
	if _, err := chromedp.Call(tb.ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: `(() => {
		const o = new MutationObserver(() => {
			if (!document.body || '__themeAtBody' in window) return;
			window.__themeAtBody = document.documentElement.dataset.theme ?? 'unset';
			o.disconnect();
		});
		o.observe(document, {childList: true, subtree: true});
	})()`}); err != nil {
		t.Fatal(err)
	}

	emulateScheme(t, tb, "light")
	openDashboard(t, d, tb)
	waitBg(tb, "system theme, the system light: the dashboard is light", dashLightBg)
	if got := mustEval[string](tb, `document.querySelector('[data-testid="theme-select"]').value`); got != "system" {
		t.Errorf("the toggle reads %q at first, want system", got)
	}
	// The terminal's palette is the CSS's (--term-bg, --text): the
	// terminal pane and xterm.js agree.
	checkTerminalPalette := func(when string) {
		t.Helper()
		got := mustEval[map[string]string](tb, `(() => {
			const rgb = (h) => 'rgb(' + [1, 3, 5].map((i) => parseInt(h.slice(i, i + 2), 16)).join(', ') + ')';
			const x = window.dashgateTheme.xterm();
			const pane = getComputedStyle(document.querySelector('.terminal-pane'));
			const probe = document.createElement('span');
			document.body.append(probe);
			const text = getComputedStyle(probe).color;
			probe.remove();
			return {xtermBg: rgb(x.background), paneBg: pane.backgroundColor, xtermFg: rgb(x.foreground), text, theme: window.dashgateTheme.theme};
		})()`)
		if got["xtermBg"] != got["paneBg"] || got["xtermFg"] != got["text"] {
			t.Errorf("%s: the terminal's palette and the page's differ: %v", when, got)
		}
	}
	checkTerminalPalette("light")

	emulateScheme(t, tb, "dark")
	waitBg(tb, "system theme, the system dark: the dashboard turns dark", dashDarkBg)
	checkTerminalPalette("dark")
	if got := mustEval[string](tb, `window.dashgateTheme.xterm().background`); got != "#0f1115" {
		t.Errorf("the dark terminal background is %s, want #0f1115", got)
	}

	// A choice overrides the system's, and is remembered.
	chooseTheme(tb, "light")
	waitBg(tb, "the light theme chosen on a dark system", dashLightBg)
	if got := mustEval[string](tb, `localStorage.getItem('dashgate.theme') ?? ''`); got != "light" {
		t.Errorf("localStorage holds %q after choosing light", got)
	}
	checkTerminalPalette("light, chosen")

	tb.Do("reload", chromedp.Reload())
	waitDashboard(t, tb)
	waitBg(tb, "after a reload: still light", dashLightBg)
	if got := mustEval[string](tb, `window.__themeAtBody ?? 'no record'`); got != "light" {
		t.Errorf("when <body> appeared the theme was %q, want light (set before the first paint)", got)
	}
	if got := mustEval[string](tb, `document.querySelector('[data-testid="theme-select"]').value`); got != "light" {
		t.Errorf("after a reload the toggle reads %q, want light", got)
	}

	// The admin page: the same choice, and its own toggle.
	tb.Do("open the admin page", chromedp.Navigate(d.LoginURL("/admin")))
	tb.mustWaitJS(10*time.Second, "the admin page", adminLoaded, "")
	waitBg(tb, "the admin page in the chosen light theme", adminLightBg)
	if got := mustEval[string](tb, `document.querySelector('[data-testid="theme-select"]').value`); got != "light" {
		t.Errorf("the admin page's toggle reads %q, want light", got)
	}
	chooseTheme(tb, "dark")
	emulateScheme(t, tb, "light")
	waitBg(tb, "the dark theme chosen on the admin page, the system light", adminDarkBg)
	chooseTheme(tb, "system")
	waitBg(tb, "back to the system's (light) on the admin page", adminLightBg)
	if got := mustEval[string](tb, `localStorage.getItem('dashgate.theme') ?? 'none'`); got != "none" {
		t.Errorf("localStorage holds %q after choosing system, want nothing", got)
	}
	tb.Do("back to the dashboard", chromedp.Navigate(d.URL("/")))
	waitDashboard(t, tb)
	waitBg(tb, "the dashboard follows the system (light) again", dashLightBg)
}

// A fenced code block naming its language is highlighted (highlight.js
// spans, coloured by the theme, readable in both), stays the code's text,
// and stays inert: the highlighter's output goes through the sanitizer. A
// block without a language or with an unknown one is not highlighted (no
// auto-detection).
func TestReplyCodeIsHighlightedAndInert(t *testing.T) {
	m := newModelServer(t)
	d := startAgent(t, m, t.TempDir())
	b := newBrowser(t)
	tb := b.newTab(t, "highlight")
	emulateScheme(t, tb, "light")
	openDashboard(t, d, tb)

	const goCode = "package main\n\n// say <img src=x onerror=\"window.__pwned=1\">\nfunc main() {\n\tfmt.Println(\"<script>window.__pwned=2</script>\", 42)\n}\n"
	const md = "Here:\n\n```go\n" + goCode + "```\n\n```\nfunc plain() {}\n```\n\n```nosuchlang\nfunc unknown() {}\n```\n"
	m.then(reply(md))
	sendChat(t, tb, "show me go")

	const goBlock = replyEntry + ` pre > code.language-go`
	tb.mustWaitJS(15*time.Second, "the reply's go block is highlighted",
		`!!document.querySelector('`+replyEntry+` .msg:not([data-streaming="true"]) pre > code.hljs.language-go span.hljs-keyword')`, markdownState)

	check := func(when string) {
		t.Helper()
		if got := mustEval[string](tb, `document.querySelector('`+goBlock+`').textContent`); got != goCode {
			t.Errorf("%s: the go block reads %q, want %q", when, got, goCode)
		}
		spans := mustEval[map[string]string](tb, `Object.fromEntries(['keyword', 'string', 'comment', 'number', 'title'].map(k =>
			[k, [...document.querySelectorAll('`+goBlock+` span.hljs-' + k)].map(s => s.textContent).join('|')]))`)
		for k, want := range map[string]string{"keyword": "package", "string": `"<script>window.__pwned=2</script>"`, "comment": "// say", "number": "42", "title": "main"} {
			if !strings.Contains(spans[k], want) {
				t.Errorf("%s: no hljs-%s span holds %q: %v", when, k, want, spans)
			}
		}
		if n := mustEval[int](tb, `document.querySelectorAll('`+replyEntry+` pre:not(:has(code.language-go)) span').length`); n != 0 {
			t.Errorf("%s: %d spans in the blocks without a known language, want none (no auto-detection)", when, n)
		}
		if bad := mustEval[[]string](tb, inertJS); len(bad) > 0 {
			t.Errorf("%s: the chat log holds live markup from the model: %v", when, bad)
		}
		if got := mustEval[string](tb, `String(window.__pwned)`); got != "undefined" {
			t.Errorf("%s: window.__pwned is %s", when, got)
		}
		// Only the highlighter's classes, only on its spans (and the code's own).
		if bad := mustEval[[]string](tb, `[...document.querySelectorAll('`+replyEntry+` .msg [class]')]
			.filter(e => !(e.tagName === 'SPAN' && [...e.classList].every(c => /^(hljs-[a-z0-9_-]+|[a-z0-9]+_+|language-[a-z0-9_+#-]+)$/.test(c)))
				&& !(e.tagName === 'CODE' && [...e.classList].every(c => /^(hljs|language-[a-z0-9_+#-]+)$/.test(c)))
				&& !(e.matches('.code-block, .copy-code')))
			.map(e => e.tagName + '.' + e.className)`); len(bad) > 0 {
			t.Errorf("%s: classes not from the highlighter: %v", when, bad)
		}
	}
	check("live")

	// The sanitizer, which runs last, keeps only the highlighter's classes.
	got := mustEval[string](tb, `import('/static/js/markdown.js').then(m => {
		const d = document.createElement('div');
		d.append(m.sanitize('<span class="hljs-keyword evil">a</span><span class="title_ x">b</span><p class="hljs-keyword">c</p><code class="hljs language-go other">d</code>'));
		return d.innerHTML;
	})`)
	if want := `<span class="hljs-keyword">a</span><span class="title_">b</span><p>c</p><code class="hljs language-go">d</code>`; got != want {
		t.Errorf("the sanitizer makes %s, want %s", got, want)
	}

	// Colours: the theme's, a keyword unlike the plain code around it.
	colours := func() map[string]string {
		return mustEval[map[string]string](tb, `(() => {
			const c = document.querySelector('`+goBlock+`');
			return {code: getComputedStyle(c).color, keyword: getComputedStyle(c.querySelector('.hljs-keyword')).color, string: getComputedStyle(c.querySelector('.hljs-string')).color};
		})()`)
	}
	light := colours()
	if light["keyword"] != "rgb(160, 17, 94)" || light["keyword"] == light["code"] || light["string"] == light["code"] {
		t.Errorf("light theme: the go block's colours are %v, want the keyword rgb(160, 17, 94), unlike the code", light)
	}
	emulateScheme(t, tb, "dark")
	tb.mustWaitJS(10*time.Second, "the dark theme", bodyBg+` === `+js(dashDarkBg), themeState)
	dark := colours()
	if dark["keyword"] != "rgb(255, 122, 178)" || dark["keyword"] == dark["code"] {
		t.Errorf("dark theme: the go block's colours are %v, want the keyword rgb(255, 122, 178)", dark)
	}

	// Readable in both themes (axe-core, injected past the CSP, so after
	// the inertness checks above ran under it).
	axe := axeSource(t)
	if _, err := chromedp.Call(tb.ctx, page.SetBypassCSP, page.SetBypassCSPParams{Enabled: true}); err != nil {
		t.Fatal(err)
	}
	tb.Do("reload", chromedp.Reload())
	waitDashboard(t, tb)
	tb.mustWaitJS(15*time.Second, "after a reload: the go block is highlighted", `!!document.querySelector('`+goBlock+` span.hljs-keyword')`, markdownState)
	check("after a reload")
	for _, scheme := range []string{"dark", "light"} {
		emulateScheme(t, tb, scheme)
		want := map[string]string{"dark": dashDarkBg, "light": dashLightBg}[scheme]
		tb.mustWaitJS(10*time.Second, "the "+scheme+" theme", bodyBg+` === `+js(want), themeState)
		if v := seriousViolations(t, tb, axe); len(v) > 0 {
			t.Errorf("%s theme: %d serious or critical accessibility violations: %+v", scheme, len(v), v)
		}
	}
}
