package web_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"golang.org/x/crypto/bcrypt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dashgate/dashgate/users"
	"github.com/dashgate/dashgate/web"
)

// TestWrongTokensThrottled: with a real --users-file, one client address
// gets ten tokens wrong (each a bcrypt comparison) and then 429 without
// one, while another client's good token and the throttled client's
// login cookie still get in.
func TestWrongTokensThrottled(t *testing.T) {
	t.Parallel()
	// A line at bcrypt's least cost: the race detector makes the default
	// cost take seconds per comparison.
	good, _, err := users.NewToken("alice")
	if err != nil {
		t.Fatal(err)
	}
	name, _, _ := strings.Cut(good, ".")
	hash, err := bcrypt.GenerateFromPassword([]byte(strings.TrimPrefix(good, name+".")), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "users")
	if err := os.WriteFile(path, []byte("alice:"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	uf, err := users.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	srv, logs, s := identServerS(t, web.Config{Users: uf, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, httptest.NewServer)
	web.SetThrottleRefill(s, time.Hour)
	from := func(client string) map[string]string { return map[string]string{"X-Forwarded-For": client} }
	bearer := func(client, tok string) map[string]string {
		h := from(client)
		h["Authorization"] = "Bearer " + tok
		return h
	}

	// The guessing client logs in properly first: its cookie must outlive
	// the throttle.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/?token="+good, nil)
	req.Header.Set("Accept", "text/html")
	res, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	var cookie *http.Cookie
	for _, c := range res.Cookies() {
		if strings.HasPrefix(c.Name, web.LoginCookiePrefix) {
			cookie = c
		}
	}
	if cookie == nil {
		t.Fatal("the login set no cookie")
	}

	wrong := "alice." + strings.Repeat("0", 48)
	for i := range 10 {
		if code, _ := ask(t, http.DefaultClient, srv.URL, "/ws/chat", bearer("10.0.0.1", wrong)); code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i+1, code)
		}
	}
	if code, _ := ask(t, http.DefaultClient, srv.URL, "/ws/chat", bearer("10.0.0.1", wrong)); code != http.StatusTooManyRequests {
		t.Fatalf("the 11th wrong token: %d, want 429", code)
	}
	if code, _ := ask(t, http.DefaultClient, srv.URL, "/ws/chat?token="+wrong, from("10.0.0.1")); code != http.StatusTooManyRequests {
		t.Fatalf("a wrong ?token= once throttled: %d, want 429", code)
	}
	if code, body := ask(t, http.DefaultClient, srv.URL, "/ws/chat", bearer("10.0.0.2", good)); code != http.StatusOK || !strings.Contains(body, `user="alice"`) {
		t.Fatalf("another client's good token: %d %s, want alice", code, body)
	}
	if code, body := ask(t, http.DefaultClient, srv.URL, "/ws/chat", from("10.0.0.1"), cookie); code != http.StatusOK || !strings.Contains(body, `user="alice"`) {
		t.Fatalf("the throttled client's login cookie: %d %s, want alice", code, body)
	}
	if n := len(logs.Records("wrong tokens: client throttled")); n != 1 {
		t.Fatalf("%d throttle WARN records, want 1 (rate limited)", n)
	}
	if strings.Contains(logs.String(), strings.Repeat("0", 48)) || strings.Contains(logs.String(), good) {
		t.Fatal("the log carries a token")
	}
}
