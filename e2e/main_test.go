package e2e_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
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
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: prctl(PR_SET_CHILD_SUBREAPER):", err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "dashgate-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	if err := build(dir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m,
		// Nothing to ignore: every test stops its dashgate, its browser and its
		// HTTP clients before it returns.
		goleak.Cleanup(func(code int) {
			if left := reapOrphans(5 * time.Second); len(left) > 0 {
				fmt.Fprintf(os.Stderr, "e2e: processes still reparented to the test process at exit: %v\n", left)
				if code == 0 {
					code = 1
				}
			}
			os.RemoveAll(dir)
			os.Exit(code)
		}),
	)
}

// build compiles ./cmd/dashgate into dir, with the race detector when this
// test binary has it, so that a data race in dashgate fails its exit-code
// check (a race-enabled binary exits 66 after reporting one).
func build(dir string) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	dashgateBin = filepath.Join(dir, "dashgate")
	args := []string{"build", "-o", dashgateBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/dashgate")
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return nil
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
