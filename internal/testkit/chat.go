package testkit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/coder/websocket"
)

// RPCError is a JSON-RPC error reply (PROTOCOL.md §2).
type RPCError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *RPCError) Error() string {
	if len(e.Data) > 0 {
		return fmt.Sprintf("rpc error %d: %s %s", e.Code, e.Message, e.Data)
	}
	return fmt.Sprintf("rpc error %d: %s", e.Code, e.Message)
}

// Event is the params of an "event" notification: "type", "session_id" and
// the event's fields, as decoded by encoding/json.
type Event map[string]any

// Type is the event's type ("gateway.ready", "session.created", ...).
func (e Event) Type() string { s, _ := e["type"].(string); return s }

// SessionID is the event's session, "" for none.
func (e Event) SessionID() string { s, _ := e["session_id"].(string); return s }

// Payload is the event's payload object (nil when it has none).
func (e Event) Payload() map[string]any { p, _ := e["payload"].(map[string]any); return p }

type rpcReply struct {
	result json.RawMessage
	err    error
}

// Chat is a /ws/chat client speaking JSON-RPC 2.0 (PROTOCOL.md §2). Its
// reader hands each reply to its Call and keeps every event, in order, for
// Events and WaitEvent; other frames go to Next. Close or Drop ends it.
type Chat struct {
	*Conn

	cmu     sync.Mutex
	nextID  int64
	pending map[int64]chan rpcReply
	events  []Event
	evWake  chan struct{} // closed and replaced at each event
}

// DialChat opens /ws/chat at url and waits for gateway.ready. On a refused
// upgrade it returns the server's response with the error.
func DialChat(ctx context.Context, url string, o DialOptions) (*Chat, *http.Response, error) {
	conn, res, err := dial(ctx, url, o)
	if err != nil {
		return nil, res, err
	}
	c := &Chat{Conn: conn, pending: map[int64]chan rpcReply{}, evWake: make(chan struct{})}
	conn.handle, conn.onEnd = c.handleFrame, c.ended
	conn.start()
	if _, err := c.WaitEvent(ctx, "gateway.ready", ""); err != nil {
		c.Close()
		return nil, res, err
	}
	return c, res, nil
}

// ended fails the pending calls and wakes WaitEvent once the socket ended.
func (c *Chat) ended() {
	c.cmu.Lock()
	p := c.pending
	c.pending = map[int64]chan rpcReply{}
	close(c.evWake)
	c.evWake = make(chan struct{})
	c.cmu.Unlock()
	for _, ch := range p {
		ch <- rpcReply{err: fmt.Errorf("chat socket closed: %w", c.Err())}
	}
}

func (c *Chat) handleFrame(f Frame) {
	var msg struct {
		ID     *int64          `json:"id"`
		Method string          `json:"method"`
		Result json.RawMessage `json:"result"`
		Error  *RPCError       `json:"error"`
		Params Event           `json:"params"`
	}
	if f.Type == websocket.MessageText && json.Unmarshal(f.Data, &msg) == nil {
		switch {
		case msg.Method == "event" && msg.Params != nil:
			c.cmu.Lock()
			c.events = append(c.events, msg.Params)
			close(c.evWake)
			c.evWake = make(chan struct{})
			c.cmu.Unlock()
			return
		case msg.ID != nil:
			c.cmu.Lock()
			ch := c.pending[*msg.ID]
			delete(c.pending, *msg.ID)
			c.cmu.Unlock()
			if ch != nil {
				if msg.Error != nil {
					ch <- rpcReply{err: msg.Error}
				} else {
					ch <- rpcReply{result: msg.Result}
				}
				return
			}
		}
	}
	c.mu.Lock()
	c.queue = append(c.queue, f)
	c.mu.Unlock()
	c.wake()
}

// Call sends one request and waits for its reply; the result is decoded
// into out (nil: discarded). An error reply is returned as a *RPCError
// (errors.As); a socket that ends first, or ctx, fails the call.
func (c *Chat) Call(ctx context.Context, method string, params, out any) error {
	c.cmu.Lock()
	if err := c.Err(); err != nil {
		c.cmu.Unlock()
		return fmt.Errorf("%s: chat socket closed: %w", method, err)
	}
	c.nextID++
	id := c.nextID
	ch := make(chan rpcReply, 1)
	c.pending[id] = ch
	c.cmu.Unlock()
	req := map[string]any{"jsonrpc": "2.0", "id": id, "method": method}
	if params != nil {
		req["params"] = params
	}
	b, err := json.Marshal(req)
	if err == nil {
		err = c.Write(ctx, websocket.MessageText, b)
	}
	if err != nil {
		c.cmu.Lock()
		delete(c.pending, id)
		c.cmu.Unlock()
		return fmt.Errorf("%s: send: %w", method, err)
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return fmt.Errorf("%s: %w", method, r.err)
		}
		if out != nil {
			if err := json.Unmarshal(r.result, out); err != nil {
				return fmt.Errorf("%s: decode result %s: %w", method, r.result, err)
			}
		}
		return nil
	case <-ctx.Done():
		c.cmu.Lock()
		delete(c.pending, id)
		c.cmu.Unlock()
		return fmt.Errorf("%s: no reply: %w", method, ctx.Err())
	}
}

// Events returns every event received so far, in order.
func (c *Chat) Events() []Event {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	return append([]Event(nil), c.events...)
}

// WaitEvent returns the first event, received so far or later, of type typ
// and, unless sid is "", of session sid. It fails when the socket ends or
// ctx ends first.
func (c *Chat) WaitEvent(ctx context.Context, typ, sid string) (Event, error) {
	return c.WaitEventWhere(ctx, typ, sid, nil)
}

// WaitEventWhere is WaitEvent for the first such event whose payload
// where accepts (nil: any); e.g. the message.complete of one turn_id.
func (c *Chat) WaitEventWhere(ctx context.Context, typ, sid string, where func(payload map[string]any) bool) (Event, error) {
	seen := 0
	for {
		c.cmu.Lock()
		evs, wake := c.events[seen:], c.evWake
		seen = len(c.events)
		c.cmu.Unlock()
		for _, ev := range evs {
			if ev.Type() == typ && (sid == "" || ev.SessionID() == sid) && (where == nil || where(ev.Payload())) {
				return ev, nil
			}
		}
		if err := c.Err(); err != nil {
			return nil, fmt.Errorf("no %s event: chat socket closed: %w", typ, err)
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, fmt.Errorf("no %s event: %w", typ, ctx.Err())
		}
	}
}

// CreateSession calls session.create with title and returns the new
// session's id.
func (c *Chat) CreateSession(ctx context.Context, title string) (string, error) {
	var r struct {
		SessionID string `json:"session_id"`
	}
	if err := c.Call(ctx, "session.create", map[string]any{"title": title}, &r); err != nil {
		return "", err
	}
	if r.SessionID == "" {
		return "", errors.New("session.create: no session_id")
	}
	return r.SessionID, nil
}

// Slash runs a slash command (slash.exec) in session sid and returns its
// output.
func (c *Chat) Slash(ctx context.Context, sid, command string) (string, error) {
	var r struct {
		Output *string `json:"output"`
	}
	if err := c.Call(ctx, "slash.exec", map[string]any{"session_id": sid, "command": command}, &r); err != nil {
		return "", err
	}
	if r.Output == nil {
		return "", errors.New("slash.exec: no output")
	}
	return *r.Output, nil
}
