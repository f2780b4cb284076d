package main

// `dashgate-bench stall-trace TRACE CALLS`: where a quiet session.history
// call's time goes, from the stall group's profiles (stall.go,
// DASHGATE_BENCH_PROFILES). TRACE is dashgate's execution trace of the
// loaded phase, CALLS the quiet client's calls (start and end on
// CLOCK_MONOTONIC, the trace's clock). Each call within the trace is
// split at the gateway's side:
//
//   - to the gateway: the client's write, the kernel, and the time until
//     dashgate's network poller saw the frame (its threads were busy);
//   - reader waits: the socket's read loop runnable, waiting for a thread
//     (Go's run queue and the CPU);
//   - read, dispatch: the read loop running until it started the call's
//     goroutine, and that goroutine waiting to run;
//   - the call: session.history itself, of which the waits for a lock
//     (by who released it), the time it ran, the time it was runnable
//     again (preempted, or woken and waiting for a thread), and its other
//     waits (a channel, a system call: by the trace's reason);
//   - reply written: the socket's writer woken and its write(2) done;
//   - back to the client: the kernel and the client's own wake-ups.
//
// Then each GET /admin within the trace, by its goroutine's state.

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strings"

	"golang.org/x/exp/trace"
)

// gCall is what the trace says of one call made by a chat read loop.
type gCall struct {
	loop                   trace.GoID
	loopReadied, loopRan   int64 // CLOCK_MONOTONIC ns, as every time below
	made, started, ended   int64
	ran                    int64 // ns on a thread
	lastRun, blockedAt     int64
	blockedOn              string
	locks                  map[string]int64 // ns waited, by the lock's releaser
	waits                  map[string]int64 // ns blocked other than on a lock, by the trace's reason ("syscall" for a system call)
	runnable, runnableAt   int64            // ns runnable after it first ran (preempted or woken, waiting for a thread)
	writerReadied, written int64
	writer                 trace.GoID
	writerRan              int64
}

// stallTrace prints the split of every call of calls within the trace.
func stallTrace(tracePath, callsPath string, out io.Writer) error {
	var calls [][2]int64
	b, err := os.ReadFile(callsPath)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &calls); err != nil {
		return fmt.Errorf("%s: %w", callsPath, err)
	}
	gcs, err := readCalls(tracePath)
	if err != nil {
		return err
	}
	// A client call is the gateway call whose read loop woke within it.
	sort.Slice(gcs, func(i, j int) bool { return gcs[i].loopReadied < gcs[j].loopReadied })
	legs := []string{"to the gateway", "reader waits", "read, dispatch", "the call", "  its lock waits", "  it ran", "  runnable", "  other waits", "reply to the client", "  written (split calls)", "  back (split calls)", "whole call (the client's)"}
	var rows [][]float64
	locks, waits := map[string]int64{}, map[string]int64{}
	unsplit := 0 // its reply's writer was not woken for it (busy already): no written/back split
	first, last := gcs[0].loopReadied, gcs[len(gcs)-1].loopReadied
	for _, c := range calls {
		if c[0] < first || c[1] > last {
			continue // outside the trace
		}
		i := sort.Search(len(gcs), func(i int) bool { return gcs[i].loopReadied >= c[0] })
		if i == len(gcs) || gcs[i].loopReadied > c[1] || gcs[i].ended > c[1] {
			continue // not this call
		}
		g := gcs[i]
		written, back := math.NaN(), math.NaN()
		if g.written != 0 && g.written <= c[1] {
			written, back = float64(g.written-g.ended)/1e6, float64(c[1]-g.written)/1e6
		} else {
			unsplit++
		}
		var lockNS, waitNS int64
		for k, v := range g.locks {
			locks[k] += v
			lockNS += v
		}
		for k, v := range g.waits {
			waits[k] += v
			waitNS += v
		}
		ms := func(a, b int64) float64 { return float64(b-a) / 1e6 }
		rows = append(rows, []float64{
			ms(c[0], g.loopReadied), ms(g.loopReadied, g.loopRan), ms(g.loopRan, g.started),
			ms(g.started, g.ended), float64(lockNS) / 1e6, float64(g.ran) / 1e6,
			float64(g.runnable) / 1e6, float64(waitNS) / 1e6,
			ms(g.ended, c[1]), written, back, ms(c[0], c[1]),
		})
	}
	if len(rows) == 0 {
		fmt.Fprintf(out, "no session.history call of %s is in %s\n", callsPath, tracePath)
		return adminPages(tracePath, out)
	}
	fmt.Fprintf(out, "%d session.history calls in the trace (%d of them not split into written and back: their reply's writer was busy already); ms\n%-28s %8s %8s %8s %8s\n",
		len(rows), unsplit, "", "p50", "p90", "p99", "max")
	for j, l := range legs {
		var col []float64
		for _, r := range rows {
			if !math.IsNaN(r[j]) {
				col = append(col, r[j])
			}
		}
		if len(col) == 0 {
			fmt.Fprintf(out, "%-28s %8s\n", l, "none")
			continue
		}
		fmt.Fprintf(out, "%-28s %8.2f %8.2f %8.2f %8.2f\n", l, percentile(col, 50), percentile(col, 90), percentile(col, 99), slices.Max(col))
	}
	slices.SortFunc(rows, func(a, b []float64) int { return int(b[len(b)-1]*1e6 - a[len(a)-1]*1e6) })
	fmt.Fprintln(out, "\nthe slowest calls, the legs above in order:")
	for _, r := range rows[:min(10, len(rows))] {
		for _, v := range r {
			fmt.Fprintf(out, "%8.2f", v)
		}
		fmt.Fprintln(out)
	}
	type kv struct {
		k string
		v int64
	}
	var kvs []kv
	for k, v := range locks {
		kvs = append(kvs, kv{k, v})
	}
	slices.SortFunc(kvs, func(a, b kv) int { return int(b.v - a.v) })
	fmt.Fprintln(out, "\nthe calls' lock waits, by who released the lock (ms, all calls):")
	for _, x := range kvs[:min(8, len(kvs))] {
		fmt.Fprintf(out, "%8.1f  %s\n", float64(x.v)/1e6, x.k)
	}
	fmt.Fprintln(out, "\nthe calls' other waits, by the trace's reason (ms, all calls):")
	for k, v := range waits {
		fmt.Fprintf(out, "%8.1f  %s\n", float64(v)/1e6, k)
	}
	return adminPages(tracePath, out)
}

