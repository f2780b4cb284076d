package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"runtime"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/go-chi/chi/v5"

	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/store"
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
	// ReapUser ends every live session of user (blocking until they are
	// torn down) and returns how many.
	ReapUser(by sessions.Principal, user string) int
	// Spares returns the session ids of the spare terminals (programs
	// started ahead, whose sessions List does not have yet).
	Spares() []string
}

// AdminCluster is what the admin page needs of the registry of a node of a
// cluster (sessions.AdminView): its node id (Node, "" for a node alone),
// the sessions the other live nodes hold (Elsewhere: one store read within
// ctx), and the forwarding of an admin's reap to the node that holds its
// target (ForwardReap: it returns once published; ErrNotFound for a
// principal not an admin, sessions.ErrNoCluster for a node alone). Each
// is called outside the registry's lock.
type AdminCluster interface {
	Node() string
	Elsewhere(ctx context.Context, now time.Time) ([]sessions.RemoteSession, error)
	ForwardReap(by sessions.Principal, rr sessions.RemoteReap) error
}

// AdminProcs is what the admin page needs of the worker manager: snapshots,
// and reaping a process that no session owns.
type AdminProcs interface {
	// Table reads the process table now, every figure from /proc and the
	// cgroups (GET /admin/api/workers?fresh=1 only: on a loaded machine a
	// read of 300 children takes seconds).
	Table(ctx context.Context) []workers.ProcInfo
	// Snapshot is the process table and Unowned, answered from the last
	// read while reading is slow (workers.Manager.Snapshot): the page, its
	// API and the plots' sampler never read /proc on their own path.
	Snapshot(ctx context.Context) (table []workers.ProcInfo, unowned []workers.Unowned, stale bool)
	Unowned() []workers.Unowned
	// SnapshotSelf is dashgate's own figures from the read Snapshot
	// answered from.
	SnapshotSelf() workers.Stats
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
	// UserCgroups, when set (--unix-users in cgroup mode), gives the
	// figures of a dashgate user's (Info.Owner's) cgroup, false when it
	// has none: the users table and /admin/api/users show them. It is
	// called once per user per request, after the registry's lock was
	// released, and must not block for long (it reads a few cgroup files).
	UserCgroups func(user string) (workers.UserCgroupStats, bool)
	// Nodes, when set (a store shared by several nodes: store.Nodes, with
	// the heartbeat expiry applied), lists the cluster's nodes, sorted by
	// ID: the page shows a nodes table and GET /admin/api/nodes answers
	// them. It is called once per request, bounded by nodesTimeout, never
	// under the registry's lock. nil: a node alone; no table, and the API
	// answers 404.
	Nodes func(ctx context.Context) ([]store.Node, error)
	// Cluster, with Nodes, is the registry as a node of a cluster: the
	// page and /admin/api/sessions and /admin/api/workers add the other
	// live nodes' sessions and workers, each row with its node, and their
	// reaps are forwarded. nil: Sessions, when it is one (sessions.AdminView
	// is) and has a node id; else the node's own rows only, as alone.
	Cluster AdminCluster
	// Outage, when set (sessions.AdminView.StoreOutage), says whether the
	// conversation store refuses this node's writes now, since when and
	// how many entries wait: the page shows a notice while it does.
	Outage func() (failing bool, since time.Time, waiting int)
	// Users: users are on (--user-header or --users-file), and the admin
	// token is no user: it sees no session's title (adminInfo). false:
	// token mode, where the admin token is the one (anonymous) user's and
	// sees every title.
	Users bool
	// Recordings, when set (--record-terminals), serves every user's
	// terminal recordings under /admin/recordings, and the page lists them.
	Recordings *Recordings

	samples  sampleRing // the plots' samples (samples.go), filled by Sample
	pages    sync.Pool  // *bytes.Buffer: the pages' buffers, reused (page)
	rows     templates.RowCache
	sizes    textMemo[uint64] // humanize.IBytes of the workers' RSS
	instants textMemo[int64]  // RFC 3339 of the rows' times, by Unix nanoseconds
}

// Routes mounts the admin endpoints on r (relative to /admin).
func (h *Admin) Routes(r chi.Router) {
	r.Get("/", h.page)
	r.Get("/api/sessions", h.apiSessions)
	r.Get("/api/users", h.apiUsers)
	r.Get("/api/workers", h.apiWorkers)
	r.Get("/api/unowned", h.apiUnowned)
	r.Get("/api/samples", h.apiSamples)
	r.Get("/api/nodes", h.apiNodes)
	r.Post("/sessions/reap-detached", h.reapDetached)
	r.Post("/sessions/{id}/reap", h.reapSession)
	r.Post("/workers/{pid}/reap", h.reapWorker)
	r.Post("/users/{user}/reap", h.reapUser)
	if h.Recordings != nil {
		r.Route("/recordings", h.Recordings.AdminRoutes)
	}
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
	// FiguresAt is when rss_bytes through cgroup_pids (and children) were
	// read: on a loaded machine up to workers.DefaultSnapshotMaxAge ago
	// and more; omitted for a worker started since, whose figures are
	// zero until the next read.
	FiguresAt *time.Time `json:"figures_at,omitempty"`
	// Node, on a node of a cluster only, is the node running it; another
	// node's worker (from its last heartbeat) has pid, kind, session_id,
	// started_at and user only (state "", the figures zero).
	Node string `json:"node,omitempty"`
	User string `json:"user,omitempty"`
	// Remote marks another node's worker (true), as SessionJSON's does.
	Remote bool `json:"remote,omitempty"`
	// Spare marks a terminal program started ahead for the next new
	// terminal (--pty-spare): its session_id is the session it will
	// serve, not listed until a terminal takes it.
	Spare bool `json:"spare,omitempty"`
}

