package e2e_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/dashgate/dashgate/internal/testkit"
)

// unitFile is a parsed systemd unit: section -> key -> values, in order.
type unitFile map[string]map[string][]string

// parseUnit reads a unit file: [Section] headers, Key=Value lines, comments
// (# and ;) and backslash continuations.
func parseUnit(t *testing.T, b []byte) unitFile {
	t.Helper()
	u := unitFile{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	var pending string
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if pending != "" {
			line = pending + " " + line
			pending = ""
		}
		if strings.HasSuffix(line, `\`) {
			pending = strings.TrimSuffix(line, `\`)
			continue
		}
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("unit line %d: %q is not Key=Value in a section", n, line)
			}
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

// get returns the last value of key in section ("" when unset).
func (u unitFile) get(section, key string) string {
	vs := u[section][key]
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// parseTimeSpan parses a systemd time span: "30s", "1min 30s", "90" (seconds).
func parseTimeSpan(s string) (time.Duration, error) {
	units := map[string]time.Duration{
		"us": time.Microsecond, "usec": time.Microsecond, "ms": time.Millisecond, "msec": time.Millisecond,
		"": time.Second, "s": time.Second, "sec": time.Second, "second": time.Second, "seconds": time.Second,
		"m": time.Minute, "min": time.Minute, "minute": time.Minute, "minutes": time.Minute,
		"h": time.Hour, "hr": time.Hour, "hour": time.Hour, "hours": time.Hour,
	}
	re := regexp.MustCompile(`^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-z]*)`)
	var total time.Duration
	rest := strings.TrimSpace(s)
	if rest == "" || rest == "infinity" {
		return 0, fmt.Errorf("time span %q: not a finite span", s)
	}
	for rest != "" {
		m := re.FindStringSubmatch(rest)
		if m == nil {
			return 0, fmt.Errorf("time span %q: cannot parse %q", s, rest)
		}
		unit, ok := units[m[2]]
		if !ok {
			return 0, fmt.Errorf("time span %q: unknown unit %q", s, m[2])
		}
		f, _ := strconv.ParseFloat(m[1], 64)
		total += time.Duration(f * float64(unit))
		rest = strings.TrimSpace(rest[len(m[0]):])
	}
	return total, nil
}

// flagValue returns the value of --name in args (as "--name v" or
// "--name=v") and whether it is there.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// setFlag replaces the value of --name in args.
func setFlag(t *testing.T, args []string, name, value string) []string {
	t.Helper()
	for i, a := range args {
		if a == "--"+name && i+1 < len(args) {
			args[i+1] = value
			return args
		}
		if strings.HasPrefix(a, "--"+name+"=") {
			args[i] = "--" + name + "=" + value
			return args
		}
	}
	t.Fatalf("ExecStart has no --%s", name)
	return nil
}

const unitBinary = "/usr/local/bin/dashgate"

// args0 is the unit's ExecStart split into words.
func args0(t *testing.T, u unitFile) []string {
	t.Helper()
	return strings.Fields(strings.TrimLeft(u.get("Service", "ExecStart"), "-@:+!"))
}

// Case 7: deploy/systemd/dashgate.service is consistent with dashgate's own
// stop (KillMode=mixed, a TimeoutStopSec above what dashgate may take, a
// StateDirectory for --state-dir), and its ExecStart line, run as it is
// (the binary, the state directory and the port substituted), starts,
// serves under its base path and stops cleanly on SIGTERM with exit 0.
func TestSystemdUnit(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	unitPath := filepath.Join(root, "deploy", "systemd", "dashgate.service")
	raw, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	unit := parseUnit(t, raw)

	if got := unit.get("Service", "KillMode"); got != "mixed" {
		t.Errorf("KillMode=%q, want mixed (SIGTERM to dashgate alone: it reaps its own children)", got)
	}
	if ks := unit.get("Service", "KillSignal"); ks != "" && ks != "SIGTERM" && ks != "TERM" && ks != "15" {
		t.Errorf("KillSignal=%q: dashgate stops cleanly on SIGTERM (or SIGINT)", ks)
	}
	if got := unit.get("Service", "Delegate"); got != "yes" {
		t.Errorf("Delegate=%q, want yes: dashgate puts each child in a cgroup of its own under the unit's (README, Containment)", got)
	}
	if v, _ := flagValue(args0(t, unit), "cgroup"); v != "on" {
		t.Errorf("ExecStart --cgroup %q, want on: with Delegate=yes, a unit without containment is a broken unit", v)
	}
	stateDir := unit.get("Service", "StateDirectory")
	if stateDir == "" {
		t.Errorf("StateDirectory is not set: --state-dir needs a directory that survives restarts (the startup sweep)")
	}
	execStart := unit.get("Service", "ExecStart")
	if execStart == "" || strings.ContainsAny(execStart, `"'`) {
		t.Fatalf("ExecStart=%q: want one command line without quotes", execStart)
	}
	args := strings.Fields(strings.TrimLeft(execStart, "-@:+!"))
	if args[0] != unitBinary {
		t.Fatalf("ExecStart runs %q, want %s", args[0], unitBinary)
	}
	if v, _ := flagValue(args, "state-dir"); v != "${STATE_DIRECTORY}" && v != "$STATE_DIRECTORY" && v != "%S/"+stateDir {
		t.Errorf("ExecStart --state-dir %q: want the StateDirectory (${STATE_DIRECTORY})", v)
	}
	// Durations the unit leaves to dashgate's defaults count at those.
	durations := map[string]time.Duration{"shutdown-timeout": 10 * time.Second, "worker-grace": 2 * time.Second}
	for name := range durations {
		if v, ok := flagValue(args, name); ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatalf("ExecStart --%s %q: %v", name, v, err)
			}
			durations[name] = d
		}
	}
	stopSpan := unit.get("Service", "TimeoutStopSec")
	if stopSpan == "" {
		stopSpan = "90s" // systemd's DefaultTimeoutStopSec
	}
	timeoutStop, err := parseTimeSpan(stopSpan)
	if err != nil {
		t.Fatalf("TimeoutStopSec: %v", err)
	}
	need := durations["shutdown-timeout"] + 2*durations["worker-grace"]
	if timeoutStop <= need {
		t.Errorf("TimeoutStopSec=%s (%v) is not above --shutdown-timeout %v plus two --worker-grace %v (%v): systemd would SIGKILL dashgate while it still reaps",
			stopSpan, timeoutStop, durations["shutdown-timeout"], durations["worker-grace"], need)
	}

	t.Run("ExecStart", func(t *testing.T) { runExecStart(t, args, timeoutStop) })

	t.Run("systemd-analyze verify", func(t *testing.T) {
		sa, err := exec.LookPath("systemd-analyze")
		if err != nil {
			t.Skip("systemd-analyze not found")
		}
		dir := t.TempDir()
		envFile := filepath.Join(dir, "env")
		if err := os.WriteFile(envFile, []byte("DASHGATE_TOKEN="+testToken+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		fixed := strings.ReplaceAll(string(raw), unitBinary, dashgateBin)
		fixed = regexp.MustCompile(`(?m)^EnvironmentFile=-?/.*$`).ReplaceAllString(fixed, "EnvironmentFile="+envFile)
		copyPath := filepath.Join(dir, "dashgate.service")
		if err := os.WriteFile(copyPath, []byte(fixed), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(sa, "verify", copyPath)
		cmd.Env = append(testkit.CleanEnv(), "SYSTEMD_LOG_LEVEL=notice")
		out, err := cmd.CombinedOutput()
		// Only this unit's diagnostics count (verify also loads the units it
		// orders itself after).
		var ours []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if strings.Contains(l, "dashgate.service") {
				ours = append(ours, l)
			}
		}
		if err != nil || len(ours) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", copyPath, err, out)
		}
	})
}

