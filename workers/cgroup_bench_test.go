package workers

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
)

// benchManager is a Manager in the given mode ("cgroup" or "fallback").
func benchManager(b *testing.B, mode string) *Manager {
	b.Helper()
	cfg := Config{Instance: "bench-" + newMarker(), Grace: testGrace}
	if mode == "cgroup" {
		mount, err := cgroup2Mount()
		if err != nil {
			b.Skip(err)
		}
		root := mount + "/dashgate-bench-" + newMarker()
		if err := os.Mkdir(root, 0o755); err != nil {
			b.Skipf("cgroup v2 at %s is not writable: %v", mount, err)
		}
		b.Cleanup(func() { removeTree(root, 5*time.Second) })
		cg, err := SetupCgroups(CgroupOptions{Mode: CgroupOn, Root: root, Instance: cfg.Instance})
		if err != nil {
			b.Fatal(err)
		}
		cfg.Cgroups = cg
	}
	m := NewManager(cfg)
	b.Cleanup(func() { m.CloseAll(ReasonShutdown); m.Wait() })
	return m
}

// treeSpec is a terminal whose program has two descendants, one in its
// process group and one in a session of its own (still holding the
// terminal, so the fallback finds it too); all end on SIGHUP.
var treeSpec = Spec{Kind: KindPTY, SessionID: "s-bench", Path: "/bin/sh",
	Args: []string{"-c", "sleep 300 & setsid sleep 300 & exec sleep 300"}}

// BenchmarkCloseToGone: Close of a terminal with two descendants, from the
// call until every member is gone and the child reaped, in cgroup mode and
// in the fallback. Reports the p50 and p99 of Close and the churn (starts
// and closes per second).
func BenchmarkCloseToGone(b *testing.B) {
	for _, mode := range []string{"cgroup", "fallback"} {
		b.Run(mode, func(b *testing.B) {
			m := benchManager(b, mode)
			var closes []time.Duration
			start := time.Now()
			for b.Loop() {
				p, err := m.Start(treeSpec)
				if err != nil {
					b.Fatal(err)
				}
				testkit.WaitFor(b, 5*time.Second, "both descendants", func() bool { return len(p.Descendants()) == 2 })
				t0 := time.Now()
				p.Close(ReasonDetach)
				closes = append(closes, time.Since(t0))
				p.PTY().Close()
			}
			elapsed := time.Since(start)
			slices.Sort(closes)
			b.ReportMetric(float64(closes[len(closes)/2].Microseconds()), "close-p50-µs")
			b.ReportMetric(float64(closes[len(closes)*99/100].Microseconds()), "close-p99-µs")
			b.ReportMetric(float64(len(closes))/elapsed.Seconds(), "churn/s")
		})
	}
}

// BenchmarkTable: the process table with n terminals of three processes
// each, from their cgroups or from a /proc walk.
func BenchmarkTable(b *testing.B) {
	for _, mode := range []string{"cgroup", "fallback"} {
		for _, n := range []int{10, 50} {
			b.Run(fmt.Sprintf("%s/%d", mode, n), func(b *testing.B) {
				m := benchManager(b, mode)
				for range n {
					p, err := m.Start(treeSpec)
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { p.PTY().Close() })
				}
				for b.Loop() {
					if rows := m.Table(b.Context()); len(rows) != n {
						b.Fatalf("%d rows", len(rows))
					}
				}
			})
		}
	}
}

// BenchmarkStart: Start of a terminal (/bin/sh on a pty), from the call
// until it returns (the program has exec'd), in cgroup mode and in the
// fallback; each is closed after (not timed). Reports the p50 and p99.
func BenchmarkStart(b *testing.B) {
	for _, mode := range []string{"cgroup", "fallback"} {
		b.Run(mode, func(b *testing.B) {
			m := benchManager(b, mode)
			var starts []time.Duration
			for b.Loop() {
				t0 := time.Now()
				p, err := m.Start(Spec{Kind: KindPTY, SessionID: "s-bench", Path: "/bin/sh"})
				if err != nil {
					b.Fatal(err)
				}
				starts = append(starts, time.Since(t0))
				p.Close(ReasonDetach)
				p.PTY().Close()
			}
			slices.Sort(starts)
			b.ReportMetric(float64(starts[len(starts)/2].Microseconds()), "start-p50-µs")
			b.ReportMetric(float64(starts[len(starts)*99/100].Microseconds()), "start-p99-µs")
		})
	}
}
