// Command dashgate-bench measures a real dashgate against the targets of
// issue 9 and checks that load leaves nothing behind (see BENCHMARKS.md).
//
// It runs --dashgate (default: ./cmd/dashgate of this module, built) through
// internal/testkit, a fresh instance per group of figures (per run for
// memory and idle), each stopped with SIGTERM: it must exit 0 and leave no
// process carrying its DASHGATE_INSTANCE. With --compare OLD the two builds
// alternate run by run. It prints a Markdown table and exits 1 on an error
// or a leak, never because a figure missed its target; 2 on bad flags.
//
//	go run ./cmd/dashgate-bench --short --only keys,exec --runs 3
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/perf/benchmath"

	"github.com/dashgate/dashgate/internal/testkit"
)

func main() { os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr)) }

// config holds the flags.
type config struct {
	dashgate, compare string
	args              map[string][]string // extra dashgate flags, by build label
	only              []string
	runs              int
	n                 map[string]int // the counts, by name
	stallPeers        []stallPeer    // servers the stall group times beside dashgate (stallpeers.go)
}

// counts are the sizes of the groups, changed with --counts name=N,...
var counts = []struct {
	name        string
	full, short int
	usage       string
}{
	{"throughput-mib", 256, 16, "size of the file cat through the terminal, MiB"},
	{"keystrokes", 1000, 100, "keystrokes per run"},
	{"connects", 200, 20, "terminal connects (and plain pty starts) per run"},
	{"cold-execs", 20, 5, "cold slash.exec per run (a new session and worker each)"},
	{"warm-execs", 1000, 100, "warm slash.exec per run"},
	{"reaps", 100, 10, "socket closed → worker reaped samples per run"},
	{"churn", 1000, 100, "churn cycles per run"},
	{"clients", 8, 8, "clients running churn and soak cycles at once"},
	{"detached", 5000, 300, "idle detached sessions (memory)"},
	{"attached", 200, 10, "attached sessions with a worker (memory)"},
	{"admin-sessions", 1000, 200, "sessions while timing GET /admin"},
	{"admin-gets", 20, 5, "GET /admin per run"},
	{"idle-sockets", 2000, 100, "idle chat sockets held"},
	{"idle-secs", 60, 3, "seconds the idle sockets are held"},
	{"soak", 10000, 200, "soak cycles (one run)"},
	{"soak-drop-every", 10, 10, "every Nth soak cycle drops its TCP connection without a close frame"},
	{"stream-words", 20000, 2000, "words of the streamed reply (one delta each)"},
	{"resumes", 200, 20, "session.resume of a 200-entry session per run"},
	{"stored-sessions", 10000, 500, "sessions in the store at start-up (50 entries each)"},
	{"agent-prompts", 100, 10, "prompts to the agent worker per run"},
	{"acp-prompts", 100, 10, "warm prompts per run to each of the ACP agent and the built-in agent (acp)"},
	{"acp-stream-kib", 4096, 256, "KiB of the reply streamed in 1 KiB chunks, CPU per KiB (acp)"},
	{"cluster-clients", 4, 2, "chat clients at once (cluster: on the SQLite node, or split over the two PostgreSQL nodes)"},
	{"cluster-cycles", 100, 8, "create, /echo, prompt, close cycles per run over the clients (cluster)"},
	{"cluster-sessions", 10000, 500, "sessions in PostgreSQL and SQLite at start-up (cluster; 5 entries each, half closed)"},
	{"stall-streams", 300, 30, "sockets streaming 200-word echo replies back to back (stall); terminals streaming a word every 40 ms (stall-terminal)"},
	{"stall-churn", 20, 5, "sessions a second created, /echo run and closed beside them (stall); terminals a second opened and closed (stall-terminal)"},
	{"stall-secs", 20, 5, "seconds of each quiet phase, idle and loaded (stall, stall-terminal)"},
	{"stall-load-nice", 0, 0, "nice value of the load process (stall; 0: the tool's)"},
	{"attach-mib", 10, 10, "MiB of the file attached in the chat (attach)"},
}

