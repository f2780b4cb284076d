package handlers_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/workers"
)

// fakeAdminSessions is an AdminSessions listing what list returns; its
// actions panic.
type fakeAdminSessions struct {
	handlers.AdminSessions // nil: other methods panic
	list                   func() []sessions.Info
}

func (f fakeAdminSessions) List() []sessions.Info { return f.list() }
func (f fakeAdminSessions) Spares() []string      { return nil }

// fakeAdminProcs is an AdminProcs whose table is what table returns, with
// no unowned process, in the fallback containment; ReapUnowned panics.
type fakeAdminProcs struct {
	handlers.AdminProcs // nil: other methods panic
	table               func() []workers.ProcInfo
}

func (f fakeAdminProcs) Table(context.Context) []workers.ProcInfo { return f.table() }
func (f fakeAdminProcs) Unowned() []workers.Unowned               { return nil }
func (f fakeAdminProcs) Containment() (mode, dir string)          { return "fallback", "" }
func (f fakeAdminProcs) Snapshot(context.Context) ([]workers.ProcInfo, []workers.Unowned, bool) {
	return f.table(), nil, false
}
func (f fakeAdminProcs) SnapshotSelf() workers.Stats { return workers.SelfStats(context.Background()) }

// The admin plots' samples: one at start and one per interval, with the
// live sessions, the workers and their RSS, and the closes since the
// previous sample; the ring keeps SampleWindow of them, oldest first.
func TestAdminSamplesKeepTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var live atomic.Int32
		live.Store(1)
		metrics := handlers.NewMetrics(func() []sessions.Info { return nil }, func() map[workers.Kind]int { return nil })
		adm := &handlers.Admin{
			Sessions: fakeAdminSessions{list: func() []sessions.Info { return make([]sessions.Info, live.Load()) }},
			Procs: fakeAdminProcs{table: func() []workers.ProcInfo {
				return []workers.ProcInfo{{PID: 10, Stats: workers.Stats{RSSBytes: 1 << 20}}, {PID: 11, Stats: workers.Stats{RSSBytes: 3 << 20}}}
			}},
			Metrics: metrics,
		}
		const every = time.Minute
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { adm.Sample(ctx, every); close(done) }()

		type page struct {
			IntervalMS int64             `json:"interval_ms"`
			Samples    []handlers.Sample `json:"samples"`
		}
		get := func() page {
			r := chi.NewRouter()
			adm.Routes(r)
			rec := httptest.NewRecorder()
			r.ServeHTTP(rec, httptest.NewRequest("GET", "/api/samples", nil))
			var p page
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
				t.Fatalf("%s: %v", rec.Body, err)
			}
			return p
		}
		// advance moves the bubble's clock by d (no real wait) and lets the
		// sampler take what fell due.
		advance := func(d time.Duration) { <-time.After(d); synctest.Wait() }
		start := time.Now()
		synctest.Wait()
		if p := get(); len(p.Samples) != 1 || p.IntervalMS != every.Milliseconds() || p.Samples[0].Sessions != 1 ||
			p.Samples[0].Workers != 2 || p.Samples[0].RSSBytes != 4<<20 {
			t.Fatalf("at start: %+v", p)
		}

		live.Store(3)
		metrics.SessionClosed(sessions.EndAdminReap)
		metrics.SessionClosed(sessions.EndAdminReap)
		advance(every)
		p := get()
		if last := p.Samples[len(p.Samples)-1]; last.Sessions != 3 || last.Closes["admin_reap"] != 2 {
			t.Fatalf("after two reaps: %+v", last)
		}
		advance(every)
		if last := get().Samples; last[len(last)-1].Closes["admin_reap"] != 0 {
			t.Fatalf("closes are counted per interval, not since start: %+v", last[len(last)-1])
		}

		// Past the window: the ring holds the last SampleWindow of samples.
		advance(handlers.SampleWindow)
		p = get()
		if want := int(handlers.SampleWindow / every); len(p.Samples) != want {
			t.Fatalf("%d samples kept, want %d", len(p.Samples), want)
		}
		for i := 1; i < len(p.Samples); i++ {
			if !p.Samples[i].At.After(p.Samples[i-1].At) {
				t.Fatalf("samples not oldest first: %v then %v", p.Samples[i-1].At, p.Samples[i].At)
			}
		}
		if oldest := p.Samples[0].At; oldest.Before(start.Add(2 * every)) {
			t.Fatalf("the oldest sample (%v) is older than the window", oldest.Sub(start))
		}
		cancel()
		<-done
	})
}
