package sessions

import (
	"context"
	"errors"
	"slices"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/dashgate/dashgate/store"
)

// This file is the registry's side of the conversation store: restoring
// sessions at start, reopening, deleting, renaming, paging history,
// listing closed sessions and searching. Every store read happens outside
// the registry's lock, after the journal was flushed (so a read sees
// every write queued before it, unless the store is failing).

// Restore brings back every stored session that did not close (suspended
// by a clean shutdown, or attached or detached when the process died) as
// detached: resumable, its TTL counted from now, no worker running. Its
// history is read from the store on its first resume. Beyond MaxSessions,
// the least recently active are stored as closed (end_reason lru_evict).
// It logs one INFO "sessions restored" record and returns the count.
func (r *Registry) Restore(ctx context.Context) (int, error) {
	rows, err := r.cfg.Store.Restorable(ctx)
	if err != nil {
		return 0, err
	}
	slices.SortFunc(rows, func(a, b store.Session) int { return b.LastActive.Compare(a.LastActive) })
	now := time.Now()
	restored, evicted := 0, 0
	r.mu.Lock()
	live := r.liveCountLocked()
	for _, row := range rows {
		if r.sessions[row.ID] != nil {
			continue
		}
		if live >= r.cfg.MaxSessions {
			row.State, row.EndReason, row.ClosedAt = store.StateClosed, string(EndLRUEvict), now
			r.journal.putSession(row)
			evicted++
			continue
		}
		s := r.fromRow(row, now)
		s.state, s.detachedAt = StateDetached, now
		s.ttlTimer = time.AfterFunc(r.cfg.DetachedTTL, func() { r.expire(s) })
		r.sessions[s.id] = s
		r.saveLocked(s)
		restored++
		live++
	}
	r.mu.Unlock()
	r.log.Info("sessions restored", "count", restored, "evicted", evicted)
	return restored, nil
}

// fromRow makes the live form of a stored session, in state created, its
// history still in the store.
func (r *Registry) fromRow(row store.Session, now time.Time) *Session {
	return &Session{
		id: row.ID, owner: row.Owner, title: row.Title, createdAt: row.CreatedAt, liveSince: now, lastActive: row.LastActive,
		state: StateCreated, viewers: map[Viewer]struct{}{}, spawnMu: semaphore.NewWeighted(1),
		finished: make(chan struct{}), entrySeq: row.LastSeq, unloaded: row.LastSeq > 0, model: row.Model,
	}
}

// storedSession reads the stored row of sid when p may use it (the store
// is asked for p's rows only). Errors: ErrNotFound, *StoreError.
func (r *Registry) storedSession(ctx context.Context, p Principal, sid string) (store.Session, error) {
	row, err := r.cfg.Store.Get(ctx, p.User, sid)
	if err != nil {
		return store.Session{}, storeErr(err)
	}
	if !authorize(p, row.Owner, accessUse) {
		return store.Session{}, ErrNotFound
	}
	return row, nil
}

// storeErr wraps a store failure as a *StoreError and ErrNotFound as is.
func storeErr(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return ErrNotFound
	}
	return &StoreError{err}
}

// Reopen makes a closed session live again, viewed by v, with its stored
// history (the last HistoryMessages entries); a live one is resumed. It
// logs one INFO "session reopened" record. Errors: ErrNotFound (never
// stored, deleted, or ending right now), ErrCapacity, ErrViewerCapacity,
// ErrShuttingDown, *StoreError. Another user's session is ErrNotFound.
func (r *Registry) Reopen(ctx context.Context, v Viewer, sid string) (ResumeResult, error) {
	p := principalOf(v)
	r.mu.Lock()
	cur := r.sessions[sid]
	r.mu.Unlock()
	if cur != nil {
		return r.Resume(v, sid)
	}
	r.journal.flush(ctx)
	row, err := r.storedSession(ctx, p, sid)
	if err != nil {
		return ResumeResult{}, err
	}
	now := time.Now()
	s := r.fromRow(row, now)
	s.lastActive = now
	if err := r.load(ctx, s); err != nil {
		return ResumeResult{}, err
	}

	r.mu.Lock()
	switch {
	case r.closing:
		r.mu.Unlock()
		return ResumeResult{}, ErrShuttingDown
	case r.sessions[sid] != nil: // reopened meanwhile
		r.mu.Unlock()
		return r.Resume(v, sid)
	case v != nil && viewerGone(v):
		r.mu.Unlock()
		return ResumeResult{}, ErrNotFound
	}
	if err := r.viewerFullLocked(v); err != nil {
		r.mu.Unlock()
		return ResumeResult{}, err
	}
	evict, err := r.makeRoomLocked()
	if err != nil {
		r.mu.Unlock()
		return ResumeResult{}, err
	}
	r.sessions[sid] = s
	delete(r.ended, sid)
	r.saveLocked(s)
	r.viewLocked(s, v) // cannot fail: v is not gone and has room
	res := ResumeResult{Info: s.info(), History: slices.Clone(s.history)}
	r.mu.Unlock()
	if evict != nil {
		r.goTracked(func() { r.finish(evict) })
	}
	r.log.Info("session reopened", "sid", sid, "entries", row.LastSeq)
	return res, nil
}