// groupNames are the --only names, in the order the groups run.
var groupNames = []string{"throughput", "keys", "connect", "exec", "reap", "churn", "memory", "admin", "idle", "soak", "stream", "startup", "agent", "acp", "cluster", "stall", "stall-terminal", "attach"}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	c := config{n: map[string]int{}}
	var only, over string
	fs := flag.NewFlagSet("dashgate-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.dashgate, "dashgate", "", "dashgate binary to measure (default: go build ./cmd/dashgate of the module of the working directory)")
	fs.StringVar(&c.compare, "compare", "", "an older dashgate binary measured beside --dashgate, the two alternating run by run")
	var argsNew, argsOld string
	fs.StringVar(&argsNew, "args-new", "", "extra dashgate flags of --dashgate (split on spaces; they win over a group's)")
	fs.StringVar(&argsOld, "args-old", "", "extra dashgate flags of --compare (e.g. the same binary with --store none)")
	var peers string
	fs.StringVar(&peers, "stall-peers", "", "terminal servers the stall group starts beside dashgate, name=binary,... (ttyd, gotty): a GET each answers alone, timed with dashgate's /healthz, idle and under the same load (the machine's floor)")
	fs.StringVar(&only, "only", "", "comma-separated groups to run: "+strings.Join(groupNames, ","))
	fs.IntVar(&c.runs, "runs", 0, "runs per figure: the median and spread are over runs (default 5, 2 with --short)")
	short := fs.Bool("short", false, "smoke counts: the [--short] values of --counts")
	usage := "counts to change, name=N,...; each with its default and [--short] value:"
	for _, d := range counts {
		usage += fmt.Sprintf("\n  %s=%d [%d]: %s", d.name, d.full, d.short, d.usage)
	}
	fs.StringVar(&over, "counts", "", usage+"\n")
	if err := fs.Parse(args); err != nil {
		return c, err
	} else if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for _, d := range counts {
		c.n[d.name] = d.full
		if *short {
			c.n[d.name] = d.short
		}
	}
	if c.runs == 0 {
		c.runs = map[bool]int{false: 5, true: 2}[*short]
	}
	split := func(s string) []string { return strings.FieldsFunc(s, func(r rune) bool { return r == ',' }) }
	for _, kv := range split(over) {
		k, v, _ := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if _, ok := c.n[k]; !ok || err != nil || n < 1 {
			return c, fmt.Errorf("--counts: %q is not name=N with N >= 1 and a name of --help", kv)
		}
		c.n[k] = n
	}
	c.args = map[string][]string{"new": strings.Fields(argsNew), "old": strings.Fields(argsOld)}
	var err error
	if c.stallPeers, err = parseStallPeers(peers); err != nil {
		return c, err
	}
	c.only = split(only)
	for _, g := range c.only {
		if !slices.Contains(groupNames, g) {
			return c, fmt.Errorf("--only: unknown group %q (groups: %s)", g, strings.Join(groupNames, ","))
		}
	}
	if c.runs < 1 {
		return c, errors.New("--runs must be at least 1")
	}
	return c, nil
}

