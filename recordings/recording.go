package recordings

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// eventCost is what an event counts against Config.QueueBytes beside its
// data: its queue entry, so that a stream of one-byte echoes is bounded too.
const eventCost = 64

// markerReserve is room kept under Config.MaxBytes for the line that says
// the limit was reached.
const markerReserve = 256

// flushAt is how much encoded text the writer gathers before a write.
const flushAt = 64 << 10

// keepEvents is the largest event slice the writer keeps for reuse
// between batches; a larger one (a burst of echoes) goes to the garbage
// collector, so that an idle terminal does not hold a burst's memory.
const keepEvents = 4096

// blockSize is the size of the blocks queued output is copied into: a
// pty read (at most 32 KiB) fits one. Blocks come from, and go back to, a
// pool every recording shares, so a busy terminal's queue allocates
// nothing in the steady state (one growing buffer per batch, copied as it
// grew, was most of a recording's CPU: BenchmarkRecording64MiB) and an
// idle one holds none.
const blockSize = 64 << 10

var blocks = sync.Pool{New: func() any { b := make([]byte, 0, blockSize); return &b }}

// event is one queued event: output (data, in a block), a resize, or a
// marker of dropped output.
type event struct {
	at         time.Duration // since the recording began
	kind       byte          // 'o', 'r' or 'm'
	data       []byte        // 'o': its bytes, in one of the queue's blocks
	cols, rows uint16        // 'r'
	dropped    int64         // 'm': output bytes left out before it
}

// Result is how a recording went, once Done is closed.
type Result struct {
	Bytes        int64 // the file's size
	Dropped      int64 // output bytes left out because the writer fell behind
	LimitReached bool  // stopped at Config.MaxBytes; the last line says so
	Err          error // the file could not be made or written (it ends at its last whole line)
}

// Truncated reports whether the recording lacks some of the output.
func (r Result) Truncated() bool { return r.Dropped > 0 || r.LimitReached || r.Err != nil }

// Recording is one terminal's recording. Output, Resize and Close never
// wait for the disk; see the package doc for who owns what.
type Recording struct {
	s     *Store
	path  string
	start time.Time // monotonic: the events' times count from it
	head  header

	mu      sync.Mutex
	blocks  []*[]byte // the blocks queued output is in, the last one being filled
	evs     []event   // queued events, in order
	queued  int       // bytes counted against QueueBytes
	dropped int64     // output bytes dropped since the last queued event
	stopped bool      // the writer takes nothing more (limit, error): calls return at once
	closed  bool      // Close was called
	wake    chan struct{}
	done    chan struct{}
	result  Result // set by the writer before done closes
}

type header struct {
	Version   int               `json:"version"`
	Width     int               `json:"width"`
	Height    int               `json:"height"`
	Timestamp int64             `json:"timestamp"`
	Env       map[string]string `json:"env,omitempty"`
	Title     string            `json:"title,omitempty"`
}

// Path is the recording's file.
func (r *Recording) Path() string { return r.path }

// Done is closed once the writer returned: the file is complete and
// closed (or could not be made; see Result).
func (r *Recording) Done() <-chan struct{} { return r.done }

// Result is how the recording went; valid once Done is closed.
func (r *Recording) Result() Result {
	<-r.done
	return r.result
}

// Output records p, a read of the terminal's output, now. It copies p
// and returns without waiting: past Config.QueueBytes waiting for the
// writer, p is dropped (the recording gets a marker saying how much).
func (r *Recording) Output(p []byte) {
	if len(p) == 0 {
		return
	}
	r.mu.Lock()
	if r.stopped || r.closed {
		r.mu.Unlock()
		return
	}
	if !r.roomLocked(len(p) + eventCost) {
		r.dropped += int64(len(p))
		r.mu.Unlock()
		return
	}
	wake := len(r.evs) == 0 || r.queued < r.s.highWater() && r.queued+len(p)+eventCost >= r.s.highWater()
	at := r.markLocked()
	r.evs = append(r.evs, event{at: at, kind: 'o', data: r.copyLocked(p)})
	r.queued += len(p) + eventCost
	r.mu.Unlock()
	if wake {
		r.signal()
	}
}

