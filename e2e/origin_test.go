package e2e_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// attackerPage opens a WebSocket to dashgate's terminal from its own origin
// and records what happens to it in window.result.
const attackerPage = `<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>another site</title></head><body>
<script>
window.result = { events: [], done: false };
const ws = new WebSocket(%s);
ws.binaryType = 'arraybuffer';
ws.onopen = () => result.events.push('open');
ws.onmessage = (e) => result.events.push('message: ' + (typeof e.data === 'string' ? e.data : 'binary ' + e.data.byteLength));
ws.onerror = () => result.events.push('error');
ws.onclose = (e) => { result.events.push('close ' + e.code); result.done = true; };
</script>
</body></html>`

// Case 8: a page from another origin cannot open /ws/pty, even though the
// browser holds the dashgate cookie, and dashgate logs the refusal.
func TestOtherOriginCannotOpenTerminal(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "attacker")

	// The browser logs in: from now on it holds the login cookie.
	tb.Do("log in", chromedp.Navigate(d.LoginURL("/")))
	waitDashboard(t, tb)

	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, attackerPage, js("ws://"+d.Addr+"/ws/pty"))
	}))
	defer other.Close()
	_, port, _ := net.SplitHostPort(other.Listener.Addr().String())

	cases := []struct {
		name, host string
		// cookieSent: the browser sends the SameSite=Strict cookie, so only
		// the origin check can refuse the socket (403 and a WARN).
		// Cookies are per host, not per port, and 127.0.0.1:other is the
		// same site as 127.0.0.1:dashgate. localhost is another site: the
		// cookie stays home and the socket is refused as unauthenticated.
		cookieSent bool
	}{
		{name: "same site other port", host: "127.0.0.1", cookieSent: true},
		{name: "other site", host: "localhost", cookieSent: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			origin := "http://" + net.JoinHostPort(tc.host, port)
			mark := d.logMark()
			page := b.newTab(t, "attacker-"+tc.host)
			page.Do("open the other origin's page", chromedp.Navigate(origin+"/"))
			// Settled: closed, or (were it accepted) its hello arrived.
			page.mustWaitJS(10*time.Second, "the socket settled",
				`window.result && (window.result.done || window.result.events.some(e => e.startsWith('message')))`,
				`JSON.stringify(window.result)`)
			events := mustEval[[]string](page, `window.result.events`)
			for _, e := range events {
				if e == "open" || strings.HasPrefix(e, "message") {
					t.Errorf("the page at %s opened dashgate's terminal: events %q", origin, events)
					break
				}
			}

			// The refusal of the page's request (the dashboard's carry a
			// session_id; a socket is logged when it ends, so an earlier
			// accepted one may be logged late: match the status).
			wantStatus := http.StatusForbidden // authenticated by the cookie, refused by the origin check
			if !tc.cookieSent {
				wantStatus = http.StatusUnauthorized // the SameSite=Strict cookie stays home
			}
			if _, ok := d.waitLogSince(mark, 5*time.Second, func(r logRecord) bool {
				code, _ := r.Int("status")
				return r.Msg() == "request" && r.Str("path") == "/ws/pty" && r.Str("query") == "" && code == wantStatus
			}); !ok {
				var got []string
				for _, r := range d.Log.Records("")[mark:] {
					if r.Str("path") == "/ws/pty" {
						got = append(got, r.String())
					}
				}
				t.Errorf("no /ws/pty request from %s answered %d; records since the page opened:\n%s", origin, wantStatus, strings.Join(got, "\n"))
			}
			if !tc.cookieSent {
				return
			}
			rec, ok := d.waitLogSince(mark, 5*time.Second, func(r logRecord) bool {
				return r.Msg() == "cross-origin websocket refused" && r.Str("origin") == origin
			})
			if !ok {
				t.Fatalf("no WARN \"cross-origin websocket refused\" with origin %s; log:\n%s", origin, d.logText())
			}
			if rec.Str("level") != "WARN" || rec.Str("path") != "/ws/pty" {
				t.Errorf("refusal record: %s, want level WARN and path /ws/pty", rec)
			}
		})
	}
	// No terminal was started for the other origins: only the dashboard's.
	for _, s := range d.Sessions() {
		if s.Title == "terminal" {
			t.Errorf("a terminal-only session exists: %+v", s)
		}
	}
}
