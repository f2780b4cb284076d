package web_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/web"
)

// acceptWS completes a real WebSocket handshake (101) and closes it.
var acceptWS = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	c.Close(websocket.StatusNormalClosure, "")
})

// Issue 26: a browser whose dashgate_node cookie names another node (nginx
// failed it over to this one) is re-pinned to this node, on the dashboard
// page and on the 101 of both WebSocket upgrades, with one DEBUG record;
// a cookie of this node, or of a node that is live by its heartbeats, is
// left alone; a browser without one gets one.
func TestNodeCookieRepinsToThisNode(t *testing.T) {
	t.Parallel()
	logs := &syncBuf{}
	s, err := web.New(web.Config{
		Token: "secret-token", NodeID: "b",
		NodeLive: func(id string) bool { return id == "c" }, // c heartbeats; a and bb are gone
		Log:      slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}, web.Handlers{Chat: acceptWS, Terminal: acceptWS, Metrics: ok, Admin: &handlers.Admin{}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	ours := regexp.MustCompile(`^b\.[0-9a-f]{16}$`)

	tests := []struct {
		name   string
		cookie string // "": none
		repin  bool   // a new cookie naming b is set, with a DEBUG record
		from   string // the node the record names
	}{
		{"another node's cookie is replaced", "a.0123456789abcdef", true, "a"},
		{"a node whose id starts with ours is another node", "bb.0123456789abcdef", true, "bb"},
		{"this node's cookie is kept", "b.0123456789abcdef", false, ""},
		{"a live node's cookie is kept: its sessions are there", "c.0123456789abcdef", false, ""},
		{"no cookie gets one", "", false, ""},
	}
	for _, tt := range tests {
		for _, path := range []string{"/", "/ws/chat", "/ws/pty"} {
			t.Run(tt.name+" "+path, func(t *testing.T) {
				jar, err := cookiejar.New(nil)
				if err != nil {
					t.Fatal(err)
				}
				if tt.cookie != "" {
					jar.SetCookies(u, []*http.Cookie{{Name: web.NodeCookie, Value: tt.cookie, Path: "/"}})
				}
				mark := len(repinRecords(t, logs))
				hdr := http.Header{"Authorization": {"Bearer secret-token"}}
				var res *http.Response
				if path == "/" {
					req, _ := http.NewRequest("GET", srv.URL+path, nil)
					req.Header = hdr
					res, err = (&http.Client{Jar: jar}).Do(req)
					if err != nil {
						t.Fatal(err)
					}
					res.Body.Close()
					if res.StatusCode != http.StatusOK {
						t.Fatalf("GET %s: %s", path, res.Status)
					}
				} else {
					ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
					defer cancel()
					var c *websocket.Conn
					c, res, err = websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+path,
						&websocket.DialOptions{HTTPClient: &http.Client{Jar: jar}, HTTPHeader: hdr})
					if err != nil {
						t.Fatalf("dial %s: %v", path, err)
					}
					c.CloseNow()
					if res.StatusCode != http.StatusSwitchingProtocols {
						t.Fatalf("dial %s: %s", path, res.Status)
					}
				}

				var set []string
				for _, c := range res.Cookies() {
					if c.Name == web.NodeCookie {
						set = append(set, c.Value)
						if c.Path != "/" || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.MaxAge != 30*24*3600 {
							t.Errorf("%s cookie attributes: %+v, want Path=/ HttpOnly SameSite=Lax Max-Age=30 days", web.NodeCookie, c)
						}
					}
				}
				wantSet := tt.cookie == "" || tt.repin
				switch {
				case !wantSet && len(set) != 0:
					t.Fatalf("cookie %q: response sets %s=%v, want it kept", tt.cookie, web.NodeCookie, set)
				case wantSet && (len(set) != 1 || !ours.MatchString(set[0])):
					t.Fatalf("cookie %q: response sets %s=%v, want one value b.<16 hex>", tt.cookie, web.NodeCookie, set)
				}
				var inJar string
				for _, c := range jar.Cookies(u) {
					if c.Name == web.NodeCookie {
						inJar = c.Value
					}
				}
				want := tt.cookie
				if wantSet {
					want = set[0]
				}
				if inJar != want {
					t.Errorf("the browser's cookie after the response: %q, want %q", inJar, want)
				}

				recs := repinRecords(t, logs)[mark:]
				switch {
				case !tt.repin && len(recs) != 0:
					t.Errorf("cookie %q: re-pin records %v, want none", tt.cookie, recs)
				case tt.repin && len(recs) != 1:
					t.Errorf("cookie %q: re-pin records %v, want one", tt.cookie, recs)
				case tt.repin:
					r := recs[0]
					if r.Str("level") != "DEBUG" || r.Str("from_node") != tt.from || r.Str("path") != path {
						t.Errorf("re-pin record %s, want level DEBUG, from_node %q, path %q", r, tt.from, path)
					}
					if strings.Contains(r.String(), tt.cookie) {
						t.Errorf("re-pin record %s logs the cookie's value", r)
					}
				}
			})
		}
	}
}

// repinRecords are the "node cookie re-pinned" records logged so far. The
// subtests run one after the other, so a count taken before a request
// delimits that request's records.
func repinRecords(t *testing.T, logs *syncBuf) []testkit.Record {
	t.Helper()
	all, err := testkit.ParseRecords(bytes.NewBufferString(logs.String()))
	if err != nil {
		t.Fatal(err)
	}
	var out []testkit.Record
	for _, r := range all {
		if r.Msg() == "node cookie re-pinned" {
			out = append(out, r)
		}
	}
	return out
}