// adminPages prints where the time of each GET /admin within the trace
// went: its handler's "admin page" region (handlers.Admin.page), split
// by its goroutine's state. Running counts the time its thread held a
// P, descheduled by the kernel or not: the page's CPU is a few ms.
func adminPages(tracePath string, out io.Writer) error {
	f, err := os.Open(tracePath)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := trace.NewReader(f)
	if err != nil {
		return err
	}
	type page struct {
		began, since int64
		state        trace.GoState
		by           map[trace.GoState]int64
	}
	open := map[trace.GoID]*page{}
	var done []*page
	var whole []float64
	for {
		ev, err := r.ReadEvent()
		if err == io.EOF {
			break
		} else if err != nil {
			return err
		}
		now := int64(ev.Time())
		switch ev.Kind() {
		case trace.EventRegionBegin:
			if ev.Region().Type == "admin page" {
				open[ev.Goroutine()] = &page{began: now, since: now, state: trace.GoRunning, by: map[trace.GoState]int64{}}
			}
		case trace.EventRegionEnd:
			if p := open[ev.Goroutine()]; p != nil && ev.Region().Type == "admin page" {
				p.by[p.state] += now - p.since
				done = append(done, p)
				whole = append(whole, float64(now-p.began)/1e6)
				delete(open, ev.Goroutine())
			}
		case trace.EventStateTransition:
			st := ev.StateTransition()
			if st.Resource.Kind != trace.ResourceGoroutine {
				continue
			}
			if p := open[st.Resource.Goroutine()]; p != nil {
				_, to := st.Goroutine()
				p.by[p.state] += now - p.since
				p.state, p.since = to, now
			}
		}
	}
	if len(done) == 0 {
		fmt.Fprintln(out, "\nno GET /admin in the trace")
		return nil
	}
	fmt.Fprintf(out, "\n%d GET /admin pages in the trace (their handler's region); ms\n%-28s %8s %8s %8s\n", len(done), "", "p50", "p99", "max")
	row := func(label string, col []float64) {
		fmt.Fprintf(out, "%-28s %8.2f %8.2f %8.2f\n", label, percentile(col, 50), percentile(col, 99), slices.Max(col))
	}
	row("the page", whole)
	for _, st := range []trace.GoState{trace.GoRunning, trace.GoRunnable, trace.GoSyscall, trace.GoWaiting} {
		col := make([]float64, len(done))
		for i, p := range done {
			col[i] = float64(p.by[st]) / 1e6
		}
		row("  "+strings.ToLower(st.String()), col)
	}
	return nil
}

