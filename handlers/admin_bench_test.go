package handlers

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/workers"
)

// BenchmarkAdminPage renders GET /admin (and /admin/api/sessions) with n
// idle sessions and no child: the registry snapshot, the process scans,
// dashgate's own stats and the template.
func BenchmarkAdminPage(b *testing.B) {
	for _, n := range []int{0, 1000} {
		reg := sessions.New(sessions.Config{MaxSessions: n + 1})
		for range n {
			if _, err := reg.Create(nil, sessions.NewSession{Title: "bench"}); err != nil {
				b.Fatal(err)
			}
		}
		mgr := workers.NewManager(workers.Config{Instance: "bench"})
		h := &Admin{Sessions: reg.Admin(), Procs: mgr, Metrics: NewMetrics(reg.Admin().List, mgr.CountByKind), Version: "bench",
			BasePath: func(*http.Request) string { return "/" }}
		r := chi.NewRouter()
		r.Route("/admin", h.Routes)
		for _, path := range []string{"/admin/", "/admin/api/sessions"} {
			b.Run(fmt.Sprintf("%s/%d", path, n), func(b *testing.B) {
				for b.Loop() {
					w := httptest.NewRecorder()
					r.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
					if w.Code != http.StatusOK {
						b.Fatalf("%s: %d", path, w.Code)
					}
					io.Copy(io.Discard, w.Body)
				}
			})
		}
	}
}

// benchUsers, benchPerUser: the many-users benchmarks' population, 100
// users × 100 sessions.
const benchUsers, benchPerUser = 100, 100

func benchUser(i int) string { return fmt.Sprintf("user-%03d", i) }

// benchAdminSessions lists a fixed snapshot; its actions are not called.
type benchAdminSessions struct {
	AdminSessions // nil: the actions panic
	list          []sessions.Info
}

func (f benchAdminSessions) List() []sessions.Info { return slices.Clone(f.list) }

// benchAdminProcs is a fixed process table, no unowned process.
type benchAdminProcs struct {
	AdminProcs // nil: ReapUnowned panics
	table      []workers.ProcInfo
}

func (f benchAdminProcs) Table(context.Context) []workers.ProcInfo { return slices.Clone(f.table) }
func (f benchAdminProcs) Unowned() []workers.Unowned               { return nil }
func (f benchAdminProcs) Containment() (string, string)            { return "fallback", "" }
func (f benchAdminProcs) SnapshotSelf() workers.Stats {
	return workers.Stats{RSSBytes: 64 << 20, NumFDs: 1000}
}
func (f benchAdminProcs) Snapshot(context.Context) ([]workers.ProcInfo, []workers.Unowned, bool) {
	return slices.Clone(f.table), nil, false
}

// manyUsers is 100 users × 100 sessions, every tenth with a worker in the
// process table (1,000 workers).
func manyUsers() ([]sessions.Info, []workers.ProcInfo) {
	now := time.Now()
	list := make([]sessions.Info, 0, benchUsers*benchPerUser)
	var table []workers.ProcInfo
	for i := range benchUsers * benchPerUser {
		in := sessions.Info{ID: fmt.Sprintf("%024x", i), Owner: benchUser(i % benchUsers), Title: "bench", State: sessions.StateDetached,
			CreatedAt: now.Add(-time.Duration(i) * time.Second), LastActive: now}
		if i%10 == 0 {
			in.WorkerPID, in.State = 100000+i, sessions.StateAttached
			table = append(table, workers.ProcInfo{PID: in.WorkerPID, Kind: workers.KindChat, SessionID: in.ID, State: "running",
				StartedAt: now, Stats: workers.Stats{RSSBytes: 12 << 20}})
		}
		list = append(list, in)
	}
	return list, table
}

// BenchmarkAdminManyUsers renders the admin page and its JSON with 100
// users × 100 sessions (10,000, 1,000 with a worker) from fixed snapshots:
// the cost of the handlers and the template, not of the registry's lock or
// the process scan. ?user= narrows the tables to one user's 100 sessions;
// /admin/api/users is the per-user figures alone.
func BenchmarkAdminManyUsers(b *testing.B) {
	list, table := manyUsers()
	h := &Admin{Sessions: benchAdminSessions{list: list}, Procs: benchAdminProcs{table: table}, Version: "bench",
		BasePath: func(*http.Request) string { return "/" }}
	r := chi.NewRouter()
	r.Route("/admin", h.Routes)
	for _, path := range []string{"/admin/", "/admin/?user=user-042", "/admin/api/sessions", "/admin/api/sessions?user=user-042", "/admin/api/users"} {
		b.Run(path, func(b *testing.B) {
			for b.Loop() {
				w := httptest.NewRecorder()
				r.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
				if w.Code != http.StatusOK {
					b.Fatalf("%s: %d", path, w.Code)
				}
			}
		})
	}
}

