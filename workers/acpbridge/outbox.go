package acpbridge

import (
	"encoding/json"
	"sync"

	"github.com/dashgate/dashgate/workers/jsonl"
)

// outbox writes the events of the agent's updates to dashgate in their
// order, off the connection's notification goroutine. The ACP library
// hands notifications to the client one at a time from a queue of 1,024;
// a notification that finds the queue full ends the connection. Written
// there, every delta was a write to dashgate's pipe, and an agent that
// streamed faster than dashgate read (4,096 chunks at once) overflowed the
// queue: agent_exited after about 1,450 chunks (BENCHMARKS.md, issue 40).
// Here an update costs an append; consecutive deltas of one call still
// queued are merged into one event (up to maxDelta of text, never across
// another event), as dashgate's own socket writer merges what a slow
// viewer has not taken yet.
//
// Its writer goroutine runs while there is something to write and is
// gone when there is not. flush waits until all that was pushed is
// written: a call's reply comes after its events. push waits while more
// than maxQueued bytes are queued (dashgate not reading at all), so a
// stuck reader holds the agent back instead of filling memory.
type outbox struct {
	srv *jsonl.Server

	mu      sync.Mutex
	cond    *sync.Cond // signalled when the queue shrank or the writer stopped
	queue   []outEvent
	bytes   int  // text bytes queued
	running bool // the writer goroutine runs
}

// outEvent is one queued event; text is a delta's or thought's (merged
// while queued), else in fields.
type outEvent struct {
	id     json.RawMessage
	name   string
	text   string
	fields map[string]any
}

// maxQueued bounds the text an outbox queues, bytes.
const maxQueued = 32 << 20

func newOutbox(srv *jsonl.Server) *outbox {
	o := &outbox{srv: srv}
	o.cond = sync.NewCond(&o.mu)
	return o
}

// pushText queues a delta or thought event of call id with text (at most
// maxDelta bytes), merged into the last queued event when that is the
// same kind of the same call and the sum stays within maxDelta.
func (o *outbox) pushText(id json.RawMessage, name, text string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for o.bytes > maxQueued {
		o.cond.Wait()
	}
	if n := len(o.queue); n > 0 {
		last := &o.queue[n-1]
		if last.fields == nil && last.name == name && string(last.id) == string(id) && len(last.text)+len(text) <= maxDelta {
			last.text += text
			o.bytes += len(text)
			return
		}
	}
	o.queue = append(o.queue, outEvent{id: id, name: name, text: text})
	o.bytes += len(text)
	o.startLocked()
}

// push queues any other event of call id.
func (o *outbox) push(id json.RawMessage, name string, fields map[string]any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.queue = append(o.queue, outEvent{id: id, name: name, fields: fields})
	o.startLocked()
}

func (o *outbox) startLocked() {
	if !o.running {
		o.running = true
		go o.write()
	}
}

// write writes what is queued until the queue is empty, then returns.
func (o *outbox) write() {
	o.mu.Lock()
	for len(o.queue) > 0 {
		batch := o.queue
		o.queue = nil
		o.mu.Unlock()
		n := 0
		for _, e := range batch {
			if e.fields == nil {
				o.srv.Event(e.id, e.name, map[string]any{"text": e.text})
				n += len(e.text)
			} else {
				o.srv.Event(e.id, e.name, e.fields)
			}
		}
		o.mu.Lock()
		o.bytes -= n
		o.cond.Broadcast()
	}
	o.running = false
	o.cond.Broadcast()
	o.mu.Unlock()
}

// flush returns once every event pushed before it was written.
func (o *outbox) flush() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for o.running || len(o.queue) > 0 {
		o.cond.Wait()
	}
}
