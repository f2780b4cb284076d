package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dashgate/dashgate/sessions"
)

// JSON-RPC 2.0 and dashgate error codes (PROTOCOL.md §2).
const (
	CodeParse          = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternal       = -32603
	CodeNotFound       = 4001
	CodeBusy           = 4009
	CodeCapacity       = 4029
	CodeWorkerFailed   = 5004
	CodeStoreFailed    = 5005
)

// Input limits (issue: bad input gets a clear error, nothing is lost).
const (
	MaxTitle   = 200      // characters
	MaxCommand = 4 << 10  // bytes
	MaxPrompt  = 64 << 10 // bytes
	MaxQuery   = 1 << 10  // bytes of a search query
	MaxModel   = 200      // bytes of a model name

	MaxBatch = 100 // requests (and notifications) one batch frame may hold

	MaxHistoryPage = 1000 // entries a session.history page may ask for
	MaxListPage    = 500  // closed sessions a session.list page may ask for
	MaxSearchHits  = 100  // hits a session.search may ask for
)

// checkLimit returns the limit parameter (def when absent), refusing one
// outside 1..max.
func checkLimit(p *int, def, max int) (int, *RPCError) {
	if p == nil {
		return def, nil
	}
	if *p < 1 || *p > max {
		return 0, invalidParams("invalid params: limit must be between 1 and " + strconv.Itoa(max))
	}
	return *p, nil
}

// RPCError is a JSON-RPC error object.
type RPCError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *RPCError) Error() string { return e.Message }

func invalidParams(msg string) *RPCError { return &RPCError{Code: CodeInvalidParams, Message: msg} }

// Request is one decoded JSON-RPC request.
type Request struct {
	ID           json.RawMessage // a JSON number or string; nil for a notification
	Method       string
	Params       json.RawMessage // an object, or nil (always nil for a notification)
	Notification bool            // it has no "id" member: it is not run and gets no answer
}

// Call is one request of a frame as decoded: Req to run (or to drop, a
// notification), or, when Err is not nil, the error that answers it, with
// Req.ID as the id (nil: null).
type Call struct {
	Req Request
	Err *RPCError
}

// DecodeFrame decodes one text frame: a request object, or a batch (an
// array of 1 to MaxBatch request objects, PROTOCOL.md §7). It returns the
// frame's calls in their order and whether they are a batch, whose answers
// go out together as one array. A frame that is not JSON (-32700), an empty
// batch or one of more than MaxBatch elements (-32600) is one call with
// Err, id null, and batch false: its answer is a single object. An element
// of a batch that is not a request answers -32600 in its place.
func DecodeFrame(frame []byte) (calls []Call, batch bool) {
	if !json.Valid(frame) {
		return []Call{{Err: errParse()}}, false
	}
	if t := bytes.TrimLeft(frame, " \t\r\n"); len(t) == 0 || t[0] != '[' {
		req, rerr := decodeObject(frame)
		return []Call{{Req: req, Err: rerr}}, false
	}
	// Decoded element by element, so that a long array costs no more than
	// MaxBatch elements before it is refused.
	dec := json.NewDecoder(bytes.NewReader(frame))
	dec.Token() // the '[': the frame is valid JSON
	for dec.More() {
		if len(calls) == MaxBatch {
			return []Call{{Err: &RPCError{Code: CodeInvalidRequest, Message: "invalid request: a batch holds at most " + strconv.Itoa(MaxBatch) + " requests"}}}, false
		}
		var elem json.RawMessage
		if err := dec.Decode(&elem); err != nil { // cannot happen: the frame is valid JSON
			return []Call{{Err: errParse()}}, false
		}
		req, rerr := decodeObject(elem)
		calls = append(calls, Call{Req: req, Err: rerr})
	}
	if len(calls) == 0 {
		return []Call{{Err: &RPCError{Code: CodeInvalidRequest, Message: "invalid request: a batch holds at least one request"}}}, false
	}
	return calls, true
}

