package workers

import (
	"encoding/json"
	"testing"
)

// TestDecodeDelta: the delta lines workers write are decoded without
// json.Unmarshal, to what it gives; every other line is left to it.
func TestDecodeDelta(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		line string
		take bool // decodeDelta decodes it (else json.Unmarshal does)
	}{
		{name: "go jsonl, keys sorted", line: `{"event":"delta","id":7,"text":" word"}`, take: true},
		{name: "id first", line: `{"id":7,"event":"delta","text":"a"}`, take: true},
		{name: "python json.dumps spacing", line: `{"id": 12, "event": "delta", "text": "x"}`, take: true},
		{name: "white space everywhere", line: " \t{ \"text\" :\"x\" , \"event\" : \"delta\" ,\"id\" : 3 } \r", take: true},
		{name: "short escapes", line: `{"id":1,"event":"delta","text":"a\"b\\c\/d\b\f\n\r\t"}`, take: true},
		{name: "html escapes", line: `{"id":1,"event":"delta","text":"\u003cb\u003e \u0026"}`, take: true},
		{name: "ensure_ascii", line: `{"id":1,"event":"delta","text":"h\u00e9llo \u201cq\u201d \ud83d\ude42"}`, take: true},
		{name: "upper hex", line: `{"id":1,"event":"delta","text":"\u00E9\uD83D\uDE42"}`, take: true},
		{name: "lone high surrogate", line: `{"id":1,"event":"delta","text":"a\ud83db"}`, take: true},
		{name: "lone low surrogate", line: `{"id":1,"event":"delta","text":"\ude42"}`, take: true},
		{name: "high then not low", line: `{"id":1,"event":"delta","text":"\ud83d\u0041"}`, take: true},
		{name: "high at the end", line: `{"id":1,"event":"delta","text":"\ud83d"}`, take: true},
		{name: "raw UTF-8", line: `{"id":1,"event":"delta","text":"héllo 🙂 ` + "\u2028" + `"}`, take: true},
		{name: "invalid UTF-8", line: "{\"id\":1,\"event\":\"delta\",\"text\":\"a\xffb\xc3\"}", take: true},
		{name: "encoded surrogate", line: "{\"id\":1,\"event\":\"delta\",\"text\":\"\xed\xa0\x80\"}", take: true},
		{name: "DEL", line: "{\"id\":1,\"event\":\"delta\",\"text\":\"\x7f\"}", take: true},
		{name: "empty text", line: `{"id":1,"event":"delta","text":""}`, take: true},
		{name: "negative id", line: `{"id":-3,"event":"delta","text":"a"}`, take: true},
		{name: "id zero", line: `{"id":0,"event":"delta","text":"a"}`, take: true},
		{name: "id of 18 digits", line: `{"id":999999999999999999,"event":"delta","text":"a"}`, take: true},
		{name: "id of 19 digits", line: `{"id":9223372036854775807,"event":"delta","text":"a"}`},
		{name: "id overflows", line: `{"id":99999999999999999999,"event":"delta","text":"a"}`},
		{name: "id leading zero", line: `{"id":01,"event":"delta","text":"a"}`},
		{name: "id fraction", line: `{"id":1.0,"event":"delta","text":"a"}`},
		{name: "id exponent", line: `{"id":1e2,"event":"delta","text":"a"}`},
		{name: "id string", line: `{"id":"1","event":"delta","text":"a"}`},
		{name: "id null", line: `{"id":null,"event":"delta","text":"a"}`},
		{name: "no id", line: `{"event":"delta","text":"a"}`},
		{name: "no text", line: `{"id":1,"event":"delta"}`},
		{name: "text null", line: `{"id":1,"event":"delta","text":null}`},
		{name: "another event", line: `{"id":1,"event":"thought","text":"a"}`},
		{name: "event escaped", line: `{"id":1,"event":"d\u0065lta","text":"a"}`},
		{name: "key in other case", line: `{"ID":1,"event":"delta","text":"a"}`},
		{name: "key escaped", line: `{"\u0069d":1,"event":"delta","text":"a"}`},
		{name: "another key", line: `{"id":1,"event":"delta","text":"a","x":1}`},
		{name: "duplicate text", line: `{"id":1,"event":"delta","text":"a","text":"b"}`},
		{name: "a reply", line: `{"id":1,"ok":true,"result":{}}`},
		{name: "control character", line: "{\"id\":1,\"event\":\"delta\",\"text\":\"a\x01\"}"},
		{name: "bad escape", line: `{"id":1,"event":"delta","text":"\x"}`},
		{name: "short \\u", line: `{"id":1,"event":"delta","text":"\u12"}`},
		{name: "bad hex", line: `{"id":1,"event":"delta","text":"\u12g4"}`},
		{name: "unterminated", line: `{"id":1,"event":"delta","text":"a`},
		{name: "trailing comma", line: `{"id":1,"event":"delta","text":"a",}`},
		{name: "trailing garbage", line: `{"id":1,"event":"delta","text":"a"}x`},
		{name: "two objects", line: `{"id":1,"event":"delta","text":"a"}{}`},
		{name: "array", line: `[{"id":1,"event":"delta","text":"a"}]`},
		{name: "empty object", line: `{}`},
		{name: "not JSON", line: `delta`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id, text, ok := decodeDelta([]byte(tt.line), []byte("left over"))
			if ok != tt.take {
				t.Fatalf("decodeDelta took it: %v, want %v", ok, tt.take)
			}
			if ok {
				sameAsUnmarshal(t, []byte(tt.line), id, text)
			}
		})
	}
}

