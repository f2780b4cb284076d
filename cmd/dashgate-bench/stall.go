package main

// Issue 28: the gateway under children that saturate the CPU. One run, on a
// fresh dashgate (the built-in echo worker, SQLite in its state dir):
//
//  1. idle: the quiet client (this binary re-executed, `dashgate-bench
//     stall-quiet`, a process of its own) times, for stallSecs, every
//     10 ms: session.history of one entry of a session of its own (the
//     gateway alone: no worker on the path), /echo in another session
//     (slash.exec, a worker round trip), and every 250 ms GET /admin and
//     GET /admin/api/workers, each on a
//     keep-alive connection of its own;
//  2. the load (`dashgate-bench stall-load`, one process) opens streams
//     sockets, a session each (close_on_disconnect), and streams 200-word
//     prompts back to back from the echo agent (its own pace, one delta a
//     word, builtin.WordDelay), plus churn sessions a second created, run
//     /echo (a worker spawned) and closed;
//  3. loaded: once every stream has begun and 3 s more have passed, the
//     quiet client measures again, for as long as idle, in a new process;
//     dashgate's CPU time and the machine's idle share are taken over it;
//  4. the load ends (its sockets closed): its counts are checked (no
//     socket lost, every turn in order).
//
// With DASHGATE_BENCH_PROFILES=<dir> and --pprof-addr in the build's
// --args-new/--args-old, a CPU profile (the loaded phase's middle 10 s at
// most) and a mutex profile of dashgate are written there per run, as
// <build>-<run>.cpu.pprof and .mutex.pprof, with an execution trace of
// the quiet client's first 3 s (.trace.pprof: `go tool trace`) and the loaded phase's
// session.history calls (.calls.json); `dashgate-bench stall-trace
// TRACE CALLS` splits those calls at the gateway (stalltrace.go).
//
// With --stall-peers, ttyd and gotty are started beside dashgate and the
// quiet client also times a GET each answers alone, and dashgate's
// /healthz, in both phases (stallpeers.go): the machine's floor.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/sys/unix"

	"github.com/dashgate/dashgate/internal/testkit"
)

// stallWords is the length of a stream's prompt: the echo agent streams
// it back, one delta a word.
const stallWords = 200

// stallTokenEnv carries the token to the helper processes (not their
// command line, which ps shows).
const stallTokenEnv = "DASHGATE_BENCH_STALL_TOKEN"

// stallStartedEnv, set to "3", tells the quiet client that its fd 3 is a
// pipe on which to write a byte when its timed phase begins (runQuiet).
const stallStartedEnv = "DASHGATE_BENCH_STALL_STARTED"

