package workers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
)

// closedWith waits for the worker's Close to finish (whoever ran it) and
// returns its result.
func closedWith(t *testing.T, w *Worker) CloseResult {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, "worker closed", func() bool {
		select {
		case <-w.Closed():
			return true
		default:
			return false
		}
	})
	return w.Close(ReasonShutdown) // returns the first close's result
}

// A worker that breaks the protocol fails the call with a typed error, is
// closed with the matching reason, and cannot make the gateway's heap grow
// (a 10 MiB line is read at most MaxLine at a time).
func TestWorkerProtocolViolations(t *testing.T) {
	// Not parallel: it measures the process's allocations, so nothing
	// else may run meanwhile (top-level parallel tests run after this).
	tests := []struct {
		name    string
		method  string
		failure Failure
		reason  Reason
	}{
		{name: "10 MiB line", method: "bigline", failure: FailProtocol, reason: ReasonProtocolError},
		// Issue 16 item 8: no newline ever; a protocol error, not a timeout.
		{name: "endless line", method: "endless", failure: FailProtocol, reason: ReasonProtocolError},
		{name: "garbage", method: "garbage", failure: FailProtocol, reason: ReasonProtocolError},
		{name: "stdout closed, process alive", method: "closeout", failure: FailCrashed, reason: ReasonExited},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, lb := newTestManager(t, Config{})
			w := startWorker(t, m, helperSpec(t, "proto"))
			pid := ping(t, w)

			var before runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)

			_, err := callW(t, w, tt.method, nil)
			workerErr(t, err, tt.failure)
			res := closedWith(t, w)

			var after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&after)

			if res.Reason != tt.reason {
				t.Errorf("closed with reason %q, want %q", res.Reason, tt.reason)
			}
			if !testkit.Reaped(pid) {
				t.Errorf("pid %d not reaped", pid)
			}
			if rec := oneCloseRecord(t, lb); rec["reason"] != string(tt.reason) {
				t.Errorf("record reason %v, want %s", rec["reason"], tt.reason)
			}
			if _, err := callW(t, w, "ping", nil); err == nil {
				t.Errorf("a later Call succeeded on the closed worker")
			}
			// Bounded memory: the heap in use after GC, and what the call
			// allocated at all (an unbounded reader of the 10 MiB line would
			// allocate at least 10 MiB; the bounded one about MaxLine).
			if after.HeapInuse > 64<<20 {
				t.Errorf("HeapInuse %d MiB after GC, want < 64 MiB", after.HeapInuse>>20)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
				t.Errorf("the call allocated %d MiB, want < 8 MiB (MaxLine is %d KiB)", alloc>>20, MaxLine>>10)
			}
		})
	}
}

// A request that gets no reply in time fails with FailTimeout and recycles
// the worker (reason timeout); a new worker answers the next call.
func TestCallTimeoutRecyclesWorker(t *testing.T) {
	t.Parallel()
	m, lb := newTestManager(t, Config{})
	w := startWorker(t, m, helperSpec(t, "proto"))
	pid := ping(t, w)

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := w.Call(ctx, "hang", nil, nil)
	workerErr(t, err, FailTimeout)

	// Call returns after the recycle: the worker is closed already.
	select {
	case <-w.Closed():
	default:
		t.Fatalf("worker not closed when the timed-out Call returned")
	}
	if res := w.Close(ReasonShutdown); res.Reason != ReasonTimeout {
		t.Errorf("closed with reason %q, want timeout", res.Reason)
	}
	if !testkit.Reaped(pid) {
		t.Errorf("pid %d not reaped", pid)
	}
	if rec := oneCloseRecord(t, lb); rec["reason"] != "timeout" {
		t.Errorf("record reason %v, want timeout", rec["reason"])
	}
	if _, err := callW(t, w, "ping", nil); err == nil {
		t.Errorf("the recycled worker still takes calls")
	} else {
		workerErr(t, err, FailCrashed)
	}

	w2 := startWorker(t, m, helperSpec(t, "proto"))
	if got := ping(t, w2); got == pid || got != w2.PID() {
		t.Errorf("next worker answered as pid %d (old %d, new %d)", got, pid, w2.PID())
	}
}

// A reply with an id no call is waiting for is dropped: it is not delivered
// to the later call that gets that id.
func TestUnknownReplyIDDropped(t *testing.T) {
	t.Parallel()
	m, _ := newTestManager(t, Config{})
	w := startWorker(t, m, helperSpec(t, "proto"))
	// stray writes replies to id+1 (the next call's id) and to an id never
	// used, then its own reply.
	raw, err := callW(t, w, "stray", nil)
	if err != nil {
		t.Fatalf("stray: %v", err)
	}
	if strings.Contains(string(raw), "stray") {
		t.Fatalf("stray call got a stray reply %s", raw)
	}
	for i := range 3 {
		raw, err := callW(t, w, "ping", nil)
		if err != nil {
			t.Fatalf("ping %d: %v", i, err)
		}
		var res struct {
			PID   int
			Stray bool
		}
		json.Unmarshal(raw, &res)
		if res.Stray || res.PID != w.PID() {
			t.Fatalf("ping %d got %s: a dropped reply was delivered", i, raw)
		}
	}
	if w.Closing() {
		t.Errorf("an unknown id closed the worker")
	}
}

