package sessions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/dashgate/dashgate/store"
)

// This file owns this node's hold on its sessions when the store is
// shared (store.Store.Claim): which node it is, the lease's ttl, its
// renewal, its release at a clean stop, the end of a session another
// node took (end_reason lease_lost), and what the node does while it
// cannot prove its hold (the store is unreachable). Every row and entry a
// session writes carries the epoch it holds the session under
// (conversation.putRow and putEntry); once another node claimed it, the
// store refuses them (store.ErrFenced), the journal drops them and the
// session ends here. Every node claims, a node alone too (its id kept in
// its state dir: a restart takes its own sessions back at once); only a
// registry that never Claimed (some tests) writes epoch 0, unfenced.
//
// Proven hold: the registry knows until when it has proven its hold on
// each session: provenUntil is ttl after the start of the last Renew that
// renewed it, or, before one did, ttl after the session became live here
// (made here: its row's lease starts then; claimed or adopted: just after
// the store's claim, later than the claim by its round trip). Past it
// (the store was unreachable for the renewals of a whole ttl) another
// node may have taken the session, so this node starts no new work for
// it: Prompt, Exec and a terminal's start answer ErrLeaseUnproven
// (JSON-RPC 5006) rather than risk two owners. A turn already running goes
// on, its output kept in memory and queued in the journal; history,
// resume, list and typing into a running terminal need nothing new and go
// on. The viewers get one notice when the hold lapses and one when a
// renewal proves it again; a session another node took meanwhile ends
// lease_lost instead. Records (node): WARN "store unreachable" (err) once
// when renewals start failing, WARN "leases unproven" (sessions) once
// when the first proven time passes, INFO "leases proven" (sessions,
// lost) on the first renewal after that, or INFO "store reachable" on the
// first one after failures that lapsed nothing.

// DefaultLeaseTTL is how long a node's hold on its sessions lasts without
// renewal (--node-expiry's default); Run renews it every third of that.
const DefaultLeaseTTL = 15 * time.Second

// leaseRetry bounds the wait before the next renewal after a failed one:
// once the store is back the hold is proven within it, not a third of the
// ttl later.
const leaseRetry = time.Second

// ErrLeaseUnproven: this node could not renew its lease on the session
// for a whole ttl (the store is unreachable), so it does no new work for
// it: nothing was done. The caller answers 5006; the same call works once
// a renewal proves the hold again.
var ErrLeaseUnproven = errors.New("this node cannot reach the store to prove it still holds this session; nothing was done; try again when the store is back")

// The notices a session's viewers get when its hold lapses and when it is
// proven again (a notice event and a history entry each).
const (
	leaseLapsedNotice = "this node cannot reach the store to prove it still holds this session: new prompts, commands and terminals are refused until it is back"
	leaseProvenNotice = "the store is reachable again: this session takes new work again"
)

// lease is the node's hold, node "" until Claim. Guarded by the
// registry's mutex: heldBy, mayWork and release take it themselves.
type lease struct {
	mu       *sync.Mutex         // the registry's
	sessions map[string]*Session // the registry's: what is live here
	store    store.Store         // Config.Store
	// notice tells a session's viewers text and keeps it in its history
	// (Registry.noticeLocked); the mutex must be held.
	notice func(s *Session, text string)
	// queued reports which of held still have their row on its way to the
	// store (journal.rowsQueued); called without the mutex.
	queued func(held map[string]uint64) map[string]bool
	// lost ends the sessions another node holds now (Registry.leaseLost);
	// called without the mutex.
	lost func(sids []string)

	node string
	ttl  time.Duration
	log  *slog.Logger // the registry's
	// adopting holds a channel per sid being adopted (adopt.go), closed
	// when its adoption is done: one adoption of a session at a time.
	adopting map[string]chan struct{}
	// proven holds, per held sid, the start of the last Renew that renewed
	// it (none before the first: the session's liveSince counts).
	proven map[string]time.Time
	// lapsed holds the sids whose viewers were told their hold lapsed.
	lapsed map[string]bool
	// failing: the renewals fail ("store unreachable" was logged);
	// unproven: a hold lapsed since ("leases unproven" was logged) and
	// some are still lapsed. reproven and lostLapsed count, since, the
	// lapsed sessions proven again and those ended lease_lost.
	failing, unproven    bool
	reproven, lostLapsed int
}

// newRowLocked is what a session made now by this node is stored with: the
// node, epoch 1, and a lease of ttl from now (all zero without a lease).
func (l lease) newRowLocked() (node string, epoch uint64, until time.Time) {
	if l.node == "" {
		return "", 0, time.Time{}
	}
	return l.node, 1, time.Now().Add(l.ttl)
}

