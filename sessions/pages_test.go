package sessions

import (
	"strconv"
	"testing"
)

// pageViewer is a Viewer of a page, nothing more.
type pageViewer struct{ page string }

func (pageViewer) Deliver(*Event)        {}
func (pageViewer) Done() <-chan struct{} { return nil }
func (pageViewer) Principal() Principal  { return Principal{} }
func (v *pageViewer) Page() string       { return v.page }

// TestPagesOf: a session's tabs are its viewers counted once a page, a
// viewer that names no page alone: none, one of either kind, two of one
// page, two pages, and more pages than pagesOf keeps without allocating.
func TestPagesOf(t *testing.T) {
	viewers := func(pages ...string) map[Viewer]struct{} {
		m := map[Viewer]struct{}{}
		for _, p := range pages {
			m[&pageViewer{page: p}] = struct{}{}
		}
		return m
	}
	many := make([]string, 0, 24)
	for i := range 12 {
		many = append(many, "tab"+strconv.Itoa(i), "tab"+strconv.Itoa(i)) // a chat and a terminal socket each
	}
	for _, c := range []struct {
		name  string
		pages []string
		want  int
	}{
		{"none", nil, 0},
		{"one socket of a page", []string{"a"}, 1},
		{"one socket naming no page", []string{""}, 1},
		{"a tab's two sockets", []string{"a", "a"}, 1},
		{"two tabs", []string{"a", "b"}, 2},
		{"two unnamed sockets", []string{"", ""}, 2},
		{"a tab's two sockets and an unnamed one", []string{"a", "a", ""}, 2},
		{"twelve tabs of two sockets", many, 12},
	} {
		if got := pagesOf(viewers(c.pages...)); got != c.want {
			t.Errorf("%s: %d pages, want %d", c.name, got, c.want)
		}
	}
}
