package sessions

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"golang.org/x/sync/semaphore"

	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/workers"
)

// State is where a session is in its life. States only move forward, except
// attached <-> detached.
type State string

const (
	StateCreated  State = "created"  // made, no viewer yet
	StateAttached State = "attached" // at least one viewer
	StateDetached State = "detached" // no viewer; resumable until the TTL
	StateClosing  State = "closing"  // claimed by the close funnel
	StateClosed   State = "closed"
)

// legal lists every allowed move.
var legal = map[State][]State{
	StateCreated:  {StateAttached, StateDetached, StateClosing},
	StateAttached: {StateDetached, StateClosing},
	StateDetached: {StateAttached, StateClosing},
	StateClosing:  {StateClosed},
}

// ErrIllegalTransition is returned by setState for a move not in legal.
var ErrIllegalTransition = errors.New("illegal session state transition")

// canMove reports whether from -> to is a legal move.
func canMove(from, to State) bool {
	for _, s := range legal[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Message is one entry of a session's history (PROTOCOL.md §2, with the
// fields of docs/PROTOCOL.md §7: seq, kind, code, usage).
type Message = store.Entry

// Event is one event for the viewers of a session (PROTOCOL.md §2).
// Seq counts events per session from 1 with no gaps. Payload is never
// changed after the event is delivered; every viewer gets the same *Event,
// and Encode shares one encoding among them.
type Event struct {
	Type      string
	SessionID string
	Seq       uint64
	Payload   any

	enc *encoding // shared by the copies delivered to each viewer; nil for an event made elsewhere
}

// encoding is an event's bytes, encoded once for all its viewers. A
// writer that finds another one encoding encodes a copy of its own rather
// than wait: a session.changed goes to every socket of its owner, and 300
// writers waiting in turn on a lock (a sync.Once) were the gateway's
// largest lock wait under load, each hand-off a scheduling delay
// (BENCHMARKS.md, the stall, issue 43).
type encoding struct {
	state atomic.Uint32 // encodingNone, encodingBusy, encodingDone; b is set before encodingDone
	b     []byte
}

const (
	encodingNone uint32 = iota
	encodingBusy
	encodingDone
)

// NewEvent returns an event whose encoding its viewers share.
func NewEvent(typ, sid string, seq uint64, payload any) *Event {
	return &Event{Type: typ, SessionID: sid, Seq: seq, Payload: payload, enc: &encoding{}}
}

// Delta is the payload of a message.delta event (PROTOCOL.md §2):
// {"text","turn_id"}, in the order json.Marshal gave the map it replaced.
type Delta struct {
	Text   string `json:"text"`
	TurnID string `json:"turn_id"`
}

// NewDeltaEvent returns the message.delta event of text for turn, its
// payload a *Delta, in one allocation (an event, its encoding and a map
// payload were five a delta; issue 43).
func NewDeltaEvent(sid string, seq uint64, turn, text string) *Event {
	d := &struct {
		ev  Event
		enc encoding
		p   Delta
	}{p: Delta{Text: text, TurnID: turn}}
	d.ev = Event{Type: "message.delta", SessionID: sid, Seq: seq, Payload: &d.p, enc: &d.enc}
	return &d.ev
}

// Encode returns encode(*e), computed once for every viewer of e (the
// first viewer's writer encodes, the others reuse its bytes, which must not
// be modified); a writer that comes while the first is encoding encodes
// its own copy instead of waiting. It never blocks. It is called by
// writers, never under the registry's lock.
func (e *Event) Encode(encode func(Event) []byte) []byte {
	if e.enc == nil {
		return encode(*e)
	}
	switch e.enc.state.Load() {
	case encodingDone:
		return e.enc.b
	case encodingNone:
		if e.enc.state.CompareAndSwap(encodingNone, encodingBusy) {
			e.enc.b = encode(*e)
			e.enc.state.Store(encodingDone)
			return e.enc.b
		}
	}
	return encode(*e)
}

// Viewer is a socket viewing sessions. Deliver queues an event and must not
// block; a viewer that cannot keep up disconnects itself. Done is closed
// when the socket is gone, before it calls Registry.DetachViewer: a call
// still in flight from that socket can then never re-attach a session to
// it (nil means never done).
//
// Principal is who the socket acts for (see [Principal]); it must not
// change over the viewer's life.
type Viewer interface {
	Deliver(*Event)
	Done() <-chan struct{}
	Principal() Principal
}

// principalOf is v's principal; a nil viewer (a call made by the registry
// itself, or a test) acts for the anonymous user.
func principalOf(v Viewer) Principal {
	if v == nil {
		return Principal{}
	}
	return v.Principal()
}

func viewerGone(v Viewer) bool {
	select {
	case <-v.Done():
		return true
	default:
		return false
	}
}

// Session is one conversation with its worker and terminals. Its fields are
// guarded by the registry's mutex, but for those of its event stream (see
// stream).
type Session struct {
	id                string
	title             string
	titled            bool // its title was chosen (renamed, or taken from its first prompt): see promptTitle
	closeOnDisconnect bool
	terminalOnly      bool // made by /ws/pty without a session_id
	createdAt         time.Time
	liveSince         time.Time // created, restored or reopened in this process

	state      State
	viewers    map[Viewer]struct{} // a chat socket counts once however often it resumes
	lastActive time.Time
	detachedAt time.Time
	ttlTimer   *time.Timer

	conversation // its entries, their seqs, its owner and its journal (conversation.go)

	// stream serialises the events of s: it guards seq, every delivery to
	// the viewers (changes of the viewers' set take it too) and the
	// streamed state of its turn (turn.text, done, ckpt, paused). A
	// turn's deltas take it alone, never r.mu (turn.onDelta): 300 streams
	// queued on the registry's lock held up every other call
	// (BENCHMARKS.md, issue 28). Lock order: r.mu, then stream; nothing
	// takes r.mu while holding it.
	stream sync.Mutex
	seq    uint64 // the last event seq; guarded by stream

	grace     *turnGrace           // a detached session's turn let finish, nil when none
	execs     int                  // slash commands running
	execStops map[*func()]struct{} // cancels of the running slash commands (Interrupt)
	exited    *workers.CloseResult // its worker's exit, told once the running commands' results are
	model     string               // "" for the worker's default
	system    string               // its owner's system prompt as the last turn read it (settings.go)
	// agent is the --agent the session talks to ("" for the built-in
	// worker; it never changes), agentSession that agent's id of the
	// conversation (session/load's, "" until it gave one), plan and
	// commands its last plan and slash commands (ACP's, as the worker's
	// plan and commands events gave them; nil for none): told again in
	// session.resume.
	agent, agentSession string
	plan, commands      json.RawMessage
	turn                *turn
	turns               int
	pending             pendingFiles // files uploaded and not sent yet (attachments.go)

	worker Worker
	terms  terminals // its running terminals (terminals.go)
	// startRefused is why its last terminal start was refused at a cap
	// (matching ErrCapacity or workers.ErrCapacity), until one of its
	// terminals starts: TerminalRefusal tells it to a page that retries.
	// Guarded by r.mu.
	startRefused error
	endedPTYPID  int                 // the pid of its last terminal that ended by itself or was reaped
	spawnMu      *semaphore.Weighted // weight 1: serialises spawns of its children (docs/failure-classes.md #12)

	endReason EndReason
	endBy     string        // the admin whose action ended it (by=), "" for none
	finished  chan struct{} // closed when its teardown is done and its end stored
}

// row is the stored form of s, without what the conversation stamps on
// it when it is queued (see conversation.putRow).
func (s *Session) row() store.Session {
	return store.Session{ID: s.id, Title: s.title, CreatedAt: s.createdAt, LastActive: s.lastActive, State: string(s.state), Model: s.model,
		Agent: s.agent, AgentSession: s.agentSession}
}

// setState moves the session to next, or refuses an illegal move. Callers
// go through Registry.setState, which makes a refusal loud.
func (s *Session) setState(next State) error {
	if !canMove(s.state, next) {
		return fmt.Errorf("%w: %s -> %s", ErrIllegalTransition, s.state, next)
	}
	s.state = next
	return nil
}

func (s *Session) live() bool {
	return s.state == StateCreated || s.state == StateAttached || s.state == StateDetached
}

// Info is a snapshot of a session (session.list, the admin page).
type Info struct {
	ID         string    `json:"session_id"`
	Owner      string    `json:"user"` // Principal.User of who made it; "" the anonymous user
	Title      string    `json:"title"`
	State      State     `json:"state"`
	Viewers    int       `json:"viewers"` // sockets
	Pages      int       `json:"pages"`   // browser tabs: a tab's chat and terminal sockets count once (pages.go)
	CreatedAt  time.Time `json:"created_at"`
	LastActive time.Time `json:"last_active"`
	Running    bool      `json:"running"`
	WorkerPID  int       `json:"worker_pid"`
	PTYPID     int       `json:"pty_pid"` // its first running terminal's (Terminals[0]); 0 for none
	Model      string    `json:"model,omitempty"`
	Agent      string    `json:"agent,omitempty"` // --agent's name; "" the built-in worker
	Turns      int       `json:"-"`

	// Terminals are its running terminals in the order they started
	// (issue 42; absent for none).
	Terminals []TerminalInfo `json:"terminals,omitempty"`
}

func (s *Session) info() Info {
	in := Info{
		ID: s.id, Owner: s.owner, Title: s.title, State: s.state, Viewers: len(s.viewers), Pages: pagesOf(s.viewers),
		CreatedAt: s.createdAt, LastActive: s.lastActive, Running: s.turn != nil, Turns: s.turns, Model: s.model,
		Agent: s.agent,
	}
	if s.worker != nil {
		in.WorkerPID = s.worker.PID()
	}
	if in.Terminals = s.terms.info(); len(in.Terminals) > 0 {
		in.PTYPID = in.Terminals[0].PID
	}
	return in
}

// defaultTitle is a title the dashboard gives a new session ("session 3"):
// one the user did not choose.
var defaultTitle = regexp.MustCompile(`^session ([1-9][0-9]{0,8})$`)

// defaultNumber is N of a default title "session N", and whether title is
// one.
func defaultNumber(title string) (int, bool) {
	m := defaultTitle.FindStringSubmatch(title)
	if m == nil {
		return 0, false
	}
	n, err := strconv.Atoi(m[1])
	return n, err == nil
}

// promptTitleMax is the most runes of a title taken from a prompt, the
// ellipsis included.
const promptTitleMax = 40

// promptTitle is the title a session takes from its first prompt text:
// its first line that is not blank, runs of white space made one space,
// cut at the last word boundary within promptTitleMax runes with "…"
// added (a single word longer than that is cut inside). "" when text has
// no letters to show.
func promptTitle(text string) string {
	var line string
	for l := range strings.SplitSeq(text, "\n") {
		if line = strings.Join(strings.Fields(l), " "); line != "" {
			break
		}
	}
	if utf8.RuneCountInString(line) <= promptTitleMax {
		return line
	}
	r := []rune(line)[:promptTitleMax-1] // room for the ellipsis
	cut := string(r)
	if i := strings.LastIndexByte(cut, ' '); i > 0 {
		cut = cut[:i]
	}
	return strings.TrimRight(cut, " ,.;:-") + "…"
}
