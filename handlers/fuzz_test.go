package handlers_test

import (
	"encoding/json"
	"testing"

	"github.com/dashgate/dashgate/handlers"
)

// FuzzDecodeRequest: any frame decodes to a request or to a -32700/-32600/
// -32602 error, never a panic; a decoded request has a method and a valid id.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"session.create","params":{}}`,
		`{"jsonrpc":"2.0","id":"a","method":"slash.exec","params":{"session_id":"x","command":"/echo"}}`,
		`{"jsonrpc":"2.0","id":null,"method":"x"}`, `[]`, `{`, `null`, `"str"`,
		`{"jsonrpc":"2.0","id":1e400,"method":"x"}`, `{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		req, rerr := handlers.DecodeRequest(frame)
		if rerr != nil {
			switch rerr.Code {
			case handlers.CodeParse, handlers.CodeInvalidRequest, handlers.CodeInvalidParams:
			default:
				t.Fatalf("unexpected code %d", rerr.Code)
			}
			if req.ID != nil && !json.Valid(req.ID) {
				t.Fatalf("invalid id %q kept", req.ID)
			}
			return
		}
		if req.Method == "" || !json.Valid(req.ID) {
			t.Fatalf("decoded request without method or id: %+v", req)
		}
		if req.Params != nil && !json.Valid(req.Params) {
			t.Fatalf("invalid params kept")
		}
	})
}

// FuzzDecodeControl: a control frame is a valid resize or an error.
func FuzzDecodeControl(f *testing.F) {
	for _, s := range []string{`{"type":"resize","cols":80,"rows":24}`, `{"type":"resize","cols":0,"rows":24}`, `nope`, `{}`, `{"type":"resize","cols":1e9,"rows":-1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		m, err := handlers.DecodeControl(frame)
		if err != nil {
			return
		}
		if m.Type != "resize" || m.Cols < 1 || m.Cols > handlers.MaxCols || m.Rows < 1 || m.Rows > handlers.MaxRows {
			t.Fatalf("accepted %+v", m)
		}
	})
}
