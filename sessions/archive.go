package sessions

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/dashgate/dashgate/store"
	"golang.org/x/sync/semaphore"
)

// This file owns the archive: the registry's reads (and the rename and
// delete) of conversations in the store, for sessions live here and
// stored ones: a session's row, its history page by page, a restored or
// reopened session's latest entries, the closed list, search, a whole
// transcript. It is a view beside the registry's lock: the registry's
// exported methods look the session up and authorize the call first
// (findLocked, archive.stored) and hand it only what passed; the archive
// reads the store outside the lock, after the journal was flushed (so a
// read sees every write queued before it, unless the store is failing),
// and takes the registry's lock only to read or merge a live session's
// entries in memory.

// archive is the store-facing side of the registry.
type archive struct {
	store      store.Store
	journal    *journal    // the registry's write-behind queue, flushed before a read
	mu         *sync.Mutex // the registry's lock: a live session's memory is read and merged under it
	maxEntries int         // Config.HistoryMessages: the entries memory keeps of a session
	maxBytes   int         // Config.HistoryBytes
}

// stored is findLocked's step for a session not live here: the stored
// row of sid when p may use it (the store is asked for p's rows only; the
// admin token's principal has none). Errors: ErrNotFound, *StoreError.
func (a *archive) stored(ctx context.Context, p Principal, sid string) (store.Session, error) {
	owner, ok := p.owner()
	if !ok {
		return store.Session{}, ErrNotFound
	}
	row, err := a.row(ctx, owner, sid)
	if err != nil {
		return store.Session{}, err
	}
	if !authorize(p, row.Owner, accessUse) {
		return store.Session{}, ErrNotFound
	}
	return row, nil
}

// live makes the live form of a stored session, in state created, its
// history still in the store, its writes queued on the journal.
func (a *archive) live(row store.Session, now time.Time) *Session {
	return &Session{
		id: row.ID, title: row.Title, createdAt: row.CreatedAt, liveSince: now, lastActive: row.LastActive,
		state: StateCreated, viewers: map[Viewer]struct{}{}, spawnMu: semaphore.NewWeighted(1),
		finished: make(chan struct{}), model: row.Model, agent: row.Agent, agentSession: row.AgentSession,
		conversation: conversation{sid: row.ID, owner: row.Owner, journal: a.journal, entrySeq: row.LastSeq, unloaded: row.LastSeq > 0,
			node: row.Node, epoch: row.Epoch},
	}
}

// row is sid's stored row when owner has it. Errors: ErrNotFound,
// *StoreError. It does not authorize: stored does.
func (a *archive) row(ctx context.Context, owner, sid string) (store.Session, error) {
	row, err := a.store.Get(ctx, owner, sid)
	if err != nil {
		return store.Session{}, storeErr(err)
	}
	return row, nil
}

// load reads the latest stored entries of a restored or reopened session
// into its memory, below the entries it got since. Errors: *StoreError.
func (a *archive) load(ctx context.Context, s *Session) error {
	entries, _, err := a.store.HistoryFor(ctx, s.owner, s.id, 0, a.maxEntries)
	if err != nil {
		return &StoreError{err}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	s.merge(entries, a.maxEntries, a.maxBytes)
	return nil
}

// history returns up to limit entries of s, live here when it was looked
// up, with a seq below beforeSeq (0: the latest), oldest first, and
// whether older ones exist: the latest from memory (loaded first when s
// was restored or reopened), older ones from the store. Errors:
// *StoreError.
func (a *archive) history(ctx context.Context, s *Session, beforeSeq uint64, limit int) ([]Message, bool, error) {
	a.mu.Lock()
	unloaded := s.unloaded
	a.mu.Unlock()
	if unloaded {
		if err := a.load(ctx, s); err != nil {
			return nil, false, err
		}
	}
	a.mu.Lock()
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
	a.mu.Unlock()
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
	a.journal.flush(ctx)
	older, more, err := a.storedHistory(ctx, s.owner, s.id, below, limit-len(out))
	if err != nil {
		return nil, false, err
	}
	return append(older, out...), more, nil
}

// storedHistory is history for a session not live here, owner's, from the
// store alone (the caller flushed the journal). Errors: *StoreError.
func (a *archive) storedHistory(ctx context.Context, owner, sid string, beforeSeq uint64, limit int) ([]Message, bool, error) {
	out, more, err := a.store.HistoryFor(ctx, owner, sid, beforeSeq, limit)
	if err != nil {
		return nil, false, &StoreError{err}
	}
	return out, more, nil
}

// transcriptPage is how many entries one read of an export takes.
const transcriptPage = 500

// entries is the whole history of session sid, owner's, oldest first, at
// most the latest MaxTranscriptEntries, read page by page as history
// does: through s, when it was live here when looked up (nil: stored
// only). Errors: *StoreError, ctx's error.
func (a *archive) entries(ctx context.Context, s *Session, owner, sid string) ([]Message, error) {
	var pages [][]Message
	n := 0
	for before := uint64(0); n < MaxTranscriptEntries; {
		limit := min(transcriptPage, MaxTranscriptEntries-n)
		var page []Message
		var more bool
		var err error
		if s != nil {
			page, more, err = a.history(ctx, s, before, limit)
		} else {
			page, more, err = a.storedHistory(ctx, owner, sid, before, limit)
		}
		if err != nil {
			return nil, err
		}
		if len(page) == 0 {
			break
		}
		pages = append(pages, page)
		n += len(page)
		before = page[0].Seq
		if !more {
			break
		}
	}
	slices.Reverse(pages)
	out := slices.Concat(pages...)
	if out == nil {
		out = []Message{}
	}
	return out, nil
}

// rename sets the stored title of owner's session sid (only the title: a
// write beside this one keeps its fields). Errors: ErrNotFound (deleted
// meanwhile), *StoreError.
func (a *archive) rename(ctx context.Context, owner, sid, title string) error {
	found, err := a.store.Rename(ctx, owner, sid, title)
	if err != nil {
		return &StoreError{err}
	}
	if !found {
		return ErrNotFound
	}
	return nil
}

// remove deletes owner's session sid and its history from the store,
// after what the journal holds of it, and reports whether it was there.
// Errors: *StoreError.
func (a *archive) remove(ctx context.Context, owner, sid string) (bool, error) {
	if err := a.journal.flush(ctx); err != nil {
		return false, &StoreError{err}
	}
	found, err := a.store.Delete(ctx, owner, sid)
	if err != nil {
		return false, &StoreError{err}
	}
	return found, nil
}

// closed is owner's closed sessions, newest closed first, closed before
// before (zero: any), at most limit, and whether more exist. Errors:
// *StoreError.
func (a *archive) closed(ctx context.Context, owner string, before time.Time, limit int) ([]store.Session, bool, error) {
	a.journal.flush(ctx)
	out, more, err := a.store.Closed(ctx, store.ListQuery{Owner: owner, Before: before, Limit: limit})
	if err != nil {
		return nil, false, &StoreError{err}
	}
	return out, more, nil
}

// search is the entries of owner's sessions holding every word of query,
// newest first, at most limit. Errors: *StoreError.
func (a *archive) search(ctx context.Context, owner, query string, limit int) ([]store.Hit, error) {
	a.journal.flush(ctx)
	hits, err := a.store.Search(ctx, owner, query, limit)
	if err != nil {
		return nil, &StoreError{err}
	}
	return hits, nil
}
