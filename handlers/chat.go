package handlers

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/workers"
)

// ChatRegistry is what the chat gateway needs of the session registry.
//
// A call with a viewer acts for the viewer's principal; one without takes
// the principal as a parameter. Another user's session answers as a
// missing one (sessions.ErrNotFound).
type ChatRegistry interface {
	Create(v sessions.Viewer, o sessions.NewSession) (sessions.Info, error)
	Resume(v sessions.Viewer, sid string) (sessions.ResumeResult, error)
	Close(p sessions.Principal, sid string, reason sessions.EndReason) (bool, error)
	List(p sessions.Principal) []sessions.Info
	Exec(ctx context.Context, v sessions.Viewer, sid, command string) (string, error)
	Prompt(v sessions.Viewer, sid, text string, files ...string) (string, func(), error)
	Interrupt(v sessions.Viewer, sid string) (string, error)
	Leave(v sessions.Viewer, sid string) (bool, error)
	DetachViewer(v sessions.Viewer, reason workers.Reason)
	Reopen(ctx context.Context, v sessions.Viewer, sid string) (sessions.ResumeResult, error)
	Delete(ctx context.Context, p sessions.Principal, sid string) error
	Rename(ctx context.Context, p sessions.Principal, sid, title string) error
	History(ctx context.Context, p sessions.Principal, sid string, beforeSeq uint64, limit int) ([]sessions.Message, bool, error)
	ListClosed(ctx context.Context, p sessions.Principal, before time.Time, limit int) ([]store.Session, bool, error)
	Search(ctx context.Context, p sessions.Principal, query string, limit int) ([]store.Hit, error)
	RespondApproval(ctx context.Context, v sessions.Viewer, sid, requestID, choice string) (bool, error)
	Configure(v sessions.Viewer, sid, model string) error
	Settings(ctx context.Context, p sessions.Principal) (store.Settings, error)
	PutSettings(ctx context.Context, p sessions.Principal, patch store.SettingsPatch) (store.Settings, error)
	CloseTerminal(p sessions.Principal, sid, terminal string) (bool, error)
}

// SessionWatcher is what a chat socket needs to hear of every session's
// changes (event session.changed, docs/PROTOCOL.md §7); a ChatRegistry that
// is one gets every socket as a watcher.
type SessionWatcher interface {
	Watch(v sessions.Viewer) (stop func())
}

// ModelLister lists the models of the model server (model.list): their
// ids and the default. Errors are *workers.Error (5004) naming why.
type ModelLister func(ctx context.Context) (models []string, def string, err error)

// AgentInfo is an agent as agent.list names it: Name is what
// session.create's agent takes (sessions.BuiltinAgent for the built-in
// worker), Kind "builtin" or "acp", Default whether a session.create
// without an agent gets it.
type AgentInfo struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	Default bool   `json:"default"`
}

// SocketConfig bounds a WebSocket's liveness and writes.
type SocketConfig struct {
	PingInterval time.Duration // a ping every interval (0: none)
	PingTimeout  time.Duration // no pong within it ends the socket
	WriteTimeout time.Duration // a frame not written within it ends the socket
}

// Chat serves GET /ws/chat (PROTOCOL.md §2). Origin and auth are checked by
// the web middleware before it runs.
type Chat struct {
	Registry    ChatRegistry
	Log         *slog.Logger
	Version     string
	Socket      SocketConfig
	MaxFrame    int64       // bytes; larger frames close the socket with 1009
	SendQueue   int         // frames queued per socket before it is a slow consumer
	MaxInflight int         // requests one socket may have running
	Models      ModelLister // nil: model.list answers no models
	// Node is this node's id in a cluster ("" alone): gateway.ready says
	// it, so a page that reconnected to another node shows which.
	Node string
	// Agents is what agent.list answers: the agents a session may talk
	// to, the built-in worker first (nil: that one alone).
	Agents []AgentInfo
	// Attach is the attachment limits gateway.ready tells the page, so
	// that it refuses a file over them before uploading it (issue 42).
	Attach          sessions.AttachLimits
	OnConn          func(delta int)
	connSeq         atomic.Uint64
	defaultsApplied sync.Once
}

