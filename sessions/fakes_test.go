package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/dashgate/dashgate/workers"
)

// fakeWorker answers calls from a script; it is "alive" until closed.
type fakeWorker struct {
	pid     int
	onClose func(workers.CloseResult)
	hang    bool        // calls never answer until the worker closes
	stream  chan string // when set, a prompt streams its deltas until it is closed

	mu      sync.Mutex
	prompts []map[string]any    // the params of every prompt it got
	answers []map[string]string // the params of every approval answer it got
	events  chan workers.Event  // when set, a prompt sends these events until it is closed
	acked   chan struct{}       // a value after each of events was handled
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

func (w *fakeWorker) Call(ctx context.Context, method string, params any, onEvent func(workers.Event)) (json.RawMessage, error) {
	onDelta := func(d string) {
		if onEvent != nil {
			onEvent(workers.Event{Name: "delta", Text: d})
		}
	}
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
	if m, ok := params.(map[string]any); ok { // a prompt's params
		p = map[string]string{"text": m["text"].(string)}
		w.mu.Lock()
		w.prompts = append(w.prompts, m)
		w.mu.Unlock()
	}
	switch method {
	case "slash":
		if p["command"] == "/crash" { // exits while it runs the command, as /exit does
			w.crash()
			return nil, &workers.Error{Failure: workers.FailCrashed, Message: "worker closed its stdout"}
		}
		if p["command"] == "/fail" {
			return nil, &workers.Error{Failure: workers.FailReply, Message: "unknown command /fail"}
		}
		out := p["command"]
		if out == "/model" { // the session's model, as the agent worker's /model says it
			out = "model " + p["model"]
		}
		b, _ := json.Marshal(map[string]string{"output": out})
		return b, nil
	case "approval":
		w.mu.Lock()
		w.answers = append(w.answers, params.(map[string]string))
		w.mu.Unlock()
		return json.RawMessage(`{}`), nil
	case "prompt":
		if w.events != nil { // send what the test sends until it closes the channel
			for {
				select {
				case ev, ok := <-w.events:
					if !ok {
						return json.RawMessage(`{"output":"","status":"complete"}`), nil
					}
					onEvent(ev)
					w.acked <- struct{}{} // the test goes on once the event was handled
				case <-w.closed:
					return nil, &workers.Error{Failure: workers.FailCrashed, Message: "closed"}
				case <-ctx.Done():
					return json.RawMessage(`{"output":"","interrupted":true}`), nil
				}
			}
		}
		if w.stream != nil { // stream what the test sends until it closes the channel
			for {
				select {
				case d, ok := <-w.stream:
					if !ok {
						b, _ := json.Marshal(map[string]any{"output": "", "usage": map[string]int{"input_tokens": 3, "output_tokens": 5}})
						return b, nil
					}
					onDelta(d)
				case <-w.closed:
					return nil, &workers.Error{Failure: workers.FailCrashed, Message: "closed"}
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
		}
		onDelta("echo")
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
	stream  chan string        // given to every worker (see fakeWorker.stream)
	events  chan workers.Event // given to every worker (see fakeWorker.events)
	acked   chan struct{}
	spawned atomic.Int64
	gate    chan struct{} // when set, spawns wait on it
	entered chan struct{} // when set, each spawn signals it before waiting

	ptyFlood int                           // output each fake terminal writes, bytes
	ptyGate  atomic.Pointer[chan struct{}] // when set, terminal spawns wait until it is closed
	ptys     []*fakePTY
	maxLive  int // when > 0, spawns fail with workers.ErrCapacity once this many children are not closed
}

// liveLocked counts the children not closed. s.mu must be held.
func (s *fakeSpawner) liveLocked() int {
	n := 0
	for _, w := range s.all {
		select {
		case <-w.closed:
		default:
			n++
		}
	}
	for _, p := range s.ptys {
		select {
		case <-p.closed:
		default:
			n++
		}
	}
	return n
}

func (s *fakeSpawner) SpawnWorker(req SpawnRequest) (Worker, error) {
	if s.entered != nil {
		s.entered <- struct{}{}
	}
	if s.gate != nil {
		<-s.gate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.maxLive > 0 && s.liveLocked() >= s.maxLive {
		return nil, workers.ErrCapacity
	}
	s.next++
	w := &fakeWorker{pid: 100000 + s.next, onClose: req.OnClose, hang: s.hang, stream: s.stream, events: s.events, acked: s.acked, closed: make(chan struct{})}
	s.all = append(s.all, w)
	s.spawned.Add(1)
	return w, nil
}

// SpawnPTY starts a fakePTY that floods s.ptyFlood bytes of output.
func (s *fakeSpawner) SpawnPTY(req SpawnRequest) (PTY, error) {
	if gate := s.ptyGate.Load(); gate != nil {
		<-*gate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.maxLive > 0 && s.liveLocked() >= s.maxLive {
		return nil, workers.ErrCapacity
	}
	s.next++
	p := &fakePTY{pid: 200000 + s.next, req: req, onClose: req.OnClose, left: s.ptyFlood,
		closed: make(chan struct{}), released: make(chan struct{})}
	s.ptys = append(s.ptys, p)
	return p, nil
}

func (s *fakeSpawner) terminals() []*fakePTY {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*fakePTY(nil), s.ptys...)
}

// fakePTY is a terminal program that writes left bytes of output as fast
// as it is read, then waits for its end. It counts what Read handed out.
type fakePTY struct {
	pid     int
	req     SpawnRequest
	onClose func(workers.CloseResult)

	mu       sync.Mutex
	left     int   // output still to write
	read     int64 // bytes handed out by Read
	closedBy workers.Reason
	exitCode int

	closed   chan struct{}
	released chan struct{}
	once     sync.Once
	relOnce  sync.Once
	res      workers.CloseResult
	attrs    map[string]any // AddCloseAttr's, as a Proc's close record would carry them
}

// AddCloseAttr records key=value as workers.Proc's does (a later value of
// a key replaces the earlier).
func (p *fakePTY) AddCloseAttr(key string, value any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.attrs == nil {
		p.attrs = map[string]any{}
	}
	p.attrs[key] = value
}

// attr is the value AddCloseAttr gave key, and whether it did.
func (p *fakePTY) attr(key string) (any, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.attrs[key]
	return v, ok
}

func (p *fakePTY) PID() int { return p.pid }

func (p *fakePTY) Read(b []byte) (int, error) {
	p.mu.Lock()
	if n := min(len(b), p.left); n > 0 {
		p.left -= n
		p.read += int64(n)
		p.mu.Unlock()
		for i := range b[:n] {
			b[i] = 'y'
		}
		return n, nil
	}
	p.mu.Unlock()
	select {
	case <-p.closed:
		return 0, syscall.EIO // every holder of the terminal is gone
	case <-p.released:
		return 0, os.ErrClosed
	}
}

// bytesRead is what Read handed out so far.
func (p *fakePTY) bytesRead() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.read
}

func (p *fakePTY) Write(ctx context.Context, b []byte) error { return nil }

func (p *fakePTY) Resize(cols, rows uint16) error { return nil }

func (p *fakePTY) Close(r workers.Reason) workers.CloseResult {
	p.once.Do(func() {
		p.mu.Lock()
		p.closedBy = r
		p.res = workers.CloseResult{PID: p.pid, Kind: workers.KindPTY, Reason: r, ExitCode: p.exitCode, Escalation: workers.EscalationNone}
		p.mu.Unlock()
		close(p.closed)
		if p.onClose != nil {
			p.onClose(p.res)
		}
	})
	<-p.closed
	return p.res
}

// exit makes the program end by itself with code.
func (p *fakePTY) exit(code int) {
	p.mu.Lock()
	p.exitCode = code
	p.mu.Unlock()
	p.Close(workers.ReasonExited)
}

// reason is what the program was closed with ("" while it runs).
func (p *fakePTY) reason() workers.Reason {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closedBy
}

func (p *fakePTY) Release() error {
	p.relOnce.Do(func() { close(p.released) })
	return nil
}

func (s *fakeSpawner) workers() []*fakeWorker {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*fakeWorker(nil), s.all...)
}

// anon is the anonymous user: today's one principal of the dashboard token.
var anon = Principal{}

// recViewer records the events it is given.
type recViewer struct {
	mu     sync.Mutex
	events []*Event
	done   chan struct{} // nil: never done
	p      Principal     // zero: the anonymous user
}

func (v *recViewer) Principal() Principal { return v.p }

func (v *recViewer) Done() <-chan struct{} { return v.done }

// leavingViewer is a viewer that can leave (see leave).
func leavingViewer() *recViewer { return &recViewer{done: make(chan struct{})} }

// leave marks the viewer's socket gone, as a handler does before it calls
// DetachViewer. The viewer must come from leavingViewer.
func (v *recViewer) leave() { close(v.done) }

func (v *recViewer) Deliver(ev *Event) {
	v.mu.Lock()
	v.events = append(v.events, ev)
	v.mu.Unlock()
}

func (v *recViewer) ofType(typ string) []*Event {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []*Event
	for _, e := range v.events {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}
