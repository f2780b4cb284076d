package handlers_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/workers"
)

// The workers table names each worker's user, its session's owner (issue
// 42: it had no user column): the anonymous user as "(anonymous)", and no
// one ("–") for a worker whose session is no longer listed.
func TestAdminWorkersNameTheirUser(t *testing.T) {
	t.Parallel()
	list := []sessions.Info{
		{ID: "a1", Owner: "alice", WorkerPID: 101, PTYPID: 102},
		{ID: "b1", Owner: "bob", WorkerPID: 201},
		{ID: "n1", Owner: "", WorkerPID: 301},
	}
	table := []workers.ProcInfo{
		{PID: 101, Kind: workers.KindChat, SessionID: "a1"},
		{PID: 102, Kind: workers.KindPTY, SessionID: "a1"},
		{PID: 201, Kind: workers.KindChat, SessionID: "b1"},
		{PID: 301, Kind: workers.KindChat, SessionID: "n1"},
		{PID: 401, Kind: workers.KindChat, SessionID: "gone", State: "closing"},
	}
	h := &handlers.Admin{
		Sessions: fakeAdminSessions{list: func() []sessions.Info { return slices.Clone(list) }},
		Procs:    fakeAdminProcs{table: func() []workers.ProcInfo { return slices.Clone(table) }},
	}
	srv := adminAs(t, h, sessions.AdminPrincipal)
	page := fetch(t, srv, "/admin")
	if !regexp.MustCompile(`data-testid="workers-table"><thead><tr><th>pid</th><th>kind</th><th>session</th><th>user</th>`).MatchString(page) {
		t.Errorf("the workers table has no user column after session")
	}
	cell := regexp.MustCompile(`<tr data-testid="worker-row" data-pid="(\d+)"[^>]*>(?:<td[^>]*>[^<]*</td>){3}<td data-testid="worker-user"(?: class="([^"]*)")?>([^<]*)</td>`)
	got := map[string]string{}
	for _, m := range cell.FindAllStringSubmatch(page, -1) {
		got[m[1]] = strings.TrimSpace(m[3] + " " + m[2])
	}
	want := map[string]string{
		"101": "alice", "102": "alice", "201": "bob",
		"301": "(anonymous) anonymous", // and its class says so
		"401": "–",
	}
	for pid, w := range want {
		if got[pid] != w {
			t.Errorf("worker %s's user reads %q, want %q", pid, got[pid], w)
		}
	}
	if t.Failed() {
		t.Log(page)
	}
}
