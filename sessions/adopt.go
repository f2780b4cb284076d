package sessions

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dashgate/dashgate/store"
)

// This file owns adoption: when a node of a cluster (after Claim) is asked
// for a session it does not hold in memory (session.resume,
// session.reopen), it takes the session over from the store when the node
// that held it let its lease lapse (it died, or hung), and serves it as
// its own from then on: detached, its whole history in the store, the next
// command spawning a worker here, its lease renewed with the node's others
// (renew). A session another node holds under a live lease answers as
// missing (ErrNotFound): nginx's sticky routing sends its user there.
// Without a Claim nothing is adopted.

// HeldElsewhereError: the session asked for is p's, stored and not
// closed, but another node holds it under a live lease (it lives, or it
// died and its lease has not lapsed yet): nothing was claimed. RetryIn is
// the lease's time left by this node's clock (at least a second: a retry
// sooner is refused again), Node the holder. A viewer that waits and asks
// again then gets the session from whichever node adopted it (issue 41).
// The caller answers 4010 with {node, retry_in_ms}.
type HeldElsewhereError struct {
	Node    string
	RetryIn time.Duration
}

func (e *HeldElsewhereError) Error() string {
	return fmt.Sprintf("the server holding this conversation (%s) does not answer here; another takes over within %s", e.Node, e.RetryIn.Round(time.Second))
}

// heldElsewhere is the HeldElsewhereError of row, held by another node
// until row.LeaseUntil.
func heldElsewhere(row store.Session, now time.Time) *HeldElsewhereError {
	return &HeldElsewhereError{Node: row.Node, RetryIn: max(row.LeaseUntil.Sub(now), time.Second)}
}

// errStoredClosed: the session asked for is stored closed, not
// adoptable; Reopen reopens it, Resume answers ErrNotFound.
var errStoredClosed = fmt.Errorf("adopt: stored session is closed: %w", ErrNotFound)

// adopt makes the stored session sid live here, detached, when the
// registry holds a lease (after Claim), sid is not live here already, p
// may use it (authorized on the stored row before anything is claimed:
// another user's session is ErrNotFound and stays where it is) and no
// other node holds it under a live lease (store.Store.ClaimSession). One
// adoption of a sid runs at a time: a second caller waits for the first
// (bounded by ctx) and goes on with what it left. It logs one INFO
// "session adopted" record (sid, user, from_node: the node that held it,
// epoch: the new one). With mayEvict false (a list's adoption) it takes
// no room: at MaxSessions or the owner's MaxSessionsPerUser it claims
// nothing and answers with the cap it met (admission.fullErr).
//
// It returns nil when sid is live here afterwards, or when there is no
// lease (nothing to adopt: the caller answers as before). Errors:
// ErrNotFound (unknown, another user's, or ended meanwhile), a
// *HeldElsewhereError (p's, held by another node under a live lease),
// errStoredClosed (stored closed), a *CapacityError or a
// *UserCapacityError (no room, both ErrCapacity: the lease it took lapses unrenewed),
// ErrShuttingDown, *StoreError, ctx's error.
func (r *Registry) adopt(ctx context.Context, p Principal, sid string, mayEvict bool) error {
	r.mu.Lock()
	node, ttl := r.lease.node, r.lease.ttl
	if node == "" || r.sessions[sid] != nil {
		r.mu.Unlock()
		return nil
	}
	wait, done := r.lease.startAdopting(sid)
	r.mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	defer func() {
		r.mu.Lock()
		done()
		r.mu.Unlock()
	}()

	// Authorize first: the store is asked for p's rows only.
	row, err := r.archive.stored(ctx, p, sid)
	if err != nil {
		return err
	}
	if row.State == store.StateClosed {
		return errStoredClosed
	}
	r.mu.Lock()
	endedHere := r.ended.has(sid)
	r.mu.Unlock()
	if endedHere && row.Node == node {
		// It ended here, and its closed row is still on its way to the
		// store (the journal): closed, never this node's to bring back (a
		// list taken meanwhile adopted it again, alive).
		return errStoredClosed
	}
	if !mayEvict {
		r.mu.Lock()
		var full error
		if r.admission.full(row.Owner) {
			full = r.admission.fullErr(row.Owner)
		}
		r.mu.Unlock()
		if full != nil {
			return full
		}
	}
	claimed, err := r.cfg.Store.ClaimSession(ctx, node, sid, ttl, time.Time{}) // the store's clock
	switch {
	case errors.Is(err, store.ErrLeaseHeld):
		return heldElsewhere(row, time.Now())
	case errors.Is(err, store.ErrNotFound):
		return ErrNotFound
	case err != nil:
		return &StoreError{err}
	}

	now := time.Now()
	s := r.archive.live(claimed, now)
	s.state, s.detachedAt = StateDetached, now
	r.mu.Lock()
	if r.closing {
		r.mu.Unlock()
		return ErrShuttingDown // FlushStore's Release ends the lease just taken
	}
	kind := admitAdopt
	if !mayEvict {
		kind = admitAdoptList
	}
	evict, err := r.admission.admit(s.owner, kind)
	if err != nil {
		r.mu.Unlock()
		r.finishAll(evict)
		return err
	}
	s.ttlTimer = time.AfterFunc(r.cfg.DetachedTTL, func() { r.expire(s) })
	r.sessions[sid] = s
	r.usage.addSession(s)
	r.ended.forget(sid)
	s.save()
	r.mu.Unlock()
	r.finishAll(evict)
	r.log.Info("session adopted", "sid", sid, "user", s.owner, "from_node", row.Node, "epoch", claimed.Epoch)
	return nil
}

