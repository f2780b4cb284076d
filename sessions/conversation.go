package sessions

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/dashgate/dashgate/store"
)

// This file owns the conversation: its entries and their seqs, the bounds
// of what memory keeps, what is queued for the store (the one place that
// stamps the owner on stored rows: Session.row, written by Session.save and
// finish), the conversation sent with each prompt and the model a session
// uses; restoring sessions at start; and the registry's exported calls on
// the store (reopening, deleting, renaming, paging history, listing closed
// sessions, searching): each looks its session up and authorizes the call
// (findLocked, archive.stored), then hands the store's part to the archive
// (archive.go).

// conversation is a session's conversation: the latest entries in memory,
// their seqs, and the journal its rows and entries are queued to. It is
// the one place that stamps the owner on stored rows (putRow): nothing
// else writes a session's row or entries. It is guarded by the registry's
// mutex.
type conversation struct {
	sid     string
	owner   string   // Principal.User of who made it: authorize checks it, putRow stamps it
	journal *journal // nil: not stored (a terminal-only session, or one whose lease was lost); a live session's changes under its stream lock too
	// The node that holds it and the epoch it holds it under (Registry.Claim);
	// every row and entry is written under that epoch, so that once another
	// node claimed it the store refuses them (store.ErrFenced). Epoch 0:
	// no lease (writes unfenced, as before leases).
	node       string
	epoch      uint64
	leaseUntil time.Time // stored with a new row only: afterwards a renewal moves it
	history    []Message // the latest entries, by seq (bounded by Config.HistoryMessages and HistoryBytes)
	histBytes  int
	entrySeq   uint64 // the last entry seq given out
	unloaded   bool   // restored or reopened: its stored entries are not in history yet
}

// putRow queues row, the session's metadata, for the store, stamped with
// the owner.
func (c *conversation) putRow(row store.Session) {
	if c.journal == nil {
		return
	}
	row.ID, row.Owner = c.sid, c.owner
	row.Node, row.Epoch, row.LeaseUntil = c.node, c.epoch, c.leaseUntil
	c.journal.putSession(row)
}

// putEntry queues m for the store (a later put of its seq replaces it: a
// streaming reply's checkpoints).
func (c *conversation) putEntry(m Message) {
	if c.journal != nil {
		c.journal.putEntry(c.sid, c.epoch, m)
	}
}

// nextSeq gives out the next entry seq.
func (c *conversation) nextSeq() uint64 {
	c.entrySeq++
	return c.entrySeq
}

// add puts m in memory at its seq (the next one unless it has one,
// reserved earlier), at now unless it has a time, keeps memory within
// maxEntries and maxBytes, and queues m. It returns m as added.
func (c *conversation) add(m Message, maxEntries, maxBytes int) Message {
	if m.Seq == 0 {
		m.Seq = c.nextSeq()
	}
	if m.At.IsZero() {
		m.At = time.Now()
	}
	i := len(c.history)
	for i > 0 && c.history[i-1].Seq > m.Seq { // a reply whose seq was reserved at its prompt
		i--
	}
	c.history = slices.Insert(c.history, i, m)
	c.histBytes += len(m.Text)
	c.trim(maxEntries, maxBytes)
	c.putEntry(m)
	return m
}

// trim drops the oldest entries beyond the memory bounds (the store keeps
// them).
func (c *conversation) trim(maxEntries, maxBytes int) {
	for len(c.history) > maxEntries || (c.histBytes > maxBytes && len(c.history) > 1) {
		c.histBytes -= len(c.history[0].Text)
		c.history[0] = Message{}
		c.history = c.history[1:]
	}
}

// merge puts entries read from the store below those memory got since
// (once: a conversation loaded already ignores them).
func (c *conversation) merge(entries []Message, maxEntries, maxBytes int) {
	if !c.unloaded {
		return
	}
	c.unloaded = false
	if len(c.history) > 0 {
		first := c.history[0].Seq
		entries = slices.DeleteFunc(entries, func(e Message) bool { return e.Seq >= first })
	}
	c.history = append(entries, c.history...)
	c.histBytes = 0
	for _, e := range c.history {
		c.histBytes += len(e.Text)
	}
	c.trim(maxEntries, maxBytes)
}

