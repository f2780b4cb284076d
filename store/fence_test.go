package store_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/dashgate/dashgate/store"
)

// TestCheckBatch is the fencing decision's table, once for every backend
// (each also runs it through storetest: testFenced, the owner tests).
func TestCheckBatch(t *testing.T) {
	t.Parallel()
	row := func(id, owner string, epoch uint64) store.Session {
		return store.Session{ID: id, Owner: owner, Epoch: epoch}
	}
	ent := func(sid string, seq, epoch uint64) store.SessionEntry {
		return store.SessionEntry{SessionID: sid, Epoch: epoch, Entry: store.Entry{Seq: seq}}
	}
	stored := map[string]store.Fence{"s": {Owner: "ann", Epoch: 3}, "t": {Owner: "", Epoch: 0}}
	for _, tc := range []struct {
		name   string
		b      store.Batch
		want   error    // nil, ErrNotFound, ErrOtherOwner or ErrFenced
		fenced []string // with ErrFenced
	}{
		{name: "empty"},
		{name: "the stored epoch", b: store.Batch{Sessions: []store.Session{row("s", "ann", 3)}, Entries: []store.SessionEntry{ent("s", 1, 3)}}},
		{name: "epoch 0 is unchecked", b: store.Batch{Sessions: []store.Session{row("s", "ann", 0)}, Entries: []store.SessionEntry{ent("s", 1, 0)}}},
		{name: "an older epoch", b: store.Batch{Sessions: []store.Session{row("s", "ann", 2)}}, want: store.ErrFenced, fenced: []string{"s"}},
		{name: "a newer epoch", b: store.Batch{Entries: []store.SessionEntry{ent("s", 1, 4)}}, want: store.ErrFenced, fenced: []string{"s"}},
		{name: "an epoch on a session stored without one", b: store.Batch{Entries: []store.SessionEntry{ent("t", 1, 1)}}, want: store.ErrFenced, fenced: []string{"t"}},
		{name: "a new session takes its first row's epoch", b: store.Batch{Sessions: []store.Session{row("n", "bob", 1)}, Entries: []store.SessionEntry{ent("n", 1, 1)}}},
		{name: "a new session's later epoch", b: store.Batch{Sessions: []store.Session{row("n", "bob", 1), row("n", "bob", 2)}, Entries: []store.SessionEntry{ent("n", 1, 2)}}, want: store.ErrFenced, fenced: []string{"n"}},
		{name: "fenced sessions named sorted once", b: store.Batch{
			Sessions: []store.Session{row("t", "", 5), row("s", "ann", 3)},
			Entries:  []store.SessionEntry{ent("t", 1, 5), ent("s", 1, 1), ent("s", 2, 1)},
		}, want: store.ErrFenced, fenced: []string{"s", "t"}},
		{name: "another owner", b: store.Batch{Sessions: []store.Session{row("s", "bob", 3)}}, want: store.ErrOtherOwner},
		{name: "another owner on a new session's second row", b: store.Batch{Sessions: []store.Session{row("n", "bob", 0), row("n", "eve", 0)}}, want: store.ErrOtherOwner},
		{name: "another owner before a fence", b: store.Batch{Sessions: []store.Session{row("t", "", 9), row("s", "bob", 3)}}, want: store.ErrOtherOwner},
		{name: "an entry of an unknown session", b: store.Batch{Entries: []store.SessionEntry{ent("x", 1, 0)}}, want: store.ErrNotFound},
		{name: "deletes are not fenced", b: store.Batch{Deletes: []string{"s", "x"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			before := len(stored)
			err := store.CheckBatch(tc.b, stored)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("CheckBatch = %v; want %v", err, tc.want)
			}
			if fe, ok := errors.AsType[*store.FencedError](err); ok != (tc.fenced != nil) || ok && !slices.Equal(fe.SessionIDs, tc.fenced) {
				t.Errorf("CheckBatch = %v; want fenced %v", err, tc.fenced)
			}
			if len(stored) != before {
				t.Errorf("CheckBatch changed stored")
			}
		})
	}
}

func TestFenceIDs(t *testing.T) {
	t.Parallel()
	b := store.Batch{
		Sessions: []store.Session{{ID: "b"}, {ID: "a"}},
		Entries:  []store.SessionEntry{{SessionID: "c"}, {SessionID: "a"}, {SessionID: "b"}},
		Deletes:  []string{"d"},
	}
	if got, want := b.FenceIDs(), []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("FenceIDs = %v; want %v", got, want)
	}
}