// copyLocked copies p into the queue's last block, or a new one when it
// does not fit, and returns the copy.
func (r *Recording) copyLocked(p []byte) []byte {
	var b *[]byte
	if n := len(r.blocks); n > 0 && cap(*r.blocks[n-1])-len(*r.blocks[n-1]) >= len(p) {
		b = r.blocks[n-1]
	} else {
		b = blocks.Get().(*[]byte)
		if cap(*b) < len(p) { // larger than a pty read: a block of its own
			*b = make([]byte, 0, len(p))
		}
		r.blocks = append(r.blocks, b)
	}
	start := len(*b)
	*b = append(*b, p...)
	return (*b)[start:len(*b):len(*b)]
}

// Resize records that the terminal is now cols×rows cells.
func (r *Recording) Resize(cols, rows uint16) {
	r.mu.Lock()
	if r.stopped || r.closed || !r.roomLocked(eventCost) {
		r.mu.Unlock()
		return
	}
	wake := len(r.evs) == 0
	at := r.markLocked()
	r.evs = append(r.evs, event{at: at, kind: 'r', cols: cols, rows: rows})
	r.queued += eventCost
	r.mu.Unlock()
	if wake {
		r.signal()
	}
}

// roomLocked reports whether cost more bytes fit in the queue. A marker of
// earlier drops rides along without counting.
func (r *Recording) roomLocked(cost int) bool {
	return r.queued+cost <= r.s.cfg.QueueBytes
}

// markLocked queues the marker of the output dropped since the last queued
// event, if any, and returns the time now.
func (r *Recording) markLocked() time.Duration {
	at := time.Since(r.start)
	if r.dropped > 0 {
		r.evs = append(r.evs, event{at: at, kind: 'm', dropped: r.dropped})
		r.dropped = 0
	}
	return at
}

func (r *Recording) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Close asks the writer to write what is queued and close the file; it
// returns at once (Done says when that happened). Output and Resize after
// it are ignored. Safe to call more than once.
func (r *Recording) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.signal()
}

// run is the recording's writer goroutine: it makes the file, writes the
// header, then each batch of queued events, until Close; it stops taking
// events at the size limit or at the first write error.
func (r *Recording) run() {
	defer r.s.finished(r)
	w := &fileWriter{}
	var err error
	if err = os.MkdirAll(filepath.Dir(r.path), 0o700); err == nil {
		w.f, err = r.s.cfg.Create(r.path)
	}
	if err != nil {
		r.stop(fmt.Errorf("create recording: %w", err))
		return
	}
	head, _ := json.Marshal(r.head)
	maxBytes := r.s.cfg.MaxBytes
	var (
		carry      []byte // an output's unfinished UTF-8 sequence, continued by the next
		last       time.Duration
		spareBlks  []*[]byte
		spareEvs   []event
		limit      bool
		dropped    int64
		scratch    []byte
		writeErr   error
		sawClosing bool
	)
	// The header goes out at once: a recording in progress is a valid
	// file at every batch's end.
	writeErr = w.write(append(head, '\n'))
	out := make([]byte, 0, flushAt)
	flush := func() {
		if writeErr == nil && len(out) > 0 {
			writeErr = w.write(out)
		}
		out = out[:0]
	}
	batch := time.NewTimer(time.Hour)
	batch.Stop()
	defer batch.Stop()
	for !sawClosing && writeErr == nil && !limit {
		r.mu.Lock()
		for len(r.evs) == 0 && !r.closed {
			r.mu.Unlock()
			<-r.wake
			r.mu.Lock()
		}
		// The first event of a batch woke the writer: it gathers what
		// comes within FlushEvery (a keystroke's echo and the next ones,
		// a stream's reads) and writes them at once, unless the queue
		// reaches its high-water mark (the hot path wakes it again) or
		// the recording closes: one wake-up and one write a batch
		// instead of one per read.
		if !r.closed && r.queued < r.s.highWater() {
			r.mu.Unlock()
			batch.Reset(r.s.cfg.FlushEvery)
			select {
			case <-batch.C:
			case <-r.wake:
				batch.Stop()
			}
			r.mu.Lock()
		}
		evs, blks := r.evs, r.blocks
		r.evs, r.blocks, r.queued = spareEvs[:0], spareBlks[:0], 0
		sawClosing = r.closed
		if sawClosing {
			dropped, r.dropped = r.dropped, 0 // dropped after the last event
		}
		r.mu.Unlock()

		for _, ev := range evs {
			at := max64(ev.at, last)
			last = at
			n := len(out)
			switch ev.kind {
			case 'o':
				data := ev.data
				if len(carry) > 0 {
					scratch = append(append(scratch[:0], carry...), data...)
					data = scratch
				}
				var tail []byte
				data, tail = splitIncomplete(data)
				carry = append(carry[:0], tail...)
				if len(data) > 0 {
					out = appendEvent(out, at, 'o', data)
				}
			case 'r':
				out = appendEvent(out, at, 'r', fmt.Appendf(nil, "%dx%d", ev.cols, ev.rows))
			case 'm':
				out = appendEvent(out, at, 'm', droppedNote(ev.dropped))
				r.result.Dropped += ev.dropped
			}
			if w.n+int64(len(out))+markerReserve > maxBytes {
				out = out[:n] // this event does not fit: the recording ends before it
				out = appendEvent(out, at, 'm', fmt.Appendf(nil, "dashgate: recording stopped at its size limit (%d bytes)", maxBytes))
				limit = true
				break
			}
			if len(out) >= flushAt {
				flush()
				if writeErr != nil {
					break
				}
			}
		}
		if !limit && sawClosing {
			if len(carry) > 0 { // the output ended inside a character
				out = appendEvent(out, last, 'o', carry)
			}
			if dropped > 0 {
				out = appendEvent(out, last, 'm', droppedNote(dropped))
				r.result.Dropped += dropped
			}
		}
		flush()
		for i, b := range blks {
			if cap(*b) == blockSize {
				*b = (*b)[:0]
				blocks.Put(b)
			}
			blks[i] = nil
		}
		spareBlks = blks
		clear(evs) // no event keeps a block given back
		if cap(evs) <= keepEvents {
			spareEvs = evs
		} else {
			spareEvs = nil
		}
	}
	r.result.LimitReached = limit
	r.result.Bytes = w.n
	if writeErr != nil {
		writeErr = fmt.Errorf("write recording: %w", writeErr)
	}
	if cerr := w.close(); cerr != nil && writeErr == nil {
		writeErr = fmt.Errorf("close recording: %w", cerr)
	}
	r.stop(writeErr)
}

