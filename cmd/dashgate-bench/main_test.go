package main

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m) // the end-to-end test only runs processes
}

// TestShortRun builds the tool and runs it in --short mode, end to end: it
// builds dashgate itself, starts and stops its instances, and must report
// no error and no leak (a missed timing target is not a failure).
func TestShortRun(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "dashgate-bench")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", tool, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Second)
	defer cancel()
	jsonPath := filepath.Join(dir, "out.json")
	cmd := exec.CommandContext(ctx, tool, "--short", "--json", jsonPath)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	t.Logf("dashgate-bench --short took %v:\n%s", time.Since(start).Round(time.Second), out.String())
	if err != nil {
		t.Fatalf("dashgate-bench --short: %v", err)
	}

	var rep struct {
		Errors  []string
		Leaks   []string
		Figures []Figure
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("decode %s: %v", jsonPath, err)
	}
	if len(rep.Errors) > 0 || len(rep.Leaks) > 0 {
		t.Fatalf("errors %q, leaks %q", rep.Errors, rep.Leaks)
	}
	ids := map[string]Figure{}
	for _, f := range rep.Figures {
		ids[f.ID] = f
	}
	// Every figure of the issue is measured (a URL target may skip the CPU
	// one; this run starts its own dashgate).
	for _, id := range []string{
		"pty_ratio", "pty_ws_cpu", "key_p50", "key_p99", "exec_cold", "exec_warm", "reap_p99", "churn_rate",
		"churn_workers", "churn_zombies", "churn_fds", "churn_goroutines", "rss_detached", "rss_attached",
		"worker_rss", "admin_ms", "idle_rss", "soak_workers", "soak_zombies", "soak_fds", "soak_goroutines",
	} {
		f, ok := ids[id]
		if !ok || len(f.Runs) == 0 {
			t.Errorf("figure %s: not measured", id)
			continue
		}
		if f.Leak && !f.OK {
			t.Errorf("figure %s: leak %v", id, f.Runs)
		}
		for _, v := range f.Runs {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Errorf("figure %s: run value %v", id, v)
			}
		}
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		xs   []float64
		p    float64
		want float64
	}{
		{"one sample", []float64{3}, 99, 3},
		{"median odd", []float64{5, 1, 3}, 50, 3},
		{"median even interpolates", []float64{4, 1, 3, 2}, 50, 2.5},
		{"p0 is the min", []float64{4, 1, 3, 2}, 0, 1},
		{"p100 is the max", []float64{4, 1, 3, 2}, 100, 4},
		{"p90 of 11", []float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90, 9},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := percentile(tc.xs, tc.p); got != tc.want {
				t.Errorf("percentile(%v, %v) = %v, want %v", tc.xs, tc.p, got, tc.want)
			}
		})
	}
	if !math.IsNaN(percentile(nil, 50)) {
		t.Error("percentile of no samples is not NaN")
	}
}

func TestFigureVerdict(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		f    Figure
		ok   bool
		verd string
	}{
		{"median meets <=", Figure{Runs: []float64{1, 9, 2}, Target: Target{"<=", 5}}, true, "ok"},
		{"median misses <=", Figure{Runs: []float64{6, 9, 2}, Target: Target{"<=", 5}}, false, "miss"},
		{"median meets >=", Figure{Runs: []float64{0.7, 0.9, 0.85}, Target: Target{">=", 0.8}}, true, "ok"},
		{"a leak in any run is a leak", Figure{Runs: []float64{0, 0, 1}, Target: Target{"<=", 0}, Leak: true}, false, "LEAK"},
		{"leaks within tolerance", Figure{Runs: []float64{2, 1}, Target: Target{"<=", 2}, Leak: true}, true, "ok"},
		{"info has no verdict", Figure{Runs: []float64{3}, Info: true}, true, ""},
		{"no runs", Figure{Target: Target{"<=", 1}}, false, "n/a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := tc.f
			f.summarise()
			if f.OK != tc.ok || f.verdict() != tc.verd {
				t.Errorf("OK = %v, verdict %q; want %v, %q", f.OK, f.verdict(), tc.ok, tc.verd)
			}
		})
	}
}

func TestSink(t *testing.T) {
	t.Parallel()
	now := time.Now()
	tests := []struct {
		name    string
		chunks  []string
		want    int64
		done    bool
		wantErr bool
	}{
		{"marker then data", []string{"echo DGB_ x_GO\r\n$ ", "DGB_x_GOab", "cd"}, 4, true, false},
		{"marker split across reads", []string{"DGB", "_x_", "GOabcd"}, 4, true, false},
		{"the echo alone is not the marker", []string{"printf '%s%s' DGB_ x_GO", "abcd"}, 4, false, false},
		{"short", []string{"DGB_x_GOab"}, 4, false, false},
		{"too much", []string{"DGB_x_GOabcde"}, 4, true, true},
		{"nothing expected", []string{"DGB_x_GO"}, 0, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := &sink{marker: []byte("DGB_x_GO"), want: tc.want}
			var done bool
			var err error
			for _, c := range tc.chunks {
				if done, err = s.feed([]byte(c), now); done || err != nil {
					break
				}
			}
			if done != tc.done || (err != nil) != tc.wantErr {
				t.Errorf("done %v err %v; want done %v, error %v", done, err, tc.done, tc.wantErr)
			}
		})
	}
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	c, err := parseFlags([]string{"--short", "--runs", "3"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Runs != 3 || c.ThroughputMiB != 16 || c.SoakCycles != 200 || c.IdleHold != 3*time.Second {
		t.Errorf("--short --runs 3: %+v", c)
	}
	c, err = parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Runs != 5 || c.ThroughputMiB != 256 || c.Keystrokes != 1000 || c.IdleSockets != 2000 || c.IdleHold != time.Minute || c.SoakCycles != 10000 {
		t.Errorf("defaults: %+v", c)
	}
	for _, bad := range [][]string{{"--url", "http://x"}, {"--only", "nope"}, {"--runs", "0"}, {"extra"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) accepted", bad)
		}
	}
}

// A figure without runs (a group that failed) still makes valid JSON.
func TestReportJSONWithoutRuns(t *testing.T) {
	t.Parallel()
	f := &Figure{ID: "x", Target: Target{"<=", 1}}
	f.summarise()
	b, err := json.Marshal(&Report{Figures: []*Figure{f}})
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if m := back.Figures[0].Median; !math.IsNaN(float64(m)) {
		t.Errorf("median of no runs = %v after a round trip, want NaN (null)", m)
	}
	if !strings.Contains(string(b), `"median":null`) {
		t.Errorf("JSON %s has no null median", b)
	}
}
