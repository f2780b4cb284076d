package sessions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dashgate/dashgate/workers"
)

// fakeClock is a manual clock: timers fire only in Advance.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c       *fakeClock
	at      time.Time
	f       func()
	stopped bool
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	return was
}

// Advance moves the clock and runs the timers that came due, in order, on
// the calling goroutine.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	keep := c.timers[:0]
	for _, t := range c.timers {
		switch {
		case t.stopped:
		case !t.at.After(c.now):
			t.stopped = true
			due = append(due, t)
		default:
			keep = append(keep, t)
		}
	}
	c.timers = keep
	c.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		t.f()
	}
}

// dropTimers forgets every pending timer, as if they were lost.
func (c *fakeClock) dropTimers() {
	c.mu.Lock()
	c.timers = nil
	c.mu.Unlock()
}

// fakeWorker answers calls from a script; it is "alive" until closed.
type fakeWorker struct {
	pid     int
	onClose func(workers.CloseResult)
	hang    bool // calls never answer until the worker closes

	mu      sync.Mutex
	closing bool
	reason  workers.Reason
	closed  chan struct{}
	once    sync.Once
}

func (w *fakeWorker) PID() int { return w.pid }

func (w *fakeWorker) Closing() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closing
}

func (w *fakeWorker) Call(ctx context.Context, method string, params any, onDelta func(string)) (json.RawMessage, error) {
	if w.Closing() {
		return nil, &workers.Error{Failure: workers.FailCrashed, Message: "closed"}
	}
	if w.hang {
		select {
		case <-w.closed:
			return nil, &workers.Error{Failure: workers.FailCrashed, Message: "closed"}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	p, _ := params.(map[string]string)
	switch method {
	case "slash":
		b, _ := json.Marshal(map[string]string{"output": p["command"]})
		return b, nil
	case "prompt":
		if onDelta != nil {
			onDelta("echo")
		}
		b, _ := json.Marshal(map[string]string{"output": "echo " + p["text"]})
		return b, nil
	}
	return nil, errors.New("unknown method")
}

func (w *fakeWorker) Close(r workers.Reason) workers.CloseResult {
	res := workers.CloseResult{PID: w.pid, Kind: workers.KindChat, Reason: r, Escalation: workers.EscalationNone}
	w.once.Do(func() {
		w.mu.Lock()
		w.closing = true
		w.reason = r
		w.mu.Unlock()
		close(w.closed)
		if w.onClose != nil {
			w.onClose(res)
		}
	})
	return res
}

// crash makes the worker die by itself.
func (w *fakeWorker) crash() { w.Close(workers.ReasonExited) }

type fakeSpawner struct {
	mu      sync.Mutex
	next    int
	all     []*fakeWorker
	hang    bool
	spawned atomic.Int64
	gate    chan struct{} // when set, spawns wait on it
	entered chan struct{} // when set, each spawn signals it before waiting
}

func (s *fakeSpawner) SpawnWorker(sid string, onClose func(workers.CloseResult)) (Worker, error) {
	if s.entered != nil {
		s.entered <- struct{}{}
	}
	if s.gate != nil {
		<-s.gate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	w := &fakeWorker{pid: 100000 + s.next, onClose: onClose, hang: s.hang, closed: make(chan struct{})}
	s.all = append(s.all, w)
	s.spawned.Add(1)
	return w, nil
}

func (s *fakeSpawner) SpawnPTY(sid string, cols, rows uint16, onClose func(workers.CloseResult)) (*workers.Proc, error) {
	return nil, errors.New("no pty in the fake spawner")
}

func (s *fakeSpawner) workers() []*fakeWorker {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*fakeWorker(nil), s.all...)
}

// recViewer records the events it is given.
type recViewer struct {
	mu     sync.Mutex
	events []Event
	done   chan struct{} // nil: never done
}

func (v *recViewer) Done() <-chan struct{} { return v.done }

// leavingViewer is a viewer that can leave (see leave).
func leavingViewer() *recViewer { return &recViewer{done: make(chan struct{})} }

// leave marks the viewer's socket gone, as a handler does before it calls
// DetachViewer. The viewer must come from leavingViewer.
func (v *recViewer) leave() { close(v.done) }

func (v *recViewer) Deliver(ev Event) {
	v.mu.Lock()
	v.events = append(v.events, ev)
	v.mu.Unlock()
}

func (v *recViewer) ofType(typ string) []Event {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []Event
	for _, e := range v.events {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// logBuf captures JSON log records.
type logBuf struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	parsed int              // bytes of buf already parsed
	recs   []map[string]any // the records parsed so far
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuf) records(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buf.Bytes()
	if end := bytes.LastIndexByte(b, '\n'); end >= l.parsed {
		for _, line := range bytes.Split(b[l.parsed:end], []byte("\n")) {
			var m map[string]any
			if json.Unmarshal(line, &m) == nil {
				l.recs = append(l.recs, m)
			}
		}
		l.parsed = end + 1
	}
	var out []map[string]any
	for _, m := range l.recs {
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

func newTestLogger() (*slog.Logger, *logBuf) {
	lb := &logBuf{}
	return slog.New(slog.NewJSONHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})), lb
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		<-tick.C
	}
}
