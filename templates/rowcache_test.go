package templates

import (
	"strconv"
	"strings"
	"testing"
)

// rowsPage is a page of n sessions, each with a worker.
func rowsPage(n int) AdminView {
	v := AdminView{BasePath: "/", Query: "?user=ann"}
	for i := range n {
		id := "s" + strconv.Itoa(i)
		v.Sessions = append(v.Sessions, SessionRow{ID: id, Title: "title " + id, Owner: "ann", State: "attached",
			Created: "3 seconds ago", CreatedExact: "2026-12-07T12:00:00Z", WorkerPID: 1000 + i})
		v.Workers = append(v.Workers, WorkerRow{PID: 1000 + i, Kind: "chat", SessionID: id, User: "ann", State: "running",
			RSS: "12 MiB", CPU: "0.5%", Descendants: "–"})
	}
	return v
}

// body renders v's body with the rows written through rc (nil: rendered
// each).
func body(t *testing.T, v AdminView, rc *RowCache) string {
	t.Helper()
	v.Rows = rc
	var b strings.Builder
	if err := AdminBody(v).Render(t.Context(), &b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestRowCacheAsRendered: a page whose rows come from the cache is the
// page rendered afresh, byte for byte, whatever changed since the rows
// were kept: a row's value, and the page's own values that a row shows
// (its base path, its filter, the node column and which node it is).
func TestRowCacheAsRendered(t *testing.T) {
	var rc RowCache
	v := rowsPage(3)
	if got, want := body(t, v, &rc), body(t, v, nil); got != want {
		t.Fatalf("first render through the cache differs from a render without it:\n%s\n%s", got, want)
	}
	changes := map[string]func(*AdminView){
		"a session's state":     func(v *AdminView) { v.Sessions[1].State = "detached" },
		"a session's title":     func(v *AdminView) { v.Sessions[0].Title = "renamed" },
		"a worker's CPU":        func(v *AdminView) { v.Workers[2].CPU = "97.0%" },
		"a worker's kind":       func(v *AdminView) { v.Workers[0].Kind = "pty" },
		"the base path":         func(v *AdminView) { v.BasePath = "/dash/" },
		"the filter":            func(v *AdminView) { v.Query = "" },
		"the node column":       func(v *AdminView) { v.Cluster, v.ThisNode = true, "a" },
		"which node this is":    func(v *AdminView) { v.Cluster, v.ThisNode = true, "b"; v.Sessions[0].Node = "a" },
		"a row added":           func(v *AdminView) { *v = rowsPage(4) },
		"the rows in new order": func(v *AdminView) { v.Sessions[0], v.Sessions[2] = v.Sessions[2], v.Sessions[0] },
	}
	for name, change := range changes {
		t.Run(name, func(t *testing.T) {
			v := rowsPage(3)
			body(t, v, &rc) // kept
			change(&v)
			if got, want := body(t, v, &rc), body(t, v, nil); got != want {
				t.Fatalf("after %s the cached page differs from a fresh render:\n%s\nwant\n%s", name, got, want)
			}
		})
	}
}

// TestRowCacheBounded: pages of ever new rows leave the cache at most
// about two generations of a page's limit, and rows asked again are
// found, not rendered.
func TestRowCacheBounded(t *testing.T) {
	var rc RowCache
	for round := range 50 {
		v := rowsPage(100)
		for i := range v.Sessions {
			v.Sessions[i].ID = "r" + strconv.Itoa(round) + "-" + strconv.Itoa(i)
		}
		body(t, v, &rc)
	}
	limit := pageRows(rowsPage(100))
	if n := len(rc.sessions.cur) + len(rc.sessions.prev); n > 2*limit {
		t.Fatalf("%d session rows kept after 50 pages of 100 new ones; at most %d", n, 2*limit)
	}
	v := rowsPage(5)
	body(t, v, &rc)
	kept := len(rc.sessions.cur)
	body(t, v, &rc)
	if len(rc.sessions.cur) != kept {
		t.Fatalf("the same page again added %d rows: they were rendered, not found", len(rc.sessions.cur)-kept)
	}
}
