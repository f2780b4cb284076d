package store

import (
	"fmt"
	"slices"
)

// Fence is what a stored session's writes are checked against: its owner
// (which never changes) and the epoch it is held under.
type Fence struct {
	Owner string
	Epoch uint64
}

// FenceIDs returns the ids of the sessions b writes a row or an entry of,
// sorted, each once: those whose stored Fence CheckBatch needs.
func (b *Batch) FenceIDs() []string {
	ids := make([]string, 0, len(b.Sessions)+len(b.Entries))
	for _, s := range b.Sessions {
		ids = append(ids, s.ID)
	}
	for _, e := range b.Entries {
		ids = append(ids, e.SessionID)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// CheckBatch is the fencing decision of every backend, made before
// anything of b is written: stored holds the Fence of each session of
// b.FenceIDs() that is stored (read in the transaction that writes b); a
// session absent from it is new, and its Fence is that of its first row
// in b. It fails b whole for an entry of a session neither stored nor in
// b.Sessions (ErrNotFound), a row whose Owner is not the session's
// (ErrOtherOwner), and rows or entries whose non-zero Epoch is not the
// session's (a *FencedError naming every such session, sorted, each
// once). Epoch 0 is not checked. It reads nothing but its arguments and
// changes neither.
func CheckBatch(b Batch, stored map[string]Fence) error {
	known := make(map[string]Fence, len(b.Sessions))
	fence := func(id string) (Fence, bool) {
		if f, ok := stored[id]; ok {
			return f, true
		}
		f, ok := known[id]
		return f, ok
	}
	var fenced []string
	for _, s := range b.Sessions {
		f, ok := fence(s.ID)
		if !ok {
			f = Fence{Owner: s.Owner, Epoch: s.Epoch}
			known[s.ID] = f
		}
		if s.Owner != f.Owner {
			return fmt.Errorf("session %q: %w", s.ID, ErrOtherOwner)
		}
		if s.Epoch != 0 && s.Epoch != f.Epoch {
			fenced = append(fenced, s.ID)
		}
	}
	for _, e := range b.Entries {
		f, ok := fence(e.SessionID)
		if !ok {
			return fmt.Errorf("entry %d of session %q: %w", e.Seq, e.SessionID, ErrNotFound)
		}
		if e.Epoch != 0 && e.Epoch != f.Epoch {
			fenced = append(fenced, e.SessionID)
		}
	}
	if len(fenced) == 0 {
		return nil
	}
	slices.Sort(fenced)
	return &FencedError{SessionIDs: slices.Compact(fenced)}
}
