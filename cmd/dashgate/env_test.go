package main

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
)

// TestChildrenGetNoToken: dashgate's own token variables never reach a worker
// or a terminal, whatever its environment holds; the DASHGATE_* variables of
// PROTOCOL.md §4 do.
func TestChildrenGetNoToken(t *testing.T) {
	const secret = "do-not-leak-4f1c"
	t.Setenv("DASHGATE_TOKEN", secret)
	t.Setenv("DASHGATE_ADMIN_TOKEN", testToken) // read by dashgate itself: the admin API below uses it
	t.Setenv("SOME_SECRET", secret)
	in := startInstance(t, "env", t.TempDir())
	c := dialChat(t, in)
	sid := session(t, c)
	dialTerminal(t, in, sid, "sleep 30")
	var pty testkit.APIWorker
	testkit.WaitFor(t, 10*time.Second, "the terminal", func() bool {
		ws, _ := in.Workers(t.Context())
		for _, w := range ws {
			if w.Kind == "pty" && w.SessionID == sid {
				pty = w
				return true
			}
		}
		return false
	})
	for _, pid := range []int{workerOf(t, in, "chat", sid).PID, pty.PID} {
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"DASHGATE_TOKEN=", "DASHGATE_ADMIN_TOKEN=", "SOME_SECRET=", secret} {
			if bytes.Contains(env, []byte(bad)) {
				t.Fatalf("child %d's environment holds %q", pid, bad)
			}
		}
		for _, want := range []string{"DASHGATE_PARENT_PID=", "DASHGATE_SESSION_ID=" + sid, "DASHGATE_INSTANCE=", "DASHGATE_WORKER_ID="} {
			if !bytes.Contains(env, []byte(want)) {
				t.Fatalf("child %d's environment lacks %q", pid, want)
			}
		}
	}
	if code := stop(t, in); code != 0 {
		t.Errorf("dashgate exited %d after SIGTERM", code)
	}
}
