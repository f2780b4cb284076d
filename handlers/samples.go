package handlers

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// The admin page's plots: Admin.Sample takes a Sample of the live
// sessions, the workers, their total RSS and the session closes (by
// end_reason) every interval into a bounded ring, which
// GET /admin/api/samples returns, oldest first (docs/PROTOCOL.md §7).

// SampleWindow is how far back the ring reaches: the plots show the last
// 15 minutes.
const SampleWindow = 15 * time.Minute

// DefaultSampleEvery is the interval of Admin.Sample when given none.
const DefaultSampleEvery = 5 * time.Second

// Sample is one point of the admin plots.
type Sample struct {
	At       time.Time      `json:"t"`
	Sessions int            `json:"sessions"`  // live sessions
	Workers  int            `json:"workers"`   // chat workers and terminals
	RSSBytes uint64         `json:"rss_bytes"` // their total resident memory
	Closes   map[string]int `json:"closes"`    // session closes since the previous sample, by end_reason
}

// sampleRing keeps the last samples; its zero value is ready (Sample
// sizes it).
type sampleRing struct {
	mu    sync.Mutex
	buf   []Sample
	next  int
	full  bool
	every time.Duration
}

func (r *sampleRing) size(n int, every time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.buf) != n {
		r.buf, r.next, r.full = make([]Sample, n), 0, false
	}
	r.every = every
}

func (r *sampleRing) add(s Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.buf) == 0 {
		return
	}
	r.buf[r.next] = s
	r.next = (r.next + 1) % len(r.buf)
	if r.next == 0 {
		r.full = true
	}
}

// all returns the samples, oldest first.
func (r *sampleRing) all() ([]Sample, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.full {
		return append([]Sample(nil), r.buf[:r.next]...), r.every
	}
	return append(append([]Sample(nil), r.buf[r.next:]...), r.buf[:r.next]...), r.every
}

// Sample takes a sample now and then every interval (DefaultSampleEvery
// when 0) until ctx ends, keeping SampleWindow of them. It blocks.
func (h *Admin) Sample(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = DefaultSampleEvery
	}
	h.samples.size(int(SampleWindow/every), every)
	prev := map[string]int{}
	take := func() {
		s := Sample{At: time.Now().UTC(), Sessions: len(h.Sessions.List()), Closes: map[string]int{}}
		procs, _, _ := h.Procs.Snapshot(ctx) // the page's read: one for both
		for _, p := range procs {
			s.Workers++
			s.RSSBytes += p.RSSBytes
		}
		if h.Metrics != nil {
			byEnd, _ := h.Metrics.closeCounts()
			for _, c := range byEnd {
				if d := c.n - prev[c.label]; d > 0 {
					s.Closes[c.label] = d
				}
				prev[c.label] = c.n
			}
		}
		h.samples.add(s)
	}
	take()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			take()
		}
	}
}

func (h *Admin) apiSamples(w http.ResponseWriter, r *http.Request) {
	all, every := h.samples.all()
	if all == nil {
		all = []Sample{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"interval_ms": every.Milliseconds(), "window_ms": SampleWindow.Milliseconds(), "samples": all})
}
