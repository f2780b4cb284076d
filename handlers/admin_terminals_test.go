package handlers_test

import (
	"slices"
	"testing"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/workers"
)

// TestAdminUsersCountEveryTerminal: a session's several terminals (issue
// 42) each count in its owner's terminals and RSS on /admin/api/users; a
// row that names its first terminal alone (PTYPID, as another node's did)
// still counts it.
func TestAdminUsersCountEveryTerminal(t *testing.T) {
	t.Parallel()
	const MiB = 1 << 20
	list := []sessions.Info{
		{ID: "a1", Owner: "alice", State: sessions.StateAttached, PTYPID: 102,
			Terminals: []sessions.TerminalInfo{{ID: "1", PID: 102}, {ID: "x", PID: 103}, {ID: "y", PID: 104}}},
		{ID: "b1", Owner: "bob", State: sessions.StateAttached, PTYPID: 201},
	}
	table := []workers.ProcInfo{
		{PID: 102, Kind: workers.KindPTY, SessionID: "a1", Stats: workers.Stats{RSSBytes: 1 * MiB}},
		{PID: 103, Kind: workers.KindPTY, SessionID: "a1", Stats: workers.Stats{RSSBytes: 2 * MiB}},
		{PID: 104, Kind: workers.KindPTY, SessionID: "a1", Stats: workers.Stats{RSSBytes: 4 * MiB}},
		{PID: 201, Kind: workers.KindPTY, SessionID: "b1", Stats: workers.Stats{RSSBytes: 8 * MiB}},
	}
	h := &handlers.Admin{
		Sessions: fakeAdminSessions{list: func() []sessions.Info { return slices.Clone(list) }},
		Procs:    fakeAdminProcs{table: func() []workers.ProcInfo { return slices.Clone(table) }},
	}
	srv := adminAs(t, h, sessions.AdminPrincipal)
	want := []handlers.UserJSON{
		{User: "alice", Sessions: 1, Terminals: 3, RSSBytes: 7 * MiB},
		{User: "bob", Sessions: 1, Terminals: 1, RSSBytes: 8 * MiB},
	}
	if got := usersJSON(t, srv); !slices.Equal(got, want) {
		t.Fatalf("/admin/api/users = %+v\nwant %+v", got, want)
	}
}