func (h *Chat) defaults() {
	if h.MaxFrame <= 0 {
		h.MaxFrame = 1 << 20
	}
	if h.SendQueue <= 0 {
		h.SendQueue = 256
	}
	if h.MaxInflight <= 0 {
		h.MaxInflight = 64
	}
	if h.Log == nil {
		h.Log = slog.New(slog.DiscardHandler)
	}
}

// chatConn is one chat socket; it is the Viewer of the sessions it views.
// Which sessions those are, only the registry records.
type chatConn struct {
	h    *Chat
	conn *websocket.Conn
	log  *slog.Logger
	out  chan any // *sessions.Event (the writer encodes it) or []byte (a reply): one word pair a slot
	// batch is writeQueued's array of the frames it takes, kept between
	// writes (the writer's alone).
	batch []any
	// frame is the writer's buffer for the frame of a message.delta
	// (frameBytes), kept between writes.
	frame []byte
	sock  *socket
	wt    writeTimer         // the writer's write timeout
	held  *heldConn          // the connection under conn: the writer sends what is queued together (writeQueued)
	done  chan struct{}      // closed when the socket is gone, before DetachViewer
	page  string             // the page (tab) the socket named (?page=), for sessions.Info.Pages
	who   sessions.Principal // who the socket acts for, read once from its request

	// changes are the session.changed events told to this socket that wait
	// to go out with its next frame (writeQueued takes them, in order), or
	// at the latest changedWait after the first of them (changesTimer
	// then wakes the writer with changesDue). Only the writer takes them.
	chMu         sync.Mutex
	changes      []*sessions.Event
	changesTimer *time.Timer
	changesN     atomic.Int32  // len(changes), read by the writer without chMu
	changedWait  time.Duration // 0: changedWait
}

// changedWait is how long a session.changed waits for its socket's next
// frame before it is written alone. A socket that streams a reply writes
// a frame every few tens of milliseconds: the changes ride with it, one
// wake-up of its writer and one write(2) for both. With 300 streaming
// sockets of one user, each pass of changes (sessions.tellEvery) woke
// the 300 writers at once for a frame each, a third of their wake-ups
// (BENCHMARKS.md, the stall, issue 43). An idle socket's list refreshes
// that much later.
const changedWait = 50 * time.Millisecond

// changesDue is queued by the changes' timer: it wakes the writer, which
// then writes the changes (it is not a frame itself).
type changesDue struct{}

// Principal implements sessions.Viewer.
func (c *chatConn) Principal() sessions.Principal { return c.who }

// Page implements sessions.PageViewer.
func (c *chatConn) Page() string { return c.page }

// frameBytes is the text frame of a queued item of out, valid until the
// next call. A message.delta is encoded into the writer's own buffer, not
// once for every viewer (Event.Encode): its encoding is a few appends,
// cheaper than the allocation it would share (issue 43).
func (c *chatConn) frameBytes(f any) []byte {
	ev, ok := f.(*sessions.Event)
	if !ok {
		return f.([]byte)
	}
	if _, ok := ev.Payload.(*sessions.Delta); ok {
		c.frame = appendEvent(c.frame[:0], ev)
		return c.frame
	}
	return ev.Encode(EncodeEvent)
}

// Done implements sessions.Viewer.
func (c *chatConn) Done() <-chan struct{} { return c.done }

// Deliver queues an event without encoding it (it runs under the
// registry's lock); a full queue disconnects the socket (1008) so it never
// slows the session's other viewers. A session.changed waits for the
// socket's next frame instead (changedWait); as many of them waiting as
// the queue holds disconnect it too.
func (c *chatConn) Deliver(ev *sessions.Event) {
	if ev.Type != "session.changed" {
		c.enqueue(ev)
		return
	}
	c.chMu.Lock()
	defer c.chMu.Unlock()
	if len(c.changes) >= cap(c.out) {
		c.sock.closeWith(sessions.ErrViewerSlow, websocket.StatusPolicyViolation, "slow consumer")
		return
	}
	c.changes = append(c.changes, ev)
	c.changesN.Store(int32(len(c.changes)))
	if len(c.changes) > 1 {
		return // the first one armed the timer
	}
	wait := c.changedWait
	if wait <= 0 {
		wait = changedWait
	}
	if c.changesTimer == nil {
		c.changesTimer = time.AfterFunc(wait, func() { c.enqueue(changesDue{}) })
	} else {
		c.changesTimer.Reset(wait)
	}
}

