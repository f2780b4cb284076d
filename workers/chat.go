package workers

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Bounds on what a worker may send (DESIGN.md rule 5).
const (
	MaxLine        = 1 << 20  // one stdout line, bytes
	StderrTailLine = 64       // lines kept of stderr
	StderrTailSize = 16 << 10 // bytes kept of stderr
)

// Failure says how a worker call failed; every one maps to error 5004.
type Failure string

const (
	FailSpawn    Failure = "spawn"    // the worker could not be started
	FailCrashed  Failure = "crashed"  // it exited or was closed before replying
	FailTimeout  Failure = "timeout"  // no reply within the deadline
	FailProtocol Failure = "protocol" // it wrote something that is not the protocol
	FailReply    Failure = "reply"    // it answered ok:false
	// FailInterrupted: the caller interrupted the request and the worker
	// gave no answer of its own (it was still starting, or ignored the
	// cancel and was recycled). Error() is the Message alone.
	FailInterrupted Failure = "interrupted"
)

// Error is a failed worker call. StderrTail holds the worker's last stderr
// lines at the time of the failure. A worker's ok:false reply may name its
// own Failure (a word such as model_unreachable) and RetryAfter (seconds).
type Error struct {
	Failure    Failure
	Message    string
	StderrTail []string
	RetryAfter int
}

// Event is a line a worker streams inside a call (PROTOCOL.md §4, §7):
// {"id":N,"event":Name,...}. Text is its text (a thought's, a notice's);
// Line is the whole line, for the fields of other events. A delta's text
// is in Delta, Text "", unless the line was one decodeDelta leaves to
// json.Unmarshal (then Text has it too, as an Event made by a test may).
//
// A delta's Line and Delta are the worker's read buffers, not copies:
// they are valid only until onEvent returns (copy what is kept).
type Event struct {
	Name  string
	Text  string
	Line  json.RawMessage
	Delta []byte
}

// Error is "worker <failure>: <message>", or only the message when the
// worker named its own failure: that message is meant for a person as is.
func (e *Error) Error() string {
	switch e.Failure {
	case FailSpawn, FailCrashed, FailTimeout, FailProtocol, FailReply:
		return fmt.Sprintf("worker %s: %s", e.Failure, e.Message)
	}
	return e.Message
}

// Worker is a chat child speaking the JSON-lines protocol of PROTOCOL.md §4.
// Calls may run concurrently; each gets its own request id.
type Worker struct {
	*Proc

	writeMu sync.Mutex // serialises request lines on stdin

	mu      sync.Mutex
	nextID  int64
	pending map[int64]*call
	gone    error // set once the worker can take no more calls

	tailMu sync.Mutex
	tail   []string
	tailSz int

	delta []byte // the text of the last delta decoded (decodeDelta), the stdout reader's
}

type call struct {
	onEvent func(Event)
	done    chan reply
}

type reply struct {
	result json.RawMessage
	err    error
}

// workerLine is anything a worker writes on stdout.
type workerLine struct {
	ID     *int64          `json:"id"`
	OK     *bool           `json:"ok"`
	Result json.RawMessage `json:"result"`
	Error  string          `json:"error"`
	Event  string          `json:"event"`
	Text   string          `json:"text"`
	// an ok:false reply's own failure word and retry delay (seconds)
	Failure    Failure `json:"failure"`
	RetryAfter int     `json:"retry_after"`
}

// StartWorker starts a KindChat child and its stdout and stderr drains.
// The caller must Close it.
func (m *Manager) StartWorker(spec Spec) (*Worker, error) {
	spec.Kind = KindChat
	w := &Worker{pending: map[int64]*call{}}
	userClose := spec.OnClose
	spec.OnClose = func(r CloseResult) {
		w.fail(&Error{Failure: FailCrashed, Message: fmt.Sprintf("worker closed (%s)", r.Reason)})
		if userClose != nil {
			userClose(r)
		}
	}
	_, err := m.start(spec, func(p *Proc) {
		w.Proc = p
		p.drains.Add(2)
		go w.readStdout()
		go w.readStderr()
	})
	if err != nil {
		return nil, err
	}
	return w, nil
}

