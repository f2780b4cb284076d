package sessions

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/dashgate/dashgate/store"
)

// journal is the registry's write-behind queue to its store. The registry
// queues rows under its lock (a map write, no I/O); a drain goroutine,
// started when the queue fills and gone when it is empty, applies them in
// batches outside the lock, each batch journalDelay after the one before
// (a flush cuts the wait short). Rows of one key coalesce: a streaming
// reply checkpointed ten times is written once if the store is slow. The
// delay keeps the write of a turn's prompt off the moment its first delta
// is relayed (on two cores, an immediate SQLite commit beside it cost a
// millisecond of first-delta latency; BENCHMARKS.md).
//
// When the store fails (disk full, I/O error) the rows stay queued and the
// drain retries with backoff, in parts: session by session, each
// session's entries in seq order, at most journalChunk a transaction, so
// that when less space comes back than the backlog needs, what fits is
// saved and only the rest waits. The first failure of a burst logs one
// ERROR record and the first full success after it one INFO record.
//
// Beyond backlog queued entries (Config.StoreBacklog, --store-backlog;
// journalBacklog by default), new entries are not queued: they stay in
// the sessions' memory only and are lost to the store. The first drop of
// a burst logs one WARN "store backlog full" record; the burst's end (the
// first full success after it, or close) logs exactly one ERROR "store
// entries dropped" record that counts them: dropped_entries (the count),
// sessions (how many sessions lost some) and lost (per session, up to
// journalLostSessions of them, its sid, how many entries and their first
// and last seq).
type journal struct {
	st      store.Store
	log     *slog.Logger
	backlog int // bound of the queued entries

	mu       sync.Mutex
	sessions map[string]store.Session
	entries  map[entryKey]store.SessionEntry
	order    []entryKey // entries in the order they were first queued
	deletes  []string
	inflight map[string]bool // the sids of the rows of the batch being applied
	running  bool            // a drain goroutine runs
	stopping bool            // close: give up retrying
	queued   uint64
	applied  uint64        // every change queued up to this count is stored
	progress chan struct{} // closed and replaced when applied moves or the drain stops

	failing  bool      // the current burst of failures was logged
	failFrom time.Time // when the current burst began (failing)
	dropping bool      // the backlog was full and entries were dropped in this burst
	dropped  int
	dropLog  []lostRange     // what was dropped in this burst, per session, the first journalLostSessions
	dropAt   map[string]int  // index in dropLog by sid
	dropSids map[string]bool // every session that lost entries in this burst

	hurry chan struct{} // cuts the drain's delay short (flush, close)
	wg    sync.WaitGroup

	// onFenced is told, outside the journal's lock, the sessions whose
	// writes the store refused as another node's (store.ErrFenced): their
	// queue was dropped. Set once, before the first write.
	onFenced func(sids []string)
	// onOutage is told, outside the journal's lock, the sessions with
	// changes the store could not take (saved false; each once per
	// outage, when its first unsaved change fails) and, once a write
	// succeeds again, those it told (saved true). Set once, before the
	// first write; nil: nobody is told.
	onOutage func(saved bool, sids []string)
	unsaved  map[string]bool // the sessions told unsaved in this outage
}

type entryKey struct {
	sid string
	seq uint64
}

// journalBacklog is the default bound of the queued entries while the
// store fails (Config.StoreBacklog).
const journalBacklog = 100_000

// journalRetry bounds the backoff between attempts on a failing store.
const journalRetry = 2 * time.Second

// journalDelay is how long the drain gathers writes before a batch.
const journalDelay = 20 * time.Millisecond

// journalChunk bounds the entries of one transaction of a retry.
const journalChunk = 256

// journalLostSessions bounds the sessions a loss record names.
const journalLostSessions = 20

// newJournal returns the journal of st, its queued entries bounded by
// journalBacklog (see withBacklog).
func newJournal(st store.Store, log *slog.Logger) *journal {
	return &journal{
		st: st, log: log, backlog: journalBacklog,
		inflight: map[string]bool{},
		sessions: map[string]store.Session{},
		entries:  map[entryKey]store.SessionEntry{},
		progress: make(chan struct{}),
		hurry:    make(chan struct{}, 1),
	}
}