// DecodeRequest decodes one text frame holding a request object (not a
// batch: see DecodeFrame). A request without an "id" member decodes as a
// notification. On failure it returns the id it could read (nil: the
// reply's id is null) and a -32700, -32600 or -32602 error.
func DecodeRequest(frame []byte) (Request, *RPCError) {
	if !json.Valid(frame) {
		return Request{}, errParse()
	}
	return decodeObject(frame)
}

func errParse() *RPCError {
	return &RPCError{Code: CodeParse, Message: "parse error: the frame is not valid JSON"}
}

// decodeObject decodes one request object of valid JSON.
func decodeObject(b []byte) (Request, *RPCError) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return Request{}, &RPCError{Code: CodeInvalidRequest, Message: "invalid request: a request is a JSON-RPC 2.0 object"}
	}
	var req Request
	id, hasID := raw["id"]
	if hasID && validID(id) {
		req.ID = id
	}
	var version, method string
	if json.Unmarshal(raw["jsonrpc"], &version) != nil || version != "2.0" {
		return req, &RPCError{Code: CodeInvalidRequest, Message: `invalid request: "jsonrpc" must be "2.0"`}
	}
	if hasID && req.ID == nil { // null included: a reply's id null means "unreadable"
		return req, &RPCError{Code: CodeInvalidRequest, Message: `invalid request: "id" must be a number or a string`}
	}
	if json.Unmarshal(raw["method"], &method) != nil || method == "" {
		return req, &RPCError{Code: CodeInvalidRequest, Message: `invalid request: "method" must be a non-empty string`}
	}
	req.Method = method
	if !hasID { // not run, so its params are not read
		req.Notification = true
		return req, nil
	}
	if p, ok := raw["params"]; ok && !bytes.Equal(bytes.TrimSpace(p), []byte("null")) {
		if t := bytes.TrimSpace(p); len(t) == 0 || t[0] != '{' {
			return req, invalidParams(`invalid params: "params" must be an object`)
		}
		req.Params = p
	}
	return req, nil
}

func validID(id json.RawMessage) bool {
	t := bytes.TrimSpace(id)
	if len(t) == 0 {
		return false
	}
	switch {
	case t[0] == '"':
		var s string
		return json.Unmarshal(t, &s) == nil
	case t[0] == '-' || (t[0] >= '0' && t[0] <= '9'):
		var n json.Number
		return json.Unmarshal(t, &n) == nil
	}
	return false
}

// decodeParams decodes params into v, rejecting unknown shapes.
func decodeParams(p json.RawMessage, v any) *RPCError {
	if p == nil {
		p = json.RawMessage("{}")
	}
	if err := json.Unmarshal(p, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return invalidParams("invalid params: " + te.Field + " has the wrong type")
		}
		return invalidParams("invalid params: " + err.Error())
	}
	return nil
}

// requireSession checks a session_id parameter.
func requireSession(sid string) *RPCError {
	if sid == "" {
		return invalidParams("invalid params: session_id is required")
	}
	return nil
}

func checkTitle(t string) *RPCError {
	if utf8.RuneCountInString(t) > MaxTitle {
		return invalidParams("invalid params: title is over 200 characters")
	}
	return nil
}

func checkCommand(c string) *RPCError {
	switch {
	case strings.TrimSpace(c) == "":
		return invalidParams("invalid params: command is empty")
	case !strings.HasPrefix(c, "/"):
		return invalidParams(`invalid params: command must start with "/"`)
	case len(c) > MaxCommand:
		return invalidParams("invalid params: command is over 4 KiB")
	}
	return nil
}

func checkPrompt(t string) *RPCError {
	switch {
	case strings.TrimSpace(t) == "":
		return invalidParams("invalid params: text is empty")
	case len(t) > MaxPrompt:
		return invalidParams("invalid params: text is over 64 KiB")
	}
	return nil
}