// adoptForResume is Resume's adoption of a session not live here, bounded
// by storeReadTimeout (Resume has no context of its own). Errors: those of
// adopt, a closed one as ErrNotFound.
func (r *Registry) adoptForResume(v Viewer, sid string) error {
	ctx, cancel := context.WithTimeout(context.Background(), storeReadTimeout)
	defer cancel()
	err := r.adopt(ctx, principalOf(v), sid, true)
	if errors.Is(err, ErrNotFound) {
		return ErrNotFound
	}
	return err
}

// reopenAdopting is Reopen's step for a session not live here: in a
// cluster, a stored session that is not closed is adopted, then resumed,
// never reopened from its row (that would make it live on two nodes under
// one epoch). ok is false when Reopen goes on itself: no lease, or the
// session is stored closed.
func (r *Registry) reopenAdopting(ctx context.Context, v Viewer, sid string) (res ResumeResult, ok bool, err error) {
	if node, _ := r.lease.heldBy(); node == "" {
		return ResumeResult{}, false, nil
	}
	switch err := r.adopt(ctx, principalOf(v), sid, true); {
	case errors.Is(err, errStoredClosed):
		return ResumeResult{}, false, nil
	case errors.Is(err, ErrNotFound):
		return ResumeResult{}, true, ErrNotFound
	case err != nil:
		return ResumeResult{}, true, err
	}
	res, err = r.Resume(v, sid)
	return res, true, err
}

// adoptForList adopts, before p's list is taken, p's stored sessions that
// are not closed, not live here and held by no node under a live lease
// (one store read, RestorableFor, then adopt for each), so that a user
// whose node died sees its sessions on the node nginx sent it to. Only in
// a cluster (after Claim) and only for a user's own list: an admin's list
// (the admin page, the samples) adopts nothing, and no session is evicted
// for an adoption of a list's (beyond capacity the rest stay in the store,
// adopted on their resume). Bounded by storeReadTimeout; a failure is
// logged at WARN and the list is what is live here.
func (r *Registry) adoptForList(p Principal) {
	node, _ := r.lease.heldBy()
	if node == "" || p.Admin {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeReadTimeout)
	defer cancel()
	rows, err := r.cfg.Store.RestorableFor(ctx, p.User)
	if err != nil {
		r.log.Warn("adopt for a list", "user", p.User, "err", err)
		return
	}
	now := time.Now()
	for _, row := range rows {
		if row.Node != "" && row.Node != node && row.LeaseUntil.After(now) {
			continue // its node lives: it serves it
		}
		var held *HeldElsewhereError
		switch err := r.adopt(ctx, p, row.ID, false); {
		case err == nil, errors.Is(err, ErrNotFound), errors.Is(err, errStoredClosed), errors.As(err, &held):
		case errors.Is(err, ErrCapacity), errors.Is(err, ErrShuttingDown):
			return
		default:
			r.log.Warn("adopt for a list", "sid", row.ID, "user", p.User, "err", err)
			return
		}
	}
}
