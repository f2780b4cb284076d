package sessions

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/store/sqlite"
)

// BenchmarkCreateWithClosed is session.create (a default title, as the
// dashboard asks for one) by a user with 10,000 closed sessions in a real
// SQLite file, each closed again so that the live count stays 1. It
// measures what the default title costs a create (issue 39: a journal
// flush and a 500-row store read on every create before the counter);
// create-p50-ns is the median of the creates alone.
func BenchmarkCreateWithClosed(b *testing.B) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "dashgate.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	const closed = 10_000
	t0 := time.Now().Add(-time.Hour)
	var batch store.Batch
	for i := range closed {
		at := t0.Add(time.Duration(i) * time.Millisecond)
		batch.Sessions = append(batch.Sessions, store.Session{
			ID: fmt.Sprintf("closed-%05d", i), Title: fmt.Sprintf("session %d", i+1), CreatedAt: at, LastActive: at,
			State: store.StateClosed, EndReason: string(EndClientClose), ClosedAt: at,
		})
	}
	if err := st.Apply(ctx, batch); err != nil {
		b.Fatal(err)
	}
	r, _ := benchRegistry(b, func(c *Config) { c.Store = st })
	v := benchViewer()
	var took []time.Duration
	for b.Loop() {
		start := time.Now()
		in, err := r.Create(v, NewSession{Title: "session 1"})
		took = append(took, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
		if ok, err := r.Close(anon, in.ID, EndClientClose); !ok || err != nil {
			b.Fatalf("Close = %v, %v", ok, err)
		}
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "create-p50-ns")
}
