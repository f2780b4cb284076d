package handlers_test

import (
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dashgate/dashgate/handlers"
	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/sessions"
)

// TestAdminMarksSpares: a spare terminal (--pty-spare), whose session is
// not listed until a terminal takes it, is marked as a spare on /admin
// (its user cell says so) and in /admin/api/workers (spare: true), while
// the terminal in use is not.
func TestAdminMarksSpares(t *testing.T) {
	t.Parallel()
	s := newStackWith(t, envOpts{reg: func(c *sessions.Config) { c.PTYSpare = true }})
	p := s.pty(url.Values{})
	p.waitText("hello")
	var spare, used handlers.WorkerJSON
	testkit.WaitFor(t, 10*time.Second, "a spare listed", func() bool {
		var body struct{ Workers []handlers.WorkerJSON }
		if err := json.Unmarshal([]byte(s.get("/admin/api/workers")), &body); err != nil {
			t.Fatal(err)
		}
		spare, used = handlers.WorkerJSON{}, handlers.WorkerJSON{}
		for _, w := range body.Workers {
			if w.Spare {
				spare = w
			} else {
				used = w
			}
		}
		return spare.PID != 0 && used.PID != 0
	})
	if spare.Kind != "pty" || used.Kind != "pty" || spare.SessionID == used.SessionID {
		t.Fatalf("spare %+v, terminal in use %+v", spare, used)
	}
	if sessionsJSON := s.get("/admin/api/sessions"); strings.Contains(sessionsJSON, spare.SessionID) ||
		!strings.Contains(sessionsJSON, used.SessionID) {
		t.Fatalf("/admin/api/sessions %s: want the terminal's session %s and not the spare's %s", sessionsJSON, used.SessionID, spare.SessionID)
	}
	page := s.get("/admin")
	if row := rowOf(page, spare.PID); !strings.Contains(row, `data-testid="worker-spare"`) {
		t.Fatalf("the spare's row is not marked:\n%s", row)
	}
	if row := rowOf(page, used.PID); row == "" || strings.Contains(row, `data-testid="worker-spare"`) {
		t.Fatalf("the terminal in use's row is marked a spare, or missing:\n%s", row)
	}
}

// rowOf is the workers table's row of pid on the admin page, "" for none.
func rowOf(page string, pid int) string {
	i := strings.Index(page, `<tr data-testid="worker-row" data-pid="`+strconv.Itoa(pid)+`"`)
	if i < 0 {
		return ""
	}
	row, _, _ := strings.Cut(page[i:], "</tr>")
	return row
}