// runExecStart runs the unit's command line as systemd would (its
// environment: PATH, STATE_DIRECTORY, the token from the EnvironmentFile),
// with only the binary, ${STATE_DIRECTORY} and the port substituted; checks
// /dashgate/healthz, a session with a worker and a terminal, then SIGTERM to
// dashgate alone (KillMode=mixed): it must exit 0 within TimeoutStopSec
// having reaped every child, leaving nothing for systemd's final SIGKILL.
func runExecStart(t *testing.T, unitArgs []string, timeoutStop time.Duration) {
	clearArtifacts(t)
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	if err := os.Mkdir(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	args := append([]string(nil), unitArgs[1:]...)
	for i, a := range args {
		args[i] = strings.NewReplacer("${STATE_DIRECTORY}", stateDir, "$STATE_DIRECTORY", stateDir).Replace(a)
	}
	args = setFlag(t, args, "addr", "127.0.0.1:0")
	if why := cgroupProblem(); why != "" {
		// systemd would delegate the unit's cgroup; this test cannot.
		t.Logf("--cgroup auto instead of on: %s", why)
		args = setFlag(t, args, "cgroup", "auto")
	}
	t.Logf("ExecStart: %s %s", dashgateBin, strings.Join(args, " "))

	// The unit's command line as is (only --addr-file added), systemd's
	// environment, and its working directory; the start fails unless the
	// log is JSON (--log-format json) with a "dashgate listening" record.
	d := launch(t, testkit.Options{
		Dir: dir, Args: args, Exact: true, WorkDir: "/",
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"STATE_DIRECTORY=" + stateDir,
			"DASHGATE_TOKEN=" + testToken,
			"LANG=C.UTF-8",
		},
	})
	base := strings.TrimPrefix(d.Base, "http://"+d.Addr)
	if base != "/dashgate/" {
		t.Errorf("the unit serves under %q, want /dashgate/ (deploy/nginx/dashgate.conf)", base)
	}

	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	res, err := hc.Get("http://" + d.Addr + "/dashgate/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body := new(bytes.Buffer)
	body.ReadFrom(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || body.String() != "ok" {
		t.Errorf("GET /dashgate/healthz: %s %q, want 200 ok", res.Status, body)
	}
	d.Sessions() // authenticates with the token from the environment (EnvironmentFile)

	// Children to reap at the stop: a chat worker and a terminal running a
	// program.
	chat := openChat(t, "chat", "ws://"+d.Addr+"/dashgate/ws/chat", bearer())
	sid := chat.createSession("unit")
	chat.mustEcho(sid, "hi")
	pty := openPTY(t, "pty", "ws://"+d.Addr+"/dashgate/ws/pty?session_id="+sid, bearer())
	if err := pty.write(websocket.MessageBinary, []byte("sleep 300\r")); err != nil {
		t.Fatal(err)
	}
	if !testkit.Until(10*time.Second, func() bool {
		w, ok := d.Worker(sid, "pty")
		return ok && len(w.Children) > 0
	}) {
		t.Fatalf("no terminal running sleep: %+v", d.Workers())
	}
	if _, ok := d.Worker(sid, "chat"); !ok {
		t.Fatalf("no chat worker: %+v", d.Workers())
	}

	// systemctl stop with KillMode=mixed: SIGTERM to the main process only.
	start := time.Now()
	done := make(chan struct{})
	go func() {
		select {
		case <-d.Exited():
		case <-time.After(timeoutStop):
			t.Errorf("dashgate still running TimeoutStopSec (%v) after SIGTERM: systemd would SIGKILL it", timeoutStop)
		}
		close(done)
	}()
	d.stop() // SIGTERM, exit 0, "dashgate stopped", no ERROR, nothing left
	<-done
	t.Logf("stopped %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	if websocket.CloseStatus(chat.Err()) != websocket.StatusGoingAway {
		t.Errorf("chat socket ended with %v, want close 1001 at shutdown", chat.Err())
	}
	if b, err := os.ReadFile(d.Log.Path); err == nil {
		for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			if len(l) > 0 && l[0] != '{' {
				t.Errorf("a log line is not JSON (--log-format json): %s", l)
			}
		}
	}
}
