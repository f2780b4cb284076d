package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/workers"
)

// TestGoMaxProcs: --gomaxprocs sets the gateway's GOMAXPROCS (its
// /metrics says so), and by default it is auto: package maxprocs moves it
// between Go's own and four times that (the kernel shares a saturated CPU
// per thread, and with Go's default 300 busy children took all but a
// fifth of a core from the gateway, BENCHMARKS.md, issue 28; while they
// do not, the threads beyond the CPUs cost a third more CPU a terminal
// connect, issue 43).
func TestGoMaxProcs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		auto bool
		n    int
	}{{nil, true, 0}, {[]string{"--gomaxprocs", "auto"}, true, 0}, {[]string{"--gomaxprocs", "0"}, false, 0}, {[]string{"--gomaxprocs", "6"}, false, 6}} {
		cfg, err := parseConfig(append(tt.args, "--state-dir", t.TempDir()), func(string) string { return "" }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.GoMaxProcsAuto != tt.auto || cfg.GoMaxProcs != tt.n {
			t.Errorf("%q: GoMaxProcsAuto, GoMaxProcs = %v, %d; want %v, %d", tt.args, cfg.GoMaxProcsAuto, cfg.GoMaxProcs, tt.auto, tt.n)
		}
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

// TestWorkerOneProc: a worker process (dashgate worker) runs its Go code
// on one thread at a time, as its /sysinfo says, unless its environment
// sets GOMAXPROCS: with Go's default, 300 streaming workers' wake-ups
// were much of the machine's load (BENCHMARKS.md, issue 43).
func TestWorkerOneProc(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ env, want string }{
		{"", "(Go code on 1 at a time)"},
		{"GOMAXPROCS=2", "(Go code on 2 at a time)"},
	} {
		cmd := exec.Command(self, "worker")
		cmd.Env = append(testkit.CleanEnv(), mainEnv+"=1", "GORACE=atexit_sleep_ms=0")
		if tt.env != "" {
			cmd.Env = append(cmd.Env, tt.env)
		}
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		wait, err := workers.Start(cmd) // not a plain fork: TestNodeLoad's workers close in parallel
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(in, `{"id":1,"method":"slash","params":{"command":"/sysinfo"}}`+"\n")
		var reply struct {
			ID     int
			OK     bool
			Result struct{ Output string }
		}
		err = json.NewDecoder(out).Decode(&reply)
		in.Close()
		wait()
		if err != nil || !reply.OK {
			t.Fatalf("%q: /sysinfo reply %+v: %v", tt.env, reply, err)
		}
		if !strings.Contains(reply.Result.Output, tt.want) {
			t.Errorf("environment %q: /sysinfo says\n%s\nwant %q", tt.env, reply.Result.Output, tt.want)
		}
	}
}