// stall is the group; streams sockets stream, churn sessions a second come
// and go, each quiet phase lasts secs seconds; the load runs at nice
// loadNice (0: as the tool; the browsers of a real load are elsewhere).
func (b *bench) stall(streams, churn, secs, loadNice int) group {
	figs := []*Figure{
		fig(fmt.Sprintf("stall: session.history (1 entry), loaded (%d streams, %d sessions/s) p99", streams, churn), "ms", "<= 20"),
		fig("  session.history, loaded p50", "ms", ""),
		fig("  session.history, loaded max", "ms", ""),
		fig("  session.history, idle p50", "ms", ""),
		fig("  session.history, idle p99", "ms", ""),
		fig("stall: GET /admin, loaded max", "ms", "<= 200"),
		fig("  GET /admin, loaded p50", "ms", ""),
		fig("  GET /admin, idle max", "ms", ""),
		fig("  GET /admin, loaded p99", "ms", "<= 200"),
		fig("stall: GET /admin/api/workers, loaded p99", "ms", "<= 200"),
		fig("  GET /admin/api/workers, loaded p50", "ms", ""),
		fig("  GET /admin/api/workers, loaded max", "ms", ""),
		fig("  GET /admin/api/workers, idle max", "ms", ""),
		fig("stall: /echo (worker round trip), loaded p99", "ms", ""),
		fig("  /echo, loaded p50", "ms", ""),
		fig("  /echo, loaded max", "ms", ""),
		fig("  /echo, idle p50", "ms", ""),
		fig("  /echo, idle p99", "ms", ""),
		fig("  deltas/s the load received, loaded", "1/s", ""),
		fig("  churn cycles/s done, loaded", "1/s", ""),
		fig("  dashgate CPU, loaded", "% of a core", ""),
		fig("  machine idle, loaded", "%", ""),
		fig("  1-minute load average after the loaded phase", "", ""),
	}
	figs = append(figs, probeFigures(probeLabels(b.cfg.stallPeers))...)
	args := []string{"--max-workers", strconv.Itoa(streams + 100), "--max-sessions", strconv.Itoa(streams + 1000)}
	return group{name: "stall", figs: figs, args: args, fresh: true,
		run: func(ctx context.Context, t *target, r int) ([]float64, error) {
			d := time.Duration(secs) * time.Second
			probes, stopPeers, err := startStallPeers(ctx, t.Base, b.cfg.stallPeers)
			if err != nil {
				return nil, fmt.Errorf("peers: %w", err)
			}
			defer stopPeers()
			idle, err := runQuiet(ctx, t, d, probes, nil)
			if err != nil {
				return nil, fmt.Errorf("idle: %w", err)
			}
			load, err := startLoad(ctx, t, streams, churn, loadNice)
			if err != nil {
				return nil, fmt.Errorf("load: %w", err)
			}
			defer load.kill()
			if err := load.waitReady(ctx, 3*time.Minute); err != nil {
				return nil, fmt.Errorf("load: %w", err)
			}
			if err := sleepCtx(ctx, 3*time.Second); err != nil {
				return nil, err
			}
			started := make(chan struct{}) // the quiet client's timed phase began
			prof := b.profile(ctx, t, r, min(d-2*time.Second, 10*time.Second), started)
			cpu0, idle0, t0 := procCPU(t.PID()), machineIdle(), time.Now()
			d0 := load.deltas()
			c0 := load.churned()
			loaded, err := runQuiet(ctx, t, d, probes, started)
			el := time.Since(t0)
			cpu1, idle1, d1, c1 := procCPU(t.PID()), machineIdle(), load.deltas(), load.churned()
			lavg, _ := strconv.ParseFloat(strings.Fields(loadavg())[0], 64)
			perr := errors.Join(prof(), b.writeCalls(t, r, loaded.HistoryAt))
			stats, lerr := load.stop()
			if err = errors.Join(err, lerr, perr); err != nil {
				return nil, fmt.Errorf("loaded: %w", err)
			}
			fmt.Fprintf(b.stderr, "dashgate-bench: stall (%s) run %d: %s\n", t.build, r, stats)
			p := func(xs []float64, q float64) float64 { return percentile(xs, q) }
			var floor []float64
			for i := range probes {
				floor = append(floor, p(loaded.Probes[i], 99), p(loaded.Probes[i], 50), p(idle.Probes[i], 99))
			}
			return append([]float64{
				p(loaded.History, 99), p(loaded.History, 50), p(loaded.History, 100), p(idle.History, 50), p(idle.History, 99),
				p(loaded.Admin, 100), p(loaded.Admin, 50), p(idle.Admin, 100), p(loaded.Admin, 99),
				p(loaded.Workers, 99), p(loaded.Workers, 50), p(loaded.Workers, 100), p(idle.Workers, 100),
				p(loaded.Echo, 99), p(loaded.Echo, 50), p(loaded.Echo, 100), p(idle.Echo, 50), p(idle.Echo, 99),
				float64(d1-d0) / el.Seconds(), float64(c1-c0) / el.Seconds(),
				100 * (cpu1 - cpu0).Seconds() / el.Seconds(), 100 * idle1.share(idle0), lavg,
			}, floor...), nil
		}}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// profile starts taking a CPU profile of d from dashgate's --pprof-addr
// when DASHGATE_BENCH_PROFILES is set, and an execution trace of the 3 s
// after started is closed (the quiet client's timed phase began); the
// function it returns waits for them, takes the mutex profile and writes
// them.
func (b *bench) profile(ctx context.Context, t *target, r int, d time.Duration, started <-chan struct{}) func() error {
	dir, addr := os.Getenv("DASHGATE_BENCH_PROFILES"), ""
	args := b.cfg.args[t.build]
	if i := slices.Index(args, "--pprof-addr"); i >= 0 && i+1 < len(args) {
		addr = args[i+1]
	}
	if dir == "" || addr == "" {
		return func() error { return nil }
	}
	get := func(path, file string) error {
		resp, err := noKeepAlive.Get("http://" + addr + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.%s.pprof", t.build, r, file)))
		if err != nil {
			return err
		}
		_, err = io.Copy(f, resp.Body)
		return errors.Join(err, f.Close())
	}
	get("/debug/pprof/mutex?debug=0", "mutex-before") // the counts so far, for a -diff_base
	done := make(chan error, 1)
	go func() { done <- get(fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(d.Seconds())), "cpu") }()
	// The trace starts with the quiet client's timed phase: the client is a
	// process of its own, and on the saturated machine it took 10 s to
	// start, so that a trace of the load's first 3 s held none of its
	// calls.
	traced := make(chan error, 1)
	go func() {
		select {
		case <-started:
		case <-ctx.Done():
		}
		traced <- get("/debug/pprof/trace?seconds=3", "trace")
	}()
	return func() error {
		err := errors.Join(<-done, <-traced)
		return errors.Join(err, get("/debug/pprof/mutex?debug=0", "mutex"))
	}
}

// writeCalls writes the loaded phase's session.history calls (start and
// end, CLOCK_MONOTONIC ns) beside the profiles, as <build>-<run>.calls.json,
// for `dashgate-bench stall-trace`; nothing without DASHGATE_BENCH_PROFILES.
func (b *bench) writeCalls(t *target, r int, at [][2]int64) error {
	dir := os.Getenv("DASHGATE_BENCH_PROFILES")
	if dir == "" {
		return nil
	}
	buf, err := json.Marshal(at)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%d.calls.json", t.build, r)), buf, 0o644)
}

// procCPU is the user and system CPU time of pid so far.
func procCPU(pid int) time.Duration {
	u, _ := testkit.ReadUsage(pid)
	return u.CPU
}

// cpuTimes are the idle and total jiffies of /proc/stat's cpu line.
type cpuTimes struct{ idle, total float64 }

func machineIdle() cpuTimes {
	b, _ := os.ReadFile("/proc/stat")
	line, _, _ := strings.Cut(string(b), "\n")
	var c cpuTimes
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		c.total += v
		if i == 3 || i == 4 { // idle, iowait
			c.idle += v
		}
	}
	return c
}