// Main runs the tool with args and returns its exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 2 && args[0] == "relay" { // a reference relay of the keys group (relay.go)
		if err := serveRelay(args[1], stdout); err != nil {
			fmt.Fprintln(stderr, "dashgate-bench relay:", err)
			return 1
		}
		return 0
	}
	if len(args) == 1 && args[0] == "acp-agent" { // the acp group's ACP agent (acp.go)
		if err := serveACPAgent(); err != nil {
			fmt.Fprintln(stderr, "dashgate-bench acp-agent:", err)
			return 1
		}
		return 0
	}
	if len(args) == 3 && args[0] == "stall-trace" { // a stall run's calls split at the gateway (stalltrace.go)
		if err := stallTrace(args[1], args[2], stdout); err != nil {
			fmt.Fprintln(stderr, "dashgate-bench stall-trace:", err)
			return 1
		}
		return 0
	}
	for _, h := range []func([]string, io.Writer) (string, bool, error){stallHelper, tstallHelper} { // the stall groups' processes (stall.go, tstall.go)
		if helper, ok, err := h(args, stdout); ok {
			if err != nil {
				fmt.Fprintf(stderr, "dashgate-bench %s: %v\n", helper, err)
				return 1
			}
			return 0
		}
	}
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		fmt.Fprintln(stderr, "dashgate-bench:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	b, err := run(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "dashgate-bench:", err)
		return 1
	}
	return b.report(stdout, stderr)
}

// build is one dashgate binary measured: "new" (--dashgate) or "old"
// (--compare).
type build struct{ label, bin string }

// bench collects figures and problems while the groups run, one at a time.
type bench struct {
	cfg    config
	tmp    string
	stderr io.Writer
	builds []build
	began  time.Time
	figs   []*Figure
	errs   []string
	warns  int       // WARN records in dashgate logs
	insts  []*target // every dashgate started, once stopped
}

// errorf records a problem: the run goes on, the tool will exit 1.
func (b *bench) errorf(format string, args ...any) {
	b.errs = append(b.errs, fmt.Sprintf(format, args...))
	fmt.Fprintln(b.stderr, "dashgate-bench: error:", b.errs[len(b.errs)-1])
}

