package handlers_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/dashgate/dashgate/handlers"
)

// FuzzDecodeRequest: any frame decodes (DecodeFrame) to one call, or to a
// batch of 1 to MaxBatch, never a panic; each call is a -32700/-32600/
// -32602 error, a request with a method and a valid id, or a notification
// (a method, no id, no params). A frame that is not a batch decodes as
// DecodeRequest decodes it.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"session.create","params":{}}`,
		`{"jsonrpc":"2.0","id":"a","method":"slash.exec","params":{"session_id":"x","command":"/echo"}}`,
		`{"jsonrpc":"2.0","id":null,"method":"x"}`, `[]`, `{`, `null`, `"str"`,
		`{"jsonrpc":"2.0","id":1e400,"method":"x"}`, `{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}`,
		`{"jsonrpc":"2.0","method":"update","params":[1,2,3,4,5]}`, `[1,2,3]`, ` [{"jsonrpc":"2.0","id":"1","method":"x"},{"foo":"boo"},null]`,
		`[{"jsonrpc":"2.0","method":"sum","params":[1,2,4],"id":"1"},{"jsonrpc":"2.0","method"]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		calls, batch := handlers.DecodeFrame(frame)
		switch {
		case !batch && len(calls) != 1:
			t.Fatalf("%d calls of a frame that is not a batch", len(calls))
		case batch && (len(calls) < 1 || len(calls) > handlers.MaxBatch):
			t.Fatalf("batch of %d calls", len(calls))
		}
		if t1 := bytes.TrimLeft(frame, " \t\r\n"); !batch && len(t1) > 0 && t1[0] != '[' {
			req, rerr := handlers.DecodeRequest(frame)
			if !reflect.DeepEqual(calls[0], handlers.Call{Req: req, Err: rerr}) {
				t.Fatalf("DecodeFrame %+v, DecodeRequest %+v %v", calls[0], req, rerr)
			}
		}
		for _, c := range calls {
			req, rerr := c.Req, c.Err
			if rerr != nil {
				switch rerr.Code {
				case handlers.CodeInvalidRequest, handlers.CodeInvalidParams:
				case handlers.CodeParse:
					if batch {
						t.Fatalf("parse error in a batch")
					}
				default:
					t.Fatalf("unexpected code %d", rerr.Code)
				}
				if req.ID != nil && !json.Valid(req.ID) {
					t.Fatalf("invalid id %q kept", req.ID)
				}
				continue
			}
			if req.Method == "" {
				t.Fatalf("decoded request without method: %+v", req)
			}
			if req.Notification != (req.ID == nil) || (req.ID != nil && !json.Valid(req.ID)) {
				t.Fatalf("decoded request with neither a valid id nor no id: %+v", req)
			}
			if req.Params != nil && (req.Notification || !json.Valid(req.Params)) {
				t.Fatalf("params kept: %+v", req)
			}
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