// Call sends one request and waits for its reply. onEvent, when set, gets
// each event the worker streams for it (delta, approval, tool_start, ...),
// in order, on the stdout goroutine (it must not block for long). When ctx
// ends first by its deadline (or is cancelled with the cause
// context.DeadlineExceeded: a caller's idle timeout), the worker is
// recycled (closed with ReasonTimeout, so no stale reply is left in
// flight) and a FailTimeout *Error is returned; otherwise it is asked to
// cancel. Other failures are *Error too.
func (w *Worker) Call(ctx context.Context, method string, params any, onEvent func(Event)) (json.RawMessage, error) {
	c := &call{onEvent: onEvent, done: make(chan reply, 1)}
	w.mu.Lock()
	if w.gone != nil {
		err := w.gone
		w.mu.Unlock()
		return nil, err
	}
	w.nextID++
	id := w.nextID
	w.pending[id] = c
	w.mu.Unlock()

	if err := w.send(map[string]any{"id": id, "method": method, "params": params}); err != nil {
		w.forget(id)
		return nil, &Error{Failure: FailCrashed, Message: "write request: " + err.Error(), StderrTail: w.StderrTail()}
	}

	select {
	case r := <-c.done:
		return r.result, w.withTail(r.err)
	case <-ctx.Done():
	}
	if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		w.forget(id)
		w.Close(ReasonTimeout)
		return nil, &Error{Failure: FailTimeout, Message: "no reply in time; worker recycled", StderrTail: w.StderrTail()}
	}
	// Cancelled: ask the worker to stop this request and give it the
	// cancel grace to answer; a worker that does not is recycled.
	w.send(map[string]any{"id": -id, "method": "cancel", "params": map[string]any{"id": id}})
	grace := w.spec.CancelGrace
	if grace <= 0 {
		grace = DefaultCancelGrace
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case r := <-c.done:
		return r.result, w.withTail(r.err)
	case <-t.C:
		w.forget(id)
		w.Close(ReasonInterrupted)
		return nil, ctx.Err()
	}
}

// withTail fills a failure's StderrTail when it has none yet.
func (w *Worker) withTail(err error) error {
	var we *Error
	if errors.As(err, &we) && len(we.StderrTail) == 0 {
		cp := *we
		cp.StderrTail = w.StderrTail()
		return &cp
	}
	return err
}

// DefaultCancelGrace is how long a worker may take to answer a cancelled
// request when its Spec sets no CancelGrace.
const DefaultCancelGrace = time.Second

// send writes one line to the worker without waiting for any reply.
func (w *Worker) send(v any) error {
	line, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	w.stdin.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, err = w.stdin.Write(append(line, '\n'))
	return err
}

func (w *Worker) forget(id int64) {
	w.mu.Lock()
	delete(w.pending, id)
	w.mu.Unlock()
}

// fail ends every pending call with err and refuses new ones.
func (w *Worker) fail(err *Error) {
	err.StderrTail = w.StderrTail()
	w.mu.Lock()
	if w.gone == nil {
		w.gone = err
	}
	pending := w.pending
	w.pending = map[int64]*call{}
	w.mu.Unlock()
	for _, c := range pending {
		c.done <- reply{err: err}
	}
}

