package testkit

import (
	"context"
	"testing"
	"time"
)

// Backoff of Poll: the first retry after minPoll, each next one twice as
// late, at most maxPoll.
const (
	minPoll = time.Millisecond
	maxPoll = 20 * time.Millisecond
)

// Poll calls cond until it returns true, waiting 1 ms after the first call,
// then twice as long each time up to 20 ms. It returns nil once cond held,
// or ctx.Err() (context.DeadlineExceeded for a timeout) once ctx is done.
func Poll(ctx context.Context, cond func() bool) error {
	return PollErr(ctx, func() (bool, error) { return cond(), nil })
}

// PollErr is Poll for a condition that can fail: its first error ends the
// poll and is returned as is.
func PollErr(ctx context.Context, cond func() (bool, error)) error {
	d := minPoll
	var t *time.Timer
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if t == nil {
			t = time.NewTimer(d)
			defer t.Stop()
		} else {
			t.Reset(d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		d = min(2*d, maxPoll)
	}
}

// Until polls cond for at most d and reports whether it held.
func Until(d time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return Poll(ctx, cond) == nil
}

// WaitFor polls cond for at most d, and fails the test with "what: not
// within d" if it never held. It does not use tb.Context, so that a
// cleanup can call it.
func WaitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	if !Until(d, cond) {
		tb.Fatalf("%s: not within %v", what, d)
	}
}

// Recv receives from ch within d, or fails the test with "what: not
// within d".
func Recv[T any](tb testing.TB, d time.Duration, what string, ch <-chan T) T {
	tb.Helper()
	t := time.NewTimer(d)
	defer t.Stop()
	var v T
	select {
	case v = <-ch:
	case <-t.C:
		tb.Fatalf("%s: not within %v", what, d)
	}
	return v
}
