package handlers

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/store"
)

// marshalEvent is what EncodeEvent must give: json.Marshal of the
// notification, as it was written before it was hand-rolled.
func marshalEvent(ev sessions.Event) []byte {
	b, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0", "method": "event",
		"params": eventParams{Type: ev.Type, SessionID: ev.SessionID, Seq: ev.Seq, Payload: ev.Payload},
	})
	return b
}

// TestEncodeEventAsMarshal: EncodeEvent's bytes are json.Marshal's for
// every kind of payload and of string (PROTOCOL.md is a contract: the
// wire does not change with the encoder).
func TestEncodeEventAsMarshal(t *testing.T) {
	t.Parallel()
	texts := []string{"", " word", "plain ASCII 0123", `quote " and \ backslash`, "line\nbreak\ttab\r", "\x00\x01\x1f\x7f",
		"<b>&amp;</b>", "héllo wörld ✓ 😀", "\u2028\u2029", "bad \xff utf-8 \xc3", "\ufffd", "é"}
	var evs []sessions.Event
	for _, s := range texts {
		evs = append(evs,
			sessions.Event{Type: "message.delta", SessionID: "0123456789abcdef01234567", Seq: 17, Payload: map[string]any{"turn_id": "t1", "text": s}},
			*sessions.NewDeltaEvent("0123456789abcdef01234567", 17, s, s),
			sessions.Event{Type: s, SessionID: s, Seq: 1, Payload: map[string]any{s: s, "a": "b"}},
		)
	}
	evs = append(evs,
		sessions.Event{Type: "gateway.ready", Payload: map[string]any{"version": "dev"}},
		sessions.Event{Type: "message.complete", SessionID: "s", Seq: 1<<64 - 1, Payload: map[string]any{"turn_id": "t", "text": "x", "interrupted": false, "status": "complete"}},
		sessions.Event{Type: "history.entry", SessionID: "s", Payload: map[string]any{"entry": store.Entry{Seq: 3, Role: store.RoleUser, Text: "<p>"}}},
		sessions.Event{Type: "approval.resolved", SessionID: "s", Seq: 4, Payload: map[string]string{"request_id": "r", "choice": "once", "by": "viewer"}},
		sessions.Event{Type: "nil map", Payload: map[string]any(nil)},
		sessions.Event{Type: "nil", Payload: nil},
		sessions.Event{Type: "message.delta", Payload: (*sessions.Delta)(nil)},
		sessions.Event{Type: "empty", Payload: map[string]any{}},
		sessions.Event{Type: "raw", Payload: json.RawMessage(` { "b" : 1 , "a" : "<" } `)},
		sessions.Event{Type: "nine", Payload: map[string]any{"a": "1", "b": "2", "c": "3", "d": "4", "e": "5", "f": "6", "g": "7", "h": "8", "i": "9"}},
		sessions.Event{Type: "bad", Payload: map[string]any{"f": func() {}}},
	)
	for _, ev := range evs {
		if got, want := EncodeEvent(ev), marshalEvent(ev); !bytes.Equal(got, want) {
			t.Errorf("EncodeEvent(%+v)\n got %s\nwant %s", ev, got, want)
		}
	}
}

// TestEncodeEventDeltaAllocs: a message.delta is encoded without
// reflection, in one allocation (json.Marshal of its maps took 16, and a
// fifth of a loaded gateway's CPU; BENCHMARKS.md, issue 28).
func TestEncodeEventDeltaAllocs(t *testing.T) {
	ev := sessions.Event{Type: "message.delta", SessionID: "0123456789abcdef01234567", Seq: 17,
		Payload: map[string]any{"turn_id": "0123456789abcdef01234567", "text": " word"}}
	if n := testing.AllocsPerRun(100, func() { EncodeEvent(ev) }); n > 1 {
		t.Fatalf("EncodeEvent of a delta: %v allocations, want 1", n)
	}
}

// TestEncodeEventEscapedDeltaAllocs: a delta whose text JSON escapes
// (a line break, a quote, <, U+2028, invalid UTF-8) is encoded in the
// one allocation of its frame too (it went through json.Marshal; issue
// 43).
func TestEncodeEventEscapedDeltaAllocs(t *testing.T) {
	ev := sessions.Event{Type: "message.delta", SessionID: "0123456789abcdef01234567", Seq: 17,
		Payload: map[string]any{"turn_id": "0123456789abcdef01234567", "text": "\n\t\"<b>\" \u2028 \xff"}}
	if n := testing.AllocsPerRun(100, func() { EncodeEvent(ev) }); n > 1 {
		t.Fatalf("EncodeEvent of an escaped delta: %v allocations, want 1", n)
	}
}

// FuzzAppendJSONString: appendJSONString quotes any string as
// json.Marshal does, after what the buffer held.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "a", `"\`, "\x00\x1f\x7f", "<>&", "\u2028\u2029", "\xff\xc3(", "\xed\xa0\x80", "é😀", "\b\f\n\r\t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendJSONString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Fatalf("appendJSONString(%q) = %s, want x%s", s, got, want)
		}
	})
}

// TestDeltaFrameAsMap: a message.delta's frame is byte for byte the one
// its map payload gave ({"turn_id","text"} as json.Marshal orders it),
// and the writer encodes it (appendEvent into its buffer) without an
// allocation.
func TestDeltaFrameAsMap(t *testing.T) {
	sid, turn, text := "0123456789abcdef01234567", "89abcdef0123456701234567", "a \"quoted\"\n<line> \u2028"
	ev := sessions.NewDeltaEvent(sid, 17, turn, text)
	want := EncodeEvent(sessions.Event{Type: "message.delta", SessionID: sid, Seq: 17, Payload: map[string]any{"turn_id": turn, "text": text}})
	if got := EncodeEvent(*ev); !bytes.Equal(got, want) {
		t.Fatalf("delta frame\n got %s\nwant %s", got, want)
	}
	c := &chatConn{}
	if got := c.frameBytes(ev); !bytes.Equal(got, want) {
		t.Fatalf("writer's delta frame\n got %s\nwant %s", got, want)
	}
	evs := make([]*sessions.Event, 101) // AllocsPerRun's warm-up and runs: each a new event, not encoded yet
	for i := range evs {
		evs[i] = sessions.NewDeltaEvent(sid, uint64(i), turn, text)
	}
	i := 0
	if n := testing.AllocsPerRun(100, func() { c.frameBytes(evs[i]); i++ }); n != 0 {
		t.Fatalf("the writer's encoding of a delta: %v allocations, want 0", n)
	}
}