// withBacklog sets the bound of j's queued entries to n (<= 0: keeps
// journalBacklog), before its first write, and returns j.
func (j *journal) withBacklog(n int) *journal {
	if n > 0 {
		j.backlog = n
	}
	return j
}

// hasten cuts the drain's current delay short.
func (j *journal) hasten() {
	select {
	case j.hurry <- struct{}{}:
	default:
	}
}

// putSession queues a session row; a later row of the same session
// replaces it.
func (j *journal) putSession(row store.Session) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.sessions[row.ID] = row
	j.kickLocked()
}

// putEntry queues an entry, written under epoch (0: unfenced); a later
// entry with the same seq replaces it.
func (j *journal) putEntry(sid string, epoch uint64, e store.Entry) {
	j.mu.Lock()
	defer j.mu.Unlock()
	k := entryKey{sid, e.Seq}
	if _, ok := j.entries[k]; !ok {
		if len(j.order) >= j.backlog {
			j.dropLocked(k)
			return
		}
		j.order = append(j.order, k)
	}
	j.entries[k] = store.SessionEntry{SessionID: sid, Epoch: epoch, Entry: e}
	j.kickLocked()
}

// dropLocked counts the entry k, not queued: the backlog is full. The
// first drop of a burst logs the WARN record (see journal).
func (j *journal) dropLocked(k entryKey) {
	j.dropped++
	if !j.dropping {
		j.dropping = true
		j.log.Warn("store backlog full", "backlog", j.backlog, "note", "new history entries are kept in memory only; the loss is counted when the store is back")
	}
	if j.dropSids == nil {
		j.dropSids, j.dropAt = map[string]bool{}, map[string]int{}
	}
	j.dropSids[k.sid] = true
	i, ok := j.dropAt[k.sid]
	if !ok {
		if len(j.dropLog) >= journalLostSessions {
			return
		}
		i = len(j.dropLog)
		j.dropAt[k.sid] = i
		j.dropLog = append(j.dropLog, lostRange{SID: k.sid, FromSeq: k.seq})
	}
	r := &j.dropLog[i]
	r.Entries++
	r.FromSeq, r.ToSeq = min(r.FromSeq, k.seq), max(r.ToSeq, k.seq)
}

// endDropsLocked ends a burst of drops: the one ERROR record counting
// them (see journal), when there were any.
func (j *journal) endDropsLocked() {
	if j.dropped > 0 {
		j.log.Error("store entries dropped", "dropped_entries", j.dropped, "sessions", len(j.dropSids), "lost", j.dropLog,
			"backlog", j.backlog, "note", "the store's backlog was full: these entries are in the sessions' memory only")
	}
	j.dropping, j.dropped = false, 0
	j.dropLog, j.dropAt, j.dropSids = nil, nil, nil
}

// rowsQueued returns the sids of held whose session row is queued or
// being applied: not known to be stored yet (a renewal's question).
func (j *journal) rowsQueued(held map[string]uint64) map[string]bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := map[string]bool{}
	for id := range held {
		if _, ok := j.sessions[id]; ok || j.inflight[id] {
			out[id] = true
		}
	}
	return out
}

// kickLocked counts a queued change and starts the drain when none runs.
func (j *journal) kickLocked() {
	j.queued++
	if !j.running && !j.stopping {
		j.running = true
		j.wg.Add(1)
		go j.drain()
	}
}

// taken is what takeLocked moved out of the queue, to be made a batch
// outside the journal's lock.
type taken struct {
	sessions map[string]store.Session
	entries  map[entryKey]store.SessionEntry
	order    []entryKey
	deletes  []string
}

func (tk taken) empty() bool {
	return len(tk.sessions) == 0 && len(tk.order) == 0 && len(tk.deletes) == 0
}

