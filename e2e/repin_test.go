package e2e_test

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Issue 26: on a node of a cluster the dashboard makes one request after
// each resume (GET healthz), so that the node now holding the session can
// re-pin the browser's dashgate_node cookie (the socket that resumed was
// opened before; see deploy/cluster/README.md). A node alone (no node in
// the header) makes none.
func TestDashboardRepinsAfterResume(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		repin bool
	}{
		{"a node of a cluster", []string{"--node-id", "solo"}, true},
		{"a node alone", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := startDashgate(t, tc.args...)
			b := newBrowser(t)
			tb := b.newTab(t, "dashboard")
			openDashboard(t, d, tb)
			sendChat(t, tb, "/echo before the reload")
			waitEntryCount(t, tb, "slash_output", "before the reload", 1)
			mark := d.Log.Mark()
			tb.Do("reload", chromedp.Reload())
			waitDashboard(t, tb)
			waitEntryCount(t, tb, "slash_output", "before the reload", 1) // resumed
			healthz := func(r logRecord) bool { return r.Msg() == "request" && r.Str("path") == "/healthz" }
			if tc.repin {
				if _, ok := d.waitLogSince(mark, 10*time.Second, healthz); !ok {
					t.Fatalf("no GET /healthz after the resume:\n%s", d.logText())
				}
				return
			}
			// The resume's own records come after its request: once the
			// session is shown, a fetch made in show() would have been
			// logged by the time an RPC after it is answered.
			mustEval[bool](tb, `window.dashgate.call('model.list', {}).then(() => true)`)
			for _, r := range d.Log.Records("request") {
				if r["path"] == "/healthz" {
					t.Errorf("a node alone fetched healthz after a resume: %v", r)
				}
			}
		})
	}
}