func (w *Worker) readStdout() {
	defer w.drains.Done()
	r := bufio.NewReaderSize(w.stdout, 64<<10)
	for {
		line, err := readLine(r, MaxLine)
		if errors.Is(err, errLineTooLong) {
			w.protocolError(fmt.Sprintf("stdout line over %d bytes", MaxLine))
			return
		}
		if err != nil {
			if !w.Closing() {
				// stdout closed while the process may live on: it can no
				// longer answer, so recycle it.
				w.fail(&Error{Failure: FailCrashed, Message: "worker closed its stdout"})
				w.requestClose(ReasonExited)
			}
			io.Copy(io.Discard, r)
			return
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if id, text, ok := decodeDelta(line, w.delta); ok {
			w.delta = text
			w.mu.Lock()
			c := w.pending[id]
			w.mu.Unlock()
			if c != nil && c.onEvent != nil {
				c.onEvent(Event{Name: "delta", Line: line, Delta: text})
			}
			if cap(w.delta) > 64<<10 { // one long delta: not kept for the worker's life
				w.delta = nil
			}
			continue
		}
		line = bytes.Clone(line) // an event's Line, a reply's Result, kept after the next read
		var msg workerLine
		if err := json.Unmarshal(line, &msg); err != nil || msg.ID == nil {
			w.protocolError(fmt.Sprintf("not a protocol line: %.80q", line))
			return
		}
		w.mu.Lock()
		c := w.pending[*msg.ID]
		if c != nil && msg.Event == "" {
			delete(w.pending, *msg.ID)
		}
		w.mu.Unlock()
		if c == nil {
			continue // a late reply to a call that gave up: dropped
		}
		switch {
		case msg.Event != "":
			if c.onEvent != nil { // the caller ignores kinds it does not know
				ev := Event{Name: msg.Event, Text: msg.Text, Line: line}
				if msg.Event == "delta" {
					ev.Delta = []byte(msg.Text)
				}
				c.onEvent(ev)
			}
		case msg.OK != nil && *msg.OK:
			res := msg.Result
			if len(res) == 0 {
				res = json.RawMessage("{}")
			}
			c.done <- reply{result: res}
		case msg.OK != nil:
			f := FailReply
			if msg.Failure != "" {
				f = msg.Failure
			}
			c.done <- reply{err: &Error{Failure: f, Message: msg.Error, RetryAfter: msg.RetryAfter}}
		default:
			c.done <- reply{err: &Error{Failure: FailProtocol, Message: "reply without ok"}}
		}
	}
}

func (w *Worker) protocolError(msg string) {
	w.fail(&Error{Failure: FailProtocol, Message: msg})
	w.requestClose(ReasonProtocolError)
	// keep draining so the child never blocks on a full pipe before it dies
	io.Copy(io.Discard, w.stdout)
}

var errLineTooLong = errors.New("line too long")

// readLine reads one '\n'-terminated line of at most max bytes (without
// the newline; a trailing '\r' is dropped too). A line that fits r's
// buffer is r's, not a copy: valid until the next read. A longer line is reported
// as errLineTooLong as soon as it passes max, without waiting for its
// newline (a worker writing an endless line is a protocol error at once,
// not a timeout later); the rest of it is not read, so the caller gives up
// on the stream.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var buf []byte
	for {
		frag, err := r.ReadSlice('\n')
		if err == nil && buf == nil && len(frag)-1 <= max { // the whole line at once: no copy (a line each delta; issue 43)
			return bytes.TrimRight(frag, "\r\n"), nil
		}
		buf = append(buf, frag...)
		content := len(buf)
		if err == nil {
			content-- // the newline
		}
		if content > max {
			return nil, errLineTooLong
		}
		switch {
		case err == nil:
			return bytes.TrimRight(buf, "\r\n"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case len(buf) > 0 && errors.Is(err, io.EOF):
			return bytes.TrimRight(buf, "\r"), nil
		default:
			return nil, err
		}
	}
}

func (w *Worker) readStderr() {
	defer w.drains.Done()
	r := bufio.NewReaderSize(w.stderr, 4<<10)
	for {
		line, err := r.ReadSlice('\n')
		if len(line) > 0 {
			w.addTail(string(bytes.TrimRight(line, "\r\n")))
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

func (w *Worker) addTail(line string) {
	if len(line) > StderrTailSize {
		line = line[len(line)-StderrTailSize:]
	}
	w.tailMu.Lock()
	defer w.tailMu.Unlock()
	w.tail = append(w.tail, line)
	w.tailSz += len(line)
	for len(w.tail) > StderrTailLine || w.tailSz > StderrTailSize {
		w.tailSz -= len(w.tail[0])
		w.tail = w.tail[1:]
	}
}

// StderrTail returns a copy of the last lines the worker wrote on stderr
// (at most StderrTailLine lines and StderrTailSize bytes).
func (w *Worker) StderrTail() []string {
	w.tailMu.Lock()
	defer w.tailMu.Unlock()
	return append([]string(nil), w.tail...)
}

// String is "chat worker <pid>".
func (w *Worker) String() string {
	return strings.Join([]string{string(w.Kind()), "worker", fmt.Sprint(w.PID())}, " ")
}