// share is the idle share of the time since c0.
func (c cpuTimes) share(c0 cpuTimes) float64 {
	return (c.idle - c0.idle) / max(1, c.total-c0.total)
}

// quietResult is what the quiet client measured, in ms.
type quietResult struct {
	History, Echo, Admin []float64
	Workers              []float64 // GET /admin/api/workers
	// HistoryAt is each session.history call's start and end on
	// CLOCK_MONOTONIC, ns: the clock of dashgate's execution trace, so
	// that stall-trace can split a call at the gateway's side.
	HistoryAt [][2]int64 `json:",omitempty"`
	// Probes are the samples of the probes the client was given
	// (stallpeers.go), in their order.
	Probes [][]float64 `json:",omitempty"`
}

// monoNow is CLOCK_MONOTONIC in ns (Go's own monotonic reading has no
// fixed base).
func monoNow() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// runQuiet runs `dashgate-bench stall-quiet` for d against t, timing
// probes too, and returns its samples. It closes started, when not nil,
// once the client's timed phase begins (or the client ended).
func runQuiet(ctx context.Context, t *target, d time.Duration, probes []stallProbe, started chan<- struct{}) (quietResult, error) {
	var res quietResult
	self, err := os.Executable()
	if err != nil {
		return res, err
	}
	ctx, cancel := context.WithTimeout(ctx, d+2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, "stall-quiet", t.Base, d.String())
	cmd.Env = append(os.Environ(), stallTokenEnv+"="+t.Token, stallProbesEnv+"="+encodeProbes(probes))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	if started != nil {
		r, w, err := os.Pipe()
		if err != nil {
			return res, err
		}
		cmd.ExtraFiles = []*os.File{w} // its fd 3: a byte when the timed phase begins
		cmd.Env = append(cmd.Env, stallStartedEnv+"=3")
		go func() {
			r.Read(make([]byte, 1)) // the byte, or EOF when it ended
			r.Close()
			close(started)
		}()
		defer w.Close()
	}
	out, err := cmd.Output()
	if err != nil {
		return res, fmt.Errorf("stall-quiet: %w", err)
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return res, fmt.Errorf("stall-quiet: %q: %w", out, err)
	}
	if len(res.History) == 0 || len(res.Echo) == 0 || len(res.Admin) == 0 {
		return res, fmt.Errorf("stall-quiet: no samples: %s", out)
	}
	if len(res.Probes) != len(probes) || slices.ContainsFunc(res.Probes, func(xs []float64) bool { return len(xs) == 0 }) {
		return res, fmt.Errorf("stall-quiet: %w: %s", errNoProbeSamples, out)
	}
	return res, nil
}