// batch is tk as a store batch: the rows, the entries in the order they
// were first queued, the deletes.
func (tk taken) batch() store.Batch {
	var b store.Batch
	for _, row := range tk.sessions {
		b.Sessions = append(b.Sessions, row)
	}
	for _, k := range tk.order {
		b.Entries = append(b.Entries, tk.entries[k])
	}
	b.Deletes = tk.deletes
	return b
}

// takeLocked moves everything queued out of the queue and returns it
// and the count it covers. It swaps the maps, whatever their size: the
// puts of 300 streaming turns' checkpoints waited behind a drain that
// copied them under the lock (BENCHMARKS.md, issue 28).
func (j *journal) takeLocked() (taken, uint64) {
	tk := taken{sessions: j.sessions, entries: j.entries, order: j.order, deletes: j.deletes}
	j.sessions = map[string]store.Session{}
	j.entries = map[entryKey]store.SessionEntry{}
	j.order, j.deletes = nil, nil
	return tk, j.queued
}

// requeueLocked puts a failed batch back under what was queued since:
// newer rows win.
func (j *journal) requeueLocked(b store.Batch) {
	for _, row := range b.Sessions {
		if _, ok := j.sessions[row.ID]; !ok {
			j.sessions[row.ID] = row
		}
	}
	var order []entryKey
	for _, e := range b.Entries {
		k := entryKey{e.SessionID, e.Seq}
		if _, ok := j.entries[k]; !ok {
			j.entries[k] = e
			order = append(order, k)
		}
	}
	j.order = append(order, j.order...)
	j.deletes = append(b.Deletes, j.deletes...)
}

func (j *journal) signalLocked() {
	close(j.progress)
	j.progress = make(chan struct{})
}

func (j *journal) drain() {
	defer j.wg.Done()
	backoff := 50 * time.Millisecond
	for {
		j.wait(journalDelay)
		j.mu.Lock()
		tk, upto := j.takeLocked()
		if tk.empty() || j.stopping && j.failing {
			if !tk.empty() {
				j.requeueLocked(tk.batch())
			}
			j.running = false
			j.signalLocked()
			j.mu.Unlock()
			return
		}
		retry := j.failing
		for id := range tk.sessions {
			j.inflight[id] = true
		}
		j.mu.Unlock()
		b := tk.batch()

		var err error
		rest := b
		if retry {
			rest, err = j.applyParts(b)
		} else {
			err = j.st.Apply(context.Background(), b)
		}

		var fenced *store.FencedError
		if errors.As(err, &fenced) {
			j.fenced(rest, upto, fenced.SessionIDs)
			continue // the rest was no failure: it is written at once
		}
		j.mu.Lock()
		// A row of the batch is either stored now or queued again: never,
		// under the lock, in neither place (rowsQueued).
		clear(j.inflight)
		if err != nil {
			j.requeueLocked(rest)
			if !j.failing {
				j.failing, j.failFrom = true, time.Now()
				j.log.Warn("store write failed", "err", err, "pending_entries", len(j.order), "note", "chat goes on from memory; writes are retried")
			}
			if errors.Is(err, store.ErrClosed) {
				j.stopping = true // nothing will ever be written: close says what is lost
			}
			j.signalLocked() // Flush callers see the failure
			stop := j.stopping
			var told []string
			if !stop {
				told = j.newlyUnsavedLocked(rest)
			}
			j.mu.Unlock()
			if stop {
				continue // give up at once (the loop ends above)
			}
			if len(told) > 0 && j.onOutage != nil {
				j.onOutage(false, told)
			}
			j.wait(backoff)
			backoff = min(2*backoff, journalRetry)
			continue
		}
		j.applied = max(j.applied, upto)
		if j.failing || j.dropping {
			j.log.Info("store writes resumed", "dropped_entries", j.dropped)
			j.failing = false
			j.endDropsLocked()
		}
		var saved []string
		for id := range j.unsaved {
			saved = append(saved, id)
		}
		clear(j.unsaved)
		backoff = 50 * time.Millisecond
		j.signalLocked()
		j.mu.Unlock()
		if len(saved) > 0 && j.onOutage != nil {
			j.onOutage(true, saved)
		}
	}
}