// run measures every selected group; an error means the run could not
// start (no binary); problems met on the way are in b.errs.
func run(ctx context.Context, cfg config, stderr io.Writer) (*bench, error) {
	b := &bench{cfg: cfg, stderr: stderr, began: time.Now()}
	// For the idle sockets; syscall.Setrlimit, unlike x/sys/unix, also
	// makes the children (dashgate) inherit it.
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil {
		lim.Cur = lim.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	var err error
	if b.tmp, err = os.MkdirTemp("", "dashgate-bench-"); err != nil {
		return nil, err
	}
	defer os.RemoveAll(b.tmp)
	bin := cfg.dashgate
	if bin == "" {
		fmt.Fprintln(stderr, "dashgate-bench: building dashgate")
		if bin, err = testkit.Build(ctx); err != nil {
			return nil, err
		}
		defer testkit.RemoveBuild()
	}
	for _, bd := range []build{{"new", bin}, {"old", cfg.compare}} {
		if bd.bin == "" {
			continue
		} else if bd.bin, err = filepath.Abs(bd.bin); err == nil {
			_, err = os.Stat(bd.bin)
		}
		if err != nil {
			return nil, fmt.Errorf("dashgate binary: %w", err)
		}
		b.builds = append(b.builds, bd)
	}
	for _, g := range b.groups() {
		if len(cfg.only) > 0 && !slices.Contains(cfg.only, g.name) {
			continue
		} else if ctx.Err() != nil {
			b.errorf("interrupted before %s", g.name)
			break
		}
		fmt.Fprintf(stderr, "dashgate-bench: %s (%s, load %s)\n", g.name, time.Since(b.began).Round(time.Second), loadavg())
		b.runGroup(ctx, g)
	}
	return b, nil
}

// group is a set of figures measured on one instance per build (or a fresh
// one per run). run yields one value per figure, in order; r is the run's
// index (pairs against a plain pty alternate their order with it).
type group struct {
	name  string // its --only name
	figs  []*Figure
	args  []string // dashgate flags beyond the defaults
	env   []string // environment of dashgate beyond testkit.CleanEnv
	fresh bool     // a fresh instance per run
	// prepare, when set, runs before each start with the instance's
	// directory (its state dir is <dir>/state).
	prepare func(ctx context.Context, dir string) error
	runs    int // 0: --runs
	setup   func(ctx context.Context, t *target) error
	done    func() // when set, called once the group's runs are over
	run     func(ctx context.Context, t *target, r int) ([]float64, error)
}

// groups are the figure groups, in the order they run.
func (b *bench) groups() []group {
	n := b.cfg.n
	gs := []group{
		b.throughput(n["throughput-mib"]), keys(n["keystrokes"]), connect(n["connects"]),
		slashExec(n["cold-execs"], n["warm-execs"]), reap(n["reaps"]), churn("churn", n["churn"], n["clients"], 0),
		memory(n["detached"], false), memory(n["attached"], true), admin(n["admin-sessions"], n["admin-gets"]),
		idle(n["idle-sockets"], time.Duration(n["idle-secs"])*time.Second),
		churn("soak", n["soak"], n["clients"], n["soak-drop-every"]),
		stream(n["stream-words"], n["resumes"]), b.startup(n["stored-sessions"]), agent(n["agent-prompts"]),
		b.acp(n["acp-prompts"], n["acp-stream-kib"]),
		b.cluster(n["cluster-clients"], n["cluster-cycles"], n["cluster-sessions"]),
		b.stall(n["stall-streams"], n["stall-churn"], n["stall-secs"], n["stall-load-nice"]),
		b.stallTerminal(n["stall-streams"], n["stall-churn"], n["stall-secs"]),
		attach(n["attach-mib"]),
	}
	for _, g := range gs {
		b.figs = append(b.figs, g.figs...)
	}
	return gs
}

// target is one running dashgate of one build.
type target struct {
	*testkit.Instance
	build string // "new" or "old"
}

// runGroup runs g on every build, the builds alternating run by run (the
// order reversed every other run) so that the machine's noise hits both.
// An error ends that build's runs of g.
func (b *bench) runGroup(ctx context.Context, g group) {
	live, failed := map[string]*target{}, map[string]bool{}
	for r := range cmp.Or(g.runs, b.cfg.runs) {
		order := slices.Clone(b.builds)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, bd := range order {
			if failed[bd.label] || ctx.Err() != nil {
				continue
			}
			vals, err := b.runOnce(ctx, g, bd, r, live)
			if err != nil {
				b.errorf("%s (%s) run %d: %v", g.name, bd.label, r, err)
				failed[bd.label] = true
			}
			for i, v := range vals {
				g.figs[i].runs[bd.label] = append(g.figs[i].runs[bd.label], v)
			}
			if t := live[bd.label]; t != nil && (g.fresh || err != nil) {
				b.stop(g.name, t)
				delete(live, bd.label)
			}
		}
	}
	for _, bd := range b.builds {
		if t := live[bd.label]; t != nil {
			b.stop(g.name, t)
		}
	}
	if g.done != nil {
		g.done()
	}
}

// runOnce runs g once on the live instance of bd, which it starts (and
// sets up) if there is none, and returns one value per figure.
func (b *bench) runOnce(ctx context.Context, g group, bd build, r int, live map[string]*target) ([]float64, error) {
	if live[bd.label] == nil {
		dir, err := os.MkdirTemp(b.tmp, g.name+"-"+bd.label+"-")
		if err != nil {
			return nil, err
		}
		if g.prepare != nil {
			if err := g.prepare(ctx, dir); err != nil {
				return nil, fmt.Errorf("prepare: %w", err)
			}
		}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		args := append([]string{"--max-conns-per-ip", "0", "--pty-cmd", "/bin/sh"}, g.args...)
		in, err := testkit.Start(sctx, testkit.Options{
			Bin: bd.bin, Dir: dir, Env: append(testkit.CleanEnv(), g.env...),
			Args: append(args, b.cfg.args[bd.label]...),
			// Its own process group: a Ctrl-C reaches the tool only, which
			// then stops dashgate with one SIGTERM; it dies with the tool.
			SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
		})
		if err != nil {
			return nil, fmt.Errorf("start: %w", err)
		}
		live[bd.label] = &target{Instance: in, build: bd.label}
		if g.setup != nil {
			if err := g.setup(ctx, live[bd.label]); err != nil {
				return nil, fmt.Errorf("setup: %w", err)
			}
		}
	}
	vals, err := g.run(ctx, live[bd.label], r)
	for i := 0; err == nil && i < len(vals); i++ {
		if math.IsNaN(vals[i]) || math.IsInf(vals[i], 0) {
			err = fmt.Errorf("%s: no value", strings.TrimSpace(g.figs[i].name))
		}
	}
	if err != nil {
		return nil, err
	}
	return vals, nil
}

// stop sends SIGTERM and checks the instance: exit status 0, no process
// carrying its DASHGATE_INSTANCE left (those are killed), no ERROR record.
func (b *bench) stop(group string, t *target) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	what := fmt.Sprintf("%s (%s) dashgate %d", group, t.build, t.PID())
	if code, err := t.Stop(ctx); err != nil || code != 0 {
		b.errorf("%s: exit status %d after SIGTERM, want 0 (%v)", what, code, err)
	}
	left, err := t.Procs()
	if err != nil {
		b.errorf("%s: list its processes: %v", what, err)
	}
	for _, p := range left {
		b.errorf("%s: process outlived it: %s", what, testkit.Describe(p.PID))
		syscall.Kill(p.PID, syscall.SIGKILL)
	}
	for _, rec := range t.Log.Records("") {
		switch rec["level"] {
		case "ERROR":
			b.errorf("%s: ERROR log record: %s", what, rec)
		case "WARN":
			b.warns++
		}
	}
	b.insts = append(b.insts, t)
}