// heldBy is the node and the ttl of the registry's lease ("" and 0
// before Claim). It takes the registry's mutex.
func (l *lease) heldBy() (string, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.node, l.ttl
}

// Claim makes node (not "") the holder of the registry's sessions under
// leases of ttl (> 0): it takes from the store every session not closed
// that no other node holds under a live lease, each with a new epoch
// (store.Store.Claim), and brings them back detached (restore). From then on
// a session made here is stored as node's, every write carries its
// session's epoch, Run renews the leases every ttl/3 and FlushStore
// releases them. Call it once, at start. It logs one
// INFO "sessions restored" record and returns the count. Errors: the
// store's.
func (r *Registry) Claim(ctx context.Context, node string, ttl time.Duration) (int, error) {
	if node == "" || ttl <= 0 {
		return 0, fmt.Errorf("claim sessions: a node (%q) and a lease ttl (%v) are required", node, ttl)
	}
	r.mu.Lock()
	r.lease.node, r.lease.ttl, r.lease.log = node, ttl, r.log
	r.mu.Unlock()
	rows, err := r.cfg.Store.Claim(ctx, node, ttl, time.Time{}) // the store's clock
	if err != nil {
		return 0, fmt.Errorf("claim sessions for node %q: %w", node, err)
	}
	return r.restore(rows), nil
}

// held reports whether s is held under a lease that must be proven:
// live, stored, with an epoch, in a registry that Claimed. The registry's
// lock must be held (as for every method of lease).
func (l *lease) held(s *Session) bool {
	return l.node != "" && s.live() && s.journal != nil && s.epoch > 0
}

// provenUntil is until when the registry has proven its hold on s (see
// the file's comment).
func (l *lease) provenUntil(s *Session) time.Time {
	since := s.liveSince
	if p := l.proven[s.id]; p.After(since) {
		since = p
	}
	return since.Add(l.ttl)
}

// heldEpochs is the epoch of each held session of sessions: what renew
// asks the store to extend.
func (l *lease) heldEpochs(sessions map[string]*Session) map[string]uint64 {
	held := map[string]uint64{}
	for id, s := range sessions {
		if l.held(s) {
			held[id] = s.epoch
		}
	}
	return held
}

// lapse marks, once, each held session of sessions whose proven time is
// past now as lapsed and returns them (their viewers are to be told), and
// what logs the WARN "leases unproven" record when this is the first
// lapse since the hold was last proven (to be called outside the lock; a
// no-op otherwise).
func (l *lease) lapse(sessions map[string]*Session, now time.Time) (lapsed []*Session, warn func()) {
	for id, s := range sessions {
		if !l.held(s) || l.lapsed[id] || now.Before(l.provenUntil(s)) {
			continue
		}
		if l.lapsed == nil {
			l.lapsed = map[string]bool{}
		}
		l.lapsed[id] = true
		lapsed = append(lapsed, s)
	}
	if len(lapsed) == 0 || l.unproven {
		return lapsed, func() {}
	}
	l.unproven = true
	log, node, n := l.log, l.node, len(l.lapsed)
	return lapsed, func() { log.Warn("leases unproven", "node", node, "sessions", n) }
}

// proved ends the lapse once no session is lapsed any more (each was
// proven again or ended: a lapsed session whose row was still queued is
// proven by a later renewal, or fenced by the journal's write): it
// returns what logs the INFO "leases proven" record (to be called outside
// the lock), nil when there is no lapse to end or it goes on.
func (l *lease) proved() func() {
	if !l.unproven {
		return nil
	}
	if len(l.lapsed) > 0 {
		return func() {}
	}
	log, node, again, lost := l.log, l.node, l.reproven, l.lostLapsed
	l.unproven, l.reproven, l.lostLapsed = false, 0, 0
	return func() { log.Info("leases proven", "node", node, "sessions", again, "lost", lost) }
}

// untilLapse is how long from now until the first held session's proven
// time passes (among those not lapsed yet); at most ttl (a session made
// later lapses no sooner), at least a millisecond.
func (l *lease) untilLapse(sessions map[string]*Session, now time.Time) time.Duration {
	next := l.ttl
	for id, s := range sessions {
		if l.held(s) && !l.lapsed[id] {
			next = min(next, l.provenUntil(s).Sub(now))
		}
	}
	return max(next, time.Millisecond)
}

