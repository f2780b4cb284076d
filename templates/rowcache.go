package templates

import (
	"bytes"
	"context"
	"io"
	"sync"

	"github.com/a-h/templ"
)

// rowContext is what a session's or a worker's row takes from the page
// besides the row itself: the node column, the forms' base path and
// query.
type rowContext struct {
	Cluster                   bool
	BasePath, Query, ThisNode string
}

func rowContextOf(v AdminView) rowContext {
	return rowContext{Cluster: v.Cluster, BasePath: v.BasePath, Query: v.Query, ThisNode: v.ThisNode}
}

// RowCache keeps the HTML of the admin page's session and worker rows
// from one render to the next: a row whose every value and page context
// are those of a row rendered before is written from here, not rendered
// again. Under 300 streaming sessions most rows of a page polled every
// few seconds are unchanged (their times are relative, in whole seconds
// and more; the workers' figures are refreshed in the background), and
// rendering them was most of a page's work. An entry is dropped once it
// went unused through two rotations; a rotation comes when the newer
// generation holds twice the rows of the page being rendered (at least
// minRows), so it holds at most about four pages' rows. Safe for
// concurrent use; the zero value is ready; a nil *RowCache renders every
// row.
type RowCache struct {
	mu       sync.Mutex
	sessions rowGens[sessionKey]
	workers  rowGens[workerKey]
}

type sessionKey struct {
	c rowContext
	s SessionRow
}

type workerKey struct {
	c rowContext
	w WorkerRow
}

// minRows is the fewest rows a generation of RowCache takes before it
// rotates.
const minRows = 256

// SessionRows is the sessions table's rows of the page v.
func (rc *RowCache) SessionRows(v AdminView) templ.Component {
	return cachedRows(rc, v, v.Sessions, func(rc *RowCache) *rowGens[sessionKey] { return &rc.sessions },
		func(c rowContext, s SessionRow) sessionKey { return sessionKey{c, s} }, renderSession)
}

// WorkerRows is the workers table's rows of the page v.
func (rc *RowCache) WorkerRows(v AdminView) templ.Component {
	return cachedRows(rc, v, v.Workers, func(rc *RowCache) *rowGens[workerKey] { return &rc.workers },
		func(c rowContext, w WorkerRow) workerKey { return workerKey{c, w} }, renderWorker)
}

// cachedRows writes rows, rows of the page v, each through cachedRow
// with its key in gens(rc) (every one rendered without rc).
func cachedRows[R any, K comparable](rc *RowCache, v AdminView, rows []R, gens func(*RowCache) *rowGens[K],
	key func(rowContext, R) K, render func(K) templ.Component) templ.Component {
	return templ.ComponentFunc(func(ctx context.Context, w io.Writer) error {
		var g *rowGens[K]
		if rc != nil {
			g = gens(rc)
		}
		c, limit := rowContextOf(v), pageRows(v)
		var scratch bytes.Buffer
		for _, r := range rows {
			if err := cachedRow(ctx, w, rc, g, key(c, r), limit, render, &scratch); err != nil {
				return err
			}
		}
		return nil
	})
}

func renderSession(k sessionKey) templ.Component { return sessionRow(k.c, k.s) }
func renderWorker(k workerKey) templ.Component   { return workerRow(k.c, k.w) }

// pageRows is how many rows a generation of RowCache takes, for the page
// v, before it rotates.
func pageRows(v AdminView) int { return max(2*(len(v.Sessions)+len(v.Workers)), minRows) }

// cachedRow writes the HTML g keeps for k to w, or renders row(k) into
// scratch, keeps a copy and writes it; with a nil rc it renders row(k).
// limit is the rows a generation takes before it rotates.
func cachedRow[K comparable](ctx context.Context, w io.Writer, rc *RowCache, g *rowGens[K], k K, limit int, row func(K) templ.Component, scratch *bytes.Buffer) error {
	if rc == nil {
		return row(k).Render(ctx, w)
	}
	rc.mu.Lock()
	html, ok := g.get(k)
	rc.mu.Unlock()
	if !ok {
		scratch.Reset()
		if err := row(k).Render(ctx, scratch); err != nil {
			return err
		}
		html = bytes.Clone(scratch.Bytes())
		rc.mu.Lock()
		g.put(k, html, limit)
		rc.mu.Unlock()
	}
	_, err := w.Write(html)
	return err
}

// rowGens is RowCache's two generations of one kind of row: cur takes
// new rows and the rows found in prev.
type rowGens[K comparable] struct {
	cur, prev map[K][]byte
}

func (g *rowGens[K]) get(k K) ([]byte, bool) {
	if html, ok := g.cur[k]; ok {
		return html, true
	}
	html, ok := g.prev[k]
	if ok {
		g.cur[k] = html // cur is not nil: prev was once
	}
	return html, ok
}

func (g *rowGens[K]) put(k K, html []byte, limit int) {
	if g.cur == nil || len(g.cur) >= limit {
		g.prev, g.cur = g.cur, make(map[K][]byte, limit)
	}
	g.cur[k] = html
}
