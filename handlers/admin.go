package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/go-chi/chi/v5"

	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/templates"
	"github.com/dashgate/dashgate/workers"
)

// AdminSessions is what the admin page needs of the session registry. A
// session's children are reaped through it (ReapWorker), so the session
// records why they ended.
type AdminSessions interface {
	List() []sessions.Info
	// The actions act for the admin given (the request's principal): the
	// close records name it (by=).
	Close(by sessions.Principal, sid string, reason sessions.EndReason) (bool, error)
	ReapDetached(by sessions.Principal) int
	ReapWorker(by sessions.Principal, pid int) error
}

// AdminProcs is what the admin page needs of the worker manager: snapshots,
// and reaping a process that no session owns.
type AdminProcs interface {
	Table(ctx context.Context) []workers.ProcInfo
	Unowned() []workers.Unowned
	ReapUnowned(pid int) error
	// Containment is "cgroup" with the instance's cgroup directory, or
	// "fallback" with "".
	Containment() (mode, dir string)
}

// Admin serves /admin, its actions and /admin/api (PROTOCOL.md §5). Auth
// and cross-origin protection are the web middleware's.
type Admin struct {
	Sessions AdminSessions
	Procs    AdminProcs
	Metrics  *Metrics
	Log      *slog.Logger
	Version  string
	BasePath func(*http.Request) string // the request's base path, "/..."

	samples sampleRing // the plots' samples (samples.go), filled by Sample
}

// Routes mounts the admin endpoints on r (relative to /admin).
func (h *Admin) Routes(r chi.Router) {
	r.Get("/", h.page)
	r.Get("/api/sessions", h.apiSessions)
	r.Get("/api/workers", h.apiWorkers)
	r.Get("/api/unowned", h.apiUnowned)
	r.Get("/api/samples", h.apiSamples)
	r.Post("/sessions/reap-detached", h.reapDetached)
	r.Post("/sessions/{id}/reap", h.reapSession)
	r.Post("/workers/{pid}/reap", h.reapWorker)
}

// WorkerJSON is a worker in /admin/api/workers.
type WorkerJSON struct {
	PID        int       `json:"pid"`
	Kind       string    `json:"kind"`
	SessionID  string    `json:"session_id"`
	State      string    `json:"state"`
	StartedAt  time.Time `json:"started_at"`
	RSSBytes   uint64    `json:"rss_bytes"`
	CPUPercent float64   `json:"cpu_percent"`
	NumFDs     int32     `json:"num_fds"`
	NumThreads int32     `json:"num_threads"`
	Children   []int     `json:"children"`
	// Cgroup and its figures, in cgroup mode only; a figure whose
	// controller is not enabled is omitted.
	Cgroup       string `json:"cgroup,omitempty"`
	CgroupCPUUs  *int64 `json:"cgroup_cpu_usec,omitempty"`
	CgroupMemory *int64 `json:"cgroup_memory_bytes,omitempty"`
	CgroupPids   *int64 `json:"cgroup_pids,omitempty"`
}

func (h *Admin) workersJSON(ctx context.Context) []WorkerJSON {
	table := h.Procs.Table(ctx)
	out := make([]WorkerJSON, 0, len(table))
	for _, p := range table {
		children := p.Descendants
		if children == nil {
			children = []int{}
		}
		row := WorkerJSON{PID: p.PID, Kind: string(p.Kind), SessionID: p.SessionID, State: p.State, StartedAt: p.StartedAt,
			RSSBytes: p.RSSBytes, CPUPercent: p.CPUPercent, NumFDs: p.NumFDs, NumThreads: p.NumThreads, Children: children}
		if p.Cgroup != "" {
			row.Cgroup = p.Cgroup
			row.CgroupCPUUs, row.CgroupMemory, row.CgroupPids = known(p.CgroupStats.CPUUsec), known(p.CgroupStats.MemoryBytes), known(p.CgroupStats.Pids)
		}
		out = append(out, row)
	}
	slices.SortFunc(out, func(a, b WorkerJSON) int { return a.PID - b.PID })
	return out
}

// known is &v, or nil for -1 (a figure that could not be read).
func known(v int64) *int64 {
	if v < 0 {
		return nil
	}
	return &v
}

