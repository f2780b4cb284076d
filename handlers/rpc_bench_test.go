package handlers

import (
	"encoding/json"
	"testing"

	"github.com/dashgate/dashgate/sessions"
)

// The chat socket's per-frame work: decode a request, encode its reply,
// encode the events a turn streams.

var benchFrame = []byte(`{"jsonrpc":"2.0","id":42,"method":"slash.exec","params":{"session_id":"0123456789abcdef01234567","command":"/echo hello"}}`)

func BenchmarkDecodeRequest(b *testing.B) {
	b.SetBytes(int64(len(benchFrame)))
	for b.Loop() {
		if _, err := DecodeRequest(benchFrame); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeSlashExec is the whole decode of a slash.exec: the frame,
// then its params.
func BenchmarkDecodeSlashExec(b *testing.B) {
	for b.Loop() {
		req, rerr := DecodeRequest(benchFrame)
		if rerr != nil {
			b.Fatal(rerr)
		}
		var p struct {
			SessionID string `json:"session_id"`
			Command   string `json:"command"`
		}
		if e := decodeParams(req.Params, &p); e != nil {
			b.Fatal(e)
		}
	}
}

func BenchmarkEncodeReply(b *testing.B) {
	id := json.RawMessage("42")
	b.Run("slash", func(b *testing.B) {
		for b.Loop() {
			encodeReply(id, map[string]any{"output": "hello"}, nil)
		}
	})
	b.Run("error", func(b *testing.B) {
		e := &RPCError{Code: CodeNotFound, Message: "session not found or already closed"}
		for b.Loop() {
			encodeReply(id, nil, e)
		}
	})
}

func BenchmarkEncodeEvent(b *testing.B) {
	ev := sessions.Event{Type: "message.delta", SessionID: "0123456789abcdef01234567", Seq: 17,
		Payload: map[string]any{"turn_id": "0123456789abcdef01234567", "text": " word"}}
	for b.Loop() {
		EncodeEvent(ev)
	}
}
