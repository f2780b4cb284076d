// Command dashgate-bench measures a dashgate gateway against its targets
// (issue 9) and checks that load leaves nothing behind: no worker, no
// zombie, no file descriptor, no goroutine.
//
// By default it runs the dashgate binary given by --dashgate (or builds one
// from the module it runs in) on 127.0.0.1:0, a fresh instance per group of
// figures, and stops each with SIGTERM, expecting exit status 0, no process
// of the instance left behind and no ERROR log record. With --url and
// --token it measures a running dashgate instead (--pid, when it runs on this
// machine, lets it read that process's /proc).
//
// It prints a table (median and spread over --runs runs, the target, ok or
// miss) and writes the same as JSON with --json. It exits 1 on an error or
// a leak, never because a figure missed its target; 2 on bad flags.
//
//	go run ./cmd/dashgate-bench               # the full run (about 13 minutes)
//	go run ./cmd/dashgate-bench --short       # CI counts, under a minute
//	go run ./cmd/dashgate-bench --only churn,soak --json out.json
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() { os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr)) }

// config holds the flags.
type config struct {
	Dashgate string
	URL      string
	Token    string
	PID      int
	JSON     string
	Markdown string
	Runs     int
	Short    bool
	Only     string
	Keep     bool
	Verbose  bool

	ThroughputMiB    int
	Keystrokes       int
	ColdExecs        int
	WarmExecs        int
	ReapSamples      int
	ChurnCycles      int
	Concurrency      int
	DetachedSessions int
	AttachedSessions int
	AdminSessions    int
	AdminGets        int
	IdleSockets      int
	IdleHold         time.Duration
	SoakCycles       int
	SoakDropEvery    int
}

// groups are the figure groups, in the order they run.
var groups = []string{"throughput", "keys", "exec", "reap", "churn", "memory", "admin", "idle", "soak"}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("dashgate-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Dashgate, "dashgate", "", "dashgate binary to run (default: go build ./cmd/dashgate of the module found by `go env GOMOD`)")
	fs.StringVar(&c.URL, "url", "", "measure the dashgate at this URL (base path included) instead of starting one")
	fs.StringVar(&c.Token, "token", "", "token of --url (dashboard and admin)")
	fs.IntVar(&c.PID, "pid", 0, "pid of the --url dashgate when it runs on this machine (RSS, fds and zombies from /proc)")
	fs.StringVar(&c.JSON, "json", "", "write the results as JSON to this file")
	fs.StringVar(&c.Markdown, "markdown", "", "write the results table as Markdown to this file")
	fs.IntVar(&c.Runs, "runs", 5, "runs per figure (the median and spread are over runs)")
	fs.BoolVar(&c.Short, "short", false, "CI mode: tiny counts, 2 runs unless --runs is given, whole run under a minute")
	fs.StringVar(&c.Only, "only", "", "comma-separated groups to run: "+strings.Join(groups, ","))
	fs.BoolVar(&c.Keep, "keep", false, "keep the temp dir (dashgate logs, the throughput file)")
	fs.BoolVar(&c.Verbose, "v", false, "log progress")

	fs.IntVar(&c.ThroughputMiB, "throughput-mib", 256, "size of the file cat through the terminal, MiB")
	fs.IntVar(&c.Keystrokes, "keystrokes", 1000, "keystrokes per run")
	fs.IntVar(&c.ColdExecs, "cold-execs", 20, "cold slash.exec samples per run (a new session and worker each)")
	fs.IntVar(&c.WarmExecs, "warm-execs", 1000, "warm slash.exec samples per run")
	fs.IntVar(&c.ReapSamples, "reap-samples", 100, "socket-close-to-reaped samples per run")
	fs.IntVar(&c.ChurnCycles, "churn-cycles", 1000, "session churn cycles per run")
	fs.IntVar(&c.Concurrency, "concurrency", 8, "clients running churn and soak cycles at once")
	fs.IntVar(&c.DetachedSessions, "detached-sessions", 5000, "idle detached sessions for the RSS figure")
	fs.IntVar(&c.AttachedSessions, "attached-sessions", 200, "attached sessions with a worker for the RSS figure")
	fs.IntVar(&c.AdminSessions, "admin-sessions", 1000, "sessions while timing GET /admin")
	fs.IntVar(&c.AdminGets, "admin-gets", 20, "GET /admin samples per run")
	fs.IntVar(&c.IdleSockets, "idle-sockets", 2000, "idle chat sockets held")
	fs.DurationVar(&c.IdleHold, "idle-hold", 60*time.Second, "how long the idle sockets are held")
	fs.IntVar(&c.SoakCycles, "soak-cycles", 10000, "soak churn cycles")
	fs.IntVar(&c.SoakDropEvery, "soak-drop-every", 10, "every Nth soak cycle drops its TCP connection without a close frame")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if c.Short {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		short := map[string]string{
			"runs": "2", "throughput-mib": "16", "keystrokes": "100", "cold-execs": "5", "warm-execs": "100",
			"reap-samples": "10", "churn-cycles": "100", "detached-sessions": "300", "attached-sessions": "10",
			"admin-sessions": "200", "admin-gets": "5", "idle-sockets": "100", "idle-hold": "3s",
			"soak-cycles": "200",
		}
		for name, v := range short {
			if !set[name] {
				fs.Set(name, v)
			}
		}
	}
	if c.URL != "" && c.Token == "" {
		return c, errors.New("--url needs --token")
	}
	if c.URL != "" && c.Dashgate != "" {
		return c, errors.New("--url and --dashgate exclude each other")
	}
	if c.Runs < 1 || c.Concurrency < 1 || c.SoakDropEvery < 1 {
		return c, errors.New("--runs, --concurrency and --soak-drop-every must be at least 1")
	}
	for _, g := range c.only() {
		if !contains(groups, g) {
			return c, fmt.Errorf("--only: unknown group %q (groups: %s)", g, strings.Join(groups, ","))
		}
	}
	return c, nil
}

