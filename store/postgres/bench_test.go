package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/store"
)

// The benchmark database, the same data as store/sqlite's benchmarks:
// benchSessions sessions of benchEntries entries of about 20 words, plus
// one long session, built once per test process.
const (
	benchSessions = 10_000
	benchEntries  = 50
	benchLong     = 1_000 // entries of the session "long"
	rareEvery     = 5_000 // one entry in rareEvery holds rareWord
	commonWord    = "model"
	rareWord      = "zephyr"
)

var vocabulary = strings.Fields(`the a of to and in is it that for on with as was this be are
model server reply prompt token session history search window file error retry user
assistant system tool request answer question code line function test build run
check value table index query store write read open close start stop time wait
long short fast slow small large first last next other same new old good bad
memory disk network socket stream buffer queue worker process signal child parent`)

var bench struct {
	once sync.Once
	url  string
	err  error
}

// benchStore returns the URL of the populated benchmark database.
func benchStore(b *testing.B) string {
	b.Helper()
	bench.once.Do(func() {
		ctx := context.Background()
		bench.url, _, bench.err = testkit.PostgresDB(ctx)
		if bench.err == nil {
			bench.err = populate(ctx, bench.url)
		}
	})
	if errors.Is(bench.err, testkit.ErrNoPostgres) && os.Getenv(testkit.EnvE2E) != "1" {
		b.Skip(bench.err)
	}
	if bench.err != nil {
		b.Fatalf("populate: %v", bench.err)
	}
	return bench.url
}

func sentence(rnd *rand.Rand, n int) string {
	words := make([]string, 20)
	for i := range words {
		words[i] = vocabulary[rnd.IntN(len(vocabulary))]
	}
	if n%rareEvery == 0 {
		words[rnd.IntN(len(words))] = rareWord
	}
	s := strings.Join(words, " ")
	return strings.ToUpper(s[:1]) + s[1:] + "."
}

// populate writes the benchmark data in batches of 200 sessions (10,000
// entries), one transaction each, then ANALYZEs the tables as autovacuum
// would.
func populate(ctx context.Context, url string) error {
	s, err := Open(ctx, url, Options{CallTimeout: time.Minute})
	if err != nil {
		return err
	}
	defer s.Close()
	rnd := rand.New(rand.NewPCG(7, 11))
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	n := 0
	addSession := func(b *store.Batch, id string, entries int) {
		b.Sessions = append(b.Sessions, store.Session{ID: id, Title: "session " + id, CreatedAt: base, LastActive: base,
			State: store.StateSuspended})
		for seq := 1; seq <= entries; seq++ {
			n++
			role, kind := store.RoleUser, store.KindPrompt
			if seq%2 == 0 {
				role, kind = store.RoleAssistant, store.KindReply
			}
			b.Entries = append(b.Entries, store.SessionEntry{SessionID: id, Entry: store.Entry{
				Seq: uint64(seq), Role: role, Kind: kind, Text: sentence(rnd, n), At: base.Add(time.Duration(n) * time.Second)}})
		}
	}
	var b store.Batch
	for i := range benchSessions {
		addSession(&b, fmt.Sprintf("s%05d", i), benchEntries)
		if len(b.Sessions) == 200 {
			if err := s.Apply(ctx, b); err != nil {
				return err
			}
			b = store.Batch{}
		}
	}
	addSession(&b, "long", benchLong)
	if err := s.Apply(ctx, b); err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `ANALYZE`)
	return err
}

func openBench(b *testing.B, url string) *Store {
	b.Helper()
	s, err := Open(b.Context(), url, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// reportP50 reports the median of ds in milliseconds.
func reportP50(b *testing.B, ds []time.Duration) {
	slices.Sort(ds)
	if len(ds) > 0 {
		b.ReportMetric(float64(ds[len(ds)/2])/float64(time.Millisecond), "p50-ms")
	}
}

func BenchmarkSearch(b *testing.B) {
	s := openBench(b, benchStore(b))
	for _, tc := range []struct{ name, query string }{
		{"common", commonWord},
		{"common_prefix", commonWord[:3]},
		{"one_letter_prefix", "t"},
		{"common_two_words", commonWord + " the"},
		{"rare", rareWord},
		{"absent", "xylophone"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var ds []time.Duration
			for b.Loop() {
				start := time.Now()
				hits, err := s.Search(b.Context(), "", tc.query, 20)
				ds = append(ds, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				if tc.name != "absent" && len(hits) == 0 {
					b.Fatalf("Search(%q): no hits", tc.query)
				}
			}
			reportP50(b, ds)
		})
	}
}

func BenchmarkHistory200(b *testing.B) {
	s := openBench(b, benchStore(b))
	for b.Loop() {
		es, more, err := s.HistoryFor(b.Context(), "", "long", 0, 200)
		if err != nil || len(es) != 200 || !more {
			b.Fatalf("History = %d entries, more %v, %v", len(es), more, err)
		}
	}
}

// BenchmarkOpenRestorable10k is start-up: open the store (connect, find
// the schema current) and read every session to restore, with its LastSeq.
func BenchmarkOpenRestorable10k(b *testing.B) {
	url := benchStore(b)
	for b.Loop() {
		s, err := Open(b.Context(), url, Options{})
		if err != nil {
			b.Fatal(err)
		}
		rs, err := s.Restorable(b.Context())
		if err != nil || len(rs) != benchSessions+1 {
			b.Fatalf("Restorable = %d sessions, %v", len(rs), err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyStream is the journal writing a streaming reply: one
// batch per checkpoint, the reply's entry rewritten with its text so far
// (fenced by the epoch the node holds), next to the 500,000 entries of
// the benchmark database.
func BenchmarkApplyStream(b *testing.B) {
	s := openBench(b, benchStore(b))
	ctx := b.Context()
	base := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	sid := fmt.Sprintf("stream-%d", time.Now().UnixNano())
	row := store.Session{ID: sid, Title: "stream", CreatedAt: base, LastActive: base, State: "attached", Node: "bench", Epoch: 1}
	if err := s.Apply(ctx, store.Batch{Sessions: []store.Session{row}}); err != nil {
		b.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	var reply strings.Builder
	seq := uint64(1)
	i := 0
	for b.Loop() {
		// A reply of 50 checkpoints of a few words each, then the next one.
		if i%50 == 0 {
			seq++
			reply.Reset()
		}
		i++
		reply.WriteString(sentence(rnd, 1))
		reply.WriteByte(' ')
		e := store.SessionEntry{SessionID: sid, Epoch: 1, Entry: store.Entry{Seq: seq, Role: store.RoleAssistant,
			Kind: store.KindReply, Text: reply.String(), At: base.Add(time.Duration(i) * time.Millisecond), Status: "incomplete"}}
		if err := s.Apply(ctx, store.Batch{Entries: []store.SessionEntry{e}}); err != nil {
			b.Fatal(err)
		}
	}
}