// readCalls reads from the trace every goroutine a chat read loop started
// (a call) with the times of its read loop, itself and the writer it woke.
func readCalls(path string) ([]*gCall, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := trace.NewReader(f)
	if err != nil {
		return nil, err
	}
	var base int64 // CLOCK_MONOTONIC minus trace time, from the first clock snapshot
	type gState struct{ readied, ran int64 }
	gs := map[trace.GoID]*gState{}
	state := func(g trace.GoID) *gState {
		if gs[g] == nil {
			gs[g] = &gState{}
		}
		return gs[g]
	}
	calls := map[trace.GoID]*gCall{}
	byWriter := map[trace.GoID]*gCall{}
	var all []*gCall
	for {
		ev, err := r.ReadEvent()
		if err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		if ev.Kind() == trace.EventSync && base == 0 {
			if cs := ev.Sync().ClockSnapshot; cs != nil {
				base = int64(cs.Mono) - int64(cs.Trace)
			}
		}
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		g, now := st.Resource.Goroutine(), int64(ev.Time())+base
		from, to := st.Goroutine()
		s, c := state(g), calls[g]
		switch {
		case from == trace.GoNotExist && to == trace.GoRunnable:
			s.readied = now
			if hasFrame(ev.Stack(), "chatConn).readLoop") {
				loop := state(ev.Goroutine())
				c := &gCall{loop: ev.Goroutine(), loopReadied: loop.readied, loopRan: loop.ran, made: now}
				calls[g] = c
				all = append(all, c)
			}
		case from == trace.GoWaiting && to == trace.GoRunnable:
			s.readied = now
			if c != nil && c.blockedAt != 0 && strings.Contains(c.blockedOn, "sync") {
				if c.locks == nil {
					c.locks = map[string]int64{}
				}
				c.locks[frames(ev.Stack(), 6)] += now - c.blockedAt
			}
			if waker := calls[ev.Goroutine()]; waker != nil && ev.Goroutine() != g && hasFrame(ev.Stack(), "chatConn).enqueue") {
				waker.writer, waker.writerReadied, waker.writerRan, waker.written = g, now, 0, 0
				byWriter[g] = waker
			}
		}
		if c != nil && c.started != 0 && c.blockedAt != 0 && (from == trace.GoWaiting || from == trace.GoSyscall) &&
			!strings.Contains(c.blockedOn, "sync") {
			reason := c.blockedOn
			if from == trace.GoSyscall || reason == "" {
				reason = "syscall"
			}
			if c.waits == nil {
				c.waits = map[string]int64{}
			}
			c.waits[reason] += now - c.blockedAt
		}
		if c != nil && c.started != 0 && to == trace.GoRunnable {
			c.runnableAt = now
		}
		if c != nil && c.runnableAt != 0 && to == trace.GoRunning {
			c.runnable += now - c.runnableAt
			c.runnableAt = 0
		}
		if from == trace.GoRunning && c != nil {
			c.ran += now - c.lastRun
			c.blockedAt, c.blockedOn = now, st.Reason
		}
		if to == trace.GoRunning {
			s.ran = now
			if c != nil {
				if c.started == 0 {
					c.started = now
				}
				c.lastRun, c.blockedAt = now, 0
			}
			if w := byWriter[g]; w != nil && w.writerRan == 0 {
				w.writerRan = now
			}
		}
		if to == trace.GoNotExist && c != nil {
			c.ended = now
		}
		if to == trace.GoWaiting {
			if w := byWriter[g]; w != nil && w.writerRan != 0 {
				w.written = now // the writer done, back at its select
				delete(byWriter, g)
			}
		}
	}
	if base == 0 {
		return nil, fmt.Errorf("%s: no clock snapshot (a trace of Go 1.25 or later is needed)", path)
	}
	out := all[:0]
	for _, c := range all {
		if c.ended != 0 && c.loopReadied != 0 {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no chat call in it", path)
	}
	return out, nil
}

func hasFrame(s trace.Stack, sub string) bool {
	for f := range s.Frames() {
		if strings.Contains(f.Func, sub) {
			return true
		}
	}
	return false
}

// frames is the first n functions of s, without their packages' paths.
func frames(s trace.Stack, n int) string {
	var fr []string
	for f := range s.Frames() {
		fn := f.Func
		if i := strings.LastIndex(fn, "/"); i >= 0 {
			fn = fn[i+1:]
		}
		if fr = append(fr, fn); len(fr) == n {
			break
		}
	}
	return strings.Join(fr, " < ")
}