func (c config) only() []string {
	var out []string
	for _, g := range strings.Split(c.Only, ",") {
		if g = strings.TrimSpace(g); g != "" {
			out = append(out, g)
		}
	}
	return out
}

func (c config) runs(group string) bool {
	only := c.only()
	return len(only) == 0 || contains(only, group)
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// Report is the JSON output.
type Report struct {
	Started  time.Time `json:"started"`
	Duration string    `json:"duration"`
	Machine  Machine   `json:"machine"`
	Config   any       `json:"config"`
	Target   string    `json:"target"`
	Figures  []*Figure `json:"figures"`
	Errors   []string  `json:"errors"`
	Warnings int       `json:"dashgate_warn_records"`
	Leaks    []string  `json:"leaks"`
	Notes    []string  `json:"notes,omitempty"`
	// Load is /proc/loadavg when each group started: the machine is shared.
	Load map[string]string `json:"loadavg"`
}

// Main runs the tool with args and returns its exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "dashgate-bench:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	rep, err := run(ctx, cfg, stderr)
	if rep != nil {
		fmt.Fprintln(stdout)
		writeTable(stdout, rep.Figures)
		for _, e := range rep.Errors {
			fmt.Fprintln(stdout, "error:", e)
		}
		for _, l := range rep.Leaks {
			fmt.Fprintln(stdout, "leak:", l)
		}
		for _, n := range rep.Notes {
			fmt.Fprintln(stdout, "note:", n)
		}
		if cfg.JSON != "" {
			b, werr := json.MarshalIndent(rep, "", "  ")
			if werr == nil {
				werr = os.WriteFile(cfg.JSON, append(b, '\n'), 0o644)
			}
			if werr != nil && err == nil {
				err = fmt.Errorf("--json: %w", werr)
			}
		}
		if cfg.Markdown != "" {
			f, werr := os.Create(cfg.Markdown)
			if werr == nil {
				writeMarkdown(f, rep.Figures)
				werr = f.Close()
			}
			if werr != nil && err == nil {
				err = werr
			}
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "dashgate-bench:", err)
		return 1
	}
	if len(rep.Errors) > 0 || len(rep.Leaks) > 0 {
		fmt.Fprintf(stderr, "dashgate-bench: %d errors, %d leaks\n", len(rep.Errors), len(rep.Leaks))
		if !cfg.Keep && cfg.URL == "" {
			fmt.Fprintln(stderr, "dashgate-bench: run with --keep to keep the dashgate logs")
		}
		return 1
	}
	return 0
}

