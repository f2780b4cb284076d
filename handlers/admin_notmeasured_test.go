package handlers_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/workers"
)

// A user's cgroup memory and pids that the host cannot measure (its
// cgroup v2 has no such controller: a hybrid host keeps them on v1) read
// "not measured", the reason as the title, not a "0 B" / "0" that looks
// measured (issue 42); /admin/api/users omits them and says why.
func TestAdminUsersCgroupNotMeasured(t *testing.T) {
	t.Parallel()
	const noMemory, noPids = "no memory controller in the cgroup v2 hierarchy", "no pids controller in the cgroup v2 hierarchy"
	list := []sessions.Info{{ID: "c1", Owner: "carol", State: sessions.StateAttached}}
	h := &handlers.Admin{
		Sessions: fakeAdminSessions{list: func() []sessions.Info { return slices.Clone(list) }},
		Procs:    fakeAdminProcs{table: func() []workers.ProcInfo { return nil }},
		UserCgroups: func(string) (workers.UserCgroupStats, bool) {
			return workers.UserCgroupStats{CPUUsec: 5000, MemoryBytes: -1, Pids: -1, MemoryUnmeasured: noMemory, PidsUnmeasured: noPids}, true
		},
	}
	srv := adminAs(t, h, sessions.AdminPrincipal)

	var users struct{ Users []map[string]any }
	if err := json.Unmarshal([]byte(fetch(t, srv, "/admin/api/users")), &users); err != nil {
		t.Fatal(err)
	}
	if len(users.Users) != 1 {
		t.Fatalf("/admin/api/users: %+v", users)
	}
	u := users.Users[0]
	for key, want := range map[string]any{
		"cgroup_cpu_usec": 5000.0, "cgroup_memory_bytes": nil, "cgroup_pids": nil,
		"cgroup_memory_not_measured": noMemory, "cgroup_pids_not_measured": noPids,
	} {
		if got := u[key]; got != want {
			t.Errorf("/admin/api/users: %s is %v, want %v", key, got, want)
		}
	}

	page := fetch(t, srv, "/admin")
	for _, w := range []string{
		`<td data-testid="user-cgroup-cpu" title="5000 µs">5ms</td>`,
		`<td data-testid="user-cgroup-memory" class="none" data-state="not-measured" title="` + noMemory + `">not measured</td>`,
		`<td data-testid="user-cgroup-pids" class="none" data-state="not-measured" title="` + noPids + `">not measured</td>`,
	} {
		if !strings.Contains(page, w) {
			t.Errorf("the admin page lacks %s", w)
		}
	}
	if t.Failed() {
		t.Log(page)
	}
}
