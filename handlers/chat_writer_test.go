package handlers

import (
	"fmt"
	"strings"
	"testing"

	"github.com/dashgate/dashgate/sessions"
)

func delta(sid, turn, text string, seq uint64) *sessions.Event {
	return sessions.NewDeltaEvent(sid, seq, turn, text)
}

// describe is frames as "type sid seq text" lines, a reply as its bytes.
func describe(frames []any) string {
	var b strings.Builder
	for _, f := range frames {
		if ev, ok := f.(*sessions.Event); ok {
			text := ""
			if p, ok := ev.Payload.(*sessions.Delta); ok {
				text = p.Text
			}
			fmt.Fprintf(&b, "%s %s %d %s\n", ev.Type, ev.SessionID, ev.Seq, text)
		} else {
			fmt.Fprintf(&b, "reply %s\n", f)
		}
	}
	return b.String()
}

// TestWriterMergesDeltasAndPutsControlFirst: frames taken by a socket
// that is behind go out with the answers, approval.* and session.closed
// first, and the deltas of one message merged into one event (texts in
// order, the last seq), a session's other events keeping their place:
// another session's deltas between them do not end the run, an event of
// its own session or a new turn does.
func TestWriterMergesDeltasAndPutsControlFirst(t *testing.T) {
	frames := []any{
		delta("a", "t1", "Hel", 1),
		delta("b", "u1", "One", 1),
		delta("a", "t1", "lo ", 2),
		[]byte(`{"id":1}`),
		delta("a", "t1", "world", 3),
		delta("b", "u1", " two", 2),
		sessions.NewEvent("tool.start", "a", 4, map[string]any{"tool_id": "x"}),
		delta("a", "t1", "!", 5),
		sessions.NewEvent("approval.request", "b", 3, map[string]any{"id": "p"}),
		delta("b", "u2", "new turn", 4),
		sessions.NewEvent("session.closed", "c", 9, map[string]any{"end_reason": "admin_reap"}),
		delta("a", "t1", "?", 6),
	}
	got := describe(mergeDeltas(controlFirst(frames)))
	want := `reply {"id":1}
approval.request b 3 
session.closed c 9 
message.delta a 3 Hello world
message.delta b 2 One two
tool.start a 4 
message.delta a 6 !?
message.delta b 4 new turn
`
	if got != want {
		t.Fatalf("frames written:\n%s\nwant:\n%s", got, want)
	}
	// Nothing to merge or reorder: the frames as they were, the lone
	// deltas the very events queued (their encoding is shared).
	one := []any{delta("a", "t1", "x", 1), sessions.NewEvent("tool.start", "a", 2, nil), delta("a", "t1", "y", 3)}
	out := mergeDeltas(controlFirst(append([]any(nil), one...)))
	for i := range one {
		if out[i] != one[i] {
			t.Fatalf("frame %d was replaced: %s", i, describe(out))
		}
	}
}