// renewed notes a renewal started at start that asked for held and was
// told notHeld are not the node's: the others are proven from start, and
// each lapsed one proven again is returned (its viewers are to be told);
// lapsed ones not held any more (ended, or in gone: counted when they end
// lease_lost) are left to leaseLost.
func (l *lease) renewed(sessions map[string]*Session, held map[string]uint64, notHeld map[string]bool, gone []string, start time.Time) (reproven []*Session) {
	proven := make(map[string]time.Time, len(held))
	for id := range held {
		if !notHeld[id] {
			proven[id] = start
		} else if p, ok := l.proven[id]; ok {
			proven[id] = p
		}
	}
	l.proven = proven
	for id := range l.lapsed {
		s := sessions[id]
		switch {
		case s == nil || !l.held(s): // ended meanwhile
			delete(l.lapsed, id)
		case slices.Contains(gone, id): // counted by leaseLost
		case proven[id].Equal(start):
			delete(l.lapsed, id)
			reproven = append(reproven, s)
			l.reproven++
		}
	}
	return reproven
}

// startAdopting registers the adoption of sid (adopt.go): wait is nil and
// done must be called when it is over, or wait is the channel the
// adoption already running closes when it is over.
func (l *lease) startAdopting(sid string) (wait <-chan struct{}, done func()) {
	if w := l.adopting[sid]; w != nil {
		return w, nil
	}
	if l.adopting == nil {
		l.adopting = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	l.adopting[sid] = ch
	return nil, func() {
		delete(l.adopting, sid)
		close(ch)
	}
}

// mayWork is the check, before anything new is started for s (a turn, a
// slash command, a terminal program), that the node still proves its
// hold on s: ErrLeaseUnproven past its proven time (the lapse is noted
// and told first, see lapseLocked), else nil. Without a lease it is nil.
// It takes the registry's mutex.
func (l *lease) mayWork(s *Session) error {
	l.mu.Lock()
	if !l.held(s) || time.Now().Before(l.provenUntil(s)) {
		l.mu.Unlock()
		return nil
	}
	warn := l.lapseLocked(time.Now())
	l.mu.Unlock()
	warn()
	return ErrLeaseUnproven
}

// lapseLocked tells the viewers of each held session whose proven time is
// past now, once, that its hold lapsed (a notice event and entry), and
// returns what logs the WARN "leases unproven" record when this is the
// first lapse since the hold was last proven (the caller calls it
// outside the lock; a no-op otherwise). The registry's mutex must be
// held.
func (l *lease) lapseLocked(now time.Time) func() {
	lapsed, warn := l.lapse(l.sessions, now)
	for _, s := range lapsed {
		l.notice(s, leaseLapsedNotice)
	}
	return warn
}

// The notices of a store outage (journal.onOutage): a session whose
// changes the store could not take hears once that they are not saved
// yet, and once that they are, when a write succeeds again. They are
// events only, not history: what they say is over once it is saved.
const (
	unsavedNotice = "not saved yet: the conversation store is unreachable; this chat goes on and is saved when the store is back"
	savedNotice   = "saved: the conversation store is reachable again"
)

// storeOutage tells each live session of sids whether its changes are
// saved (journal.onOutage's contract). It takes the registry's mutex.
func (r *Registry) storeOutage(saved bool, sids []string) {
	text := unsavedNotice
	if saved {
		text = savedNotice
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing {
		return
	}
	for _, id := range sids {
		if s := r.sessions[id]; s != nil && s.live() {
			r.emitLocked(s, "notice", map[string]any{"text": text})
		}
	}
}

// noticeLocked tells s's viewers text (a notice event) and keeps it in
// its history. r.mu must be held.
func (r *Registry) noticeLocked(s *Session, text string) {
	r.emitLocked(s, "notice", map[string]any{"text": text})
	r.appendLocked(s, Message{Role: store.RoleSystem, Kind: store.KindNotice, Text: text})
}

// renew extends, by the lease's ttl, the leases of the node's live
// sessions; one the store says the node no longer holds (another node
// claimed it) ends with end_reason lease_lost. A store failure is logged
// (see the file's comment) and the next renewal retries. A renewal that
// succeeds proves the hold on the sessions it renewed again (their
// viewers told, when it had lapsed). Registry.Run calls it every ttl/3
// (sooner after a failure, run); without a Claim it does nothing. It
// returns false when the store failed. It takes the registry's mutex.
func (l *lease) renew(ctx context.Context) bool {
	l.mu.Lock()
	node, ttl := l.node, l.ttl
	held := l.heldEpochs(l.sessions)
	l.mu.Unlock()
	if node == "" || len(held) == 0 {
		return true
	}
	// A session made here is stored when the journal writes its first row;
	// until then the store does not know it and says it is lost. renew no
	// longer flushes the journal first to avoid that: after an outage the
	// journal may drain a backlog for longer than the ttl, and a renewal
	// waiting behind it would let every lease lapse. Instead the sessions
	// whose row is still queued (or being written) are asked for like the
	// others, and when the store says they are lost they are left to the
	// journal: their row's write either stores them (renewed next time) or
	// is fenced, which ends them lease_lost (onFenced). The rows are noted
	// before the store is asked, so that one written meanwhile counts as
	// queued, never as lost.
	queued := l.queued(held)
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, max(ttl/3, leaseRetry))
	lost, err := l.store.Renew(rctx, node, held, ttl, time.Time{}) // the store's clock
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return true // stopping: not the store's failure
		}
		l.mu.Lock()
		first := !l.failing
		l.failing = true
		l.mu.Unlock()
		if first {
			l.log.Warn("store unreachable", "node", node, "sessions", len(held), "err", err)
		} else {
			l.log.Debug("lease renewal", "node", node, "sessions", len(held), "err", err)
		}
		return false
	}
	notHeld := map[string]bool{}
	var gone []string
	for _, id := range lost {
		notHeld[id] = true
		if !queued[id] {
			gone = append(gone, id)
		}
	}
	l.mu.Lock()
	for _, s := range l.renewed(l.sessions, held, notHeld, gone, start) {
		l.notice(s, leaseProvenNotice)
	}
	failing := l.failing
	l.failing = false
	l.mu.Unlock()
	l.lost(gone)
	l.mu.Lock()
	logged := l.proved()
	l.mu.Unlock()
	if logged != nil {
		logged()
	} else if failing {
		l.log.Info("store reachable", "node", node, "sessions", len(held)-len(lost), "lost", len(gone))
	}
	return true
}

