package maxprocs

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dashgate/dashgate/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestTunerFollowsTheWait: with one P taken by goroutines that never
// block, the others wait for it for milliseconds, and the Tuner raises
// GOMAXPROCS to High; once they are gone, it lowers it to Low after Hold.
func TestTunerFollowsTheWait(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	ctx, cancel := context.WithCancel(t.Context())
	tu := &Tuner{Low: 1, High: 4, Period: 100 * time.Millisecond, Hold: 300 * time.Millisecond}
	var tuned sync.WaitGroup
	tuned.Go(func() { tu.Run(ctx) })
	defer func() { cancel(); tuned.Wait() }()
	testkit.WaitFor(t, 5*time.Second, "GOMAXPROCS 1 at the start", func() bool { return runtime.GOMAXPROCS(0) == 1 })

	// The load: spinners hold the P until preempted (every 10 ms), and
	// a hundred goroutines woken each millisecond by their tickers wait
	// behind them.
	var stop atomic.Bool
	var load sync.WaitGroup
	for range 3 {
		load.Go(func() {
			for !stop.Load() {
			}
		})
	}
	for range 100 {
		load.Go(func() {
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for !stop.Load() {
				<-tick.C
			}
		})
	}
	raised := testkit.Until(20*time.Second, func() bool { return runtime.GOMAXPROCS(0) == 4 })
	stop.Store(true)
	load.Wait()
	if !raised {
		t.Fatal("GOMAXPROCS not raised to 4 while goroutines waited behind spinners")
	}
	testkit.WaitFor(t, 20*time.Second, "GOMAXPROCS lowered to 1 once idle", func() bool { return runtime.GOMAXPROCS(0) == 1 })
}

// TestQuantile: the q-quantile is the upper bound of the bucket that holds
// it; an infinite last bound reads as the bucket's lower one.
func TestQuantile(t *testing.T) {
	inf := 1e300
	buckets := []float64{0, 1e-6, 1e-3, 4e-3, inf}
	for _, tt := range []struct {
		counts []uint64
		want   time.Duration
		n      uint64
	}{
		{[]uint64{0, 0, 0, 0}, 0, 0},
		{[]uint64{0, 100, 0, 0}, time.Millisecond, 100},
		{[]uint64{0, 98, 2, 0}, 4 * time.Millisecond, 100}, // the 99th of 100 is in the third
		{[]uint64{0, 99, 1, 0}, time.Millisecond, 100},
		{[]uint64{0, 50, 0, 50}, 4 * time.Millisecond, 100},
	} {
		got, n := quantile(buckets, tt.counts, 0.99)
		if got != tt.want || n != tt.n {
			t.Errorf("quantile(%v) = %v, %d; want %v, %d", tt.counts, got, n, tt.want, tt.n)
		}
	}
}