// stallHelper runs `stall-quiet BASE DURATION` or `stall-load BASE
// STREAMS CHURN`; ok is false for any other arguments.
func stallHelper(args []string, stdout io.Writer) (name string, ok bool, err error) {
	switch {
	case len(args) == 3 && args[0] == "stall-quiet":
		return args[0], true, serveQuiet(args[1], args[2], stdout)
	case len(args) == 4 && args[0] == "stall-load":
		return args[0], true, serveLoad(args[1], args[2], args[3], stdout)
	}
	return "", false, nil
}

// serveQuiet is `dashgate-bench stall-quiet BASE DURATION`: the quiet
// client. It writes its samples (quietResult) as JSON on stdout.
func serveQuiet(base, dur string, stdout io.Writer) error {
	d, err := time.ParseDuration(dur)
	if err != nil {
		return err
	}
	token := os.Getenv(stallTokenEnv)
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	ws := "ws" + strings.TrimPrefix(base, "http") + "ws/chat"
	ch, _, err := testkit.DialChat(ctx, ws, testkit.DialOptions{Token: token})
	if err != nil {
		return err
	}
	defer ch.Close()
	var hist, ech string
	if hist, err = ch.CreateSession(ctx, "quiet history"); err == nil {
		if _, err = ch.Slash(ctx, hist, "/echo one entry"); err == nil {
			ech, err = ch.CreateSession(ctx, "quiet echo")
		}
	}
	for i := 0; err == nil && i < 5; i++ { // its worker spawned and warm
		_, err = echo(ctx, ch, ech)
	}
	if err != nil {
		return err
	}
	var res quietResult
	var wg sync.WaitGroup
	var adminErr error
	until := time.Now().Add(d)
	if os.Getenv(stallStartedEnv) == "3" { // runQuiet's pipe
		f := os.NewFile(3, "started")
		f.Write([]byte{1})
		f.Close()
	}
	// GET /admin and GET /admin/api/workers, each every 250 ms on a
	// keep-alive connection of its own.
	get := func(path string, into *[]float64, errp *error) func() {
		return func() { *errp = timeGets(ctx, base+path, token, 250*time.Millisecond, until, d+time.Minute, into) }
	}
	var workersErr error
	wg.Go(get("admin", &res.Admin, &adminErr))
	wg.Go(get("admin/api/workers", &res.Workers, &workersErr))
	probes := probesOf()
	res.Probes = make([][]float64, len(probes))
	probeErrs := make([]error, len(probes))
	for i, pr := range probes {
		wg.Go(func() {
			probeErrs[i] = timeGets(ctx, pr.url, "", 10*time.Millisecond, until, d+time.Minute, &res.Probes[i])
		})
	}
	err = every(ctx, 10*time.Millisecond, d+time.Minute, func() (bool, error) {
		var page struct {
			Entries []json.RawMessage `json:"entries"`
		}
		t0, m0 := time.Now(), monoNow()
		err := ch.Call(ctx, "session.history", map[string]any{"session_id": hist, "limit": 1}, &page)
		if err == nil && len(page.Entries) != 1 {
			err = fmt.Errorf("session.history: %d entries, want 1", len(page.Entries))
		}
		res.History = append(res.History, ms1(time.Since(t0)))
		res.HistoryAt = append(res.HistoryAt, [2]int64{m0, monoNow()})
		if err != nil {
			return false, err
		}
		de, err := echo(ctx, ch, ech)
		res.Echo = append(res.Echo, ms1(de))
		return !time.Now().Before(until), err
	})
	wg.Wait()
	for _, sid := range []string{hist, ech} {
		ch.Call(ctx, "session.close", map[string]string{"session_id": sid}, nil)
	}
	if err = errors.Join(append(probeErrs, err, adminErr, workersErr)...); err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(res)
}

