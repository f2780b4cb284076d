package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
)

// Memory is a Store that keeps everything in memory (`--store none`):
// nothing survives the process. It holds at most MaxClosed closed
// sessions (the oldest closed go first) and MaxEntries entries a session
// (the oldest go first) so a long-running gateway does not grow without
// bound.
type Memory struct {
	MaxClosed  int // 1000 when <= 0
	MaxEntries int // 10000 when <= 0

	mu          sync.Mutex
	sessions    map[string]*memSession
	attachments map[string]Attachment // by id
	settings    map[string]Settings   // by owner
	closed      bool
}

type memSession struct {
	row     Session
	entries []Entry // sorted by Seq
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty memory store.
func NewMemory() *Memory {
	return &Memory{sessions: map[string]*memSession{}, attachments: map[string]Attachment{}, settings: map[string]Settings{}}
}

func (m *Memory) check(ctx context.Context) error {
	if m.closed {
		return ErrClosed
	}
	return ctx.Err()
}

// Apply implements Store.
func (m *Memory) Apply(ctx context.Context, b Batch) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return err
	}
	if err := m.checkBatchLocked(b); err != nil {
		return err
	}
	for _, s := range b.Sessions {
		ms := m.sessions[s.ID]
		if ms == nil {
			ms = &memSession{row: s}
			m.sessions[s.ID] = ms
		}
		kept := ms.row
		ms.row = s
		ms.row.LastSeq, ms.row.Owner = kept.LastSeq, kept.Owner
		ms.row.Node, ms.row.LeaseUntil, ms.row.Epoch = kept.Node, kept.LeaseUntil, kept.Epoch
	}
	for _, e := range b.Entries {
		ms := m.sessions[e.SessionID]
		i, found := slices.BinarySearchFunc(ms.entries, e.Seq, func(x Entry, seq uint64) int { return cmp.Compare(x.Seq, seq) })
		if found {
			ms.entries[i] = e.Entry
		} else {
			ms.entries = slices.Insert(ms.entries, i, e.Entry)
		}
		ms.row.LastSeq = max(ms.row.LastSeq, e.Seq)
		if limit := cmp.Or(max(m.MaxEntries, 0), 10000); len(ms.entries) > limit {
			ms.entries = slices.Delete(ms.entries, 0, len(ms.entries)-limit)
		}
	}
	for _, id := range b.Deletes {
		m.deleteLocked(id)
	}
	m.trimLocked()
	return nil
}

// checkBatchLocked is store.CheckBatch of b against the stored sessions.
func (m *Memory) checkBatchLocked(b Batch) error {
	stored := map[string]Fence{}
	for _, id := range b.FenceIDs() {
		if ms := m.sessions[id]; ms != nil {
			stored[id] = Fence{Owner: ms.row.Owner, Epoch: ms.row.Epoch}
		}
	}
	return CheckBatch(b, stored)
}

// trimLocked forgets the oldest closed sessions beyond MaxClosed.
func (m *Memory) trimLocked() {
	limit := m.MaxClosed
	if limit <= 0 {
		limit = 1000
	}
	var closed []*memSession
	for _, s := range m.sessions {
		if s.row.State == StateClosed {
			closed = append(closed, s)
		}
	}
	if len(closed) <= limit {
		return
	}
	slices.SortFunc(closed, func(a, b *memSession) int { return a.row.ClosedAt.Compare(b.row.ClosedAt) })
	for _, s := range closed[:len(closed)-limit] {
		m.deleteLocked(s.row.ID)
	}
}

// deleteLocked forgets session id with its entries and attachments.
func (m *Memory) deleteLocked(id string) {
	delete(m.sessions, id)
	for aid, a := range m.attachments {
		if a.SessionID == id {
			delete(m.attachments, aid)
		}
	}
}

// Restorable implements Store.
func (m *Memory) Restorable(ctx context.Context) ([]Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	var out []Session
	for _, s := range m.sessions {
		if s.row.State != StateClosed {
			out = append(out, s.row)
		}
	}
	return out, nil
}

// RestorableFor implements Store.
func (m *Memory) RestorableFor(ctx context.Context, owner string) ([]Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	var out []Session
	for _, s := range m.sessions {
		if s.row.State != StateClosed && s.row.Owner == owner {
			out = append(out, s.row)
		}
	}
	return out, nil
}

// Get implements Store.
func (m *Memory) Get(ctx context.Context, owner, id string) (Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return Session{}, err
	}
	s := m.sessions[id]
	if s == nil || s.row.Owner != owner {
		return Session{}, ErrNotFound
	}
	return s.row, nil
}