// stop ends the recording as the writer finished it: no more events are
// taken, and what is queued and will be dropped is counted.
func (r *Recording) stop(err error) {
	r.mu.Lock()
	r.stopped = true
	r.evs, r.blocks, r.queued = nil, nil, 0
	r.result.Dropped += r.dropped
	r.dropped = 0
	r.mu.Unlock()
	r.result.Err = err
}

func droppedNote(n int64) []byte {
	return fmt.Appendf(nil, "dashgate: %d bytes of output not recorded here (the recording's writer fell behind)", n)
}

func max64(a, b time.Duration) time.Duration {
	if a > b {
		return a
	}
	return b
}

// fileWriter writes whole batches and counts the bytes the file holds. A
// batch written in part (a full disk) is cut off again where the file
// supports it (Truncate), so that the file ends at its last whole line.
type fileWriter struct {
	f io.WriteCloser
	n int64 // bytes of whole batches written
}

func (w *fileWriter) write(b []byte) error {
	k, err := w.f.Write(b)
	if err == nil && k < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		if t, ok := w.f.(interface{ Truncate(int64) error }); ok && k > 0 {
			if terr := t.Truncate(w.n); terr != nil {
				err = errors.Join(err, terr)
			}
		}
		return err
	}
	w.n += int64(k)
	return nil
}

func (w *fileWriter) close() error {
	if w.f == nil {
		return nil
	}
	return w.f.Close()
}

// logResult logs the recording's end: DEBUG when it is whole, WARN when
// some output is missing from it (no terminal content is logged).
func (r *Recording) logResult(log *slog.Logger) {
	res := r.result
	attrs := []any{"recording", r.path, "bytes", res.Bytes}
	if !res.Truncated() {
		log.Debug("recording closed", attrs...)
		return
	}
	attrs = append(attrs, "dropped_bytes", res.Dropped, "limit_reached", res.LimitReached)
	if res.Err != nil {
		attrs = append(attrs, "err", res.Err)
	}
	log.Warn("recording truncated", attrs...)
}