// outage reports whether the store refuses writes now, since when, and
// how many entries wait for it.
func (j *journal) outage() (failing bool, since time.Time, waiting int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.failing, j.failFrom, len(j.order)
}

// newlyUnsavedLocked notes the sessions of b (a batch the store refused)
// not yet told in this outage and returns them. j.mu must be held.
func (j *journal) newlyUnsavedLocked(b store.Batch) []string {
	var out []string
	note := func(id string) {
		if !j.unsaved[id] {
			if j.unsaved == nil {
				j.unsaved = map[string]bool{}
			}
			j.unsaved[id] = true
			out = append(out, id)
		}
	}
	for _, s := range b.Sessions {
		note(s.ID)
	}
	for _, e := range b.Entries {
		note(e.SessionID)
	}
	return out
}

// fenced drops, from rest (the part of a batch the store did not write)
// and from what was queued since, every row and entry of sids, which
// another node holds now; it requeues what is left of rest and tells
// onFenced. upto is the count the batch covered.
func (j *journal) fenced(rest store.Batch, upto uint64, sids []string) {
	drop := map[string]bool{}
	for _, id := range sids {
		drop[id] = true
	}
	var keep store.Batch
	for _, row := range rest.Sessions {
		if !drop[row.ID] {
			keep.Sessions = append(keep.Sessions, row)
		}
	}
	for _, e := range rest.Entries {
		if !drop[e.SessionID] {
			keep.Entries = append(keep.Entries, e)
		}
	}
	keep.Deletes = rest.Deletes
	j.mu.Lock()
	clear(j.inflight) // as in drain: requeued below, under this lock
	for id := range drop {
		delete(j.sessions, id)
	}
	j.order = slices.DeleteFunc(j.order, func(k entryKey) bool {
		if drop[k.sid] {
			delete(j.entries, k)
			return true
		}
		return false
	})
	if keep.Empty() {
		j.applied = max(j.applied, upto) // everything of the batch is written or dropped
	} else {
		j.requeueLocked(keep)
	}
	j.signalLocked()
	j.mu.Unlock()
	j.log.Debug("store write fenced", "sids", sids)
	if j.onFenced != nil {
		j.onFenced(sids)
	}
}

// applyParts applies b in parts, in order, and stops at the first that
// fails: it returns that error and what was not stored (that part and
// the ones after it).
func (j *journal) applyParts(b store.Batch) (store.Batch, error) {
	ps := parts(b)
	for i, p := range ps {
		err := j.st.Apply(context.Background(), p)
		if err == nil {
			continue
		}
		var rest store.Batch
		for _, p := range ps[i:] {
			rest.Sessions = append(rest.Sessions, p.Sessions...)
			rest.Entries = append(rest.Entries, p.Entries...)
			rest.Deletes = append(rest.Deletes, p.Deletes...)
		}
		return rest, err
	}
	return store.Batch{}, nil
}

// parts splits b into batches of one session each: its row (in its first
// part) and at most journalChunk of its entries, in the order of b.Entries
// (the order they were first queued: a session's seq order). Sessions
// come in the order their first entry is in b.Entries (the order it was
// queued), then those with a row and no entry; the deletes come last,
// after the rows they may delete, as in one Apply.
func parts(b store.Batch) []store.Batch {
	rows := map[string]store.Session{}
	for _, row := range b.Sessions {
		rows[row.ID] = row
	}
	var sids []string
	bySession := map[string][]store.SessionEntry{}
	for _, e := range b.Entries {
		if _, ok := bySession[e.SessionID]; !ok {
			sids = append(sids, e.SessionID)
		}
		bySession[e.SessionID] = append(bySession[e.SessionID], e)
	}
	var rowOnly []string
	for id := range rows {
		if _, ok := bySession[id]; !ok {
			rowOnly = append(rowOnly, id)
		}
	}
	slices.Sort(rowOnly)
	var out []store.Batch
	for _, sid := range append(sids, rowOnly...) {
		es := bySession[sid]
		var p store.Batch
		if row, ok := rows[sid]; ok {
			p.Sessions = []store.Session{row}
		}
		for {
			n := min(len(es), journalChunk)
			p.Entries, es = es[:n], es[n:]
			out = append(out, p)
			if len(es) == 0 {
				break
			}
			p = store.Batch{}
		}
	}
	if len(b.Deletes) > 0 {
		out = append(out, store.Batch{Deletes: b.Deletes})
	}
	return out
}

