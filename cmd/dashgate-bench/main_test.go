//go:build bench

package main

import (
	"io"
	"os"
	"strings"
	"testing"

	"github.com/dashgate/dashgate/internal/testkit"
)

// TestMain runs Main for the helpers the tool re-executes itself as
// (`relay go`, `stall-quiet`, `stall-load`, `acp-agent`): os.Executable is
// the test binary here, which would otherwise run TestShortRun again, and
// so on without end.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && !strings.HasPrefix(os.Args[1], "-") {
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestShortRun (go test -tags bench ./cmd/dashgate-bench/) runs the tool
// with --short counts, one run, the built dashgate compared with itself: no
// error or leak, every figure measured on both builds, and every dashgate
// exited 0 on SIGTERM leaving no process carrying its instance id.
func TestShortRun(t *testing.T) {
	bin, err := testkit.Build(t.Context())
	t.Cleanup(testkit.RemoveBuild)
	var cfg config
	if err == nil {
		cfg, err = parseFlags([]string{"--short", "--runs", "1", "--dashgate", bin, "--compare", bin}, io.Discard)
	}
	var b *bench
	if err == nil {
		b, err = run(t.Context(), cfg, io.Discard)
	}
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	code := b.report(&out, &out)
	t.Logf("dashgate-bench --short:\n%s", out.String())
	if code != 0 || len(b.figs) < 30 || len(b.insts) != 2*21 {
		t.Errorf("exit code %d, %d figures, %d dashgates; want 0, at least 30, 42 (per build, one per group, two for memory, four more for cluster)",
			code, len(b.figs), len(b.insts))
	}
	for _, f := range b.figs {
		if len(f.runs["new"]) != 1 || len(f.runs["old"]) != 1 {
			t.Errorf("%s: runs %v, want one per build", f.name, f.runs)
		}
	}
	for _, in := range b.insts {
		if left, err := in.Procs(); err != nil || len(left) > 0 || in.ExitCode() != 0 || in.ID == "" {
			t.Errorf("dashgate %d (%s): exit code %d, left %v (%v)", in.PID(), in.ID, in.ExitCode(), left, err)
		}
	}
}
