package handlers_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/sessions"
)

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