// BenchmarkUsersOf is the per-user figures alone over 10,000 sessions and
// 1,000 processes.
func BenchmarkUsersOf(b *testing.B) {
	list, table := manyUsers()
	for b.Loop() {
		if u := usersOf(list, table); len(u) != benchUsers {
			b.Fatalf("%d users", len(u))
		}
	}
}

// benchViewer is a socket's viewer carrying its principal, dropping events.
type benchViewer struct {
	p    sessions.Principal
	done chan struct{}
}

func (v *benchViewer) Deliver(*sessions.Event)       {}
func (v *benchViewer) Done() <-chan struct{}         { return v.done }
func (v *benchViewer) Principal() sessions.Principal { return v.p }

// BenchmarkSessionListManyUsers is one user's session.list over a chat
// socket, on the real registry holding 100 users × 100 sessions (made by
// each user's viewer, then detached: no worker, no terminal). The list
// walks every session to keep the caller's 100.
func BenchmarkSessionListManyUsers(b *testing.B) {
	reg := sessions.New(sessions.Config{MaxSessions: benchUsers*benchPerUser + 1, MaxViewed: benchPerUser, DetachedTTL: time.Hour})
	for u := range benchUsers {
		v := &benchViewer{p: sessions.Principal{User: benchUser(u)}, done: make(chan struct{})}
		for range benchPerUser {
			if _, err := reg.Create(v, sessions.NewSession{Title: "bench"}); err != nil {
				b.Fatal(err)
			}
		}
		reg.DetachViewer(v, workers.ReasonDetach)
	}
	me := sessions.Principal{User: benchUser(42)}
	chat := &Chat{Registry: reg, Version: "bench", Socket: SocketConfig{PingInterval: time.Hour, WriteTimeout: 10 * time.Second}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chat.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), me)))
	}))
	defer func() {
		srv.CloseClientConnections()
		srv.Close()
		reg.Shutdown(context.Background())
		reg.Wait()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, _, err := testkit.DialChat(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), testkit.DialOptions{ReadLimit: 8 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Drop(false)
	var res struct {
		Sessions []sessions.Info `json:"sessions"`
	}
	for b.Loop() {
		if err := c.Call(ctx, "session.list", map[string]any{}, &res); err != nil {
			b.Fatal(err)
		}
		if len(res.Sessions) != benchPerUser {
			b.Fatalf("%d sessions listed, want %d", len(res.Sessions), benchPerUser)
		}
	}
}

// BenchmarkAdminStallPage renders the admin page, its refreshed fragment
// and /admin/api/workers for the stall group's population (cmd/
// dashgate-bench, stall): 320 sessions of one user, 300 of them with a
// chat worker in the process table, from fixed snapshots, as a page
// polled again and again is (its rows found in the handler's cache), and
// the page of a new handler. bytes is the response's size.
func BenchmarkAdminStallPage(b *testing.B) {
	now := time.Now()
	var list []sessions.Info
	var table []workers.ProcInfo
	for i := range 320 {
		in := sessions.Info{ID: fmt.Sprintf("%024x", i), Owner: "bench", Title: fmt.Sprintf("stream %d", i), State: sessions.StateAttached,
			CreatedAt: now.Add(-time.Duration(i) * time.Second), LastActive: now}
		if i < 300 {
			in.WorkerPID = 100000 + i
			table = append(table, workers.ProcInfo{PID: in.WorkerPID, Kind: workers.KindChat, SessionID: in.ID, State: "running",
				StartedAt: now, Stats: workers.Stats{RSSBytes: 12 << 20}, ReadAt: now})
		}
		list = append(list, in)
	}
	router := func() http.Handler {
		h := &Admin{Sessions: benchAdminSessions{list: list}, Procs: benchAdminProcs{table: table}, Version: "bench",
			BasePath: func(*http.Request) string { return "/" }}
		r := chi.NewRouter()
		r.Route("/admin", h.Routes)
		return r
	}
	r := router()
	for _, path := range []string{"/admin/", "/admin/?fragment=1", "/admin/api/workers"} {
		b.Run(path, func(b *testing.B) {
			n := 0
			for b.Loop() {
				w := &countingWriter{h: http.Header{}}
				r.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
				n = w.n
			}
			b.ReportMetric(float64(n), "bytes")
		})
	}
	// The page when none of its rows was rendered before (a new handler
	// each time): the rows' cache and the texts' memos all miss.
	b.Run("/admin/ every row new", func(b *testing.B) {
		for b.Loop() {
			router().ServeHTTP(&countingWriter{h: http.Header{}}, httptest.NewRequest("GET", "/admin/", nil))
		}
	})
}

// countingWriter is a ResponseWriter that keeps nothing but the count of
// the bytes written.
type countingWriter struct {
	h http.Header
	n int
}

func (c *countingWriter) Header() http.Header         { return c.h }
func (c *countingWriter) Write(b []byte) (int, error) { c.n += len(b); return len(b), nil }
func (c *countingWriter) WriteHeader(int)             {}
