package e2e_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The top bar names the signed-in user; a non-admin sees no admin link,
// an admin does; Log out ends the browser's login cookie, after which the
// page asks for a token again (issue 42).
func TestWhoAmIAndLogout(t *testing.T) {
	file := filepath.Join(t.TempDir(), "users")
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	aliceURL, aliceToken := userAdd(t, file, "alice", "http://"+addr+"/")
	carolURL, carolToken := userAdd(t, file, "carol", "http://"+addr+"/")
	d := startDashgate(t, "--users-file", file, "--addr", addr, "--admin-users", "carol")
	d.secrets = append(d.secrets, aliceToken, carolToken)
	b := newBrowser(t)

	whoami := `document.querySelector('[data-testid="whoami"]')?.textContent ?? ''`
	adminLink := exists(byTestID("admin-link"))

	alice := b.newTab(t, "alice")
	alice.Do("open alice's login URL", chromedp.Navigate(aliceURL))
	waitDashboard(t, alice)
	if got := mustEval[string](alice, whoami); got != "alice" {
		t.Errorf("alice's top bar names %q, want alice", got)
	}
	if mustEval[bool](alice, adminLink) {
		t.Errorf("alice, no admin, sees an admin link")
	}
	if names := loginCookies(alice, d.URL("/")); len(names) != 1 {
		t.Fatalf("alice's login cookies before Log out: %v, want one", names)
	}
	// A second tab of her browser, on the dashboard too.
	other := b.newTab(t, "alice-other")
	other.Do("open the dashboard in another tab", chromedp.Navigate(d.URL("/")))
	waitDashboard(t, other)

	alice.Do("log out", chromedp.Click(chromedp.CSS(byTestID("logout"))))
	alice.mustWaitJS(15*time.Second, "the login page after Log out", exists(byTestID("login-token")), dashboardState)
	// The other tab's sockets are closed with the login; it shows the
	// login page rather than a shell that still answers.
	other.mustWaitJS(20*time.Second, "the other tab on the login page", exists(byTestID("login-token"))+` && !window.dashgate`, dashboardState)
	// Both say why (a second new-user trial could not tell a logout from
	// an expired login).
	for _, tb := range []*tab{alice, other} {
		if !mustEval[bool](tb, visible(byTestID("login-logged-out"))) {
			t.Errorf("%s: the login page after Log out does not say it logged out", tb.name)
		}
	}
	if names := loginCookies(alice, d.URL("/")); len(names) != 0 {
		t.Errorf("alice's login cookies after Log out: %v, want none", names)
	}
	if got := mustEval[string](alice, `document.querySelector('[data-testid="login"]').textContent`); !strings.Contains(got, "dashgate user add") || strings.Contains(got, "--token") {
		t.Errorf("the login page with users reads %q, want it to ask for the user's own token, not --token", got)
	}
	alice.Do("reload", chromedp.Reload())
	alice.mustWaitJS(15*time.Second, "still the login page after a reload", exists(byTestID("login-token"))+` && !window.dashgate`, dashboardState)
	if _, ok := d.waitLog(5*time.Second, func(r logRecord) bool { return r.Msg() == "logout" && r.Str("user") == "alice" }); !ok {
		t.Errorf("no logout record of alice")
	}

	carol := b.newTab(t, "carol")
	carol.Do("open carol's login URL", chromedp.Navigate(carolURL))
	waitDashboard(t, carol)
	if got := mustEval[string](carol, whoami); got != "carol" {
		t.Errorf("carol's top bar names %q, want carol", got)
	}
	if !mustEval[bool](carol, adminLink) {
		t.Errorf("carol, an admin, sees no admin link")
	}

	// A logout from another site's page is refused (and logs nobody out).
	c := httpClient(t)
	req, err := http.NewRequest(http.MethodPost, d.URL("/logout"), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Origin", "https://elsewhere.example")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("a cross-site POST /logout: %s, want 403", res.Status)
	}
}

// With the one token and no users the top bar names nobody, and the
// admin link is there (that token opens the admin page too).
func TestWhoAmIOneToken(t *testing.T) {
	d := startDashgate(t)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)
	if mustEval[bool](tb, exists(byTestID("whoami"))) {
		t.Errorf("with one token the top bar names a user: %q", mustEval[string](tb, `document.querySelector('[data-testid="whoami"]').textContent`))
	}
	if !mustEval[bool](tb, exists(byTestID("admin-link"))) {
		t.Errorf("with one token (the admin's too) there is no admin link")
	}
	if !strings.Contains(mustEval[string](tb, `document.querySelector('[data-testid="logout"]')?.textContent ?? ''`), "Log out") {
		t.Errorf("no Log out button with one token")
	}
}

// With a separate admin token the dashboard shows no admin link until
// this browser logged in to /admin with it; then it does (the admin
// cookie is on the admin path, which the dashboard's requests never
// carry: a new user's trial found the link missing for good), and Log
// out takes it away again.
func TestAdminLinkSeparateAdminToken(t *testing.T) {
	adminToken := "e2e-admin-" + strings.Repeat("a", 24)
	file := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(file, []byte(adminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDashgate(t, "--admin-token-file", file)
	d.secrets = append(d.secrets, adminToken)
	b := newBrowser(t)
	tb := b.newTab(t, "dashboard")
	openDashboard(t, d, tb)
	adminLink := exists(byTestID("admin-link"))
	if mustEval[bool](tb, adminLink) {
		t.Fatal("an admin link before the admin login")
	}
	tb.Do("log in to the admin page", chromedp.Navigate(d.URL("/admin/?token="+adminToken)))
	tb.mustWaitJS(15*time.Second, "the admin page", exists(`[data-testid="admin-body"]`), dashboardState)
	tb.Do("back to the dashboard", chromedp.Navigate(d.URL("/")))
	waitDashboard(t, tb)
	if !mustEval[bool](tb, adminLink) {
		t.Fatal("no admin link on the dashboard after the admin login")
	}
	tb.Do("log out", chromedp.Click(chromedp.CSS(byTestID("logout"))))
	tb.mustWaitJS(15*time.Second, "the login page after Log out", exists(byTestID("login-token")), dashboardState)
	tb.Do("log in to the dashboard again", chromedp.Navigate(d.LoginURL("/")))
	waitDashboard(t, tb)
	if mustEval[bool](tb, adminLink) {
		t.Error("an admin link after Log out and a new dashboard login")
	}
}
