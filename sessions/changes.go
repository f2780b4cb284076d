package sessions

import (
	"sync"
	"sync/atomic"
	"time"
)

// Session changes for every chat socket (event session.changed,
// docs/PROTOCOL.md §7): a socket that watches gets one event whenever a
// session is created, attached, detached, closing, closed, renamed,
// reopened or deleted, whichever socket or path caused it (an admin reap,
// the TTL), so every dashboard's list stays current without polling.
//
// The event is not one of a session's numbered events: like gateway.ready
// it has no params.session_id and seq 0 (the session is in its payload), so
// the per-session seq its viewers count keeps no gaps.
//
// Registries that share a store tell each other their changes through a
// ChangeBus (Config.Changes; MemoryBus in one process, a database's
// notifications across nodes), so that a dashboard on one node hears of a
// session another node renamed or closed.

// StateDeleted is the state session.changed reports for a deleted session.
const StateDeleted State = "deleted"

// Change is the payload of event session.changed.
type Change struct {
	SessionID string    `json:"session_id"`
	State     State     `json:"state"`
	Title     string    `json:"title"`
	EndReason EndReason `json:"end_reason,omitempty"`
}

// Watch makes v receive session.changed for every session its principal
// may list (its own; every one for an admin) until stop is called (the
// socket's end calls it). Delivery follows the Viewer rules: Deliver
// must not block. It runs on the teller's goroutine, not under the
// registry's lock, in the order the changes happened.
func (r *Registry) Watch(v Viewer) (stop func()) { return r.tell.watch(v) }

func (t *teller) watch(v Viewer) (stop func()) {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if t.watchers == nil {
		t.watchers = map[Viewer]struct{}{}
	}
	t.watchers[v] = struct{}{}
	return func() {
		t.wmu.Lock()
		defer t.wmu.Unlock()
		delete(t.watchers, v)
	}
}

// tellEvery is the least time between two of the teller's passes: a
// change after a quiet spell is told at once, and the changes that come
// within a window of a pass wait for its end, so each socket gets them in
// one wake-up and one write, not one each. Every change is still told, in
// order; a dashboard's list refreshes at most that much later. With 300 sockets
// of one user and 20 sessions a second made and closed, telling each
// change at once woke the 300 socket writers about 60 times a second;
// the gateway's run queue then held them all, and a quiet call waited
// behind them (BENCHMARKS.md, the stall, issue 43).
const tellEvery = 100 * time.Millisecond

// teller tells the watchers the changes announced under r.mu, in their
// order, on a goroutine of its own (started when there is something to
// tell, gone when there is not): a change is one event for every chat
// socket, and 300 of them woken under the registry's lock at every
// create and close held every other call up (BENCHMARKS.md, issue 28).
// It tells at most once per tellEvery. It also publishes the changes on
// Config.Changes and hears the other registries' (heard). The registry
// sets the fields above qmu once, in New.
type teller struct {
	mu        *sync.Mutex // the registry's: a change is announced under it, in the order they happen
	closing   func() bool // Shutdown started (under mu): nothing more is announced
	bus       ChangeBus   // Config.Changes; nil without one
	origin    string      // the registry's id, in what it publishes
	goTracked func(func())
	reap      func(origin string, rr RemoteReap) // an admin's reap another node published (remote.go)

	qmu     sync.Mutex // guards queue, running and quit; never held while telling
	queue   []told
	running bool
	quit    chan struct{} // closed by stop: a loop waiting out its window tells nothing more
	last    time.Time     // when the last pass began; only the running loop uses it
	passes  atomic.Int64  // passes told so far (the tests read it)

	wmu      sync.Mutex // guards watchers and stopped; held while telling, so stop and Watch's stop wait for a pass
	watchers map[Viewer]struct{}
	stopped  bool // Shutdown: nothing more is told
}

type told struct {
	owner string
	ev    *Event
}

// loop tells what is queued until the queue is empty or stop is called:
// at once when the last pass was a window (tellEvery) ago or more, else
// once it is. One loop runs at a time (running), so the changes are told
// in their order.
func (t *teller) loop(quit <-chan struct{}) {
	for {
		if d := time.Until(t.last.Add(tellEvery)); d > 0 {
			wait := time.NewTimer(d)
			select {
			case <-wait.C:
			case <-quit:
				wait.Stop()
				t.qmu.Lock()
				t.running = false
				t.qmu.Unlock()
				return
			}
		}
		t.qmu.Lock()
		batch := t.queue
		t.queue = nil
		if len(batch) == 0 {
			t.running = false
			t.qmu.Unlock()
			return
		}
		t.qmu.Unlock()
		t.last = time.Now()
		t.passes.Add(1)
		t.wmu.Lock()
		for _, c := range batch {
			if t.stopped {
				break
			}
			for v := range t.watchers {
				if v.Principal().Owns(c.owner) { // an admin's socket too: its own sessions only
					v.Deliver(c.ev)
				}
			}
		}
		t.wmu.Unlock()
	}
}

// stop drops what is queued and tells nothing more; it returns once no
// change is being told, and a loop waiting out its window returns at
// once. Shutdown calls it.
func (t *teller) stop() {
	t.wmu.Lock()
	t.stopped = true
	t.wmu.Unlock()
	t.qmu.Lock()
	t.queue = nil
	if t.quit == nil {
		t.quit = make(chan struct{})
	}
	select {
	case <-t.quit:
	default:
		close(t.quit)
	}
	t.qmu.Unlock()
}

