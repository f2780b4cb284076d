package handlers_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/templates"
)

// TestAdminShowsStoreOutage: while the store refuses writes the page
// says so (since when, what waits); otherwise it says nothing of it.
func TestAdminShowsStoreOutage(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	failing := true
	since := time.Now().Add(-90 * time.Second)
	adm := &handlers.Admin{Sessions: s.reg.Admin(), Procs: s.mgr,
		Outage: func() (bool, time.Time, int) { return failing, since, 7 }}
	v := adm.View(t.Context(), sessions.AdminPrincipal, "/", handlers.UserFilter{})
	if !strings.Contains(v.StoreOutage, "refuses this node's writes since") || !strings.Contains(v.StoreOutage, "1m30s ago") ||
		!strings.Contains(v.StoreOutage, "7 history entries wait") {
		t.Fatalf("during an outage the page says %q", v.StoreOutage)
	}
	var page strings.Builder
	if err := templates.AdminBody(v).Render(t.Context(), &page); err != nil || !strings.Contains(page.String(), `data-testid="store-outage"`) {
		t.Fatalf("the rendered page has no store-outage notice (%v)", err)
	}
	failing = false
	if v := adm.View(t.Context(), sessions.AdminPrincipal, "/", handlers.UserFilter{}); v.StoreOutage != "" {
		t.Fatalf("without an outage the page says %q", v.StoreOutage)
	}
}

// TestAdminReadableValues: the admin page's sizes and times read as
// go-humanize writes them ("12 MiB", "now", "3 minutes ago"), each made
// from the exact value its title carries.
func TestAdminReadableValues(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	cc := s.chat()
	sid := cc.create()
	cc.call("slash.exec", map[string]any{"session_id": sid, "command": "/echo hi"})
	adm := &handlers.Admin{Sessions: s.reg.Admin(), Procs: s.mgr}
	v := adm.View(t.Context(), sessions.AdminPrincipal, "/", handlers.UserFilter{})

	at := func(exact string) time.Time {
		t.Helper()
		tm, err := time.Parse(time.RFC3339Nano, exact)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	size := func(exact string) uint64 {
		t.Helper()
		n, err := strconv.ParseUint(strings.TrimSuffix(exact, " bytes"), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	now := at(v.GeneratedAt)
	want := func(what, got, want string) {
		t.Helper()
		if got != want {
			t.Errorf("%s reads %q, want %q", what, got, want)
		}
	}
	want("dashgate's RSS", v.SelfRSS, humanize.IBytes(size(v.SelfRSSExact)))
	if len(v.Sessions) != 1 || len(v.Workers) != 1 {
		t.Fatalf("%d sessions and %d workers on the page, want 1 and 1", len(v.Sessions), len(v.Workers))
	}
	row := v.Sessions[0]
	want("created", row.Created, humanize.RelTime(at(row.CreatedExact), now, "ago", "from now"))
	want("last active", row.LastActive, humanize.RelTime(at(row.ActiveExact), now, "ago", "from now"))
	w := v.Workers[0]
	want("worker age", w.Age, humanize.RelTime(at(w.AgeExact), now, "", ""))
	want("worker RSS", w.RSS, humanize.IBytes(size(w.RSSExact)))
}
