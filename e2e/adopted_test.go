package e2e_test

import (
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/dashgate/dashgate/internal/testkit"
)

// TestAdoptedProcessEndsWithDashgate (issue 16 item 5, fallback mode): a
// process typed in a terminal that leaves the terminal's process group,
// session, parent chain and marker and drops the terminal too —
// `(setsid env -i /bin/sleep 777 </dev/null >/dev/null 2>&1 &)`, so not
// even the fallback's check of the descriptors it holds finds it — is
// adopted by dashgate (a subreaper) and listed as unowned; it does not
// outlive dashgate's SIGTERM, and its end is one INFO record.
func TestAdoptedProcessEndsWithDashgate(t *testing.T) {
	t.Parallel()
	d := startDashgate(t, "--cgroup", "off")
	pty := openPTY(t, "pty", d.WSURL("ws/pty"), bearer())
	if err := pty.write(websocket.MessageBinary, []byte("(setsid env -i /bin/sleep 777 </dev/null >/dev/null 2>&1 &)\r")); err != nil {
		t.Fatal(err)
	}
	var pid int
	testkit.WaitFor(t, 10*time.Second, "the adopted sleep", func() bool {
		var api struct {
			Unowned []struct {
				PID int `json:"pid"`
			} `json:"unowned"`
		}
		if err := d.getJSON("admin/api/unowned", &api); err != nil {
			return false
		}
		for _, u := range api.Unowned {
			if cl, _ := testkit.Cmdline(u.PID); strings.HasPrefix(cl, "/bin/sleep 777") {
				pid = u.PID
				return true
			}
		}
		return false
	})
	start := d.remember(pid)
	d.stop() // SIGTERM; the checking stop fails the test if anything is left
	if present(pid, start) {
		t.Fatalf("the adopted sleep %d outlived dashgate", pid)
	}
	if _, ok := d.findLog(func(r logRecord) bool {
		return r.Msg() == "worker closed" && r.Str("process") == "adopted" && r["worker_pid"] == float64(pid)
	}); !ok {
		t.Fatalf("no worker closed record for the adopted process:\n%s", d.logText())
	}
}