// StderrTail keeps the last StderrTailLine lines and at most StderrTailSize
// bytes, and a failed call carries it.
func TestStderrTail(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		lineSize  int
		wantLines int // exact number of lines kept
		fail      string
		failure   Failure
	}{
		// 200 short lines: the line bound wins.
		{name: "short lines then crash", lineSize: 20, wantLines: StderrTailLine, fail: "crash", failure: FailCrashed},
		// 200 lines of 1000 bytes: the size bound wins (16 lines of 1001).
		{name: "long lines then crash", lineSize: 1000, wantLines: StderrTailSize / 1000, fail: "crash", failure: FailCrashed},
		// A bad reply (ok:false) is a worker failure of error 5004 too,
		// whose data.stderr_tail "holds its last lines" (PROTOCOL.md §2).
		{name: "short lines then ok:false", lineSize: 20, wantLines: StderrTailLine, fail: "fail", failure: FailReply},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, _ := newTestManager(t, Config{})
			w := startWorker(t, m, helperSpec(t, "proto"))
			if _, err := callW(t, w, "noise", map[string]int{"lines": 200, "size": tt.lineSize}); err != nil {
				t.Fatalf("noise: %v", err)
			}
			// stderr is drained apart from stdout: wait until the last line
			// arrived, so the failure below sees a complete tail.
			last := "line 199 "
			testkit.WaitFor(t, 5*time.Second, "last stderr line drained", func() bool {
				tail := w.StderrTail()
				return len(tail) > 0 && strings.HasPrefix(tail[len(tail)-1], last)
			})
			checkTail := func(what string, tail []string) {
				t.Helper()
				size := 0
				for _, l := range tail {
					size += len(l)
				}
				if len(tail) != tt.wantLines || size > StderrTailSize {
					t.Fatalf("%s: %d lines, %d bytes; want %d lines, at most %d bytes", what, len(tail), size, tt.wantLines, StderrTailSize)
				}
				for i, l := range tail {
					want := fmt.Sprintf("line %03d ", 200-len(tail)+i)
					if !strings.HasPrefix(l, want) || len(l) != max(tt.lineSize, len(want)) {
						t.Fatalf("%s: line %d = %.20q (len %d), want %q... (len %d)", what, i, l, len(l), want, tt.lineSize)
					}
				}
			}
			checkTail("StderrTail", w.StderrTail())

			_, err := callW(t, w, tt.fail, map[string]int{"code": 1})
			we := workerErr(t, err, tt.failure)
			checkTail("Error.StderrTail", we.StderrTail)
		})
	}
}

// MaxWorkers caps chat and pty children together; a Close frees a slot.
func TestMaxWorkers(t *testing.T) {
	t.Parallel()
	m, _ := newTestManager(t, Config{MaxWorkers: 2})
	w1 := startWorker(t, m, helperSpec(t, "proto"))
	pty, err := m.Start(Spec{Kind: KindPTY, SessionID: "pty", Path: "/bin/sh", Args: []string{"-c", "exec sleep 300"}})
	if err != nil {
		t.Fatalf("start pty: %v", err)
	}
	t.Cleanup(func() { pty.Close(ReasonShutdown); pty.PTY().Close() })

	for _, kind := range []Kind{KindChat, KindPTY} {
		spec := helperSpec(t, "proto")
		spec.Kind = kind
		p, err := m.Start(spec)
		if !errors.Is(err, ErrCapacity) {
			if p != nil {
				p.Close(ReasonShutdown)
			}
			t.Fatalf("Start %s beyond the cap: err %v, want ErrCapacity", kind, err)
		}
	}
	if _, err := m.StartWorker(helperSpec(t, "proto")); !errors.Is(err, ErrCapacity) {
		t.Fatalf("StartWorker beyond the cap: err %v, want ErrCapacity", err)
	}
	if m.Count() != 2 {
		t.Fatalf("Count = %d, want 2", m.Count())
	}

	w1.Close(ReasonDetach)
	w3 := startWorker(t, m, helperSpec(t, "proto"))
	ping(t, w3)
	if _, err := m.StartWorker(helperSpec(t, "proto")); !errors.Is(err, ErrCapacity) {
		t.Fatalf("StartWorker beyond the cap after refill: err %v, want ErrCapacity", err)
	}
	pty.Close(ReasonDetach)
	w4 := startWorker(t, m, helperSpec(t, "proto"))
	ping(t, w4)
}

// TestWorkerEventsAndOwnFailure: every event of a call reaches the caller
// in order, with its whole line; an ok:false naming its failure and retry
// delay keeps them, and its message is the worker's sentence alone.
func TestWorkerEventsAndOwnFailure(t *testing.T) {
	t.Parallel()
	m, _ := newTestManager(t, Config{})
	w := startWorker(t, m, helperSpec(t, "proto"))
	var got []Event
	_, err := w.Call(t.Context(), "fail-word", nil, func(ev Event) {
		if ev.Name == "delta" { // its Line and Delta are the worker's read buffers; other events' are theirs
			ev.Line, ev.Delta = bytes.Clone(ev.Line), bytes.Clone(ev.Delta)
		}
		got = append(got, ev)
	})
	var we *Error
	if !errors.As(err, &we) || we.Failure != "rate_limited" || we.RetryAfter != 7 || err.Error() != "the model server is rate limiting" {
		t.Fatalf("err = %v (%+v)", err, we)
	}
	if len(got) != 2 || got[0].Name != "delta" || string(got[0].Delta) != "so far" || got[1].Name != "approval" ||
		!strings.Contains(string(got[1].Line), `"request_id":"r1"`) {
		t.Fatalf("events = %+v", got)
	}
}
