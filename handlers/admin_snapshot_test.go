package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/workers"
)

// snapshotProcs is an AdminProcs that counts its fresh reads (Table) and
// answers Snapshot with a row read at readAt.
type snapshotProcs struct {
	fakeAdminProcs
	tables *atomic.Int32
	readAt time.Time
}

func (p snapshotProcs) Table(context.Context) []workers.ProcInfo {
	p.tables.Add(1)
	return []workers.ProcInfo{{PID: 10, Kind: workers.KindChat, SessionID: "s1", Stats: workers.Stats{RSSBytes: 2 << 20}}}
}

func (p snapshotProcs) Snapshot(context.Context) ([]workers.ProcInfo, []workers.Unowned, bool) {
	return []workers.ProcInfo{{PID: 10, Kind: workers.KindChat, SessionID: "s1", Stats: workers.Stats{RSSBytes: 1 << 20}, ReadAt: p.readAt}}, nil, true
}

// TestAdminReadsNoProcessTable: the admin page, its fragment,
// /admin/api/workers and /admin/api/users answer from the last snapshot
// (on a loaded machine a read of the process table takes seconds) and say
// how old its figures are: figures_at, "figures read 7s ago"; only
// /admin/api/workers?fresh=1 reads the table now.
func TestAdminReadsNoProcessTable(t *testing.T) {
	t.Parallel()
	var tables atomic.Int32
	readAt := time.Now().Add(-7 * time.Second)
	adm := &handlers.Admin{
		Sessions: fakeAdminSessions{list: func() []sessions.Info { return []sessions.Info{{ID: "s1", State: sessions.StateAttached}} }},
		Procs:    snapshotProcs{tables: &tables, readAt: readAt},
		BasePath: func(*http.Request) string { return "/" },
	}
	r := chi.NewRouter()
	adm.Routes(r)
	get := func(path string) string {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != 200 {
			t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
		return rec.Body.String()
	}
	for _, path := range []string{"/", "/?fragment=1"} {
		if page := get(path); !strings.Contains(page, `data-testid="figures-age">figures read 7s ago<`) {
			t.Errorf("GET %s does not say how old the figures are", path)
		}
	}
	get("/api/users")
	var ws struct{ Workers []handlers.WorkerJSON }
	if err := json.Unmarshal([]byte(get("/api/workers")), &ws); err != nil {
		t.Fatal(err)
	}
	if len(ws.Workers) != 1 || ws.Workers[0].RSSBytes != 1<<20 || ws.Workers[0].FiguresAt == nil || !ws.Workers[0].FiguresAt.Equal(readAt) {
		t.Fatalf("/api/workers = %+v; want the snapshot's row with figures_at %s", ws.Workers, readAt)
	}
	if n := tables.Load(); n != 0 {
		t.Fatalf("the admin page and its API read the process table %d times; want 0 (the snapshot)", n)
	}
	if err := json.Unmarshal([]byte(get("/api/workers?fresh=1")), &ws); err != nil {
		t.Fatal(err)
	}
	if n := tables.Load(); n != 1 || len(ws.Workers) != 1 || ws.Workers[0].RSSBytes != 2<<20 || ws.Workers[0].FiguresAt == nil || ws.Workers[0].FiguresAt.Before(readAt.Add(time.Second)) {
		t.Fatalf("?fresh=1: %d reads, workers %+v; want one read now", n, ws.Workers)
	}
}
