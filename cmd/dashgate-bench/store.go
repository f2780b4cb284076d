package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/store/sqlite"
	"github.com/dashgate/dashgate/workers/builtin"
)

// stream: one socket streams a reply of words deltas (the echo agent
// without its pause) as fast as the gateway goes, prompt.submit to
// message.complete; then session.resume of a session with 200 entries.
// Run it as the same binary with and without a store (--args-old "--store
// none") to see what keeping the conversation costs.
func stream(words, resumes int) group {
	figs := []*Figure{
		fig(fmt.Sprintf("chat stream, one socket (%d deltas/run)", words+1), "deltas/s", ""),
		fig(fmt.Sprintf("session.resume, 200 entries (%d/run) p50", resumes), "ms", ""),
		fig("  session.resume p99", "ms", ""),
	}
	return group{name: "stream", figs: figs,
		env:  []string{builtin.WordDelayEnv + "=" + streamPace.String()},
		args: []string{"--pass-env", builtin.WordDelayEnv},
		run: func(ctx context.Context, t *target, r int) ([]float64, error) {
			ch, err := dialChat(ctx, t)
			if err != nil {
				return nil, err
			}
			defer ch.Close()
			sid, err := ch.CreateSession(ctx, "stream")
			if err != nil {
				return nil, err
			}
			t0 := time.Now()
			if err := ch.Call(ctx, "prompt.submit", map[string]string{"session_id": sid, "text": strings.Repeat("w ", words)}, nil); err != nil {
				return nil, err
			}
			if _, err := ch.WaitEvent(ctx, "message.complete", sid); err != nil {
				return nil, err
			}
			rate := float64(words+1) / time.Since(t0).Seconds()

			// A session of 200 entries: 100 commands and their output.
			hist, err := ch.CreateSession(ctx, "resume")
			for i := 0; err == nil && i < 100; i++ {
				_, err = ch.Slash(ctx, hist, "/echo entry "+strconv.Itoa(i))
			}
			var ds []time.Duration
			for i := 0; err == nil && i < resumes; i++ {
				var res struct {
					History []json200 `json:"history"`
				}
				t1 := time.Now()
				err = ch.Call(ctx, "session.resume", map[string]string{"session_id": hist}, &res)
				ds = append(ds, time.Since(t1))
				if err == nil && len(res.History) != 200 {
					err = fmt.Errorf("resume returned %d entries, want 200", len(res.History))
				}
			}
			if err != nil {
				return nil, err
			}
			for _, s := range []string{sid, hist} {
				ch.Call(ctx, "session.close", map[string]string{"session_id": s}, nil)
			}
			return []float64{rate, percentile(ms(ds), 50), percentile(ms(ds), 99)}, nil
		}}
}

// streamPace is the echo agent's pause between words in the stream
// group: about as fast as one socket and its client take deltas on the
// reference machine (unpaced, a flood cuts the socket as a slow consumer,
// by design).
const streamPace = 50 * time.Microsecond

type json200 struct {
	Seq uint64 `json:"seq"`
}

// startup: dashgate starts on a store of n suspended sessions of 50
// entries each (--max-sessions n: all are restored); timed from exec to
// its "dashgate listening" record. Then session.search over them, searches
// times per query.
func (b *bench) startup(n int) group {
	const searches = 50
	figs := []*Figure{
		fig(fmt.Sprintf("start-up with %d stored sessions (50 entries each)", n), "ms", "<= 2000"),
		fig(fmt.Sprintf("session.search over them, a common word (%d/run) p50", searches), "ms", "<= 20"),
		fig("  session.search, two words p50", "ms", ""),
		fig("  session.search, a word in no entry p50", "ms", ""),
	}
	var once sync.Once
	var seed string
	var seedErr error
	return group{name: "startup", figs: figs, fresh: true,
		args: []string{"--max-sessions", strconv.Itoa(n)},
		prepare: func(ctx context.Context, dir string) error {
			once.Do(func() {
				seed = filepath.Join(b.tmp, "startup.db")
				fmt.Fprintf(b.stderr, "dashgate-bench: writing %d sessions to %s\n", n, seed)
				seedErr = writeStore(ctx, seed, n, 50)
			})
			if seedErr != nil {
				return seedErr
			}
			if err := os.MkdirAll(filepath.Join(dir, "state"), 0o700); err != nil {
				return err
			}
			dst := filepath.Join(dir, "state", "dashgate.db")
			if err := copyFile(seed, dst); err != nil {
				return err
			}
			// A restart after a clean stop: the seal the store's Close left
			// comes with the file (an older dashgate writes none), so the
			// start skips the full check as it would in place.
			if _, err := os.Stat(seed + ".sealed"); err == nil {
				return copyFile(seed+".sealed", dst+".sealed")
			}
			return nil
		},
		run: func(ctx context.Context, t *target, r int) ([]float64, error) {
			recs := t.Log.Records("dashgate listening")
			if len(recs) == 0 {
				return nil, fmt.Errorf("no dashgate listening record")
			}
			at, err := time.Parse(time.RFC3339Nano, recs[0].Str("time"))
			if err != nil {
				return nil, err
			}
			// n, or 0 with --store none
			if rs := t.Log.Records("sessions restored"); len(rs) != 1 || rs[0]["count"] != float64(n) && rs[0]["count"] != 0.0 {
				return nil, fmt.Errorf("sessions restored records: %v, want one with count %d", rs, n)
			}
			vals := []float64{float64(at.Sub(t.Started).Microseconds()) / 1000}
			ch, err := dialChat(ctx, t)
			if err != nil {
				return nil, err
			}
			defer ch.Close()
			for _, q := range []string{"gateway", "conversation stream", "xylophone"} {
				var ds []time.Duration
				for range searches {
					var res struct {
						Hits []struct{} `json:"hits"`
					}
					t1 := time.Now()
					if err := ch.Call(ctx, "session.search", map[string]any{"query": q}, &res); err != nil {
						return nil, err
					}
					ds = append(ds, time.Since(t1))
				}
				vals = append(vals, percentile(ms(ds), 50))
			}
			return vals, nil
		}}
}

// writeStore writes a store of n suspended sessions with entries entries
// each, sentences of a small vocabulary.
func writeStore(ctx context.Context, path string, n, entries int) error {
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	vocab := strings.Fields("the a gateway session worker terminal reply prompt store restart search conversation kept " +
		"detached viewer process group cgroup lease grace model token stream delta history entry close reap")
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Now().Add(-24 * time.Hour)
	var batch store.Batch
	for i := range n {
		id := fmt.Sprintf("bench%08d", i)
		at := base.Add(time.Duration(i) * time.Second)
		batch.Sessions = append(batch.Sessions, store.Session{ID: id, Title: "session " + strconv.Itoa(i),
			CreatedAt: at, LastActive: at, State: store.StateSuspended})
		for seq := range entries {
			words := make([]string, 20)
			for w := range words {
				words[w] = vocab[rng.IntN(len(vocab))]
			}
			kind, role := store.KindPrompt, store.RoleUser
			if seq%2 == 1 {
				kind, role = store.KindReply, store.RoleAssistant
			}
			batch.Entries = append(batch.Entries, store.SessionEntry{SessionID: id, Entry: store.Entry{
				Seq: uint64(seq + 1), Role: role, Kind: kind, Text: strings.Join(words, " "), At: at}})
		}
		if len(batch.Sessions) == 200 || i == n-1 {
			if err := st.Apply(ctx, batch); err != nil {
				return err
			}
			batch = store.Batch{}
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