// Delete removes a session of p's and its history for good: a live
// session is closed first (end_reason client_close). It logs one INFO
// "session deleted" record. Errors: ErrNotFound (neither live nor stored,
// or another user's), *StoreError.
func (r *Registry) Delete(ctx context.Context, p Principal, sid string) error {
	r.mu.Lock()
	s := r.sessions[sid]
	if s != nil && !authorize(p, s.owner, accessUse) {
		s = nil // the store has none of p's either: not found
	}
	r.mu.Unlock()
	if s != nil {
		r.end(s, EndClientClose)
		select { // it may have been ending by another path: its end is stored last
		case <-s.finished:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := r.journal.flush(ctx); err != nil {
		return &StoreError{err}
	}
	found, err := r.cfg.Store.Delete(ctx, p.User, sid)
	if err != nil {
		return &StoreError{err}
	}
	if !found && s == nil {
		return ErrNotFound
	}
	r.announce(p.User, Change{SessionID: sid, State: StateDeleted})
	r.log.Info("session deleted", "sid", sid)
	return nil
}

// Rename sets the title of a live or stored session of p's. Errors:
// ErrNotFound (also another user's), *StoreError.
func (r *Registry) Rename(ctx context.Context, p Principal, sid, title string) error {
	r.mu.Lock()
	if s := r.sessions[sid]; s != nil && s.live() && authorize(p, s.owner, accessUse) {
		s.title = title
		r.saveLocked(s)
		r.changedLocked(s)
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()
	r.journal.flush(ctx)
	row, err := r.storedSession(ctx, p, sid)
	if err != nil {
		return err
	}
	row.Title = title
	if err := r.cfg.Store.Apply(ctx, store.Batch{Sessions: []store.Session{row}}); err != nil {
		return &StoreError{err}
	}
	r.announce(row.Owner, Change{SessionID: sid, State: StateClosed, Title: title, EndReason: EndReason(row.EndReason)})
	return nil
}

// History returns up to limit entries of a live or stored session of p's
// with a seq below beforeSeq (0: the latest), oldest first, and whether
// older ones exist. Errors: ErrNotFound (also another user's), *StoreError.
func (r *Registry) History(ctx context.Context, p Principal, sid string, beforeSeq uint64, limit int) ([]Message, bool, error) {
	r.mu.Lock()
	s := r.sessions[sid]
	if s == nil || !s.live() || !authorize(p, s.owner, accessUse) {
		r.mu.Unlock()
		r.journal.flush(ctx)
		if _, err := r.storedSession(ctx, p, sid); err != nil {
			return nil, false, err
		}
		out, more, err := r.cfg.Store.History(ctx, sid, beforeSeq, limit)
		if err != nil {
			return nil, false, &StoreError{err}
		}
		return out, more, nil
	}
	unloaded := s.unloaded
	r.mu.Unlock()
	if unloaded {
		if err := r.load(ctx, s); err != nil {
			return nil, false, err
		}
	}

	// The latest entries come from memory; older ones from the store.
	r.mu.Lock()
	cut := s.entrySeq + 1 // the first seq memory holds from
	if len(s.history) > 0 {
		cut = s.history[0].Seq
	}
	var out []Message
	for i := len(s.history) - 1; i >= 0 && len(out) < limit; i-- {
		if beforeSeq == 0 || s.history[i].Seq < beforeSeq {
			out = append(out, s.history[i])
		}
	}
	r.mu.Unlock()
	slices.Reverse(out)
	if len(out) == limit {
		return out, out[0].Seq > 1, nil
	}
	below := cut
	if beforeSeq != 0 && beforeSeq < cut {
		below = beforeSeq
	}
	if below <= 1 {
		return out, false, nil
	}
	r.journal.flush(ctx)
	older, more, err := r.cfg.Store.History(ctx, sid, below, limit-len(out))
	if err != nil {
		return nil, false, &StoreError{err}
	}
	return append(older, out...), more, nil
}

// ListClosed returns p's closed sessions, newest closed first, closed
// before before (zero: any), at most limit, and whether more exist.
// Errors: *StoreError.
func (r *Registry) ListClosed(ctx context.Context, p Principal, before time.Time, limit int) ([]store.Session, bool, error) {
	r.journal.flush(ctx)
	out, more, err := r.cfg.Store.Closed(ctx, store.ListQuery{Owner: p.User, Before: before, Limit: limit})
	if err != nil {
		return nil, false, &StoreError{err}
	}
	return out, more, nil
}

// Search finds entries of p's live and closed sessions holding every word
// of query, newest first, at most limit. Any text is a valid query.
// Errors: *StoreError.
func (r *Registry) Search(ctx context.Context, p Principal, query string, limit int) ([]store.Hit, error) {
	r.journal.flush(ctx)
	hits, err := r.cfg.Store.Search(ctx, p.User, query, limit)
	if err != nil {
		return nil, &StoreError{err}
	}
	return hits, nil
}

// FlushStore writes what the registry queued for its store, waiting until
// ctx ends at most, and stops writing; what could not be written is logged
// at ERROR and the error returned. Call it once, after Shutdown and Wait,
// before closing the store.
func (r *Registry) FlushStore(ctx context.Context) error {
	return r.journal.close(ctx)
}