// cgroupSummary is a child cgroup's figures for the page: "cpu 1.2s · 12 MiB · 3 pids",
// as far as they are known; "–" in the fallback.
func cgroupSummary(p workers.ProcInfo) string {
	if p.Cgroup == "" {
		return "–"
	}
	s := p.CgroupStats
	var parts []string
	if s.CPUUsec >= 0 {
		parts = append(parts, "cpu "+(time.Duration(s.CPUUsec)*time.Microsecond).Round(time.Millisecond).String())
	}
	if s.MemoryBytes >= 0 {
		parts = append(parts, humanize.IBytes(uint64(s.MemoryBytes)))
	}
	if s.Pids >= 0 {
		parts = append(parts, fmt.Sprintf("%d pids", s.Pids))
	}
	return strings.Join(parts, " · ")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func (h *Admin) apiSessions(w http.ResponseWriter, r *http.Request) {
	// sessions.Info is the JSON shape of PROTOCOL.md §5.
	writeJSON(w, http.StatusOK, map[string]any{"sessions": h.Sessions.List()})
}

func (h *Admin) apiWorkers(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"workers": h.workersJSON(r.Context())})
}

func (h *Admin) apiUnowned(w http.ResponseWriter, r *http.Request) {
	type row struct {
		PID    int    `json:"pid"`
		PPID   int    `json:"ppid"`
		State  string `json:"state"`
		Marker string `json:"marker,omitempty"`
	}
	out := []row{}
	for _, u := range h.Procs.Unowned() {
		out = append(out, row{u.PID, u.PPID, u.State, u.Marker})
	}
	writeJSON(w, http.StatusOK, map[string]any{"unowned": out})
}

// View builds the admin page's view: the session and process snapshots are
// taken first, the stats read afterwards, never under the registry lock.
func (h *Admin) View(ctx context.Context, base string) templates.AdminView {
	now := time.Now()
	list := h.Sessions.List()
	procs := h.Procs.Table(ctx)
	unowned := h.Procs.Unowned()
	self := workers.SelfStats(ctx)

	v := templates.AdminView{
		BasePath: base, Version: h.Version, GeneratedAt: now.UTC().Format(time.RFC3339Nano),
		SelfRSS: humanize.IBytes(self.RSSBytes), SelfRSSExact: fmt.Sprintf("%d bytes", self.RSSBytes),
		SelfFDs: self.NumFDs, Goroutines: runtime.NumGoroutine(),
	}
	v.Containment, v.ContainmentDir = h.Procs.Containment()
	states := map[string]int{}
	for _, s := range list {
		states[string(s.State)]++
		v.Sessions = append(v.Sessions, templates.SessionRow{
			ID: s.ID, Title: s.Title, State: string(s.State), Viewers: s.Pages, Sockets: s.Viewers,
			Created: humanAgo(now, s.CreatedAt), CreatedExact: s.CreatedAt.UTC().Format(time.RFC3339Nano),
			LastActive: humanAgo(now, s.LastActive), ActiveExact: s.LastActive.UTC().Format(time.RFC3339Nano),
			Running: s.Running, WorkerPID: s.WorkerPID, PTYPID: s.PTYPID,
		})
	}
	kinds := map[string]int{}
	slices.SortFunc(procs, func(a, b workers.ProcInfo) int { return a.PID - b.PID })
	for _, p := range procs {
		kinds[string(p.Kind)]++
		v.Workers = append(v.Workers, templates.WorkerRow{
			PID: p.PID, Kind: string(p.Kind), SessionID: p.SessionID, State: p.State,
			Age: humanAge(now, p.StartedAt), AgeExact: p.StartedAt.UTC().Format(time.RFC3339Nano),
			RSS: humanize.IBytes(p.RSSBytes), RSSExact: fmt.Sprintf("%d bytes", p.RSSBytes),
			CPU: fmt.Sprintf("%.1f%%", p.CPUPercent), FDs: p.NumFDs, Threads: p.NumThreads, Descendants: p.Descendants,
			Cgroup: p.Cgroup, CgroupStats: cgroupSummary(p),
		})
	}
	for _, u := range unowned {
		v.Unowned = append(v.Unowned, templates.UnownedRow{PID: u.PID, PPID: u.PPID, State: u.State, Marker: u.Marker})
	}
	v.SessionsByState = countsOf(states)
	v.WorkersByKind = countsOf(kinds)
	if h.Metrics != nil {
		byEnd, byReason := h.Metrics.closeCounts()
		for _, c := range byEnd {
			v.SessionCloses = append(v.SessionCloses, templates.Count{Label: c.label, N: c.n})
		}
		for _, c := range byReason {
			v.WorkerCloses = append(v.WorkerCloses, templates.Count{Label: c.label, N: c.n})
		}
	}
	return v
}

