package workers

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
)

// TestOutputSurvivesTheOrphanReaper: a helper command run through Output
// keeps its exit status from the orphan reaper. The reaper's pass runs
// while the command is a zombie not yet waited for (the window in which
// a plain exec raced it: accounts' id(1) failed with ECHILD); Wait still
// gets the status and the output.
func TestOutputSurvivesTheOrphanReaper(t *testing.T) {
	m, _ := newTestManager(t, Config{})
	passes := 0
	outputStarted = func(pid int) {
		testkit.WaitFor(t, 10*time.Second, "the command to exit", func() bool {
			st, ok := readStat(pid)
			return ok && st.zombie()
		})
		m.reapZombieOrphans()
		passes++
	}
	t.Cleanup(func() { outputStarted = nil })
	out, err := Output(exec.Command("sh", "-c", "echo 100 1000; exit 0"))
	if err != nil {
		t.Fatalf("Output: %v (the reaper took the exit status?)", err)
	}
	if got := strings.TrimSpace(string(out)); got != "100 1000" || passes != 1 {
		t.Fatalf("Output = %q after %d reaper passes, want %q after 1", got, passes, "100 1000")
	}
	_, err = Output(exec.Command("sh", "-c", "echo why >&2; exit 3"))
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 3 || strings.TrimSpace(string(ee.Stderr)) != "why" {
		t.Fatalf("failing command: err = %v, want exit status 3 with stderr %q", err, "why")
	}
}