// Figure is one measured quantity: one value per run and build, summarised
// per build by benchmath and checked against its target.
type Figure struct {
	name, unit string // an indented name is a sub-row: it explains the row above
	op         string // ">=", "<=" or "" (no target)
	target     float64
	leak       bool                 // a count: a run above target is a leak, an error of the run
	runs       map[string][]float64 // by build label
}

// fig is a figure; target is "" or an op and a value (">= 0.8"). A figure
// in unit "count" is a leak count.
func fig(name, unit, target string) *Figure {
	f := &Figure{name: name, unit: unit, leak: unit == "count", runs: map[string][]float64{}}
	fmt.Sscan(target, &f.op, &f.target)
	return f
}

func (f *Figure) met(v float64) bool {
	return f.op == "" || f.op == ">=" && v >= f.target || f.op == "<=" && v <= f.target
}

// verdict is ok or **miss** for the median of the new build's runs, ok or
// LEAK for the worst run of a leak count.
func (f *Figure) verdict(s *benchmath.Sample) string {
	switch {
	case f.op == "":
		return ""
	case s == nil:
		return "n/a"
	case f.leak && f.met(s.Values[len(s.Values)-1]), !f.leak && f.met(median(s)):
		return "ok"
	case f.leak:
		return "LEAK"
	}
	return "**miss**"
}

func median(s *benchmath.Sample) float64 { return benchmath.AssumeNothing.Summary(s, 0.95).Center }

// summary is the sample of runs (nil for none) and its cells: median,
// min–max, the 95% confidence interval of the median (benchmath's order
// statistics: none below 6 runs) and the number of runs.
func summary(runs []float64) (*benchmath.Sample, []string) {
	if len(runs) == 0 {
		return nil, []string{"-", "-", "-", "0"}
	}
	s := benchmath.NewSample(runs, &benchmath.DefaultThresholds) // sorts a copy
	sum := benchmath.AssumeNothing.Summary(s, 0.95)
	cells := []string{num(sum.Center), num(s.Values[0]) + "–" + num(s.Values[len(runs)-1]), "-", fmt.Sprint(len(runs))}
	if len(runs) == 1 {
		cells[1] = "(1 run)"
	} else if !math.IsInf(sum.Lo, 0) && !math.IsInf(sum.Hi, 0) {
		cells[2] = num(sum.Lo) + "–" + num(sum.Hi)
	}
	return s, cells
}

