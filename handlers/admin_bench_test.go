package handlers

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"

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
			if _, err := reg.Create(nil, "bench", false); err != nil {
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