// takeChanges appends the waiting session.changed events to frames, in
// their order, and disarms their timer. Only the writer calls it.
func (c *chatConn) takeChanges(frames []any) []any {
	if c.changesN.Load() == 0 {
		return frames
	}
	c.chMu.Lock()
	defer c.chMu.Unlock()
	for _, ev := range c.changes {
		frames = append(frames, ev)
	}
	clear(c.changes) // no event kept alive by the reused array
	c.changes = c.changes[:0]
	c.changesN.Store(0)
	c.changesTimer.Stop() // a changesDue it queued already finds none: nothing is written
	return frames
}

// stopChanges drops the waiting changes and disarms their timer: the
// socket ended.
func (c *chatConn) stopChanges() {
	c.chMu.Lock()
	defer c.chMu.Unlock()
	if c.changesTimer != nil {
		c.changesTimer.Stop()
	}
	c.changes = nil
	c.changesN.Store(0)
}

func (c *chatConn) send(b []byte) { c.enqueue(b) }

func (c *chatConn) enqueue(f any) {
	select {
	case c.out <- f:
	default:
		c.sock.closeWith(sessions.ErrViewerSlow, websocket.StatusPolicyViolation, "slow consumer")
	}
}

func (h *Chat) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.defaultsApplied.Do(h.defaults)
	hw := &holdingWriter{ResponseWriter: w}
	conn, err := websocket.Accept(hw, r, &websocket.AcceptOptions{InsecureSkipVerify: true}) // origin checked by web
	if err != nil {
		return
	}
	conn.SetReadLimit(h.MaxFrame)
	sock := newSocket(r.Context(), conn)
	c := &chatConn{
		h: h, conn: conn, sock: sock, wt: writeTimer{s: sock}, held: hw.conn,
		log:  h.Log.With("conn_id", h.connSeq.Add(1), "endpoint", "chat", "remote_addr", r.RemoteAddr),
		out:  make(chan any, h.SendQueue),
		done: make(chan struct{}),
		page: r.URL.Query().Get("page"),
		who:  PrincipalFrom(r.Context()),
	}
	if h.OnConn != nil {
		h.OnConn(1)
		defer h.OnConn(-1)
	}
	c.send(EncodeEvent(sessions.Event{Type: "gateway.ready", Payload: map[string]any{"version": h.Version, "node": h.Node,
		"attachments": attachLimits(h.Attach), "max_prompt_bytes": MaxPrompt, "max_command_bytes": MaxCommand}}))
	unwatch := func() {}
	if w, ok := h.Registry.(SessionWatcher); ok {
		unwatch = w.Watch(c)
	}

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); c.writeLoop() }()
	go func() { defer wg.Done(); pingLoop(sock, h.Socket) }()
	sock.end(c.readLoop(&wg))
	cause := sock.cause()
	reason := sessions.ViewerEndReason(cause)
	close(c.done)
	unwatch()
	c.stopChanges()
	h.Registry.DetachViewer(c, reason)
	wg.Wait()
	c.log.Debug("socket closed", "reason", string(reason), "err", cause)
}

// readLoop reads frames until the socket ends and dispatches each request
// on its own goroutine (spawning and reaping never block the read loop);
// the requests of a batch are dispatched one after another as if each had
// come in its own frame, and a notification is dropped.
func (c *chatConn) readLoop(wg *sync.WaitGroup) error {
	sem := make(chan struct{}, c.h.MaxInflight)
	for {
		typ, frame, err := c.conn.Read(c.sock.connCtx)
		if err != nil {
			return err
		}
		if typ != websocket.MessageText {
			c.sock.closeWith(errBinaryFrame, websocket.StatusUnsupportedData, "binary frames are not accepted")
			continue // Read returns once the close handshake is done
		}
		calls, isBatch := DecodeFrame(frame)
		var b *batch
		if isBatch {
			b = newBatch(c, calls)
		}
		for i, call := range calls {
			req := call.Req
			switch {
			case call.Err != nil:
				c.answer(b, i, encodeReply(req.ID, nil, call.Err), nil)
				continue
			case req.Notification:
				// Every method has an answer its caller needs: one that
				// asks for none is not run (no history, no worker).
				c.log.Debug("notification dropped", "method", req.Method)
				continue
			}
			select {
			case sem <- struct{}{}:
			case <-c.sock.ctx.Done():
				// Nobody reads it; a batch still needs every answer to
				// start the turns of the calls that ran.
				c.answer(b, i, encodeReply(req.ID, nil, &RPCError{Code: CodeInternal, Message: "request cancelled"}), nil)
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				c.dispatch(c.sock.ctx, req, b, i)
			}()
		}
	}
}

