package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dashgate/dashgate/store"
)

// testClaimSession claims the sessions of claimFixture one at a time as
// node a: a free, an own, a lapsed and a released lease are a's with the
// epoch bumped, the lease now+ttl and the row as stored; b's live lease is
// ErrLeaseHeld until the instant it ends; a closed or unknown id is
// ErrNotFound. Nothing refused is written.
func testClaimSession(t *testing.T, st store.Store) {
	claimFixture(t, st)
	ctx := t.Context()
	const ttl = 30 * time.Second
	if _, err := st.ClaimSession(ctx, "", "free", ttl, t0); err == nil {
		t.Errorf("ClaimSession by an empty node: no error")
	}
	if _, err := st.ClaimSession(ctx, "a", "free", 0, t0); err == nil {
		t.Errorf("ClaimSession with ttl 0: no error")
	}
	for _, tc := range []struct {
		name, id  string
		now       time.Time
		wantErr   error
		wantEpoch uint64
	}{
		{"free", "free", t0, nil, 1},
		{"own", "mine", t0, nil, 5},
		{"expired", "lapsed", t0, nil, 8},
		{"released", "released", t0, nil, 2},
		{"held", "theirs", at(time.Minute - time.Nanosecond), store.ErrLeaseHeld, 2},
		{"closed", "done", t0, store.ErrNotFound, 0},
		{"unknown", "nobody", t0, store.ErrNotFound, 0},
		{"held until the instant it ends", "theirs", at(time.Minute), nil, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := st.ClaimSession(ctx, "a", tc.id, ttl, tc.now)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("ClaimSession(a, %q) = %+v, %v; want %v", tc.id, got, err, tc.wantErr)
			}
			if tc.id == "nobody" {
				return
			}
			stored := getOK(t, st, "", tc.id)
			if tc.wantErr != nil {
				if stored.Epoch != tc.wantEpoch || stored.Node == "a" {
					t.Errorf("%s after a refused claim: node %q epoch %d; want untouched (epoch %d)", tc.id, stored.Node, stored.Epoch, tc.wantEpoch)
				}
				return
			}
			if got.ID != tc.id || got.Node != "a" || !got.LeaseUntil.Equal(tc.now.Add(ttl)) || got.Epoch != tc.wantEpoch || got.LastSeq != 3 || got.Title != "title "+tc.id {
				t.Errorf("claimed %s: %+v; want node a, lease now+30s, epoch %d, LastSeq 3, its title", tc.id, got, tc.wantEpoch)
			}
			sameSession(t, stored, got)
			if stored.Node != "a" || stored.Epoch != got.Epoch || !stored.LeaseUntil.Equal(got.LeaseUntil) {
				t.Errorf("stored %s: node %q epoch %d lease %v; want what ClaimSession returned", tc.id, stored.Node, stored.Epoch, stored.LeaseUntil)
			}
		})
	}
}

// ClaimSessionRace has 20 nodes claim one session whose lease lapsed at
// once, half on a and half on b (two handles of one store): exactly one
// gets it, with the epoch bumped once; every other sees ErrLeaseHeld.
func ClaimSessionRace(t *testing.T, a, b store.Store) {
	const claimers = 20
	s := live("s", "ann")
	s.Node, s.LeaseUntil, s.Epoch = "dead", at(-time.Second), 4
	apply(t, a, store.Batch{Sessions: []store.Session{s}, Entries: []store.SessionEntry{entry("s", 1, "kept", t0)}})
	var (
		wg   sync.WaitGroup
		errs [claimers]error
		got  [claimers]store.Session
	)
	for i := range claimers {
		st := []store.Store{a, b}[i%2]
		wg.Go(func() {
			got[i], errs[i] = st.ClaimSession(t.Context(), fmt.Sprintf("n%02d", i), "s", time.Minute, t0)
		})
	}
	wg.Wait()
	winner := ""
	for i, err := range errs {
		switch {
		case err == nil && winner != "":
			t.Errorf("n%02d claimed s beside %s", i, winner)
		case err == nil:
			winner = got[i].Node
			if got[i].Epoch != 5 || got[i].Node != fmt.Sprintf("n%02d", i) || got[i].LastSeq != 1 {
				t.Errorf("n%02d's claim = %+v; want its node, epoch 5, LastSeq 1", i, got[i])
			}
		case !errors.Is(err, store.ErrLeaseHeld):
			t.Errorf("n%02d: %v; want ErrLeaseHeld", i, err)
		}
	}
	if winner == "" {
		t.Fatal("nobody claimed s")
	}
	if stored := getOK(t, b, "ann", "s"); stored.Node != winner || stored.Epoch != 5 {
		t.Errorf("stored s: node %q epoch %d; want %s, 5", stored.Node, stored.Epoch, winner)
	}
}
