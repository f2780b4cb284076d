package sessions

import (
	"context"
	"fmt"
	"time"
)

// This file owns this node's hold on its sessions when the store is
// shared (store.Store.Claim): which node it is, the lease's ttl, its
// renewal, its release at a clean stop, and the end of a session another
// node took (end_reason lease_lost). Every row and entry a session writes
// carries the epoch it holds the session under (conversation.putRow and
// putEntry); once another node claimed it, the store refuses them
// (store.ErrFenced), the journal drops them and the session ends here.
// Without a Claim (Restore) there is no lease: writes carry epoch 0,
// unfenced, as before leases.

// DefaultLeaseTTL is how long a node's hold on its sessions lasts without
// renewal; Run renews it every third of that.
const DefaultLeaseTTL = 30 * time.Second

// lease is the node's hold, zero until Claim. Guarded by the registry's
// mutex.
type lease struct {
	node string
	ttl  time.Duration
	// adopting holds a channel per sid being adopted (adopt.go), closed
	// when its adoption is done: one adoption of a session at a time.
	adopting map[string]chan struct{}
}

// newRowLocked is what a session made now by this node is stored with: the
// node, epoch 1, and a lease of ttl from now (all zero without a lease).
func (l lease) newRowLocked() (node string, epoch uint64, until time.Time) {
	if l.node == "" {
		return "", 0, time.Time{}
	}
	return l.node, 1, time.Now().Add(l.ttl)
}

// leaseHeld is the node and the ttl of the registry's lease ("" and 0
// before Claim).
func (r *Registry) leaseHeld() (string, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lease.node, r.lease.ttl
}

// Claim makes node (not "") the holder of the registry's sessions under
// leases of ttl (> 0): it takes from the store every session not closed
// that no other node holds under a live lease, each with a new epoch
// (store.Store.Claim), and brings them back as Restore does. From then on
// a session made here is stored as node's, every write carries its
// session's epoch, Run renews the leases every ttl/3 and FlushStore
// releases them. Call it once, at start, instead of Restore. It logs one
// INFO "sessions restored" record and returns the count. Errors: the
// store's.
func (r *Registry) Claim(ctx context.Context, node string, ttl time.Duration) (int, error) {
	if node == "" || ttl <= 0 {
		return 0, fmt.Errorf("claim sessions: a node (%q) and a lease ttl (%v) are required", node, ttl)
	}
	r.mu.Lock()
	r.lease.node, r.lease.ttl = node, ttl
	r.mu.Unlock()
	rows, err := r.cfg.Store.Claim(ctx, node, ttl, time.Now())
	if err != nil {
		return 0, fmt.Errorf("claim sessions for node %q: %w", node, err)
	}
	return r.restore(rows), nil
}

// Renew extends, by the lease's ttl, the leases of the node's live
// sessions; one the store says the node no longer holds (another node
// claimed it) ends with end_reason lease_lost. A store failure is logged
// at WARN and the next renewal retries. Run calls it every ttl/3; without
// a Claim it does nothing.
func (r *Registry) Renew(ctx context.Context) {
	r.mu.Lock()
	node, ttl := r.lease.node, r.lease.ttl
	held := map[string]uint64{}
	for id, s := range r.sessions {
		if s.live() && s.journal != nil && s.epoch > 0 {
			held[id] = s.epoch
		}
	}
	r.mu.Unlock()
	if node == "" || len(held) == 0 {
		return
	}
	// Their rows were queued when they were made: stored first, a new
	// session is not taken for a lost one.
	if err := r.journal.flush(ctx); err != nil {
		r.log.Warn("lease renewal", "node", node, "sessions", len(held), "err", err)
		return
	}
	lost, err := r.cfg.Store.Renew(ctx, node, held, ttl, time.Now())
	if err != nil {
		r.log.Warn("lease renewal", "node", node, "sessions", len(held), "err", err)
		return
	}
	r.leaseLost(lost)
}

// release ends the node's leases after its last write (FlushStore).
func (r *Registry) release(ctx context.Context) error {
	node, _ := r.leaseHeld()
	if node == "" {
		return nil
	}
	if _, err := r.cfg.Store.Release(ctx, node); err != nil {
		return fmt.Errorf("release the leases of node %q: %w", node, err)
	}
	return nil
}

// leaseLost ends the sessions of sids that another node holds now with
// end_reason lease_lost (the funnel's one INFO record): nothing more of
// them is written here, since their rows and entries are the other
// node's, and their viewers get session.closed. The journal calls it for
// writes the store fenced, Renew for leases it could not renew.
func (r *Registry) leaseLost(sids []string) {
	r.mu.Lock()
	var lost []*Session
	for _, id := range sids {
		if s := r.sessions[id]; s != nil && s.journal != nil {
			s.journal = nil
			lost = append(lost, s)
		}
	}
	r.mu.Unlock()
	for _, s := range lost {
		r.goTracked(func() { r.end(s, EndLeaseLost) })
	}
}