func countsOf(m map[string]int) []templates.Count {
	out := make([]templates.Count, 0, len(m))
	for k, n := range m {
		out = append(out, templates.Count{Label: k, N: n})
	}
	slices.SortFunc(out, func(a, b templates.Count) int { return strings.Compare(a.Label, b.Label) })
	return out
}

func (h *Admin) page(w http.ResponseWriter, r *http.Request) {
	v := h.View(r.Context(), h.BasePath(r))
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if r.URL.Query().Get("fragment") == "1" {
		templates.AdminBody(v).Render(r.Context(), w)
		return
	}
	templates.Admin(v).Render(r.Context(), w)
}

// done answers an action: 303 to /admin for a form, JSON when asked for.
func (h *Admin) done(w http.ResponseWriter, r *http.Request, status int, body map[string]any) {
	if strings.Contains(r.Header.Get("Accept"), "application/json") || status == http.StatusNotFound {
		if status == http.StatusNotFound && !strings.Contains(r.Header.Get("Accept"), "application/json") {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		writeJSON(w, status, body)
		return
	}
	http.Redirect(w, r, h.BasePath(r)+"admin", http.StatusSeeOther)
}

func (h *Admin) audit(r *http.Request, target, result string) {
	if h.Log != nil {
		h.Log.Info("admin reap", "remote_addr", r.RemoteAddr, "target", target, "result", result)
	}
}

func (h *Admin) reapSession(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	closed, err := h.Sessions.Close(PrincipalFrom(r.Context()), id, sessions.EndAdminReap)
	target := "session " + id
	switch {
	case errors.Is(err, sessions.ErrNotFound), err == nil && !closed:
		h.audit(r, target, "not_found")
		h.done(w, r, http.StatusNotFound, map[string]any{"reaped": false, "error": "session not found"})
	case err != nil:
		h.audit(r, target, "error")
		httpError(w, r, h.logger(), err)
	default:
		h.audit(r, target, "reaped")
		h.done(w, r, http.StatusOK, map[string]any{"reaped": true, "end_reason": sessions.EndAdminReap})
	}
}

func (h *Admin) logger() *slog.Logger {
	if h.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return h.Log
}

func (h *Admin) reapDetached(w http.ResponseWriter, r *http.Request) {
	n := h.Sessions.ReapDetached(PrincipalFrom(r.Context()))
	h.audit(r, "detached sessions", fmt.Sprintf("reaped %d", n))
	h.done(w, r, http.StatusOK, map[string]any{"reaped": n > 0, "count": n, "end_reason": sessions.EndAdminReap})
}

func (h *Admin) reapWorker(w http.ResponseWriter, r *http.Request) {
	raw := chi.URLParam(r, "pid")
	pid, err := strconv.Atoi(raw)
	target := "worker " + raw
	if err != nil || pid <= 1 {
		h.audit(r, target, "not_found")
		h.done(w, r, http.StatusNotFound, map[string]any{"reaped": false, "error": "no such worker"})
		return
	}
	err = h.Sessions.ReapWorker(PrincipalFrom(r.Context()), pid)
	if err == nil {
		h.audit(r, target, "reaped")
		h.done(w, r, http.StatusOK, map[string]any{"reaped": true, "reason": workers.ReasonAdminReap})
		return
	}
	if !errors.Is(err, sessions.ErrNotFound) {
		h.audit(r, target, "error")
		httpError(w, r, h.logger(), err)
		return
	}
	if err := h.Procs.ReapUnowned(pid); err != nil {
		h.audit(r, target, "not_found")
		h.done(w, r, http.StatusNotFound, map[string]any{"reaped": false, "error": "not a worker nor a descendant of dashgate"})
		return
	}
	h.audit(r, "unowned "+raw, "reaped")
	h.done(w, r, http.StatusOK, map[string]any{"reaped": true})
}

// humanAgo is when t was, seen from now: "now", "3 minutes ago".
func humanAgo(now, t time.Time) string { return humanize.RelTime(t, now, "ago", "from now") }

// humanAge is how long ago start was, without "ago": "now", "2 hours".
func humanAge(now, start time.Time) string { return humanize.RelTime(start, now, "", "") }