// loadProc is a running `dashgate-bench stall-load`.
type loadProc struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string // its stdout, line by line; closed at its EOF
	mu    sync.Mutex
	last  map[string]int64 // the latest "count" line's fields
}

// startLoad starts the load: streams sockets streaming, churn sessions a
// second, at nice value nice (0: the tool's).
func startLoad(ctx context.Context, t *target, streams, churn, nice int) (*loadProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "stall-load", t.Base, strconv.Itoa(streams), strconv.Itoa(churn))
	if nice != 0 { // nice(1): every thread of it, from its start
		cmd = exec.Command("nice", append([]string{"-n", strconv.Itoa(nice)}, cmd.Args...)...)
	}
	cmd.Env = append(os.Environ(), stallTokenEnv+"="+t.Token)
	return runLoadCmd(cmd)
}

// runLoadCmd starts cmd, a load process (stall-load, tstall-load): "ready",
// then "count k=N ..." lines, "done ..." at its stdin's close.
func runLoadCmd(cmd *exec.Cmd) (*loadProc, error) {
	in, out, err := startPiped(cmd)
	if err != nil {
		return nil, err
	}
	l := &loadProc{cmd: cmd, in: in, lines: make(chan string, 16), last: map[string]int64{}}
	go func() {
		defer close(l.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if rest, ok := strings.CutPrefix(line, "count "); ok {
				l.mu.Lock()
				for _, kv := range strings.Fields(rest) {
					k, v, _ := strings.Cut(kv, "=")
					l.last[k], _ = strconv.ParseInt(v, 10, 64)
				}
				l.mu.Unlock()
				continue
			}
			l.lines <- line
		}
	}()
	return l, nil
}

func (l *loadProc) count(k string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last[k]
}

func (l *loadProc) deltas() int64  { return l.count("deltas") }
func (l *loadProc) churned() int64 { return l.count("churn") }

// waitReady waits for its "ready" line.
func (l *loadProc) waitReady(ctx context.Context, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	select {
	case line, ok := <-l.lines:
		if ok && line == "ready" {
			return nil
		}
		return fmt.Errorf("not ready: %q", line)
	case <-ctx.Done():
		return fmt.Errorf("not ready: %w", ctx.Err())
	}
}

