package sessions

import "slices"

// Pages: a browser tab opens a chat socket and a terminal socket, each a
// Viewer of the session it shows. Counted as sockets (Info.Viewers) one tab
// is two viewers; a Viewer that names its page (PageViewer, the `page`
// query parameter of both sockets, docs/PROTOCOL.md §7) lets Info.Pages
// count each tab once.

// PageViewer is a Viewer that knows the page (browser tab) it belongs to.
type PageViewer interface {
	Viewer
	// Page is the id its page gave both of its sockets ("" for none).
	Page() string
}

// maxPageID bounds the page ids kept (longer ones are cut).
const maxPageID = 64

// PageOf is the page id of v, "" when it names none.
func PageOf(v Viewer) string {
	pv, ok := v.(PageViewer)
	if !ok {
		return ""
	}
	p := pv.Page()
	if len(p) > maxPageID {
		p = p[:maxPageID]
	}
	return p
}

// pagesOf counts the pages among viewers: viewers of one page count once,
// a viewer that names no page counts alone. It runs under the registry's
// lock, for every session a list shows: it allocates nothing for a
// session's few viewers (a map a session was a third of the lock's hold
// in a list of 300).
func pagesOf(viewers map[Viewer]struct{}) int {
	if len(viewers) <= 1 {
		return len(viewers) // one viewer is one page, named or not
	}
	n := 0
	var few [8]string
	seen := few[:0] // the pages counted; a session has a viewer or two a tab
	for v := range viewers {
		p := PageOf(v)
		if p == "" {
			n++
			continue
		}
		if !slices.Contains(seen, p) {
			seen = append(seen, p)
			n++
		}
	}
	return n
}

// Page implements PageViewer: the page its socket named.
func (a *Attachment) Page() string { return a.page }