// report prints the figures as a Markdown table, with --compare the old
// build's columns and benchmath's Mann-Whitney U test of new against old,
// then the errors (leaks included). It returns the exit code.
func (b *bench) report(stdout, stderr io.Writer) int {
	cpuinfo, _ := os.ReadFile("/proc/cpuinfo")
	_, model, _ := strings.Cut(string(cpuinfo), "model name\t: ")
	model, _, _ = strings.Cut(model, "\n")
	fmt.Fprintf(stdout, "\n%s, %s, %d CPUs (%s), %s, load %s\n\n", b.began.UTC().Format("2006-01-02 15:04 MST"),
		time.Since(b.began).Round(time.Second), runtime.NumCPU(), model, runtime.Version(), loadavg())
	head, align := "| figure | unit | median | min–max | 95% CI | runs |", "|---|---|---:|---:|---:|---:|"
	if len(b.builds) > 1 {
		head, align = head+" old median | old min–max | old 95% CI | old runs | new vs old |", align+"---:|---:|---:|---:|---|"
	}
	fmt.Fprintf(stdout, "%s target | |\n%s---|---|\n", head, align)
	for _, f := range b.figs {
		if len(f.runs) == 0 {
			continue // its group did not run
		}
		cells, samples := []string{f.name, f.unit}, map[string]*benchmath.Sample{}
		for _, bd := range b.builds {
			s, c := summary(f.runs[bd.label])
			samples[bd.label], cells = s, append(cells, c...)
			if f.leak && s != nil && !f.met(s.Values[len(s.Values)-1]) {
				b.errorf("leak: %s (%s build): %s in a run, at most %g", strings.TrimSpace(f.name), bd.label, num(s.Values[len(s.Values)-1]), f.target)
			}
		}
		if len(b.builds) > 1 {
			d := "-"
			if old, nw := samples["old"], samples["new"]; old != nil && nw != nil {
				c := benchmath.AssumeNothing.Compare(old, nw)
				d = c.FormatDelta(median(old), median(nw)) + " (" + c.String() + ")"
			}
			cells = append(cells, d)
		}
		target := "-"
		if f.op != "" {
			target = fmt.Sprint(f.op, " ", f.target)
		}
		cells = append(cells, target, f.verdict(samples["new"]))
		for i := range cells {
			cells[i] = strings.ReplaceAll(cells[i], "|", `\|`)
		}
		fmt.Fprintf(stdout, "| %s |\n", strings.Join(cells, " | "))
	}
	for _, e := range b.errs {
		fmt.Fprintln(stdout, "error:", e)
	}
	fmt.Fprintf(stdout, "\n%d WARN records in the dashgate logs.\n", b.warns)
	if len(b.errs) > 0 {
		fmt.Fprintf(stderr, "dashgate-bench: %d errors or leaks\n", len(b.errs))
		return 1
	}
	return 0
}

// num formats a figure with three significant digits or so.
func num(v float64) string {
	switch a := math.Abs(v); {
	case v == math.Trunc(v) && a < 1e9, a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

// percentile is the p-th percentile (0..100) of xs by linear interpolation
// between closest ranks; NaN for no samples.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Sorted(slices.Values(xs))
	rank := p / 100 * float64(len(s)-1)
	lo, hi := int(math.Floor(rank)), int(math.Ceil(rank))
	return s[lo] + (s[hi]-s[lo])*(rank-float64(lo))
}

// ms converts durations to milliseconds.
func ms(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / float64(time.Millisecond)
	}
	return out
}

// loadavg is the 1, 5 and 15 minute load averages.
func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