// stop closes its stdin (it then closes its sockets and prints its last
// line, "done ..." or "error ...") and waits for it.
func (l *loadProc) stop() (string, error) {
	l.in.Close()
	var last string
	timeout := time.After(time.Minute)
	for {
		select {
		case line, ok := <-l.lines:
			if ok {
				last = line
				continue
			}
			err := l.cmd.Wait()
			if err == nil && !strings.HasPrefix(last, "done ") {
				err = fmt.Errorf("stall-load: %s", last)
			}
			return last, err
		case <-timeout:
			l.kill()
			return last, errors.New("stall-load did not end within a minute of its stdin's close")
		}
	}
}

// kill ends it at once (after an error; a no-op once it was waited for).
func (l *loadProc) kill() {
	if l.cmd.ProcessState == nil {
		syscall.Kill(-l.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// loadCounts are the load's counters.
type loadCounts struct {
	deltas, turns, churn, skipped atomic.Int64
}

// serveLoad is `dashgate-bench stall-load BASE STREAMS CHURN`: it prints
// "ready" once every stream's first delta came, "count deltas=N
// churn=N" every 500 ms, and when its stdin closes, ends its sockets and
// prints "done ..." (or "error ...") and exits.
func serveLoad(base, streamsArg, churnArg string, stdout io.Writer) error {
	streams, err1 := strconv.Atoi(streamsArg)
	churn, err2 := strconv.Atoi(churnArg)
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	token := os.Getenv(stallTokenEnv)
	ws := "ws" + strings.TrimPrefix(base, "http") + "ws/chat"
	prompt := strings.TrimSpace(strings.Repeat("word ", stallWords))
	var n loadCounts
	return runLoadLoop(loadSpec{
		streams: streams,
		stream:  func(ctx context.Context, began func()) error { return loadStream(ctx, ws, token, prompt, &n, began) },
		churn:   func(ctx context.Context, fail func(error)) { churnLoop(ctx, ws, token, churn, &n, fail) },
		count:   func() string { return fmt.Sprintf("deltas=%d churn=%d", n.deltas.Load(), n.churn.Load()) },
		done: func() string {
			return fmt.Sprintf("deltas=%d turns=%d churn=%d churn_skipped=%d", n.deltas.Load(), n.turns.Load(), n.churn.Load(), n.skipped.Load())
		},
	}, stdout)
}

// loadSpec is a load process's work (stall-load, tstall-load).
type loadSpec struct {
	streams int
	// stream runs one stream until ctx ends; began is to be called once
	// it streams (runLoadLoop calls it too when stream returns early).
	stream func(ctx context.Context, began func()) error
	churn  func(ctx context.Context, fail func(error)) // runs once every stream began, until ctx ends
	count  func() string                               // the "count" line's fields
	done   func() string                               // the "done" line's fields
}

// runLoadLoop runs spec: its streams, 8 opening at once; "ready" once
// every one began; then its churn, and a "count ..." line every 500 ms,
// until stdin closes or a stream or the churn fails; then "done ..." or
// "error ...".
func runLoadLoop(spec loadSpec, stdout io.Writer) error {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		fmt.Fprintf(stdout, format+"\n", args...)
		out.Unlock()
	}
	var errMu sync.Mutex
	var firstErr error
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
		stop()
	}
	var wg, started sync.WaitGroup
	started.Add(spec.streams)
	sem := make(chan struct{}, 8) // streams opening at once
	for i := range spec.streams {
		wg.Go(func() {
			sem <- struct{}{}
			began := sync.OnceFunc(func() { <-sem; started.Done() })
			defer began()
			if err := spec.stream(ctx, began); err != nil && ctx.Err() == nil {
				fail(fmt.Errorf("stream %d: %w", i, err))
			}
		})
	}
	readyCh := make(chan struct{})
	go func() { started.Wait(); close(readyCh) }()
	select {
	case <-readyCh:
		say("ready")
	case <-ctx.Done():
	}
	wg.Go(func() { spec.churn(ctx, fail) })
	wg.Go(func() {
		every(ctx, 500*time.Millisecond, 24*time.Hour, func() (bool, error) {
			say("count %s", spec.count())
			return false, nil
		})
	})
	go func() { io.Copy(io.Discard, os.Stdin); stop() }()
	<-ctx.Done()
	wg.Wait()
	if firstErr != nil {
		say("error %v", firstErr)
		return nil
	}
	say("done %s", spec.done())
	return nil
}

// loadStream is one socket of the load: session.create (close_on_disconnect),
// then prompt after prompt, the next sent at the previous one's
// message.complete, until ctx ends; began runs at the first delta (its
// worker spawned and streaming), or when the start failed. Every delta of a turn is counted, and
// the reply's text checked against them: in order, nothing lost.
func loadStream(ctx context.Context, url, token, prompt string, n *loadCounts, began func()) error {
	once := sync.OnceFunc(began)
	defer once()
	c, _, err := testkit.Dial(ctx, url, testkit.DialOptions{Token: token})
	if err != nil {
		return err
	}
	defer c.Close()
	id := 0
	send := func(method string, params any) error {
		id++
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
		return c.Write(ctx, websocket.MessageText, b)
	}
	if err := send("session.create", map[string]any{"title": "stall", "close_on_disconnect": true}); err != nil {
		return err
	}
	var sid string
	var text strings.Builder
	for {
		f, err := c.Next(ctx)
		if err != nil {
			return err
		}
		var msg struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
			Params struct {
				Type    string `json:"type"`
				Payload struct {
					Text string `json:"text"`
				} `json:"payload"`
			} `json:"params"`
		}
		if err := json.Unmarshal(f.Data, &msg); err != nil {
			return fmt.Errorf("frame %q: %w", f.Data, err)
		}
		switch {
		case msg.Error != nil:
			return fmt.Errorf("error reply: %s", f.Data)
		case msg.ID == 1:
			var r struct {
				SessionID string `json:"session_id"`
			}
			json.Unmarshal(msg.Result, &r)
			if sid = r.SessionID; sid == "" {
				return fmt.Errorf("session.create: %s", f.Data)
			}
			if err := send("prompt.submit", map[string]any{"session_id": sid, "text": prompt}); err != nil {
				return err
			}
		case msg.Params.Type == "message.delta":
			once()
			n.deltas.Add(1)
			text.WriteString(msg.Params.Payload.Text)
		case msg.Params.Type == "message.complete":
			if got, want := text.String(), msg.Params.Payload.Text; got != want {
				return fmt.Errorf("turn %d: the deltas say %q, message.complete %q", id, got, want)
			}
			text.Reset()
			n.turns.Add(1)
			if err := send("prompt.submit", map[string]any{"session_id": sid, "text": prompt}); err != nil {
				return err
			}
		}
	}
}

// churnLoop starts rate cycles a second (session.create, /echo, session.close
// on one socket, 8 at most at once; a cycle due while 8 run is skipped and
// counted) until ctx ends.
func churnLoop(ctx context.Context, url, token string, rate int, n *loadCounts, fail func(error)) {
	if rate <= 0 {
		return
	}
	ch, _, err := testkit.DialChat(ctx, url, testkit.DialOptions{Token: token})
	if err != nil {
		fail(fmt.Errorf("churn: %w", err))
		return
	}
	defer ch.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, 8)
	every(ctx, time.Second/time.Duration(rate), 24*time.Hour, func() (bool, error) {
		select {
		case sem <- struct{}{}:
		default:
			n.skipped.Add(1)
			return false, nil
		}
		wg.Go(func() {
			defer func() { <-sem }()
			sid, err := ch.CreateSession(ctx, "churn")
			if err == nil {
				_, err = echo(ctx, ch, sid)
				err = errors.Join(err, ch.Call(ctx, "session.close", map[string]string{"session_id": sid}, nil))
			}
			if err != nil && ctx.Err() == nil {
				fail(fmt.Errorf("churn: %w", err))
			} else if err == nil {
				n.churn.Add(1)
			}
		})
		return false, nil
	})
}
