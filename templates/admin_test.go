package templates

import (
	"context"
	"strings"
	"testing"
)

// TestAdminCellsEscaped renders the admin page's tables with words that
// are HTML (a session's title is its user's words, a user's name comes
// from a login): every cell shows them as text, none as markup.
func TestAdminCellsEscaped(t *testing.T) {
	const bad = `<img src=x onerror="alert(1)">&`
	const shown = `&lt;img src=x onerror=&#34;alert(1)&#34;&gt;&amp;`
	v := AdminView{BasePath: "/",
		Sessions: []SessionRow{{ID: "s1", Title: bad, Owner: bad, State: bad}},
		Workers:  []WorkerRow{{PID: 7, Kind: bad, SessionID: "s1", User: bad, State: bad, CgroupStats: bad}},
		Unowned:  []UnownedRow{{PID: 8, PPID: 1, State: bad, Marker: bad}},
		Users:    []UserRow{{Name: bad, Link: "/admin", RSS: bad}},
	}
	var page strings.Builder
	if err := AdminBody(v).Render(context.Background(), &page); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(page.String(), "<img") {
		t.Errorf("a cell wrote its words as markup:\n%s", page.String())
	}
	// The session's title, owner and state; the worker's kind, user, state
	// and cgroup figures; the unowned process's state and marker; the
	// user's name and RSS.
	if n := strings.Count(page.String(), shown); n < 10 {
		t.Errorf("%d cells show %q as text, want 10 or more:\n%s", n, bad, page.String())
	}
}

// TestAdminIcon: the admin page names its icon, the dashboard's, as the
// dashboard and the recordings pages do; without it a browser asks for
// /favicon.ico, which is a 404 in its console.
func TestAdminIcon(t *testing.T) {
	var page strings.Builder
	if err := Admin(AdminView{BasePath: "/base/"}).Render(context.Background(), &page); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), `<link rel="icon" type="image/svg+xml" href="/base/`) || !strings.Contains(page.String(), `css/icon.svg`) {
		t.Errorf("the admin page has no icon link:\n%.600s", page.String())
	}
}