// workersJSON is this node's workers, by pid, then (on a node of a
// cluster) the other live nodes' from their heartbeats, by node and pid.
// fresh reads this node's figures now (AdminProcs.Table) instead of taking
// them from the last snapshot.
func (h *Admin) workersJSON(ctx context.Context, fresh bool) ([]WorkerJSON, error) {
	c := h.cluster()
	var nodes []store.Node
	var err error
	if c != nil {
		nodes, err = h.nodes(ctx)
	}
	out := h.localWorkersJSON(ctx, fresh)
	if c == nil {
		return out, nil
	}
	self := c.Node()
	for i := range out {
		out[i].Node = self
	}
	for _, n := range nodes {
		if !n.Live || n.ID == self {
			continue
		}
		for _, w := range n.Load.List {
			out = append(out, WorkerJSON{PID: w.PID, Kind: w.Kind, SessionID: w.SessionID, StartedAt: w.StartedAt.UTC(), Children: []int{}, Node: n.ID, User: w.User, Remote: true})
		}
	}
	return out, err
}

func (h *Admin) localWorkersJSON(ctx context.Context, fresh bool) []WorkerJSON {
	var table []workers.ProcInfo
	if fresh {
		table = h.Procs.Table(ctx)
		for i := range table {
			table[i].ReadAt = time.Now()
		}
	} else {
		table, _, _ = h.Procs.Snapshot(ctx)
	}
	spares := h.Sessions.Spares()
	out := make([]WorkerJSON, 0, len(table))
	for _, p := range table {
		children := p.Descendants
		if children == nil {
			children = []int{}
		}
		row := WorkerJSON{PID: p.PID, Kind: string(p.Kind), SessionID: p.SessionID, State: p.State, StartedAt: p.StartedAt,
			RSSBytes: p.RSSBytes, CPUPercent: p.CPUPercent, NumFDs: p.NumFDs, NumThreads: p.NumThreads, Children: children,
			Spare: p.Kind == workers.KindPTY && slices.Contains(spares, p.SessionID)}
		if p.Cgroup != "" {
			row.Cgroup = p.Cgroup
			row.CgroupCPUUs, row.CgroupMemory, row.CgroupPids = known(p.CgroupStats.CPUUsec), known(p.CgroupStats.MemoryBytes), known(p.CgroupStats.Pids)
		}
		if !p.ReadAt.IsZero() {
			at := p.ReadAt.UTC()
			row.FiguresAt = &at
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

// UserFilter narrows the admin page and /admin/api/sessions to the
// sessions of one owner: ?user=NAME, where ?user= (present, empty) is the
// anonymous user's and no user parameter is everyone's (the zero value).
type UserFilter struct {
	User string // Info.Owner to keep; "" the anonymous user
	On   bool   // false: no filter
}

// UserFilterOf reads r's ?user= parameter.
func UserFilterOf(r *http.Request) UserFilter {
	q := r.URL.Query()
	return UserFilter{User: q.Get("user"), On: q.Has("user")}
}

// Query is the filter as a query string: "?user=NAME", or "" for none.
func (f UserFilter) Query() string {
	if !f.On {
		return ""
	}
	return "?user=" + url.QueryEscape(f.User)
}

// keeps reports whether the filter keeps a session owned by owner.
func (f UserFilter) keeps(owner string) bool { return !f.On || owner == f.User }

// filterSessions returns the sessions of list f keeps (list itself when
// there is no filter).
func filterSessions(list []sessions.Info, f UserFilter) []sessions.Info {
	if !f.On {
		return list
	}
	out := make([]sessions.Info, 0, len(list)/8)
	for _, s := range list {
		if f.keeps(s.Owner) {
			out = append(out, s)
		}
	}
	return out
}

// SessionJSON is a session in /admin/api/sessions: sessions.Info (the
// shape of PROTOCOL.md §5) and, on a node of a cluster only, its node.
// Another node's session is as stored: viewers, pages, running,
// worker_pid and pty_pid 0 (its workers are in /admin/api/workers).
//
// An admin sees the titles of their own sessions only (see adminInfo): the
// others' have "title":"" and "title_hidden":true.
type SessionJSON struct {
	sessions.Info
	TitleHidden bool   `json:"title_hidden,omitempty"`
	Node        string `json:"node,omitempty"`
	// Remote marks another node's session (true), so that a client that
	// wants this node's alone keeps the rows without it.
	Remote bool `json:"remote,omitempty"`
}

// adminInfo is s as an admin acting for by may see it, and whether its
// title was left out. Admins list and reap; they do not read: a session's
// title is its owner's words (typed by hand, or the first line of their
// first prompt when nobody titled it), so by sees the title of a session
// it owns only, by the registry's rule (sessions.Principal.Owns): an
// admin user sees their own sessions' titles, and the admin token
// (sessions.AdminPrincipal), which owns nothing, no one's. Without users
// (h.Users false) every session is the anonymous user's and the admin
// token is that one user's: it sees every title, by design.
//
// Every admin view of a session (the page, /admin/api/sessions, the other
// nodes' sessions) is made through it; nothing else of Info is the user's
// words (model is a setting, not text of theirs).
func (h *Admin) adminInfo(by sessions.Principal, s sessions.Info) (sessions.Info, bool) {
	if by == sessions.AdminPrincipal && !h.Users {
		by = sessions.Principal{} // the one user's admin token
	}
	if by.Owns(s.Owner) {
		return s, false
	}
	s.Title = ""
	return s, true
}

// sessionJSON is s as by may see it (adminInfo), of node (remote: another
// node's).
func (h *Admin) sessionJSON(by sessions.Principal, s sessions.Info, node string, remote bool) SessionJSON {
	in, hidden := h.adminInfo(by, s)
	return SessionJSON{Info: in, TitleHidden: hidden, Node: node, Remote: remote}
}

// apiSessions answers GET /admin/api/sessions: {"sessions":[...]}, this
// node's, then (on a node of a cluster) the other live nodes'; when
// those could not be read, this node's alone and "elsewhere_error". ?user=NAME keeps
// that user's sessions ("" the anonymous user's).
func (h *Admin) apiSessions(w http.ResponseWriter, r *http.Request) {
	by := PrincipalFrom(r.Context())
	f := UserFilterOf(r)
	local := filterSessions(h.Sessions.List(), f)
	c := h.cluster()
	var self string
	if c != nil {
		self = c.Node()
	}
	out := make([]SessionJSON, 0, len(local))
	for _, s := range local {
		out = append(out, h.sessionJSON(by, s, self, false))
	}
	body := map[string]any{}
	if c != nil {
		remote, err := h.elsewhere(r.Context(), c)
		if err != nil {
			h.logger().Warn("admin sessions of the other nodes", "err", err)
			body["elsewhere_error"] = elsewhereError
		}
		for _, s := range remote {
			if f.keeps(s.Owner) {
				out = append(out, h.sessionJSON(by, s.Info, s.Node, true))
			}
		}
	}
	body["sessions"] = out
	writeJSON(w, http.StatusOK, body)
}

// elsewhereError is what the page and the API say when the other nodes'
// sessions could not be read.
const elsewhereError = "The other nodes' sessions could not be read from the store: this node's are listed."

// cluster is h.Cluster, or h.Sessions when it is an AdminCluster; nil
// without Nodes (a node alone) or without a node id.
func (h *Admin) cluster() AdminCluster {
	if h.Nodes == nil {
		return nil
	}
	c := h.Cluster
	if c == nil {
		c, _ = h.Sessions.(AdminCluster)
	}
	if c == nil || c.Node() == "" {
		return nil
	}
	return c
}

// elsewhere calls c.Elsewhere within nodesTimeout.
func (h *Admin) elsewhere(ctx context.Context, c AdminCluster) ([]sessions.RemoteSession, error) {
	ctx, cancel := context.WithTimeout(ctx, nodesTimeout)
	defer cancel()
	return c.Elsewhere(ctx, time.Now())
}

// UserJSON is one user's figures in GET /admin/api/users:
//
//	{"users":[{"user":"alice","sessions":3,"workers":1,"terminals":2,"rss_bytes":52428800}]}
//
// one row per user with at least one live session, sorted by name, the
// anonymous user (sessions made before users were on, or every session
// without users) as "user":"". sessions counts the user's live sessions,
// workers those with a chat worker (Info.worker_pid != 0), terminals those
// with a terminal (Info.pty_pid != 0); rss_bytes is the resident memory, in
// bytes, of those worker and terminal processes (their leaders, as the
// workers table's rss_bytes; descendants not included), summed. There is no
// per-user metric: this is where per-user figures are.
//
// With Admin.UserCgroups, a user whose cgroup exists also has
// cgroup_cpu_usec (CPU time used in it, µs), cgroup_memory_bytes
// (memory.current, bytes) and cgroup_pids (pids.current): the sums over
// every child running as the user's account, descendants included. They
// are omitted when not known; memory and pids are also omitted where the
// cgroup v2 hierarchy has no such controller, and then
// cgroup_memory_not_measured / cgroup_pids_not_measured say why.
type UserJSON struct {
	User                    string  `json:"user"`
	Sessions                int     `json:"sessions"`
	Workers                 int     `json:"workers"`
	Terminals               int     `json:"terminals"`
	RSSBytes                uint64  `json:"rss_bytes"`
	CgroupCPUUsec           *uint64 `json:"cgroup_cpu_usec,omitempty"`
	CgroupMemory            *int64  `json:"cgroup_memory_bytes,omitempty"`
	CgroupPids              *int64  `json:"cgroup_pids,omitempty"`
	CgroupMemoryNotMeasured string  `json:"cgroup_memory_not_measured,omitempty"`
	CgroupPidsNotMeasured   string  `json:"cgroup_pids_not_measured,omitempty"`
}

// withCgroups adds each user's cgroup figures from cg (nil: none) to
// users.
func withCgroups(users []UserJSON, cg func(string) (workers.UserCgroupStats, bool)) {
	if cg == nil {
		return
	}
	for i := range users {
		st, ok := cg(users[i].User)
		if !ok {
			continue
		}
		u := &users[i]
		u.CgroupCPUUsec, u.CgroupMemory, u.CgroupPids = &st.CPUUsec, known(st.MemoryBytes), known(st.Pids)
		u.CgroupMemoryNotMeasured, u.CgroupPidsNotMeasured = st.MemoryUnmeasured, st.PidsUnmeasured
	}
}

// usersOf sums list per owner, the RSS from procs (matched by the
// sessions' WorkerPID and Terminals), sorted by user. It runs on snapshots,
// after the registry's lock was released.
func usersOf(list []sessions.Info, procs []workers.ProcInfo) []UserJSON {
	rss := make(map[int]uint64, len(procs))
	for _, p := range procs {
		rss[p.PID] = p.RSSBytes
	}
	at := map[string]int{} // owner -> index in out
	out := []UserJSON{}
	for _, s := range list {
		i, ok := at[s.Owner]
		if !ok {
			i = len(out)
			at[s.Owner] = i
			out = append(out, UserJSON{User: s.Owner})
		}
		u := &out[i]
		u.Sessions++
		if s.WorkerPID != 0 {
			u.Workers++
			u.RSSBytes += rss[s.WorkerPID]
		}
		for _, t := range s.Terminals { // each of its terminals (issue 42)
			u.Terminals++
			u.RSSBytes += rss[t.PID]
		}
		if len(s.Terminals) == 0 && s.PTYPID != 0 { // a row that names its first alone
			u.Terminals++
			u.RSSBytes += rss[s.PTYPID]
		}
	}
	slices.SortFunc(out, func(a, b UserJSON) int { return strings.Compare(a.User, b.User) })
	return out
}

func (h *Admin) apiUsers(w http.ResponseWriter, r *http.Request) {
	list := h.Sessions.List()
	procs, _, _ := h.Procs.Snapshot(r.Context())
	users := usersOf(list, procs)
	withCgroups(users, h.UserCgroups)
	writeJSON(w, http.StatusOK, map[string]any{"users": users})
}

// apiWorkers answers GET /admin/api/workers: {"workers":[...]} (see
// WorkerJSON); on a node of a cluster whose nodes could not be read, this
// node's alone and "elsewhere_error". The figures come from the last
// snapshot (each worker's figures_at says when they were read), unless
// ?fresh=1 asks for a read now.
func (h *Admin) apiWorkers(w http.ResponseWriter, r *http.Request) {
	list, err := h.workersJSON(r.Context(), r.URL.Query().Get("fresh") == "1")
	body := map[string]any{"workers": list}
	if err != nil {
		h.logger().Warn("admin workers of the other nodes", "err", err)
		body["elsewhere_error"] = "The other nodes' workers could not be read from the store: this node's are listed."
	}
	writeJSON(w, http.StatusOK, body)
}

// nodesTimeout bounds one call of Admin.Nodes.
const nodesTimeout = 5 * time.Second

// NodeJSON is one node in GET /admin/api/nodes:
//
//	{"nodes":[{"id":"web-1","addr":"10.0.0.1:8080","last_seen":"2026-12-01T21:10:12.5Z","live":true}]}
//
// every node that ever sent a heartbeat, sorted by id; addr is "" when the
// node did not say, last_seen is its newest heartbeat (RFC 3339), live is
// whether that is within the heartbeat expiry; sessions and workers are
// its live sessions and its workers and terminals, as that heartbeat
// counted them.
type NodeJSON struct {
	ID       string    `json:"id"`
	Addr     string    `json:"addr"`
	LastSeen time.Time `json:"last_seen"`
	Live     bool      `json:"live"`
	Sessions int       `json:"sessions"`
	Workers  int       `json:"workers"`
}

// nodes calls h.Nodes within nodesTimeout.
func (h *Admin) nodes(ctx context.Context) ([]store.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, nodesTimeout)
	defer cancel()
	list, err := h.Nodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return list, nil
}

// apiNodes answers GET /admin/api/nodes (see NodeJSON): 404 without
// Admin.Nodes, 500 (logged once by httpError) when they cannot be read.
func (h *Admin) apiNodes(w http.ResponseWriter, r *http.Request) {
	if h.Nodes == nil {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": "not a cluster: this node's store keeps no nodes"})
		return
	}
	list, err := h.nodes(r.Context())
	if err != nil {
		httpError(w, r, h.logger(), err)
		return
	}
	out := make([]NodeJSON, 0, len(list))
	for _, n := range list {
		out = append(out, NodeJSON{ID: n.ID, Addr: n.Addr, LastSeen: n.LastSeen.UTC(), Live: n.Live, Sessions: n.Load.Sessions, Workers: n.Load.Workers})
	}
	writeJSON(w, http.StatusOK, map[string]any{"nodes": out})
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

// View builds the admin page's view for the admin by, its sessions and
// workers tables narrowed to f's user (the counters and the users table
// are everyone's): the session and process snapshots are taken first, the
// stats read afterwards, never under the registry lock. by sees the titles
// of its own sessions only (adminInfo).
func (h *Admin) View(ctx context.Context, by sessions.Principal, base string, f UserFilter) templates.AdminView {
	now := time.Now()
	rel := newRelTimes(now)
	var outage string
	if h.Outage != nil {
		if failing, since, waiting := h.Outage(); failing {
			outage = fmt.Sprintf("The conversation store refuses this node's writes since %s (%s ago): chat goes on from memory; %d history entries wait to be saved.",
				since.UTC().Format("15:04:05 UTC"), now.Sub(since).Round(time.Second), waiting)
		}
	}
	c := h.cluster()
	// The store's two reads (the nodes, the other nodes' sessions) go on
	// while this node's snapshots are taken.
	var nodes []store.Node
	var nodesErr, elseErr error
	var remote []sessions.RemoteSession
	var reads sync.WaitGroup
	if h.Nodes != nil {
		reads.Go(func() { nodes, nodesErr = h.nodes(ctx) })
	}
	if c != nil {
		reads.Go(func() { remote, elseErr = h.elsewhere(ctx, c) })
	}
	all := h.Sessions.List()
	spares := h.Sessions.Spares()
	procs, unowned, _ := h.Procs.Snapshot(ctx)
	self := h.Procs.SnapshotSelf()
	reads.Wait()

	v := templates.AdminView{
		Rows:        &h.rows,
		StoreOutage: outage,
		BasePath:    base, Version: h.Version, GeneratedAt: now.UTC().Format(time.RFC3339Nano),
		SelfRSS: humanize.IBytes(self.RSSBytes), SelfRSSExact: fmt.Sprintf("%d bytes", self.RSSBytes),
		SelfFDs: self.NumFDs, Goroutines: runtime.NumGoroutine(),
	}
	v.Containment, v.ContainmentDir = h.Procs.Containment()
	v.Filtered, v.FilterUser, v.Query = f.On, f.User, f.Query()
	users := usersOf(all, procs)
	withCgroups(users, h.UserCgroups)
	v.UserCgroups = h.UserCgroups != nil
	for _, u := range users {
		row := templates.UserRow{
			Name: u.User, Link: base + "admin" + UserFilter{User: u.User, On: true}.Query(), Selected: f.On && f.User == u.User,
			Sessions: u.Sessions, Workers: u.Workers, Terminals: u.Terminals,
			RSS: humanize.IBytes(u.RSSBytes), RSSExact: fmt.Sprintf("%d bytes", u.RSSBytes),
			ReapAction: base + "admin/users/" + url.PathEscape(u.User) + "/reap" + f.Query(),
		}
		if u.CgroupCPUUsec != nil {
			cpu := time.Duration(*u.CgroupCPUUsec) * time.Microsecond
			row.CgroupCPU, row.CgroupCPUExact = cpu.Round(time.Millisecond).String(), fmt.Sprintf("%d µs", *u.CgroupCPUUsec)
		}
		if m := u.CgroupMemory; m != nil && *m >= 0 {
			row.CgroupMemory, row.CgroupMemoryExact = humanize.IBytes(uint64(*m)), fmt.Sprintf("%d bytes", *m)
		}
		if p := u.CgroupPids; p != nil && *p >= 0 {
			row.CgroupPids = fmt.Sprint(*p)
		}
		row.CgroupMemoryUnmeasured, row.CgroupPidsUnmeasured = u.CgroupMemoryNotMeasured, u.CgroupPidsNotMeasured
		v.Users = append(v.Users, row)
	}
	states := map[string]int{}
	for _, s := range all {
		states[string(s.State)]++
	}
	list := filterSessions(all, f)
	var shown map[string]bool // the filtered sessions' ids: the workers table keeps their children
	if f.On {
		shown = make(map[string]bool, len(list))
	}
	var thisNode string
	if c != nil {
		thisNode = c.Node()
		v.Cluster, v.ThisNode = true, thisNode
		if elseErr != nil {
			h.logger().Warn("admin page without the other nodes' sessions", "err", elseErr)
			v.ElsewhereError = elsewhereError
		}
	}
	row := func(s sessions.Info, node string) templates.SessionRow {
		s, hidden := h.adminInfo(by, s)
		return templates.SessionRow{
			ID: s.ID, Owner: s.Owner, Title: s.Title, TitleHidden: hidden, State: string(s.State), Tabs: s.Pages, Sockets: s.Viewers,
			Created: rel.ago(s.CreatedAt), CreatedExact: h.exact(s.CreatedAt),
			LastActive: rel.ago(s.LastActive), ActiveExact: h.exact(s.LastActive),
			Running: s.Running, WorkerPID: s.WorkerPID, PTYPID: s.PTYPID, Node: node,
		}
	}
	v.Sessions = make([]templates.SessionRow, 0, len(list)+len(remote))
	for _, s := range list {
		if shown != nil {
			shown[s.ID] = true
		}
		v.Sessions = append(v.Sessions, row(s, thisNode))
	}
	// Another node's children, from its heartbeat: its sessions' worker
	// and terminal columns, and the workers table's rows.
	var remoteWorkers []templates.WorkerRow
	children := map[string][2]int{} // session id -> worker pid, terminal pid
	if c != nil {
		for _, n := range nodes {
			if !n.Live || n.ID == thisNode {
				continue
			}
			for _, w := range n.Load.List {
				ch := children[w.SessionID]
				if w.Kind == string(workers.KindPTY) {
					ch[1] = w.PID
				} else {
					ch[0] = w.PID
				}
				children[w.SessionID] = ch
				if !f.keeps(w.User) {
					continue
				}
				remoteWorkers = append(remoteWorkers, templates.WorkerRow{
					PID: w.PID, Kind: w.Kind, SessionID: w.SessionID, User: w.User, Node: n.ID, Remote: true,
					Age: rel.age(w.StartedAt), AgeExact: h.exact(w.StartedAt),
				})
			}
		}
	}
	for _, s := range remote {
		if !f.keeps(s.Owner) {
			continue
		}
		r := row(s.Info, s.Node)
		r.WorkerPID, r.PTYPID = children[s.ID][0], children[s.ID][1]
		v.Sessions = append(v.Sessions, r)
	}
	kinds := map[string]int{}
	owners := make(map[string]string, len(all)) // session id -> its user
	for _, s := range all {
		owners[s.ID] = s.Owner
	}
	slices.SortFunc(procs, func(a, b workers.ProcInfo) int { return a.PID - b.PID })
	v.Workers = make([]templates.WorkerRow, 0, len(procs)+len(remoteWorkers))
	for _, p := range procs {
		kinds[string(p.Kind)]++
		if shown != nil && !shown[p.SessionID] {
			continue
		}
		owner, listed := owners[p.SessionID]
		v.Workers = append(v.Workers, templates.WorkerRow{
			PID: p.PID, Kind: string(p.Kind), SessionID: p.SessionID, User: owner, UserGone: !listed, State: p.State,
			Age: rel.age(p.StartedAt), AgeExact: h.exact(p.StartedAt),
			RSS: h.sizes.text(p.RSSBytes, humanize.IBytes), RSSExact: strconv.FormatUint(p.RSSBytes, 10) + " bytes",
			CPU: strconv.FormatFloat(p.CPUPercent, 'f', 1, 64) + "%", FDs: p.NumFDs, Threads: p.NumThreads, Descendants: pidList(p.Descendants),
			Cgroup: p.Cgroup, CgroupStats: cgroupSummary(p), Node: thisNode,
			Spare: p.Kind == workers.KindPTY && !listed && slices.Contains(spares, p.SessionID),
		})
	}
	v.Workers = append(v.Workers, remoteWorkers...)
	v.FiguresAge = figuresAge(now, procs)
	for _, u := range unowned {
		v.Unowned = append(v.Unowned, templates.UnownedRow{PID: u.PID, PPID: u.PPID, State: u.State, Marker: u.Marker})
	}
	if h.Nodes != nil {
		v.NodesShown = true
		if nodesErr != nil {
			// The rest of the page still renders; the table says why it is empty.
			h.logger().Warn("admin page without nodes", "err", nodesErr)
			v.NodesError = "The nodes could not be read from the store."
		}
		for _, n := range nodes {
			v.Nodes = append(v.Nodes, templates.NodeRow{
				ID: n.ID, Addr: n.Addr, Live: n.Live,
				LastSeen: rel.ago(n.LastSeen), LastSeenExact: n.LastSeen.UTC().Format(time.RFC3339Nano),
				Sessions: n.Load.Sessions, Workers: n.Load.Workers,
			})
		}
	}
	if h.Recordings != nil {
		v.RecordingsOn = true
		v.Recordings, v.RecordingsMore, v.RecordingsError = h.Recordings.adminRows(base, now)
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

// figuresAge says how old the workers table's figures are: "read 3s ago"
// from the oldest read among procs (workers.ProcInfo.ReadAt; those of a
// loaded machine come from a read in the background, up to
// workers.DefaultSnapshotMaxAge old and more), "read just now" under a
// second, "" when none has figures.
func figuresAge(now time.Time, procs []workers.ProcInfo) string {
	var oldest time.Time
	for _, p := range procs {
		if !p.ReadAt.IsZero() && (oldest.IsZero() || p.ReadAt.Before(oldest)) {
			oldest = p.ReadAt
		}
	}
	if oldest.IsZero() {
		return ""
	}
	if d := now.Sub(oldest); d >= time.Second {
		return "figures read " + d.Round(time.Second).String() + " ago"
	}
	return "figures read just now"
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
	defer trace.StartRegion(r.Context(), "admin page").End() // dashgate-bench stall-trace: where a page's time goes
	v := h.View(r.Context(), PrincipalFrom(r.Context()), h.BasePath(r), UserFilterOf(r))
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	// Rendered whole, then written at once: written as rendered, a page of
	// 300 sessions was a hundred 4 KiB writes, each a wait for a CPU on a
	// loaded machine. The buffer is an earlier page's: grown from nothing,
	// a page of half a megabyte was allocated, zeroed and copied six times
	// over, and allocated and zeroed at its size, once a page, a tenth of
	// its work.
	page, _ := h.pages.Get().(*bytes.Buffer)
	if page == nil {
		page = new(bytes.Buffer)
	}
	defer h.pages.Put(page)
	page.Reset()
	if r.URL.Query().Get("fragment") == "1" {
		templates.AdminBody(v).Render(r.Context(), page)
	} else {
		templates.Admin(v).Render(r.Context(), page)
	}
	w.Header().Set("Content-Length", strconv.Itoa(page.Len()))
	w.Write(page.Bytes()) // written before the buffer goes back
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
	// back to the page, with the user filter the form was posted under
	http.Redirect(w, r, h.BasePath(r)+"admin"+UserFilterOf(r).Query(), http.StatusSeeOther)
}

// Admin actions, the audit records' action key.
const (
	actionReapSession  = "reap_session"
	actionReapDetached = "reap_detached"
	actionReapWorker   = "reap_worker"
	actionReapUnowned  = "reap_unowned"
	actionReapUser     = "reap_user"
)

// actor is the user key of an audit record for p: its User, or
// "admin-token" for the admin token's principal (User "").
func actor(p sessions.Principal) string {
	if p == sessions.AdminPrincipal {
		return "admin-token"
	}
	return p.User
}

// audit logs an action's one INFO record: msg "admin reap" with user (who
// acted, see actor), remote (the client's address, r.RemoteAddr as the web
// middleware resolved it) and remote_addr (the same, the key this record
// had first), action, target and result.
func (h *Admin) audit(r *http.Request, action, target, result string, attrs ...any) {
	if h.Log != nil {
		h.Log.Info("admin reap", append([]any{"user", actor(PrincipalFrom(r.Context())), "remote", r.RemoteAddr, "remote_addr", r.RemoteAddr,
			"action", action, "target", target, "result", result}, attrs...)...)
	}
}

// forwarded reports whether r names (?node=) another node than this one
// of a cluster: then it has answered it, forwarding rr (its Node set) to
// that node when that node is live. Answers: 202
// {"forwarded":true,"node":"A"} (a form: back to the page), 404 when the
// node is not live (or not known), 500 when the nodes cannot be read.
// The audit record says result "forwarded" and node=A.
func (h *Admin) forwarded(w http.ResponseWriter, r *http.Request, rr sessions.RemoteReap, action, target string) bool {
	node := r.URL.Query().Get("node")
	c := h.cluster()
	if c == nil || node == "" || node == c.Node() {
		return false
	}
	rr.Node = node
	nodes, err := h.nodes(r.Context())
	if err != nil {
		h.audit(r, action, target, "error", "node", node)
		httpError(w, r, h.logger(), err)
		return true
	}
	live := slices.ContainsFunc(nodes, func(n store.Node) bool { return n.ID == node && n.Live })
	if !live {
		h.audit(r, action, target, "not_found", "node", node)
		h.done(w, r, http.StatusNotFound, map[string]any{"reaped": false, "error": "no such live node"})
		return true
	}
	switch err := c.ForwardReap(PrincipalFrom(r.Context()), rr); {
	case errors.Is(err, sessions.ErrNotFound):
		h.audit(r, action, target, "not_found", "node", node)
		h.done(w, r, http.StatusNotFound, map[string]any{"reaped": false, "error": "not found"})
	case err != nil:
		h.audit(r, action, target, "error", "node", node)
		httpError(w, r, h.logger(), err)
	default:
		h.audit(r, action, target, "forwarded", "node", node)
		h.done(w, r, http.StatusAccepted, map[string]any{"forwarded": true, "node": node})
	}
	return true
}

// reapSession ends a session (end_reason admin_reap); with ?node=A, A
// another node of the cluster, it forwards the reap to A (see forwarded).
func (h *Admin) reapSession(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	target := "session " + id
	if h.forwarded(w, r, sessions.RemoteReap{SessionID: id}, actionReapSession, target) {
		return
	}
	closed, err := h.Sessions.Close(PrincipalFrom(r.Context()), id, sessions.EndAdminReap)
	switch {
	case errors.Is(err, sessions.ErrNotFound), err == nil && !closed:
		h.audit(r, actionReapSession, target, "not_found")
		h.done(w, r, http.StatusNotFound, map[string]any{"reaped": false, "error": "session not found"})
	case err != nil:
		h.audit(r, actionReapSession, target, "error")
		httpError(w, r, h.logger(), err)
	default:
		h.audit(r, actionReapSession, target, "reaped")
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
	h.audit(r, actionReapDetached, "detached sessions", fmt.Sprintf("reaped %d", n))
	h.done(w, r, http.StatusOK, map[string]any{"reaped": n > 0, "count": n, "end_reason": sessions.EndAdminReap})
}

// reapWorker reaps a worker or terminal of this node (or an unowned
// descendant); with ?node=A, A another node of the cluster, it forwards
// the reap of A's pid to A (see forwarded).
func (h *Admin) reapWorker(w http.ResponseWriter, r *http.Request) {
	raw := chi.URLParam(r, "pid")
	pid, err := strconv.Atoi(raw)
	target := "worker " + raw
	if err != nil || pid <= 1 {
		h.audit(r, actionReapWorker, target, "not_found")
		h.done(w, r, http.StatusNotFound, map[string]any{"reaped": false, "error": "no such worker"})
		return
	}
	if h.forwarded(w, r, sessions.RemoteReap{PID: pid}, actionReapWorker, target) {
		return
	}
	err = h.Sessions.ReapWorker(PrincipalFrom(r.Context()), pid)
	if err == nil {
		h.audit(r, actionReapWorker, target, "reaped")
		h.done(w, r, http.StatusOK, map[string]any{"reaped": true, "reason": workers.ReasonAdminReap})
		return
	}
	if !errors.Is(err, sessions.ErrNotFound) {
		h.audit(r, actionReapWorker, target, "error")
		httpError(w, r, h.logger(), err)
		return
	}
	if err := h.Procs.ReapUnowned(pid); err != nil {
		h.audit(r, actionReapWorker, target, "not_found")
		h.done(w, r, http.StatusNotFound, map[string]any{"reaped": false, "error": "not a worker nor a descendant of dashgate"})
		return
	}
	h.audit(r, actionReapUnowned, "unowned "+raw, "reaped")
	h.done(w, r, http.StatusOK, map[string]any{"reaped": true})
}

// reapUser ends every live session of the user in the path (its chat
// workers and terminals with them, end_reason=admin_reap): JSON
// {"reaped":true,"count":N,"end_reason":"admin_reap"}, or 404 when the user
// has no live session. The path's user is unescaped ("" is the anonymous
// user: /admin/users//reap).
func (h *Admin) reapUser(w http.ResponseWriter, r *http.Request) {
	user := chi.URLParam(r, "user")
	if r.URL.RawPath != "" { // chi routed on the escaped path
		if u, err := url.PathUnescape(user); err == nil {
			user = u
		}
	}
	target := fmt.Sprintf("user %s", user)
	n := h.Sessions.ReapUser(PrincipalFrom(r.Context()), user)
	if n == 0 {
		h.audit(r, actionReapUser, target, "not_found")
		h.done(w, r, http.StatusNotFound, map[string]any{"reaped": false, "count": 0, "error": "no live session of that user"})
		return
	}
	h.audit(r, actionReapUser, target, fmt.Sprintf("reaped %d", n))
	h.done(w, r, http.StatusOK, map[string]any{"reaped": true, "count": n, "end_reason": sessions.EndAdminReap})
}

// pidList is the workers table's descendants cell: "[812 813]", "–" for
// none.
func pidList(pids []int) string {
	if len(pids) == 0 {
		return "–"
	}
	return fmt.Sprint(pids)
}

// humanAgo is when t was, seen from now: "now", "3 minutes ago".
func humanAgo(now, t time.Time) string { return humanize.RelTime(t, now, "ago", "from now") }

// humanAge is how long ago start was, without "ago": "now", "2 hours".
func humanAge(now, start time.Time) string { return humanize.RelTime(start, now, "", "") }

// exact is t as the page's titles write it: RFC 3339 UTC with its
// nanoseconds. A time Unix nanoseconds cannot hold (the zero time) is
// written as it is, not kept.
func (h *Admin) exact(t time.Time) string {
	if y := t.Year(); y < 1678 || y > 2261 {
		return t.UTC().Format(time.RFC3339Nano)
	}
	return h.instants.text(t.UnixNano(), func(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339Nano) })
}

// textMemo keeps texts made from a value across pages, for values that
// repeat from one page to the next (a session's creation time, a
// worker's RSS between two reads of its figures): each is made once, not
// once a row and page. Two generations, as templates.RowCache's: an entry
// not asked for through two rotations is dropped, a generation rotating
// at memoEntries. Safe for concurrent use; the zero value is ready.
type textMemo[K comparable] struct {
	mu        sync.Mutex
	cur, prev map[K]string
}

// memoEntries is the entries a generation of a textMemo takes before it
// rotates.
const memoEntries = 4096

// text is made(k), made once while k is asked for.
func (m *textMemo[K]) text(k K, made func(K) string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.cur[k]; ok {
		return s
	}
	s, ok := m.prev[k]
	if !ok {
		s = made(k)
	}
	if m.cur == nil || len(m.cur) >= memoEntries {
		m.prev, m.cur = m.cur, make(map[K]string, memoEntries)
	}
	m.cur[k] = s
	return s
}

// relTimes is humanAgo and humanAge seen from one now, each text made
// once. humanize's text depends only on the whole seconds between the
// two times and on which is later (its magnitudes are whole seconds),
// and a page of 300 sessions asks for the same few dozen texts hundreds
// of times: made each time, they were a tenth of the page's work. One
// page's; not safe for concurrent use.
type relTimes struct {
	now  time.Time
	memo map[relKey]string
}

// relKey is one text of relTimes: the whole seconds from the time to
// now (negative for a time after now; under a second either side is
// "now"), and which of the two functions.
type relKey struct {
	secs int64
	age  bool
}

func newRelTimes(now time.Time) *relTimes {
	return &relTimes{now: now, memo: map[relKey]string{}}
}

// ago is humanAgo(now, t).
func (r *relTimes) ago(t time.Time) string { return r.text(t, false) }

// age is humanAge(now, start).
func (r *relTimes) age(start time.Time) string { return r.text(start, true) }

func (r *relTimes) text(t time.Time, age bool) string {
	k := relKey{secs: int64(r.now.Sub(t) / time.Second), age: age} // truncated toward zero, as humanize's
	if s, ok := r.memo[k]; ok {
		return s
	}
	s := humanAgo(r.now, t)
	if age {
		s = humanAge(r.now, t)
	}
	r.memo[k] = s
	return s
}