// Closed implements Store.
func (m *Memory) Closed(ctx context.Context, q ListQuery) ([]Session, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return nil, false, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 50
	}
	var out []Session
	for _, s := range m.sessions {
		if s.row.State == StateClosed && s.row.Owner == q.Owner && (q.Before.IsZero() || s.row.ClosedAt.Before(q.Before)) {
			out = append(out, s.row)
		}
	}
	slices.SortFunc(out, func(a, b Session) int {
		return cmp.Or(b.ClosedAt.Compare(a.ClosedAt), strings.Compare(b.ID, a.ID))
	})
	if len(out) > limit {
		return out[:limit], true, nil
	}
	return out, false, nil
}

// HistoryFor implements Store.
func (m *Memory) HistoryFor(ctx context.Context, owner, sid string, beforeSeq uint64, limit int) ([]Entry, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return nil, false, err
	}
	s := m.sessions[sid]
	if s != nil && s.row.Owner != owner {
		s = nil
	}
	return m.historyLocked(s, beforeSeq, limit)
}

func (m *Memory) historyLocked(s *memSession, beforeSeq uint64, limit int) ([]Entry, bool, error) {
	if s == nil {
		return nil, false, nil
	}
	end := len(s.entries)
	if beforeSeq > 0 {
		end, _ = slices.BinarySearchFunc(s.entries, beforeSeq, func(x Entry, seq uint64) int { return cmp.Compare(x.Seq, seq) })
	}
	start := max(0, end-max(limit, 0))
	return slices.Clone(s.entries[start:end]), start > 0, nil
}

// Search implements Store: every word of query, case-folded, must be a
// prefix of a word of the entry's text (words are runs of letters and digits, as the
// SQLite backend's full-text index splits them).
func (m *Memory) Search(ctx context.Context, owner, query string, limit int) ([]Hit, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	var words []string
	for _, w := range splitWords(query) {
		words = append(words, strings.ToLower(query[w[0]:w[1]]))
	}
	if len(words) == 0 || limit <= 0 {
		return nil, nil
	}
	var hits []Hit
	for _, s := range m.sessions {
		if s.row.Owner != owner {
			continue
		}
		for _, e := range s.entries {
			text := e.SearchText()
			at, ok := matchAll(text, words)
			if !ok {
				continue
			}
			hits = append(hits, Hit{SessionID: s.row.ID, Title: s.row.Title, Seq: e.Seq, Kind: e.Kind, At: e.At,
				Snippet: snippet(text, at)})
		}
	}
	slices.SortFunc(hits, func(a, b Hit) int { return cmp.Or(b.At.Compare(a.At), cmp.Compare(b.Seq, a.Seq)) })
	if len(hits) > limit {
		hits = hits[:limit]
	}
	return hits, nil
}

// splitWords returns the [start, end) byte offsets of the words of text:
// runs of letters and digits.
func splitWords(text string) [][2]int {
	var out [][2]int
	start := -1
	for i, r := range text {
		in := unicode.IsLetter(r) || unicode.IsNumber(r)
		switch {
		case in && start < 0:
			start = i
		case !in && start >= 0:
			out = append(out, [2]int{start, i})
			start = -1
		}
	}
	if start >= 0 {
		out = append(out, [2]int{start, len(text)})
	}
	return out
}

// matchAll reports whether every one of words (lower case) is a prefix of
// a word of text, and the byte offset in text of the first word that one
// of them is a prefix of.
func matchAll(text string, words []string) (int, bool) {
	found := make([]bool, len(words))
	first := -1
	for _, w := range splitWords(text) {
		lw := strings.ToLower(text[w[0]:w[1]])
		for i, q := range words {
			if strings.HasPrefix(lw, q) {
				found[i] = true
				if first < 0 {
					first = w[0]
				}
			}
		}
	}
	return first, first >= 0 && !slices.Contains(found, false)
}

// snippet returns about 80 bytes of text around byte offset at, on rune
// boundaries, with an ellipsis where it was cut.
func snippet(text string, at int) string {
	const around = 40
	start, end := max(0, at-around), min(len(text), at+around)
	for start > 0 && !isRuneStart(text[start]) {
		start--
	}
	for end < len(text) && !isRuneStart(text[end]) {
		end++
	}
	out := text[start:end]
	if start > 0 {
		out = "…" + out
	}
	if end < len(text) {
		out += "…"
	}
	return out
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// Delete implements Store.
func (m *Memory) Delete(ctx context.Context, owner, id string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return false, err
	}
	s := m.sessions[id]
	if s == nil || s.row.Owner != owner {
		return false, nil
	}
	m.deleteLocked(id)
	return true, nil
}

// Prune implements Store.
func (m *Memory) Prune(ctx context.Context, cutoff time.Time) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return 0, err
	}
	n := 0
	for id, s := range m.sessions {
		if s.row.State == StateClosed && s.row.ClosedAt.Before(cutoff) {
			m.deleteLocked(id)
			n++
		}
	}
	return n, nil
}