type rpcReply struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *RPCError       `json:"error,omitempty"`
}

// encodeReply renders a result or an error reply; a nil id becomes null.
func encodeReply(id json.RawMessage, result any, rerr *RPCError) []byte {
	if id == nil {
		id = json.RawMessage("null")
	}
	b, err := json.Marshal(rpcReply{JSONRPC: "2.0", ID: id, Result: result, Error: rerr})
	if err != nil {
		b, _ = json.Marshal(rpcReply{JSONRPC: "2.0", ID: id, Error: &RPCError{Code: CodeInternal, Message: "internal error"}})
	}
	return b
}

type eventParams struct {
	Type      string `json:"type"`
	SessionID string `json:"session_id,omitempty"`
	Seq       uint64 `json:"seq"`
	Payload   any    `json:"payload"`
}

// EncodeEvent renders an event notification: the bytes json.Marshal
// gives {"jsonrpc":"2.0","method":"event","params":eventParams{...}}
// (keys in that order, HTML escaped), nil when the payload does not
// marshal. It is written out by hand, a message.delta's payload
// (*sessions.Delta) and a map of string values too, without reflection:
// json.Marshal of the maps was a fifth of a loaded gateway's CPU, once
// per delta (BENCHMARKS.md, issue 28). TestEncodeEventAsMarshal holds it
// to json.Marshal.
func EncodeEvent(ev sessions.Event) []byte {
	return appendEvent(make([]byte, 0, 256), &ev) // a delta's frame in one allocation
}

// appendEvent appends EncodeEvent(*ev) to b; a message.delta's payload
// (*sessions.Delta) without allocating.
func appendEvent(b []byte, ev *sessions.Event) []byte {
	b = append(b, `{"jsonrpc":"2.0","method":"event","params":{"type":`...)
	b = appendJSONString(b, ev.Type)
	if ev.SessionID != "" {
		b = append(b, `,"session_id":`...)
		b = appendJSONString(b, ev.SessionID)
	}
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, ev.Seq, 10)
	b = append(b, `,"payload":`...)
	ok := false
	if d, isDelta := ev.Payload.(*sessions.Delta); isDelta && d != nil {
		b = append(b, `{"text":`...) // json.Marshal's order of its fields
		b = appendJSONString(b, d.Text)
		b = append(b, `,"turn_id":`...)
		b = appendJSONString(b, d.TurnID)
		b, ok = append(b, '}'), true
	} else {
		b, ok = appendStringMap(b, ev.Payload)
	}
	if !ok {
		p, err := json.Marshal(ev.Payload)
		if err != nil {
			return nil
		}
		b = append(b, p...)
	}
	return append(b, "}}"...)
}

// appendStringMap appends v as json.Marshal does when v is a
// map[string]any of at most 8 string values (its keys sorted), and
// reports whether it was one.
func appendStringMap(b []byte, v any) ([]byte, bool) {
	m, ok := v.(map[string]any)
	if !ok || m == nil || len(m) > 8 {
		return b, false
	}
	var keys [8]string
	n := 0
	for k, v := range m {
		if _, ok := v.(string); !ok {
			return b, false
		}
		keys[n] = k
		n++
	}
	slices.Sort(keys[:n])
	b = append(b, '{')
	for i, k := range keys[:n] {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = appendJSONString(b, m[k].(string))
	}
	return append(b, '}'), true
}

// appendJSONString appends s quoted as json.Marshal quotes it (HTML
// escaping on), without allocating: " and \ and the short escapes of
// encoding/json (\b \f \n \r \t) by a backslash, the other control
// characters and <, > and & as \u00XX, U+2028 and U+2029 as \u2028 and
// \u2029, and each byte of invalid UTF-8 as \ufffd. It went through
// json.Marshal for any of these, an allocation for a delta with a line
// break (issue 43). TestEncodeEventAsMarshal and FuzzAppendJSONString
// hold it to json.Marshal.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
