package e2e_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Issue 27: the chat's Export links download the current conversation as
// Markdown and as JSON, through the browser's own login cookie.
func TestExportLinksDownloadTheConversation(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)
	sendChat(t, tb, "/echo pomegranate seeds")
	waitEntryCount(t, tb, "slash_output", "pomegranate seeds", 1)
	tb.mustWaitJS(5*time.Second, "the export links are shown",
		`!document.querySelector('[data-testid="chat-export"]').hidden`, "")

	fetch := func(testid string) string {
		return mustEval[string](tb, `(async () => {
			const a = document.querySelector('[data-testid="`+testid+`"]');
			const r = await fetch(a.href);
			return r.status + ' ' + r.headers.get('Content-Type') + '\n' + await r.text();
		})()`)
	}
	md := fetch("export-markdown")
	if !strings.HasPrefix(md, "200 text/markdown") || !strings.Contains(md, "`/echo pomegranate seeds`") || !strings.Contains(md, "```\npomegranate seeds\n```") {
		t.Errorf("the Markdown export:\n%s", md)
	}
	js := fetch("export-json")
	if !strings.HasPrefix(js, "200 application/json") || !strings.Contains(js, `"kind":"slash_output"`) || !strings.Contains(js, `"text":"pomegranate seeds"`) {
		t.Errorf("the JSON export:\n%s", js)
	}
	if got := mustEval[bool](tb, `document.querySelector('[data-testid="export-markdown"]').hasAttribute('download')`); !got {
		t.Error("the Markdown link does not download")
	}
	// A new session's links follow it.
	first := mustEval[string](tb, `localStorage.getItem('dashgate.session')`)
	tb.Do("new session", chromedp.Click(chromedp.CSS(`[data-testid="new-session"]`)))
	tb.mustWaitJS(10*time.Second, "the export links follow the new session",
		`(id => id !== '`+first+`' && document.querySelector('[data-testid="export-json"]').href.includes('/sessions/' + id + '/export'))(localStorage.getItem('dashgate.session'))`, "")
}
