package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestConfigFromFlagsAndEnv(t *testing.T) {
	env := map[string]string{
		"DASHGATE_WORKER_GRACE": "750ms",
		"DASHGATE_MAX_WORKERS":  "7",
		"DASHGATE_TOKEN":        "from-env",
		"DASHGATE_ADDR":         "127.0.0.1:9999",
		"HOME":                  "/home/t",
	}
	cfg, err := parseConfig([]string{"--max-workers", "9"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.WorkerGrace != 750*time.Millisecond || cfg.MaxWorkers != 9 || cfg.Token != "from-env" || !cfg.TokenExplicit || cfg.Addr != "127.0.0.1:9999" {
		t.Fatalf("cfg = %+v", cfg)
	}
}

func TestConfigRefusals(t *testing.T) {
	none := func(string) string { return "" }
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"non-loopback without a token", []string{"--addr", "0.0.0.0:8787"}, "not a loopback address"},
		{"bad log format", []string{"--log-format", "xml"}, "--log-format"},
		{"zero grace", []string{"--worker-grace", "0s"}, "must be positive"},
		{"stray argument", []string{"extra"}, "unexpected argument"},
		{"negative retention", []string{"--history-retention", "-1h"}, "--history-retention"},
		{"unknown cgroup mode", []string{"--cgroup", "yes"}, "--cgroup"},
		{"memory limit not a size", []string{"--child-memory-max", "lots"}, "--child-memory-max"},
		{"negative pids limit", []string{"--child-pids-max", "-1"}, "--child-pids-max"},
		{"user header without trusted proxies", []string{"--user-header", "X-Forwarded-User"}, "needs a proxy to trust"},
		{"unix users trusting an address", []string{"--unix-users", "--user-header", "X-Forwarded-User", "--trusted-proxies", "127.0.0.1"}, "an address proves nothing"},
		{"unix users trusting any socket peer", []string{"--unix-users", "--user-header", "X-Forwarded-User", "--trusted-proxies", "unix", "--addr", "unix:/run/d.sock"}, "--proxy-user"},
		{"unix users with the token in argv", []string{"--unix-users", "--users-file", "/u", "--token", "t0k"}, "--token on the command line"},
		{"unix users with the admin token in argv", []string{"--unix-users", "--users-file", "/u", "--admin-token", "t0k"}, "--admin-token on the command line"},
		{"unix users with a store password in argv", []string{"--unix-users", "--users-file", "/u", "--store", "postgres://u:pw@h/db"}, "--store on the command line"},
		{"proxy user over TCP", []string{"--user-header", "X-Forwarded-User", "--proxy-user", "www-data"}, "needs --addr unix:"},
		{"user header not a name", []string{"--user-header", "X User", "--trusted-proxies", "127.0.0.1"}, "not a header name"},
		{"admin users without users", []string{"--admin-users", "carol"}, "--admin-users needs users"},
		{"negative per-user cap", []string{"--max-workers-per-user", "-1"}, "--max-workers-per-user"},
		{"unix users without users", []string{"--unix-users"}, "--unix-users needs users"},
		{"user limit without unix users", []string{"--user-pids-max", "100"}, "need --unix-users"},
		{"cpu share not a share", []string{"--unix-users", "--users-file", "/u", "--user-cpu-max", "lots"}, "--user-cpu-max"},
		{"user memory not a size", []string{"--unix-users", "--users-file", "/u", "--user-memory-max", "lots"}, "--user-memory-max"},
		{"pprof beyond loopback", []string{"--pprof-addr", "0.0.0.0:6060"}, "--pprof-addr"},
		{"pprof without a port", []string{"--pprof-addr", "127.0.0.1"}, "--pprof-addr"},
		{"child nice out of range", []string{"--child-nice", "20"}, "--child-nice"},
		{"gomaxprocs negative", []string{"--gomaxprocs", "-1"}, "--gomaxprocs"},
		{"gateway slice under the kernel's least", []string{"--gateway-slice", "50us"}, "--gateway-slice"},
		{"gateway slice over the kernel's most", []string{"--gateway-slice", "1s"}, "--gateway-slice"},
		{"unknown child policy", []string{"--child-sched", "fifo"}, "--child-sched"},
		{"child cpu weight out of range", []string{"--child-cpu-weight", "10001"}, "--child-cpu-weight"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseConfig(tt.args, none, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
	if _, err := parseConfig([]string{"--addr", "0.0.0.0:8787", "--token", "t", "--state-dir", "/srv/dashgate"}, none, io.Discard); err != nil {
		t.Fatalf("non-loopback with a token: %v", err)
	}
	for _, args := range [][]string{
		{"--addr", "unix:/run/dashgate.sock"},
		{"--addr", "0.0.0.0:8787", "--user-header", "X-Forwarded-User", "--trusted-proxies", "10.0.0.1"},
		{"--addr", "0.0.0.0:8787", "--users-file", "/etc/dashgate/users"},
	} {
		if _, err := parseConfig(append(args, "--state-dir", "/srv/dashgate"), none, io.Discard); err != nil {
			t.Fatalf("%q without a token (a Unix socket, or users on): %v", args, err)
		}
	}
	if _, err := parseConfig(nil, func(k string) string {
		if k == "DASHGATE_WORKER_GRACE" {
			return "soon"
		}
		return ""
	}, io.Discard); err == nil || !strings.Contains(err.Error(), "DASHGATE_WORKER_GRACE") {
		t.Fatalf("bad env value: %v", err)
	}
}

func TestConfigCgroupLimits(t *testing.T) {
	cfg, err := parseConfig([]string{"--child-memory-max", "512MiB", "--child-pids-max", "64", "--cgroup", "on", "--state-dir", "/srv/dashgate"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ChildMemoryBytes != 512<<20 || cfg.ChildPidsMax != 64 || cfg.Cgroup != "on" {
		t.Fatalf("cfg = %+v", cfg)
	}
}

// TestConfigUnixUsers: --user-cpu-max becomes cpu.max's line, and
// --pty-cmd given (by flag or environment) keeps the terminal program
// the operator chose instead of each account's login shell.
func TestConfigUnixUsers(t *testing.T) {
	none := func(string) string { return "" }
	base := []string{"--unix-users", "--users-file", "/etc/dashgate/users", "--state-dir", "/srv/dashgate"}
	c, err := parseConfig(append(base, "--user-cpu-max", "150%", "--user-memory-max", "1GiB"), none, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.UserCPUMaxLine != "150000 100000" || c.UserMemoryBytes != 1<<30 || c.PTYCmdExplicit {
		t.Fatalf("cpu.max %q, memory %d, pty-cmd given %v; want 150000 100000, 1 GiB, false", c.UserCPUMaxLine, c.UserMemoryBytes, c.PTYCmdExplicit)
	}
	if c, _ := parseConfig(append(base, "--pty-cmd", "/bin/zsh"), none, io.Discard); !c.PTYCmdExplicit {
		t.Fatal("--pty-cmd on the command line not seen as given")
	}
	env := func(k string) string {
		if k == "DASHGATE_PTY_CMD" {
			return "/bin/zsh"
		}
		return ""
	}
	if c, _ := parseConfig(base, env, io.Discard); !c.PTYCmdExplicit {
		t.Fatal("DASHGATE_PTY_CMD not seen as given")
	}
}

// TestConfigStoreOutage: --store-backlog (or DASHGATE_STORE_BACKLOG)
// bounds the journal, 100000 by default, and must be positive;
// --node-expiry, the lease ttl of a node, is 15 s by default.
func TestConfigStoreOutage(t *testing.T) {
	none := func(k string) string {
		if k == "HOME" {
			return "/home/t"
		}
		return ""
	}
	cfg, err := parseConfig(nil, none, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.StoreBacklog != 100_000 || cfg.NodeExpiry != 15*time.Second {
		t.Fatalf("defaults: store backlog %d, node expiry %v; want 100000, 15s", cfg.StoreBacklog, cfg.NodeExpiry)
	}
	cfg, err = parseConfig(nil, func(k string) string {
		if k == "DASHGATE_STORE_BACKLOG" {
			return "5"
		}
		return none(k)
	}, io.Discard)
	if err != nil || cfg.StoreBacklog != 5 {
		t.Fatalf("DASHGATE_STORE_BACKLOG=5: %d, %v", cfg.StoreBacklog, err)
	}
	if cfg, err = parseConfig([]string{"--store-backlog", "7"}, none, io.Discard); err != nil || cfg.StoreBacklog != 7 {
		t.Fatalf("--store-backlog 7: %d, %v", cfg.StoreBacklog, err)
	}
	if _, err := parseConfig([]string{"--store-backlog", "0"}, none, io.Discard); err == nil || !strings.Contains(err.Error(), "--store-backlog") {
		t.Fatalf("--store-backlog 0: %v; want refused", err)
	}
}

// TestConfigHeartbeatFollowsExpiry: --node-expiry 5s alone (the failover
// docs' advice) starts, the heartbeat a third of it; the 15 s default
// keeps the 5 s heartbeat; a heartbeat given, on the command line or in
// DASHGATE_NODE_HEARTBEAT, stays, and one not shorter than the expiry is
// refused.
func TestConfigHeartbeatFollowsExpiry(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			if k == "HOME" {
				return "/home/t"
			}
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	for _, c := range []struct {
		args []string
		env  []string
		want time.Duration
	}{
		{nil, nil, 5 * time.Second},
		{[]string{"--node-expiry", "5s"}, nil, 5 * time.Second / 3},
		{nil, []string{"DASHGATE_NODE_EXPIRY", "6s"}, 2 * time.Second},
		{[]string{"--node-expiry", "1m"}, nil, 5 * time.Second},
		{[]string{"--node-expiry", "5s", "--node-heartbeat", "4s"}, nil, 4 * time.Second},
		{[]string{"--node-expiry", "5s"}, []string{"DASHGATE_NODE_HEARTBEAT", "2s"}, 2 * time.Second},
	} {
		cfg, err := parseConfig(c.args, env(c.env...), io.Discard)
		if err != nil || cfg.NodeHeartbeat != c.want {
			t.Errorf("%v %v: heartbeat %v, %v; want %v", c.args, c.env, cfg.NodeHeartbeat, err, c.want)
		}
	}
	if _, err := parseConfig([]string{"--node-expiry", "5s", "--node-heartbeat", "5s"}, env(), io.Discard); err == nil || !strings.Contains(err.Error(), "--node-expiry longer") {
		t.Errorf("--node-expiry 5s --node-heartbeat 5s: %v; want refused", err)
	}
}

// TestConfigSecretsOutOfArgv: a secret given in the environment or a file
// is not in argv (no refusal with --unix-users, no warning); given on the
// command line it is named in ArgvSecrets (one WARN at start without
// --unix-users); a secret file readable by others, or given beside its
// flag, is refused; the proxy is proven by a secret or peer credentials.
func TestConfigSecretsOutOfArgv(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tokFile := write("token", "tok-from-file\n", 0o600)
	admFile := write("admin", "adm-from-file\n", 0o640)
	secFile := write("secret", "0123456789abcdef0123\n", 0o600)
	open := write("open", "tok-readable\n", 0o644)
	short := write("short", "abc\n", 0o600)
	env := map[string]string{"HOME": "/home/t", "DASHGATE_STORE": "postgres://u:pw@h/db"}
	getenv := func(k string) string { return env[k] }

	cfg, err := parseConfig([]string{"--unix-users", "--users-file", "/u", "--token-file", tokFile, "--admin-token-file", admFile,
		"--user-header", "X-Forwarded-User", "--trusted-proxies", "127.0.0.1", "--proxy-secret-file", secFile}, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Token != "tok-from-file" || cfg.AdminToken != "adm-from-file" || string(cfg.ProxySecret) != "0123456789abcdef0123" || !cfg.TokenExplicit {
		t.Fatalf("secrets from files: %+v", cfg)
	}
	if len(cfg.ArgvSecrets) != 0 || len(cfg.proxyWarnings()) != 0 {
		t.Fatalf("secrets from the environment and files counted as argv: %v %v", cfg.ArgvSecrets, cfg.proxyWarnings())
	}

	cfg, err = parseConfig([]string{"--token", "t0k", "--store", "postgres://u:pw@h/db", "--user-header", "X-Forwarded-User", "--trusted-proxies", "127.0.0.1"}, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.ArgvSecrets, " "); got != "--token --store" {
		t.Fatalf("ArgvSecrets %q, want --token --store", got)
	}
	if w := cfg.proxyWarnings(); len(w) != 2 || !strings.Contains(w[0], "/proc/<pid>/cmdline") || !strings.Contains(w[1], "every local process") {
		t.Fatalf("warnings %q", w)
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"token file readable by all", []string{"--token-file", open}, "readable by every account"},
		{"token and token file", []string{"--token", "x", "--token-file", tokFile}, "give one"},
		{"short proxy secret", []string{"--proxy-secret-file", short}, "at least 16"},
		{"missing file", []string{"--admin-token-file", filepath.Join(dir, "nope")}, "--admin-token-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := parseConfig(tc.args, getenv, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestConfigUserCapDefaults: with users on, the per-user caps default to
// shares of the global ones; given (argv or the environment), even 0, they
// stay; without users there is no per-user limit.
func TestConfigUserCapDefaults(t *testing.T) {
	env := map[string]string{"HOME": "/home/t", "DASHGATE_MAX_TERMINALS_PER_USER": "0"}
	getenv := func(k string) string { return env[k] }
	cfg, err := parseConfig([]string{"--users-file", "/u", "--max-sessions", "100", "--max-workers", "40", "--max-workers-per-user", "3"}, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxSessionsUser != 25 || cfg.MaxWorkersUser != 3 || cfg.MaxTerminalsUser != 0 {
		t.Fatalf("users on: per-user caps %d/%d/%d, want 25 (a quarter of 100), 3 (given), 0 (given)", cfg.MaxSessionsUser, cfg.MaxWorkersUser, cfg.MaxTerminalsUser)
	}
	cfg, err = parseConfig([]string{"--max-sessions", "100"}, func(k string) string { return map[string]string{"HOME": "/home/t"}[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxSessionsUser != 0 || cfg.MaxWorkersUser != 0 || cfg.MaxTerminalsUser != 0 {
		t.Fatalf("users off: per-user caps %d/%d/%d, want none", cfg.MaxSessionsUser, cfg.MaxWorkersUser, cfg.MaxTerminalsUser)
	}
}

// --child-nice is auto unless given: main resolves it with
// workers.AutoChildNice; a value is kept as given.
func TestConfigChildNice(t *testing.T) {
	none := func(string) string { return "" }
	for _, tc := range []struct {
		args []string
		want int
	}{{nil, -1}, {[]string{"--child-nice", "auto"}, -1}, {[]string{"--child-nice", "0"}, 0}, {[]string{"--child-nice", "7"}, 7}} {
		cfg, err := parseConfig(append(tc.args, "--state-dir", "/srv/dashgate"), none, io.Discard)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if cfg.ChildNice != tc.want {
			t.Fatalf("%q: ChildNice %d, want %d", tc.args, cfg.ChildNice, tc.want)
		}
	}
}

// TestConfigGatewaySlice: --gateway-slice is 300µs by default, 0 (the
// kernel's own) when asked, and a duration as given.
func TestConfigGatewaySlice(t *testing.T) {
	none := func(string) string { return "" }
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{{nil, 300 * time.Microsecond}, {[]string{"--gateway-slice", "0"}, 0}, {[]string{"--gateway-slice", "1ms"}, time.Millisecond}} {
		cfg, err := parseConfig(append(tc.args, "--state-dir", "/srv/dashgate"), none, io.Discard)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if cfg.GatewaySlice != tc.want {
			t.Fatalf("%q: GatewaySlice %v, want %v", tc.args, cfg.GatewaySlice, tc.want)
		}
	}
}