// appendLocked adds an entry to the history of s (giving it the next seq
// unless it has one, reserved earlier) and queues it for the store. Memory
// keeps the latest entries within the bounds. r.mu must be held.
func (r *Registry) appendLocked(s *Session, m Message) {
	s.add(m, r.cfg.HistoryMessages, r.cfg.HistoryBytes)
	s.save()
}

// save queues the row of s for the store (a terminal-only session is not
// stored: it has no conversation). The registry's mutex must be held.
func (s *Session) save() { s.putRow(s.row()) }

// modelHistory is the conversation a prompt of seq promptSeq sends its
// worker: prompts, replies and tool entries before it, oldest first, the
// oldest dropped to fit budget bytes of text (Config.AgentContext). A
// tool run that was denied, or never answered (dashgate stopped first),
// is there as its tool_call and a tool_result saying it did not run and
// why, so the model knows. The registry's mutex must be held.
func (c *conversation) modelHistory(promptSeq uint64, budget int) []modelEntry {
	var out []modelEntry
	total := 0
	add := func(kind, role, text string) bool {
		if total+len(text) > budget {
			return false
		}
		total += len(text)
		out = append(out, modelEntry{Kind: kind, Role: role, Text: text})
		return true
	}
	denied := map[string]string{} // request_id -> by, of the resolutions seen so far (newer)
	approved := map[string]bool{}
	for i := len(c.history) - 1; i >= 0; i-- {
		e := c.history[i]
		if e.Seq >= promptSeq { // this turn's own prompt (and anything after it)
			continue
		}
		switch e.Kind {
		case store.KindPrompt, store.KindReply, KindToolCall, KindToolResult:
			if !add(e.Kind, e.Role, e.Text+sentEarlier(e.Attachments)) {
				return reversed(out)
			}
		case KindApprovalResolved:
			var d struct {
				RequestID string `json:"request_id"`
				Choice    string `json:"choice"`
				By        string `json:"by"`
			}
			if json.Unmarshal(e.Data, &d) == nil {
				if d.Choice == ChoiceDeny {
					denied[d.RequestID] = d.By
				} else {
					approved[d.RequestID] = true // its run has tool entries of its own
				}
			}
		case KindApprovalRequest:
			var d struct {
				RequestID string `json:"request_id"`
			}
			json.Unmarshal(e.Data, &d)
			if approved[d.RequestID] {
				continue
			}
			by, ok := denied[d.RequestID]
			if !ok {
				by = byRestart
			}
			// Newest first, as the loop goes: the result, then the call.
			if !add(KindToolResult, store.RoleTool, notRun(by)) || !add(KindToolCall, store.RoleTool, e.Text) {
				return reversed(out)
			}
		}
	}
	return reversed(out)
}

// byRestart stands for the resolution an approval never got: dashgate
// stopped before it was answered or denied (a crash; a clean stop denies
// it by close).
const byRestart = "restart"

// notRunWhy says, for the model, why a run denied by whom did not run.
var notRunWhy = map[string]string{
	ByViewer:    "the user denied it",
	ByTimeout:   "nobody approved it in time",
	ByInterrupt: "the user interrupted the turn",
	ByDetach:    "the user left before approving it",
	ByClose:     "the session ended before it was approved",
	byRestart:   "dashgate restarted before it was approved",
}

// notRun is the tool result the model gets for a run denied by by.
func notRun(by string) string {
	return "not run: " + cmp.Or(notRunWhy[by], "it was denied")
}

func reversed(out []modelEntry) []modelEntry {
	slices.Reverse(out)
	if out == nil {
		out = []modelEntry{}
	}
	return out
}

// modelEntry is an entry of a prompt's history (a struct, not a map: it is
// encoded on every prompt's path to its first delta).
type modelEntry struct {
	Kind string `json:"kind"`
	Role string `json:"role"`
	Text string `json:"text"`
}