// changedLocked tells the watchers how s is now. t.mu must be held.
func (t *teller) changedLocked(s *Session) {
	t.announceLocked(s.owner, Change{SessionID: s.id, State: s.state, Title: s.title, EndReason: s.endReason})
}

// announceLocked delivers c, a change of a session of owner, to every
// watcher that may list it, and publishes it on Config.Changes. t.mu must
// be held. Once Shutdown started nothing is announced: every socket is
// about to close (1001), and its last frames are the session.closed of
// its sessions.
func (t *teller) announceLocked(owner string, c Change) {
	if t.closing() {
		return
	}
	if t.bus != nil {
		t.bus.Publish(Announcement{Origin: t.origin, Owner: owner, Change: c})
	}
	t.queueLocked(owner, c)
}

// announce is announceLocked for a caller without the lock.
func (t *teller) announce(owner string, c Change) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.announceLocked(owner, c)
}

// heard tells the watchers a change another registry published, or,
// for an announcement carrying a RemoteReap, does that reap when it
// names what this registry holds (remote.go; it blocks this bus's
// deliveries until the target is torn down, as a local reap blocks its
// request).
func (t *teller) heard(a Announcement) {
	if a.Origin == t.origin {
		return
	}
	if a.Reap != nil {
		t.reap(a.Origin, *a.Reap)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closing() {
		t.queueLocked(a.Owner, a.Change)
	}
}

// queueLocked queues c, a change of a session of owner, for every watcher
// that may list it (loop delivers it, started with goTracked, the
// registry's). t.mu must be held: the queue's order is the changes'.
func (t *teller) queueLocked(owner string, c Change) {
	t.qmu.Lock()
	defer t.qmu.Unlock()
	t.queue = append(t.queue, told{owner: owner, ev: NewEvent("session.changed", "", 0, c)})
	if !t.running {
		t.running = true
		if t.quit == nil {
			t.quit = make(chan struct{})
		}
		quit := t.quit
		t.goTracked(func() { t.loop(quit) })
	}
}

// Announcement is a session.changed as it goes between registries: the
// change, the owner of its session (watchers hear only of what they may
// list) and the registry it came from. One with Reap set is instead an
// admin's reap for the node holding its target (Owner and Change zero).
type Announcement struct {
	Origin string // the publishing registry's id
	Owner  string
	Change Change
	Reap   *RemoteReap // nil: a change
}

// ChangeBus carries session.changed between the registries that share a
// store, as hints (the store stays the truth): a lost one costs a
// dashboard a stale row until its next list. Publish runs under the
// publisher's lock and must not block; Subscribe calls f, one call at a
// time, for every announcement published after it (its own included)
// until stop, which returns once f no longer runs.
type ChangeBus interface {
	Publish(a Announcement)
	Subscribe(f func(Announcement)) (stop func())
}

// MemoryBus is the ChangeBus of the registries of one process, and the
// local fan-out of a bus between processes (cluster.PGBus delivers what it
// hears through one). Each subscription queues up to memoryBusQueue
// announcements; beyond, new ones are dropped for it. The zero value is
// ready to use.
type MemoryBus struct {
	// OnDrop, when set before the first Subscribe, is called for each
	// announcement a full subscription loses, under the bus's lock: it
	// must not block (count it).
	OnDrop func()

	mu     sync.Mutex
	subs   map[*memorySub]struct{}
	closed bool
}

// memoryBusQueue bounds what one subscription holds undelivered.
const memoryBusQueue = 1024

type memorySub struct {
	ch   chan Announcement
	quit chan struct{}
	done chan struct{}
}

// Publish queues a for every subscription; it never blocks.
func (b *MemoryBus) Publish(a Announcement) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		select {
		case s.ch <- a:
		default: // full: this hint is lost for that subscriber
			if b.OnDrop != nil {
				b.OnDrop()
			}
		}
	}
}

// Subscribe calls f on a goroutine of its own, which stop ends and waits
// for. After Close, f is never called.
func (b *MemoryBus) Subscribe(f func(Announcement)) (stop func()) {
	s := &memorySub{ch: make(chan Announcement, memoryBusQueue), quit: make(chan struct{}), done: make(chan struct{})}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return func() {}
	}
	if b.subs == nil {
		b.subs = map[*memorySub]struct{}{}
	}
	b.subs[s] = struct{}{}
	b.mu.Unlock()
	go func() {
		defer close(s.done)
		for {
			select {
			case a := <-s.ch:
				f(a)
			case <-s.quit:
				return
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			_, live := b.subs[s]
			delete(b.subs, s)
			b.mu.Unlock()
			if live { // else Close stopped it
				close(s.quit)
			}
			<-s.done
		})
	}
}

// Close ends every subscription and returns once none of their f runs;
// announcements not delivered yet are lost, and later ones go nowhere.
// It is idempotent; a subscription's stop still works after it.
func (b *MemoryBus) Close() {
	b.mu.Lock()
	b.closed = true
	subs := b.subs
	b.subs = nil
	b.mu.Unlock()
	for s := range subs {
		close(s.quit)
		<-s.done
	}
}
