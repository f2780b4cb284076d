package handlers_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/workers"
)

// The users table's per-user cgroup figures (--unix-users): with a
// UserCgroups source, /admin/api/users gives each user whose cgroup exists
// cgroup_cpu_usec, cgroup_memory_bytes and cgroup_pids, and the page shows
// them (CPU time, memory, pids, the exact figures as titles); a user
// without a cgroup has none (omitted, "–"). Without a source there are no
// such keys and no such columns. (Reading the figures from a real cgroup
// is workers.Cgroups.UserStats's, tested there.)
func TestAdminUsersCgroupFigures(t *testing.T) {
	t.Parallel()
	list := []sessions.Info{
		{ID: "a1", Owner: "alice", State: sessions.StateAttached},
		{ID: "b1", Owner: "bob", State: sessions.StateAttached},
	}
	src := func(user string) (workers.UserCgroupStats, bool) {
		if user == "alice" {
			return workers.UserCgroupStats{CPUUsec: 1_234_567, MemoryBytes: 12 << 20, Pids: 3}, true
		}
		return workers.UserCgroupStats{}, false
	}
	newAdmin := func(cg func(string) (workers.UserCgroupStats, bool)) *handlers.Admin {
		return &handlers.Admin{
			Sessions:    fakeAdminSessions{list: func() []sessions.Info { return slices.Clone(list) }},
			Procs:       fakeAdminProcs{table: func() []workers.ProcInfo { return nil }},
			UserCgroups: cg,
		}
	}

	srv := adminAs(t, newAdmin(src), sessions.AdminPrincipal)
	raw := fetch(t, srv, "/admin/api/users")
	for _, w := range []string{
		`{"user":"alice","sessions":1,"workers":0,"terminals":0,"rss_bytes":0,"cgroup_cpu_usec":1234567,"cgroup_memory_bytes":12582912,"cgroup_pids":3}`,
		`{"user":"bob","sessions":1,"workers":0,"terminals":0,"rss_bytes":0}`,
	} {
		if !strings.Contains(raw, w) {
			t.Errorf("/admin/api/users lacks %s: %s", w, raw)
		}
	}
	page := fetch(t, srv, "/admin")
	for _, w := range []string{
		`<th title="CPU time used in the user's cgroup">cgroup CPU</th>`,
		`data-user="alice"`,
		`<td data-testid="user-cgroup-cpu" title="1234567 µs">1.235s</td><td data-testid="user-cgroup-memory" title="12582912 bytes">12 MiB</td><td data-testid="user-cgroup-pids">3</td>`,
		`<td data-testid="user-cgroup-cpu" title="">–</td><td data-testid="user-cgroup-memory" title="">–</td><td data-testid="user-cgroup-pids">–</td>`,
	} {
		if !strings.Contains(page, w) {
			t.Errorf("the admin page lacks %s", w)
		}
	}
	if i, j := strings.Index(page, `data-user="bob"`), strings.LastIndex(page, `data-testid="user-cgroup-cpu" title="">–`); i < 0 || j < i {
		t.Errorf("bob's row does not have the unknown figures")
	}
	if t.Failed() {
		t.Log(page)
	}

	bare := adminAs(t, newAdmin(nil), sessions.AdminPrincipal)
	if raw := fetch(t, bare, "/admin/api/users"); strings.Contains(raw, "cgroup_") {
		t.Errorf("/admin/api/users without a source has cgroup figures: %s", raw)
	}
	if page := fetch(t, bare, "/admin"); strings.Contains(page, "user-cgroup-") || strings.Contains(page, "cgroup CPU") {
		t.Errorf("the admin page without a source has cgroup columns")
	}
}