// Rename implements Store.
func (m *Memory) Rename(ctx context.Context, owner, id, title string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return false, err
	}
	s := m.sessions[id]
	if s == nil || s.row.Owner != owner {
		return false, nil
	}
	s.row.Title = title
	return true, nil
}

// checkLease refuses what Claim and Renew cannot grant.
func checkLease(node string, ttl time.Duration) error {
	if node == "" {
		return errors.New("lease: empty node name")
	}
	if ttl <= 0 {
		return fmt.Errorf("lease: ttl %v is not positive", ttl)
	}
	return nil
}

// clock is now, or the process's clock for the zero time (see Store.Claim).
func clock(now time.Time) time.Time {
	if now.IsZero() {
		return time.Now()
	}
	return now
}

// Claim implements Store.
func (m *Memory) Claim(ctx context.Context, node string, ttl time.Duration, now time.Time) ([]Session, error) {
	if err := checkLease(node, ttl); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	now = clock(now)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	var out []Session
	for _, s := range m.sessions {
		r := &s.row
		if r.State == StateClosed || (r.Node != "" && r.Node != node && r.LeaseUntil.After(now)) {
			continue
		}
		r.Node, r.LeaseUntil, r.Epoch = node, now.Add(ttl), r.Epoch+1
		out = append(out, *r)
	}
	return out, nil
}

// ClaimSession implements Store.
func (m *Memory) ClaimSession(ctx context.Context, node, sid string, ttl time.Duration, now time.Time) (Session, error) {
	if err := checkLease(node, ttl); err != nil {
		return Session{}, fmt.Errorf("claim %q: %w", sid, err)
	}
	now = clock(now)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return Session{}, err
	}
	s := m.sessions[sid]
	if s == nil || s.row.State == StateClosed {
		return Session{}, fmt.Errorf("claim %q: %w", sid, ErrNotFound)
	}
	r := &s.row
	if r.Node != "" && r.Node != node && r.LeaseUntil.After(now) {
		return Session{}, fmt.Errorf("claim %q: held by %q: %w", sid, r.Node, ErrLeaseHeld)
	}
	r.Node, r.LeaseUntil, r.Epoch = node, now.Add(ttl), r.Epoch+1
	return *r, nil
}

// Renew implements Store.
func (m *Memory) Renew(ctx context.Context, node string, held map[string]uint64, ttl time.Duration, now time.Time) ([]string, error) {
	if err := checkLease(node, ttl); err != nil {
		return nil, fmt.Errorf("renew: %w", err)
	}
	now = clock(now)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	var lost []string
	for id, epoch := range held {
		s := m.sessions[id]
		if s == nil || s.row.Node != node || s.row.Epoch != epoch {
			lost = append(lost, id)
			continue
		}
		s.row.LeaseUntil = now.Add(ttl)
	}
	slices.Sort(lost)
	return lost, nil
}

// Release implements Store.
func (m *Memory) Release(ctx context.Context, node string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return 0, err
	}
	n := 0
	for _, s := range m.sessions {
		if s.row.Node == node && !s.row.LeaseUntil.IsZero() {
			s.row.LeaseUntil = time.Time{}
			n++
		}
	}
	return n, nil
}

// Close implements Store.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

// PutAttachment implements Store.
func (m *Memory) PutAttachment(ctx context.Context, a Attachment) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return err
	}
	if _, dup := m.attachments[a.ID]; dup {
		return fmt.Errorf("put attachment %q: id taken", a.ID)
	}
	a.Data = slices.Clone(a.Data)
	m.attachments[a.ID] = a
	return nil
}

// Attachment implements Store.
func (m *Memory) Attachment(ctx context.Context, owner, sid, id string) (Attachment, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return Attachment{}, err
	}
	a, ok := m.attachments[id]
	if !ok || a.Owner != owner || a.SessionID != sid {
		return Attachment{}, ErrNotFound
	}
	a.Data = slices.Clone(a.Data)
	return a, nil
}

// DeleteAttachment implements Store.
func (m *Memory) DeleteAttachment(ctx context.Context, owner, sid, id string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return false, err
	}
	a, ok := m.attachments[id]
	if !ok || a.Owner != owner || a.SessionID != sid {
		return false, nil
	}
	delete(m.attachments, id)
	return true, nil
}

// Settings implements Store.
func (m *Memory) Settings(ctx context.Context, owner string) (Settings, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return Settings{}, err
	}
	return m.settings[owner], nil
}

// PutSettings implements Store.
func (m *Memory) PutSettings(ctx context.Context, owner string, p SettingsPatch) (Settings, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(ctx); err != nil {
		return Settings{}, err
	}
	s := p.Apply(m.settings[owner])
	m.settings[owner] = s
	return s, nil
}