// batch gathers the answers of one batch frame: in the order of its
// requests, sent as one array once the last is in. The turns its
// prompt.submit calls started begin after that, so that an answer precedes
// its turn's events in a batch too.
type batch struct {
	c       *chatConn
	mu      sync.Mutex
	answers [][]byte // by request; nil for a notification
	after   []func()
	left    int // answers not in yet
}

func newBatch(c *chatConn, calls []Call) *batch {
	b := &batch{c: c, answers: make([][]byte, len(calls))}
	for _, call := range calls {
		if call.Err != nil || !call.Req.Notification {
			b.left++
		}
	}
	return b
}

// answer takes the answer of request i and what runs once it is sent;
// the last answer sends the array (a batch of notifications sends none).
func (b *batch) answer(i int, reply []byte, after func()) {
	b.mu.Lock()
	b.answers[i] = reply
	if after != nil {
		b.after = append(b.after, after)
	}
	b.left--
	last := b.left == 0
	b.mu.Unlock()
	if !last {
		return
	}
	frame := []byte{'['}
	for _, a := range b.answers {
		if a != nil {
			if len(frame) > 1 {
				frame = append(frame, ',')
			}
			frame = append(frame, a...)
		}
	}
	b.c.send(append(frame, ']'))
	for _, f := range b.after {
		f()
	}
}

// answer sends the answer of request i of a frame (b nil: a frame of one
// request), then runs after; a batch's answers wait for each other.
func (c *chatConn) answer(b *batch, i int, reply []byte, after func()) {
	if b != nil {
		b.answer(i, reply, after)
		return
	}
	c.send(reply)
	if after != nil {
		after()
	}
}

var errBinaryFrame = errors.New("binary frame on the chat socket")

// writeLoop writes queued frames until the socket ends.
func (c *chatConn) writeLoop() {
	for {
		select {
		case <-c.sock.ctx.Done():
			return
		case f := <-c.out:
			if err := c.writeQueued(f); err != nil {
				c.sock.abort(err)
				return
			}
		}
	}
}

// writeQueued writes the frame f and, when the socket is behind (frames
// queued behind f) or session.changed events wait (takeChanges), every
// frame queued then and those events, as one write(2) (heldConn),
// within the socket's write timeout: the control frames first (answers,
// approval.*, session.closed: nothing waits behind a queue of deltas),
// then the events in order with the message.delta events of one message
// merged (mergeDeltas; shared/PROTOCOL.md §10 allows both).
func (c *chatConn) writeQueued(f any) error {
	_, due := f.(changesDue)
	if !due && (len(c.out) == 0 && c.changesN.Load() == 0 || c.held == nil) {
		return c.wt.timed(c.h.Socket.WriteTimeout, func() error {
			return c.conn.Write(c.sock.connCtx, websocket.MessageText, c.frameBytes(f))
		})
	}
	frames := c.batch[:0]
	if !due {
		frames = append(frames, f)
	}
	for n := len(c.out); n > 0; n-- {
		if g := <-c.out; g != (changesDue{}) {
			frames = append(frames, g)
		}
	}
	frames = mergeDeltas(controlFirst(c.takeChanges(frames)))
	if len(frames) == 0 || c.held == nil { // c.held nil (tests): a write each
		for _, f := range frames {
			if err := c.wt.timed(c.h.Socket.WriteTimeout, func() error {
				return c.conn.Write(c.sock.connCtx, websocket.MessageText, c.frameBytes(f))
			}); err != nil {
				return err
			}
		}
		clear(frames)
		c.batch = frames[:0]
		return nil
	}
	err := c.wt.timed(c.h.Socket.WriteTimeout, func() error {
		c.held.hold()
		for _, f := range frames {
			// Held: coder/websocket's flush of the message lands in the
			// heldConn's buffer.
			if err := c.conn.Write(c.sock.connCtx, websocket.MessageText, c.frameBytes(f)); err != nil {
				c.held.release()
				return err
			}
		}
		return c.held.release()
	})
	clear(frames) // no event kept alive by the reused array
	c.batch = frames[:0]
	return err
}

