package handlers

import (
	"strconv"
	"testing"
	"time"
)

// TestRelTimesAsHumanize: the admin page's memo of relative times gives,
// for every time asked, the text humanAgo or humanAge gives, whatever was
// asked before it: fractions of a second either side of a whole one,
// times after now, and the same offset asked of both functions.
func TestRelTimesAsHumanize(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 500_000_000, time.UTC)
	var offsets []time.Duration
	for _, whole := range []time.Duration{0, time.Second, 2 * time.Second, 59 * time.Second, time.Minute, 2 * time.Minute,
		time.Hour, 36 * time.Hour, 8 * 24 * time.Hour, 400 * 24 * time.Hour} {
		for _, frac := range []time.Duration{0, 1, 400 * time.Millisecond, 999_999_999} {
			offsets = append(offsets, whole+frac, -(whole + frac))
			if whole > 0 {
				offsets = append(offsets, whole-1, -(whole - 1))
			}
		}
	}
	rel := newRelTimes(now)
	for _, d := range offsets {
		at := now.Add(-d)
		if got, want := rel.ago(at), humanAgo(now, at); got != want {
			t.Errorf("ago of %v before now: %q, humanAgo says %q", d, got, want)
		}
		if got, want := rel.age(at), humanAge(now, at); got != want {
			t.Errorf("age of %v before now: %q, humanAge says %q", d, got, want)
		}
	}
	if len(rel.memo) >= 2*len(offsets) {
		t.Errorf("%d texts made for %d asked: nothing was reused", len(rel.memo), 2*len(offsets))
	}
}

// TestTextMemoBounded: a text is made once while its value is asked for,
// and values asked once each leave at most two generations behind.
func TestTextMemoBounded(t *testing.T) {
	var m textMemo[int]
	made := 0
	double := func(n int) string { made++; return strconv.Itoa(2 * n) }
	for range 3 {
		if got := m.text(21, double); got != "42" {
			t.Fatalf("text of 21: %q", got)
		}
	}
	if made != 1 {
		t.Fatalf("the text of one value was made %d times", made)
	}
	for n := range 10 * memoEntries {
		m.text(n, double)
	}
	if n := len(m.cur) + len(m.prev); n > 2*memoEntries {
		t.Fatalf("%d texts kept after %d values asked once; at most %d", n, 10*memoEntries, 2*memoEntries)
	}
}

// TestExactTimes: the titles' exact times are RFC 3339 UTC with the
// nanoseconds, from the memo or not: a time of now in another zone, and
// the zero time, which Unix nanoseconds cannot hold.
func TestExactTimes(t *testing.T) {
	var h Admin
	at := time.Date(2026, 12, 7, 14, 5, 6, 789, time.FixedZone("x", 3600))
	for range 2 { // made, then from the memo
		if got, want := h.exact(at), "2026-12-07T13:05:06.000000789Z"; got != want {
			t.Fatalf("exact(%v) = %q, want %q", at, got, want)
		}
	}
	if got, want := h.exact(time.Time{}), "0001-01-01T00:00:00Z"; got != want {
		t.Fatalf("exact of the zero time = %q, want %q", got, want)
	}
}