// run measures every selected group and returns the report; progress goes
// to stderr. An error means the run could not go on (no binary, no
// target); problems met on the way are in the report.
func run(ctx context.Context, cfg config, stderr io.Writer) (*Report, error) {
	start := time.Now()
	raiseNoFile(stderr)
	tmp, err := os.MkdirTemp("", "dashgate-bench-")
	if err != nil {
		return nil, err
	}
	if cfg.Keep {
		fmt.Fprintln(stderr, "dashgate-bench: keeping", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	b := &bench{cfg: cfg, tmp: tmp, log: stderr, figs: map[string]*Figure{}}
	if !cfg.Verbose {
		b.log = io.Discard
	}
	shown := cfg
	if shown.Token != "" {
		shown.Token = "REDACTED" // never written out
	}
	rep := &Report{Started: start.UTC(), Machine: readMachine(), Config: shown, Load: map[string]string{}}

	if cfg.URL != "" {
		u, err := url.Parse(cfg.URL)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("--url %q: not an http URL", cfg.URL)
		}
		b.shared = newTarget(u, cfg.Token, cfg.PID)
		rep.Target = "url " + u.Redacted()
		if _, err := b.shared.workers(ctx); err != nil {
			return nil, fmt.Errorf("--url: %w", err)
		}
		b.note("--url: the flags this tool gives the dashgate it starts (--max-conns-per-ip 0, --ws-ping-interval 1s, --max-workers, --max-sessions, --pty-cmd /bin/sh) are not applied; the figures that need them may miss or fail (the idle sockets need --max-conns-per-ip 0)")
	} else {
		bin := cfg.Dashgate
		if bin == "" {
			fmt.Fprintln(stderr, "dashgate-bench: building dashgate")
			if bin, err = buildDashgate(ctx, tmp); err != nil {
				return nil, err
			}
		}
		if bin, err = filepath.Abs(bin); err != nil {
			return nil, err
		}
		b.bin = bin
		rep.Target = "started " + bin
	}

	steps := map[string]func(context.Context){
		"throughput": b.throughput, "keys": b.keystrokes, "exec": b.exec, "reap": b.reap,
		"churn": b.churn, "memory": b.memory, "admin": b.admin, "idle": b.idle, "soak": b.soak,
	}
	for _, g := range groups {
		if !cfg.runs(g) {
			continue
		}
		if ctx.Err() != nil {
			b.errorf("interrupted before %s", g)
			break
		}
		load := loadavg()
		rep.Load[g] = load
		fmt.Fprintf(stderr, "dashgate-bench: %s (%s, load %s)\n", g, time.Since(start).Round(time.Second), load)
		steps[g](ctx)
	}

	for _, id := range b.order {
		f := b.figs[id]
		f.summarise()
		rep.Figures = append(rep.Figures, f)
		if f.Leak && !f.OK && len(f.Runs) > 0 {
			rep.Leaks = append(rep.Leaks, fmt.Sprintf("%s: %s %s (target %s)", f.Name, formatNum(f.Max), f.Unit, f.Target))
		}
	}
	rep.Errors = b.errs
	if rep.Errors == nil {
		rep.Errors = []string{}
	}
	if rep.Leaks == nil {
		rep.Leaks = []string{}
	}
	rep.Warnings = b.warns
	rep.Notes = b.notes
	rep.Duration = time.Since(start).Round(time.Second).String()
	return rep, nil
}

// buildDashgate builds ./cmd/dashgate of the module found by `go env GOMOD`
// into dir.
func buildDashgate(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the dashgate module: run from the repository or pass --dashgate")
	}
	bin := filepath.Join(dir, "dashgate")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/dashgate")
	cmd.Dir = filepath.Dir(gomod)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/dashgate: %w\n%s", err, out)
	}
	return bin, nil
}

// raiseNoFile raises RLIMIT_NOFILE as far as allowed. It uses
// syscall.Setrlimit, which (unlike x/sys/unix) also makes the children
// (dashgate) inherit the new limit instead of the one the process started
// with.
func raiseNoFile(stderr io.Writer) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return
	}
	want := syscall.Rlimit{Cur: max(lim.Max, 65536), Max: max(lim.Max, 65536)}
	if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want) == nil {
		return
	}
	want = syscall.Rlimit{Cur: lim.Max, Max: lim.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		fmt.Fprintln(stderr, "dashgate-bench: raise RLIMIT_NOFILE:", err)
	}
}