// isControl reports whether a queued frame goes before queued events: an
// answer ([]byte: a reply, a batch's answers; gateway.ready too, which is
// the first frame anyway), approval.* and session.closed.
func isControl(f any) bool {
	ev, ok := f.(*sessions.Event)
	return !ok || ev.Type == "session.closed" || strings.HasPrefix(ev.Type, "approval.")
}

// controlFirst reorders frames in place, stably: the control frames
// (isControl) first, then the others, each in their order.
func controlFirst(frames []any) []any {
	n := 0
	for _, f := range frames {
		if isControl(f) {
			n++
		}
	}
	if n == 0 || n == len(frames) {
		return frames
	}
	out := make([]any, 0, len(frames))
	for _, f := range frames {
		if isControl(f) {
			out = append(out, f)
		}
	}
	for _, f := range frames {
		if !isControl(f) {
			out = append(out, f)
		}
	}
	return out
}

// deltaOf returns the session and turn_id of a message.delta event and its
// text; ok is false for any other frame.
func deltaOf(f any) (sid, turn, text string, ok bool) {
	ev, isEv := f.(*sessions.Event)
	if !isEv || ev.Type != "message.delta" {
		return "", "", "", false
	}
	d, isDelta := ev.Payload.(*sessions.Delta)
	if !isDelta {
		return "", "", "", false
	}
	return ev.SessionID, d.TurnID, d.Text, true
}

// mergeDeltas merges, in place, each run of message.delta events of one
// message (one session, one turn_id) into the first of them: their texts
// concatenated in order, the seq of the last. Any other frame of that
// session ends its run; frames of other sessions between its deltas do
// not (a session's events keep their order; sessions interleave as
// before). A run of one is left as it is (its encoding is shared with the
// session's other viewers).
func mergeDeltas(frames []any) []any {
	type run struct {
		at   int             // its first delta's index in out
		turn string          // its turn_id
		text strings.Builder // the texts so far, when more than one
		last *sessions.Event // its last delta
		n    int
	}
	var open map[string]*run // by session: its run still open
	var runs []*run
	out := frames[:0]
	for _, f := range frames {
		sid, turn, text, ok := deltaOf(f)
		if !ok {
			if ev, isEv := f.(*sessions.Event); isEv && open != nil {
				delete(open, ev.SessionID)
			}
			out = append(out, f)
			continue
		}
		if r := open[sid]; r != nil && r.turn == turn {
			if r.n == 1 {
				_, _, first, _ := deltaOf(out[r.at])
				r.text.WriteString(first)
			}
			r.text.WriteString(text)
			r.last, r.n = f.(*sessions.Event), r.n+1
			continue
		}
		if open == nil {
			open = map[string]*run{}
		}
		r := &run{at: len(out), turn: turn, last: f.(*sessions.Event), n: 1}
		open[sid] = r
		runs = append(runs, r)
		out = append(out, f)
	}
	for _, r := range runs {
		if r.n > 1 {
			out[r.at] = sessions.NewDeltaEvent(r.last.SessionID, r.last.Seq, r.turn, r.text.String())
		}
	}
	return out
}

// dispatch runs request i of a frame (b: its batch, or nil) and answers
// it; errors go through the socket's one error edge, rpcError.
func (c *chatConn) dispatch(ctx context.Context, req Request, b *batch, i int) {
	result, after, err := c.call(ctx, req)
	if err != nil {
		c.answer(b, i, encodeReply(req.ID, nil, rpcError(c.log, req.Method, err)), nil)
		return
	}
	c.answer(b, i, encodeReply(req.ID, result, nil), after)
}

// call runs one request by its method's entry in chatMethods; its errors
// are *RPCError (input, or -32601 for a method not in the table) or the
// registry's, which rpcError maps.
func (c *chatConn) call(ctx context.Context, req Request) (any, func(), error) {
	m, ok := chatMethods[req.Method]
	if !ok {
		return nil, nil, &RPCError{Code: CodeMethodNotFound, Message: "method not found: " + req.Method}
	}
	return m(c, ctx, req.Params)
}

// ErrShutdown is the cause the server gives its base context when it shuts
// down; sockets then close with 1001 and their workers with reason shutdown.
var ErrShutdown = sessions.ErrViewerShutdown
