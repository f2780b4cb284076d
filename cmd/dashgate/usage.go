package main

import (
	"flag"
	"fmt"
	"io"
)

// flagGroup is one section of `dashgate serve --help`.
type flagGroup struct {
	title string
	names []string
}

// serveFlagGroups orders `dashgate serve --help` by what the flags are for,
// the knobs an operator rarely touches last (coder's option groups). Every
// flag parseConfig registers is in exactly one group (TestServeHelpGroups);
// one left out is still printed, under "Other", at the end.
var serveFlagGroups = []flagGroup{
	{"Serving", []string{
		"addr", "addr-file", "base-path", "public-url",
		"token", "token-file", "admin-token", "admin-token-file",
		"state-dir", "store", "history-retention",
		"pty-cmd", "pty-cwd", "worker-cmd", "agent", "default-agent", "pass-env",
		"log-level", "log-format",
	}},
	{"Users and identity (docs/users.md)", []string{
		"users-file", "admin-users",
		"user-header", "trusted-proxies", "proxy-user", "proxy-secret-file",
		"allowed-origins",
		"max-sessions-per-user", "max-workers-per-user", "max-terminals-per-user",
	}},
	{"Unix accounts (docs/unix-accounts.md)", []string{
		"unix-users", "unix-users-map", "allow-root-users",
		"user-memory-max", "user-pids-max", "user-cpu-max",
	}},
	{"Terminal recordings (docs/recordings.md)", []string{
		"record-terminals", "record-max-bytes", "record-retention",
	}},
	{"Cluster (docs/cluster.md)", []string{
		"node-id", "node-expiry", "node-heartbeat", "store-wait",
	}},
	{"Agent and model server", []string{
		"llm-url", "llm-model", "llm-api-key-env",
		"llm-connect-timeout", "llm-header-timeout",
		"agent-system-prompt", "agent-context", "agent-tools",
		"tool-timeout", "approval-timeout", "llm-image-models",
	}},
	{"Containment and children's priority (docs/containment.md)", []string{
		"cgroup", "cgroup-root", "child-memory-max", "child-pids-max",
		"child-sched", "child-nice", "child-cpu-weight",
	}},
	{"Limits", []string{
		"max-sessions", "max-workers", "max-sessions-per-socket",
		"max-conns-per-ip", "max-http-conns", "max-pending-per-peer",
		"attach-max-bytes", "attach-max-files", "attach-max-total",
	}},
	{"Tuning (timeouts, buffers, threads; the defaults suit most)", []string{
		"detached-ttl", "detach-turn-grace",
		"worker-grace", "worker-timeout", "interrupt-grace",
		"pty-keepalive", "pty-buffer", "pty-spare", "pty-spare-idle", "terminal-upload-max",
		"ws-ping-interval", "ws-ping-timeout", "ws-write-timeout", "ws-close-timeout",
		"http-idle-timeout", "http-header-timeout",
		"shutdown-timeout", "store-backlog",
		"gomaxprocs", "gateway-slice", "pprof-addr",
	}},
}

// serveUsage prints fs's flags in serveFlagGroups' order, each as
// flag.PrintDefaults would, with its registered default (not the value a
// flag before --help set).
func serveUsage(fs *flag.FlagSet) func() {
	return func() {
		out := fs.Output()
		fmt.Fprintf(out, "Usage: dashgate serve [flags]\n\n")
		fmt.Fprintf(out, "Every flag can also be set as DASHGATE_<NAME> (--worker-grace: DASHGATE_WORKER_GRACE);\nthe command line wins. Users of a --users-file: dashgate user add|list|remove.\n")
		seen := map[string]bool{}
		for _, g := range serveFlagGroups {
			fmt.Fprintf(out, "\n%s:\n", g.title)
			for _, name := range g.names {
				if f := fs.Lookup(name); f != nil {
					printFlag(out, f)
					seen[name] = true
				}
			}
		}
		var rest []*flag.Flag
		fs.VisitAll(func(f *flag.Flag) {
			if !seen[f.Name] {
				rest = append(rest, f)
			}
		})
		if len(rest) > 0 {
			fmt.Fprintf(out, "\nOther:\n")
			for _, f := range rest {
				printFlag(out, f)
			}
		}
	}
}

// printFlag prints one flag in flag.PrintDefaults' format, through a
// FlagSet of its own holding only it.
func printFlag(out io.Writer, f *flag.Flag) {
	one := flag.NewFlagSet("", flag.ContinueOnError)
	one.SetOutput(out)
	one.Var(f.Value, f.Name, f.Usage)
	one.Lookup(f.Name).DefValue = f.DefValue
	one.PrintDefaults()
}