// Configure sets the model of sid's prompts ("" for the worker's
// default); it is kept with the session. v becomes a viewer of it.
// Errors: ErrNotFound, ErrViewerCapacity.
func (r *Registry) Configure(v Viewer, sid, model string) error {
	s, err := r.use(v, sid)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s.model = model
	s.save()
	return nil
}

// restore brings back rows, the stored sessions Claim took, that did not
// close (suspended by a clean shutdown, or attached or detached when the
// process died) as detached: resumable, its TTL counted from now, no
// worker running. Its history is read from the store on its first
// resume. Beyond MaxSessions, and beyond MaxSessionsPerUser of one owner,
// the least recently active are stored as closed (end_reason lru_evict).
// It logs one INFO "sessions restored" record and returns the count.
func (r *Registry) restore(rows []store.Session) int {
	slices.SortFunc(rows, func(a, b store.Session) int { return b.LastActive.Compare(a.LastActive) })
	now := time.Now()
	restored, evicted := 0, 0
	r.mu.Lock()
	for _, row := range rows {
		if r.sessions[row.ID] != nil {
			continue
		}
		if _, err := r.admission.admit(row.Owner, admitRestore); err != nil {
			row.State, row.EndReason, row.ClosedAt = store.StateClosed, string(EndLRUEvict), now
			c := conversation{sid: row.ID, owner: row.Owner, journal: r.journal, node: row.Node, epoch: row.Epoch}
			c.putRow(row)
			evicted++
			continue
		}
		s := r.archive.live(row, now)
		s.state, s.detachedAt = StateDetached, now
		s.ttlTimer = time.AfterFunc(r.cfg.DetachedTTL, func() { r.expire(s) })
		r.sessions[s.id] = s
		r.usage.addSession(s)
		s.save()
		restored++
	}
	r.mu.Unlock()
	r.log.Info("sessions restored", "count", restored, "evicted", evicted)
	return restored
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
// stored, deleted, or ending right now), ErrCapacity (a *UserCapacityError
// at MaxSessionsPerUser, when no session of the owner's is detached to
// evict), ErrViewerCapacity, ErrShuttingDown, *StoreError. Another user's
// session is ErrNotFound.
func (r *Registry) Reopen(ctx context.Context, v Viewer, sid string) (ResumeResult, error) {
	p := principalOf(v)
	r.mu.Lock()
	cur := r.findEndingLocked(p, sid, accessUse) // another user's goes on as a missing one
	r.mu.Unlock()
	if cur != nil {
		return r.Resume(v, sid)
	}
	if res, ok, err := r.reopenAdopting(ctx, v, sid); ok { // a cluster's live session is adopted, never reopened (adopt.go)
		return res, err
	}
	r.journal.flush(ctx)
	row, err := r.archive.stored(ctx, p, sid)
	if err != nil {
		return ResumeResult{}, err
	}
	now := time.Now()
	s := r.archive.live(row, now)
	s.lastActive = now
	if err := r.archive.load(ctx, s); err != nil {
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
	if err := r.viewers.full(v); err != nil {
		r.mu.Unlock()
		return ResumeResult{}, err
	}
	evict, err := r.admission.admit(s.owner, admitReopen)
	if err != nil {
		r.mu.Unlock()
		r.finishAll(evict)
		return ResumeResult{}, err
	}
	r.sessions[sid] = s
	r.usage.addSession(s)
	r.admission.noteTitle(s.owner, s.title)
	r.ended.forget(sid)
	s.save()
	r.viewLocked(s, v) // cannot fail: v is not gone and has room
	res := ResumeResult{Info: s.info(), History: slices.Clone(s.history)}
	r.mu.Unlock()
	r.finishAll(evict)
	r.log.Info("session reopened", "sid", sid, "user", s.owner, "entries", row.LastSeq)
	return res, nil
}

// Delete removes a session of p's and its history for good: a live
// session is closed first (end_reason client_close). It logs one INFO
// "session deleted" record. Errors: ErrNotFound (neither live nor stored,
// or another user's), *StoreError.
func (r *Registry) Delete(ctx context.Context, p Principal, sid string) error {
	owner, ok := p.owner()
	if !ok {
		return ErrNotFound
	}
	r.mu.Lock()
	s := r.findEndingLocked(p, sid, accessUse) // another user's: the store has none of p's either, not found
	r.mu.Unlock()
	if s != nil {
		r.end(s, EndClientClose)
		select { // it may have been ending by another path: its end is stored last
		case <-s.finished:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	found, err := r.archive.remove(ctx, owner, sid)
	if err != nil {
		return err
	}
	if !found && s == nil {
		return ErrNotFound
	}
	r.tell.announce(owner, Change{SessionID: sid, State: StateDeleted})
	r.log.Info("session deleted", "sid", sid, "user", owner)
	return nil
}

// Rename sets the title of a live or stored session of p's. Errors:
// ErrNotFound (also another user's), *StoreError.
func (r *Registry) Rename(ctx context.Context, p Principal, sid, title string) error {
	r.mu.Lock()
	if s := r.findLocked(p, sid, accessUse); s != nil {
		s.title, s.titled = title, true
		r.admission.noteTitle(s.owner, title)
		s.save()
		r.tell.changedLocked(s)
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()
	r.journal.flush(ctx)
	row, err := r.archive.stored(ctx, p, sid)
	if err != nil {
		return err
	}
	if err := r.archive.rename(ctx, row.Owner, sid, title); err != nil {
		return err
	}
	r.mu.Lock()
	r.admission.noteTitle(row.Owner, title)
	r.mu.Unlock()
	r.tell.announce(row.Owner, Change{SessionID: sid, State: StateClosed, Title: title, EndReason: EndReason(row.EndReason)})
	return nil
}

// History returns up to limit entries of a live or stored session of p's
// with a seq below beforeSeq (0: the latest), oldest first, and whether
// older ones exist. Errors: ErrNotFound (also another user's), *StoreError.
func (r *Registry) History(ctx context.Context, p Principal, sid string, beforeSeq uint64, limit int) ([]Message, bool, error) {
	r.mu.Lock()
	s := r.findLocked(p, sid, accessUse)
	r.mu.Unlock()
	if s != nil {
		return r.archive.history(ctx, s, beforeSeq, limit)
	}
	r.journal.flush(ctx)
	row, err := r.archive.stored(ctx, p, sid)
	if err != nil {
		return nil, false, err
	}
	return r.archive.storedHistory(ctx, row.Owner, sid, beforeSeq, limit)
}

// ListClosed returns p's closed sessions, newest closed first, closed
// before before (zero: any), at most limit, and whether more exist; none
// for the admin token's principal, which owns nothing. Errors:
// *StoreError.
func (r *Registry) ListClosed(ctx context.Context, p Principal, before time.Time, limit int) ([]store.Session, bool, error) {
	owner, ok := p.owner()
	if !ok {
		return nil, false, nil
	}
	return r.archive.closed(ctx, owner, before, limit)
}

// Search finds entries of p's live and closed sessions holding every word
// of query, newest first, at most limit (none for the admin token's
// principal, which owns nothing). Any text is a valid query. Errors:
// *StoreError.
func (r *Registry) Search(ctx context.Context, p Principal, query string, limit int) ([]store.Hit, error) {
	owner, ok := p.owner()
	if !ok {
		return nil, nil
	}
	return r.archive.search(ctx, owner, query, limit)
}

// FlushStore writes what the registry queued for its store, waiting until
// ctx ends at most, and stops writing; what could not be written is logged
// at ERROR and the error returned. Call it once, after Shutdown and Wait,
// before closing the store.
//
// After a Claim, a clean flush also releases the node's leases (so that
// another node may claim its sessions at once); a flush that lost writes
// leaves them to expire.
func (r *Registry) FlushStore(ctx context.Context) error {
	if err := r.journal.close(ctx); err != nil {
		return err
	}
	return r.lease.release(ctx)
}
