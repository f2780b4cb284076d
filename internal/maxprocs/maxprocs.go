// Package maxprocs sizes the gateway's GOMAXPROCS to what the machine
// leaves it (--gomaxprocs auto).
//
// The kernel shares a saturated CPU per runnable thread. With one P per
// CPU, hundreds of busy children at the gateway's priority left it a fifth
// of a core, and a quiet session's call waited 1.5 s; with four Ps per CPU
// it kept its share (BENCHMARKS.md, issue 28). But while the CPUs are not
// saturated, Ps beyond them cost: every goroutine made runnable wakes an
// idle P's thread, which spins, steals and parks again. On 2 CPUs a
// terminal's connect and close took 1.37–1.51 ms of the gateway's CPU
// with 8 Ps against 1.04–1.09 with 2, and the back-to-back connects' p99
// was 3.4–4.6 ms against 2.4–2.8 (BENCHMARKS.md, issue 43).
//
// A Tuner watches the scheduler's own account of the wait: how long
// runnable goroutines waited for a P (runtime/metrics'
// /sched/latencies:seconds). Starved, the gateway's goroutines wait for
// milliseconds (p99 15–42 ms a half second under the stall's load with 2
// Ps); otherwise for microseconds (p99 under 1 ms with 300 connects a
// second on 2 CPUs). It raises GOMAXPROCS to High when a period's p99
// reaches RaiseAt, and lowers it to Low once every period for Hold stayed
// under LowerAt. There is no event to wait on for this: the Tuner reads
// the histogram each Period, a read of a few hundred counters.
package maxprocs

import (
	"cmp"
	"context"
	"log/slog"
	"runtime"
	"runtime/metrics"
	"time"
)

// Defaults of a Tuner's thresholds.
const (
	DefaultPeriod  = 250 * time.Millisecond
	DefaultHold    = 10 * time.Second
	DefaultRaiseAt = 4 * time.Millisecond
	DefaultLowerAt = time.Millisecond
	// minEvents is how many goroutine wake-ups a period needs before its
	// p99 says the gateway is starved: a handful in an idle period say
	// nothing.
	minEvents = 50
)

const latencies = "/sched/latencies:seconds"

// A Tuner moves GOMAXPROCS between Low and High. The zero values of
// Period, Hold, RaiseAt and LowerAt mean their defaults; Log may be nil.
type Tuner struct {
	Low, High int // GOMAXPROCS while the gateway gets the CPU it wants, and while it waits for it
	Period    time.Duration
	Hold      time.Duration // how long periods stay under LowerAt before GOMAXPROCS goes back to Low
	RaiseAt   time.Duration // a period's p99 of goroutines' wait for a P that raises it to High
	LowerAt   time.Duration
	Log       *slog.Logger
}

// Run sets GOMAXPROCS to Low, then tunes it each Period until ctx ends; it
// returns then, leaving GOMAXPROCS as it is. It blocks: the caller runs it
// on a goroutine it waits for.
func (t *Tuner) Run(ctx context.Context) {
	period := cmp.Or(t.Period, DefaultPeriod)
	hold := cmp.Or(t.Hold, DefaultHold)
	raiseAt, lowerAt := cmp.Or(t.RaiseAt, DefaultRaiseAt), cmp.Or(t.LowerAt, DefaultLowerAt)
	log := t.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	runtime.GOMAXPROCS(t.Low)
	cur := t.Low
	w := newWindow()
	tick := time.NewTicker(period)
	defer tick.Stop()
	var calmSince time.Time // when the periods began to stay under lowerAt; zero: the last did not
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			p99, n := w.next()
			busy := n >= minEvents
			switch {
			case busy && p99 >= raiseAt:
				calmSince = time.Time{}
				if cur != t.High {
					log.Debug("gomaxprocs raised", "from", cur, "to", t.High, "sched_p99_ms", ms(p99), "wakeups", n)
					runtime.GOMAXPROCS(t.High)
					cur = t.High
				}
			case busy && p99 >= lowerAt:
				calmSince = time.Time{}
			default:
				if calmSince.IsZero() {
					calmSince = now
				}
				if cur != t.Low && now.Sub(calmSince) >= hold {
					log.Debug("gomaxprocs lowered", "from", cur, "to", t.Low, "sched_p99_ms", ms(p99), "wakeups", n)
					runtime.GOMAXPROCS(t.Low)
					cur = t.Low
				}
			}
		}
	}
}

// window reads the scheduler's latency histogram and tells what changed
// since the last read.
type window struct {
	s    []metrics.Sample
	prev []uint64
}

func newWindow() *window {
	w := &window{s: []metrics.Sample{{Name: latencies}}}
	w.next()
	return w
}

// next returns the p99 of the waits counted since the last call (the upper
// bound of the bucket that holds it) and how many there were.
func (w *window) next() (p99 time.Duration, n uint64) {
	metrics.Read(w.s)
	if w.s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0, 0 // not in this runtime: never raised
	}
	h := w.s[0].Value.Float64Histogram()
	if len(w.prev) != len(h.Counts) {
		w.prev = make([]uint64, len(h.Counts))
		copy(w.prev, h.Counts)
		return 0, 0
	}
	for i, c := range h.Counts {
		w.prev[i], h.Counts[i] = c, c-w.prev[i] // h.Counts is the delta now
	}
	return quantile(h.Buckets, h.Counts, 0.99)
}

// quantile is the upper bound of the bucket holding the q-quantile of
// counts (len(buckets) == len(counts)+1, in seconds; an infinite bound is
// read as its lower one), and the counts' sum.
func quantile(buckets []float64, counts []uint64, q float64) (time.Duration, uint64) {
	var n uint64
	for _, c := range counts {
		n += c
	}
	if n == 0 {
		return 0, 0
	}
	want := uint64(q*float64(n) + 0.5)
	var seen uint64
	for i, c := range counts {
		seen += c
		if seen >= want && c > 0 {
			bound := buckets[i+1]
			if bound > 1e9 { // +Inf
				bound = buckets[i]
			}
			return time.Duration(bound * float64(time.Second)), n
		}
	}
	return 0, n
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