// sameAsUnmarshal fails unless json.Unmarshal decodes line to a delta of
// id and text, and nothing else.
func sameAsUnmarshal(t *testing.T, line []byte, id int64, text []byte) {
	t.Helper()
	var msg workerLine
	if err := json.Unmarshal(line, &msg); err != nil {
		t.Fatalf("decodeDelta took %q, which json.Unmarshal refuses: %v", line, err)
	}
	want := workerLine{ID: &id, Event: "delta", Text: string(text)}
	if msg.ID == nil || *msg.ID != id || msg.Event != "delta" || msg.Text != string(text) ||
		msg.OK != nil || msg.Result != nil || msg.Error != "" || msg.Failure != "" || msg.RetryAfter != 0 {
		t.Fatalf("decodeDelta(%q) = %d %q; json.Unmarshal: %+v (want %+v)", line, id, text, msg, want)
	}
}

// TestDecodeDeltaAllocs: a delta line is decoded without an allocation
// once its text buffer has grown.
func TestDecodeDeltaAllocs(t *testing.T) {
	line := []byte(`{"event":"delta","id":7,"text":"h\u00e9llo\n\"\ud83d\ude42\" \u003cb\u003e"}`)
	buf := make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() {
		if _, _, ok := decodeDelta(line, buf); !ok {
			t.Fatal("not decoded")
		}
	}); n != 0 {
		t.Fatalf("decodeDelta: %v allocations, want 0", n)
	}
}

// FuzzDecodeDelta: whatever decodeDelta takes, json.Unmarshal decodes
// to the same delta.
func FuzzDecodeDelta(f *testing.F) {
	for _, s := range []string{
		`{"event":"delta","id":7,"text":" word"}`, `{"id": 1, "event": "delta", "text": "\ud83d\ude42\u00e9"}`,
		`{"id":1,"event":"delta","text":"\ud83d\u0041\n\t\\\""}`, "{\"id\":1,\"event\":\"delta\",\"text\":\"\xff\xed\xa0\x80\"}",
		`{"id":-0,"event":"delta","text":""}`, `{"id":1,"ok":true}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		if id, text, ok := decodeDelta(line, nil); ok {
			sameAsUnmarshal(t, line, id, text)
		}
	})
}
