package main

import (
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
)

// TestGoMaxProcs: --gomaxprocs sets the gateway's GOMAXPROCS (its
// /metrics says so), and by default it is four times Go's own: the
// kernel shares a saturated CPU per thread, and with Go's default 300
// busy children took all but a fifth of a core from the gateway
// (BENCHMARKS.md, issue 28).
func TestGoMaxProcs(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig([]string{"--state-dir", t.TempDir()}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := min(4*runtime.GOMAXPROCS(0), 1024); cfg.GoMaxProcs != want {
		t.Errorf("default --gomaxprocs = %d, want %d", cfg.GoMaxProcs, want)
	}
	in := startInstance(t, "procs", t.TempDir(), "--gomaxprocs", "3")
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, in.URL("metrics"), nil)
	req.Header.Set("Authorization", "Bearer "+in.Token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %v %s", err, res.Status)
	}
	if !strings.Contains(string(body), "\ngo_sched_gomaxprocs_threads 3\n") {
		t.Fatalf("/metrics has no go_sched_gomaxprocs_threads 3:\n%s", body)
	}
	stop(t, in)
}