// run is Registry.Run's part for the lease (after a Claim): it renews
// every ttl/3, at most leaseRetry after a failed renewal, and notes each
// lapse when it is due (lapseLocked), until ctx ends. It blocks.
func (l *lease) run(ctx context.Context) {
	_, ttl := l.heldBy()
	if ttl <= 0 {
		return
	}
	// untilLapse is when the lapses are checked next: when the first held
	// session's proven time passes, at most ttl from now.
	untilLapse := func() time.Duration {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.untilLapse(l.sessions, time.Now())
	}
	renew := time.NewTimer(ttl / 3)
	defer renew.Stop()
	lapse := time.NewTimer(untilLapse())
	defer lapse.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-renew.C:
			next := ttl / 3
			if !l.renew(ctx) {
				next = min(next, leaseRetry)
			}
			renew.Reset(next)
			lapse.Reset(untilLapse())
		case <-lapse.C:
			l.mu.Lock()
			warn := l.lapseLocked(time.Now())
			l.mu.Unlock()
			warn()
			lapse.Reset(untilLapse())
		}
	}
}

// release ends the node's leases after its last write (FlushStore). It
// takes the registry's mutex.
func (l *lease) release(ctx context.Context) error {
	node, _ := l.heldBy()
	if node == "" {
		return nil
	}
	if _, err := l.store.Release(ctx, node); err != nil {
		return fmt.Errorf("release the leases of node %q: %w", node, err)
	}
	return nil
}

// leaseLost ends the sessions of sids that another node holds now with
// end_reason lease_lost (the funnel's one INFO record): nothing more of
// them is written here, since their rows and entries are the other
// node's, and their viewers get session.closed. The journal calls it for
// writes the store fenced, renew for leases it could not renew.
func (r *Registry) leaseLost(sids []string) {
	r.mu.Lock()
	var lost []*Session
	lapsed := false
	for _, id := range sids {
		if s := r.sessions[id]; s != nil && s.journal != nil {
			s.stream.Lock() // a checkpoint reads it under the stream lock alone
			s.journal = nil
			s.stream.Unlock()
			lost = append(lost, s)
			if r.lease.lapsed[id] {
				delete(r.lease.lapsed, id)
				r.lease.lostLapsed++
				lapsed = true
			}
		}
	}
	var proved func()
	if lapsed { // the last lapsed one may be gone now (a fenced write's)
		proved = r.lease.proved()
	}
	r.mu.Unlock()
	if proved != nil {
		proved()
	}
	for _, s := range lost {
		r.goTracked(func() { r.end(s, EndLeaseLost) })
	}
}
