package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/dashgate/dashgate/internal/testkit"
)

// chromiumPath is the browser the suite drives. Tests skip without it unless
// DASHGATE_E2E=1 is set (CI), where a missing browser is a failure.
const chromiumPath = "/usr/bin/chromium"

// dashgateBin is the binary built once by TestMain.
var dashgateBin string

// The tests do not call t.Parallel: each drives a Chromium and a dashgate
// on a small machine and some measure user promises in wall-clock time
// ("gone within 1 s plus the grace"), and the zombie reaping of the
// subreaper below is process-wide (it may only run while no exec.Cmd of the
// test is waiting for its child).

// TestMain makes the test process a child subreaper (so nothing dashgate or
// Chromium leaves behind escapes to init: it is reparented to us, where the
// leak checks see it and reapOrphans reaps it), builds dashgate once, runs the
// tests and checks for leaked goroutines.
func TestMain(m *testing.M) {
	if ask := os.Getenv(envNeighbour); ask != "" {
		// A neighbour's client, run as another account (sharedbox_test.go):
		// no test, no build, no subreaper.
		os.Exit(neighbourMain(ask))
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: prctl(PR_SET_CHILD_SUBREAPER):", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	bin, err := testkit.Build(ctx)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	dashgateBin = bin
	testkit.VerifyNoLeaks(m,
		// Nothing to ignore of its own: every test stops its dashgate, its browser and its
		// HTTP clients before it returns.
		goleak.Cleanup(func(code int) {
			// Before reapOrphans: the server of testkit.Postgres is a child
			// of the test process until StopPostgres stops it.
			if err := testkit.StopPostgres(); err != nil {
				fmt.Fprintln(os.Stderr, "e2e: stop PostgreSQL:", err)
				if code == 0 {
					code = 1
				}
			}
			if left := reapOrphans(5 * time.Second); len(left) > 0 {
				fmt.Fprintf(os.Stderr, "e2e: processes still reparented to the test process at exit: %v\n", left)
				if code == 0 {
					code = 1
				}
			}
			testkit.RemoveBuild()
			os.Exit(code)
		}),
	)
}

// reapOrphans waits up to d for the processes reparented to the test process
// (it is a subreaper) to exit, reaping them, and returns a description of
// those still running after d, which it then kills: they can only be
// leftovers of a browser or a dashgate this process started. Children an
// exec.Cmd waits for (testkit.Own) are left alone.
func reapOrphans(d time.Duration) []string {
	self := os.Getpid()
	live := func() []testkit.Proc {
		testkit.ReapZombieChildren()
		children, _ := testkit.Descendants(self)
		var out []testkit.Proc
		for _, p := range children {
			if p.PPID == self && !p.Dead() && !testkit.Owned(p.PID) {
				out = append(out, p)
			}
		}
		return out
	}
	var left []testkit.Proc
	testkit.Until(d, func() bool { left = live(); return len(left) == 0 })
	var desc []string
	for _, p := range left {
		desc = append(desc, testkit.Describe(p.PID))
		unix.Kill(p.PID, unix.SIGKILL)
	}
	if len(left) > 0 {
		testkit.Until(2*time.Second, func() bool { return len(live()) == 0 })
	}
	return desc
}

// repoRoot is the directory of the module's go.mod (`go env GOMOD`), or ".."
// when the go command cannot say.
func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if gomod := strings.TrimSpace(string(out)); err == nil && gomod != "" && gomod != os.DevNull {
		return filepath.Dir(gomod), nil
	}
	root, err := filepath.Abs("..")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return "", fmt.Errorf("cannot find the repository root: %w", err)
	}
	return root, nil
}

// requireChromium skips the test when the browser is missing, unless
// DASHGATE_E2E=1 asks for the suite to run for real.
func requireChromium(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("DASHGATE_E2E") == "1" {
			t.Fatalf("%s is missing and DASHGATE_E2E=1: install it with scripts/e2e-deps.sh", chromiumPath)
		}
		t.Skipf("%s not found: browser tests skipped (install it with scripts/e2e-deps.sh; set DASHGATE_E2E=1 to make this a failure)", chromiumPath)
	}
}