// wait pauses the drain for d, or until a flush or close hastens it.
func (j *journal) wait(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-j.hurry:
	}
}

// errStoreFailing is Flush's error while the store refuses writes.
var errStoreFailing = errors.New("the conversation store is failing")

// flush waits until every change queued before the call is stored, the
// store fails, or ctx ends.
func (j *journal) flush(ctx context.Context) error {
	j.hasten()
	j.mu.Lock()
	target := j.queued
	for {
		if j.applied >= target {
			j.mu.Unlock()
			return nil
		}
		if j.failing || !j.running {
			j.mu.Unlock()
			return errStoreFailing
		}
		ch := j.progress
		j.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
		j.hasten() // the drain may have started a new delay meanwhile
		j.mu.Lock()
	}
}

// retryNow has a failing drain try again at once and then flushes: nil
// when that attempt stored everything queued before the call.
func (j *journal) retryNow(ctx context.Context) error {
	j.mu.Lock()
	if !j.running || j.stopping {
		j.mu.Unlock()
		return errStoreFailing
	}
	ch := j.progress
	j.mu.Unlock()
	j.hasten()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-ch:
	}
	return j.flush(ctx)
}

// close flushes until ctx ends (a failing store gets one more attempt at
// once), then stops the drain; what is still queued
// is lost and one ERROR record says how much and which (lost: per session,
// up to journalLostSessions of them, its sid, how many entries and their
// first and last seq; entries 0 for a session row alone). It returns that
// error.
func (j *journal) close(ctx context.Context) error {
	err := j.flush(ctx)
	if errors.Is(err, errStoreFailing) {
		// The store may be back while the drain waits out its backoff (an
		// outage that just ended): one more attempt now, not after it.
		err = j.retryNow(ctx)
	}
	if err != nil && !errors.Is(err, errStoreFailing) {
		err = errors.Join(errStoreFailing, err)
	}
	j.mu.Lock()
	j.stopping = true
	j.signalLocked()
	j.mu.Unlock()
	j.hasten()
	j.wg.Wait()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.dropping {
		j.endDropsLocked() // the burst of drops ends here: counted once
	}
	if n := len(j.sessions) + len(j.order) + len(j.deletes); n > 0 {
		j.log.Error("store: changes lost at shutdown", "sessions", len(j.sessions), "entries", len(j.order),
			"deletes", len(j.deletes), "lost", j.lostLocked(), "err", err)
		return err
	}
	return nil
}

// lostRange is what close could not store of one session.
type lostRange struct {
	SID     string `json:"sid"`
	Entries int    `json:"entries"`
	FromSeq uint64 `json:"from_seq,omitempty"`
	ToSeq   uint64 `json:"to_seq,omitempty"`
}

// lostLocked is what is still queued, per session, in the order of first
// queueing (rows alone after), at most journalLostSessions sessions.
func (j *journal) lostLocked() []lostRange {
	var out []lostRange
	at := map[string]int{}
	add := func(sid string) *lostRange {
		i, ok := at[sid]
		if !ok {
			i = len(out)
			at[sid] = i
			out = append(out, lostRange{SID: sid})
		}
		return &out[i]
	}
	for _, k := range j.order {
		r := add(k.sid)
		if r.Entries == 0 || k.seq < r.FromSeq {
			r.FromSeq = k.seq
		}
		r.ToSeq = max(r.ToSeq, k.seq)
		r.Entries++
	}
	var rowOnly []string
	for id := range j.sessions {
		if _, ok := at[id]; !ok {
			rowOnly = append(rowOnly, id)
		}
	}
	slices.Sort(rowOnly)
	for _, id := range rowOnly {
		add(id)
	}
	return out[:min(len(out), journalLostSessions)]
}
