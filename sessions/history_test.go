package sessions

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/workers"
)

// kinds lists "kind:text" of entries, for readable comparisons.
func kinds(es []Message) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Kind+":"+e.Text)
	}
	return out
}

func wantKinds(t *testing.T, what string, got []Message, want ...string) {
	t.Helper()
	g := kinds(got)
	if strings.Join(g, "|") != strings.Join(want, "|") {
		t.Fatalf("%s:\n got %q\nwant %q", what, g, want)
	}
	for i, e := range got {
		if i > 0 && e.Seq <= got[i-1].Seq {
			t.Fatalf("%s: seq not increasing at %d: %+v", what, i, got)
		}
	}
}

// stored reads every entry the store holds for sid, after the journal
// wrote what was queued.
func stored(t *testing.T, h *harness, sid string) []Message {
	t.Helper()
	if err := h.r.journal.flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	es, _, err := h.r.cfg.Store.HistoryFor(t.Context(), "", sid, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// TestCompleteHistory: everything a viewer is shown is an entry, live and
// stored alike, in order: prompts and replies (with usage), commands and
// their output, a failed command and its error, a worker's exit, an
// administrator's end of the terminal, an interrupted reply.
func TestCompleteHistory(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) {
		c.DescribeError = func(err error) (int, string) { return 5004, "worker failed: " + err.Error() }
	})
	v := &recViewer{}
	in, _ := h.r.Create(v, NewSession{Title: ""})
	sid := in.ID

	_, start, _ := h.r.Prompt(v, sid, "hi")
	start()
	h.r.Wait()
	h.r.Exec(t.Context(), v, sid, "/a")
	if _, err := h.r.Exec(t.Context(), v, sid, "/fail"); err == nil {
		t.Fatal("/fail succeeded")
	}
	h.sp.workers()[0].crash()
	if _, err := h.r.AttachTerminal(t.Context(), anon, sid, TerminalOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := h.r.ReapWorker(anon, h.sp.terminals()[0].pid); err != nil {
		t.Fatal(err)
	}
	h.sp.hang = true
	_, start, _ = h.r.Prompt(v, sid, "long")
	start()
	h.r.Interrupt(v, sid)

	want := []string{
		"prompt:hi", "reply:echo hi",
		"slash:/a", "slash_output:/a",
		"slash:/fail", "error:worker failed: worker reply: unknown command /fail",
		"notice:worker exited, code 0",
		"notice:" + terminalReapNotice,
		"prompt:long", "reply:",
	}
	res, err := h.r.Resume(v, sid)
	if err != nil {
		t.Fatal(err)
	}
	wantKinds(t, "resume", res.History, want...)
	wantKinds(t, "store", stored(t, h, sid), want...)
	last := res.History[len(res.History)-1]
	if !last.Interrupted || last.Role != store.RoleAssistant {
		t.Fatalf("the interrupted reply: %+v", last)
	}
	if e := res.History[5]; e.Code != 5004 || e.Role != store.RoleSystem {
		t.Fatalf("the error entry: %+v", e)
	}
	if evs := v.ofType("notice"); len(evs) != 1 {
		t.Fatalf("notice events: %+v", evs)
	}
}

// streamingTurn starts the prompt "q" in a new session whose worker
// streams what the test sends on h.sp.stream.
func streamingTurn(t *testing.T) (*harness, *recViewer, Info) {
	h := newHarness(t, nil)
	h.sp.stream = make(chan string)
	v := &recViewer{}
	in, _ := h.r.Create(v, NewSession{Title: ""})
	_, start, _ := h.r.Prompt(v, in.ID, "q")
	start()
	return h, v, in
}

// TestUsageKept: the usage a worker reports with its reply is kept with the
// reply and sent with message.complete.
func TestUsageKept(t *testing.T) {
	t.Parallel()
	h, v, in := streamingTurn(t)
	h.sp.stream <- "an"
	h.sp.stream <- "swer"
	close(h.sp.stream)
	h.r.Wait()
	es := stored(t, h, in.ID)
	reply := es[len(es)-1]
	if reply.Text != "answer" || reply.Interrupted || reply.Usage == nil || reply.Usage.OutputTokens != 5 {
		t.Fatalf("stored reply: %+v", reply)
	}
	evs := v.ofType("message.complete")
	if len(evs) != 1 || evs[0].Payload.(map[string]any)["usage"] == nil {
		t.Fatalf("message.complete: %+v", evs)
	}
}

// TestCheckpointSurvivesCrash: text streamed 250 ms ago is in the
// store as an interrupted reply, so a process that dies mid-turn leaves
// it; a registry started on that store restores the session detached, its
// history ending with that reply, with no worker.
func TestCheckpointSurvivesCrash(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := store.NewMemory()
		h := newHarness(t, func(c *Config) { c.Store = st; c.SuspendOnShutdown = true })
		h.sp.stream = make(chan string)
		v := &recViewer{}
		in, _ := h.r.Create(v, NewSession{Title: "t"})
		_, start, _ := h.r.Prompt(v, in.ID, "tell me")
		start()
		h.sp.stream <- "once upon"
		h.sp.stream <- " a time"
		synctest.Wait()
		if es := stored(t, h, in.ID); len(es) != 2 || es[1].Text != "once upon" || !es[1].Interrupted {
			t.Fatalf("before the checkpoint, the store holds %+v; want the prompt and the reply's first delta, interrupted", es)
		}
		h.advance(250 * time.Millisecond)
		// The process "dies" here: nothing more reaches the store.
		snap := store.NewMemory()
		copyStore(t, st, snap)

		h2 := newHarness(t, func(c *Config) { c.Store = snap })
		if n, err := h2.r.Claim(t.Context(), "n", time.Hour); n != 1 || err != nil {
			t.Fatalf("Claim = %d, %v", n, err)
		}
		got, ok := h2.r.Get(anon, in.ID)
		if !ok || got.State != StateDetached || got.WorkerPID != 0 || got.Title != "t" {
			t.Fatalf("restored: %+v %v", got, ok)
		}
		res, err := h2.r.Resume(&recViewer{}, in.ID)
		if err != nil {
			t.Fatal(err)
		}
		wantKinds(t, "restored history", res.History, "prompt:tell me", "reply:once upon a time")
		if !res.History[1].Interrupted {
			t.Fatalf("the partial reply is not marked interrupted: %+v", res.History[1])
		}
		if n := h2.sp.spawned.Load(); n != 0 {
			t.Fatalf("%d workers spawned by the restore and resume", n)
		}
		if recs := h2.logs.Records("sessions restored"); len(recs) != 1 || recs[0]["count"] != float64(1) {
			t.Fatalf("sessions restored records: %v", recs)
		}
		close(h.sp.stream)
	})
}

// TestCheckpointEvery250ms: a long reply is checkpointed again every
// 250 ms while it streams, not once: the store holds what streamed up to
// the last checkpoint.
func TestCheckpointEvery250ms(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.Store = store.NewMemory() })
		h.sp.stream = make(chan string)
		v := &recViewer{}
		in, _ := h.r.Create(v, NewSession{Title: "t"})
		_, start, _ := h.r.Prompt(v, in.ID, "tell me")
		start()
		text := "once"
		h.sp.stream <- text
		for _, d := range []string{" upon", " a", " time"} {
			h.sp.stream <- d
			text += d
			h.advance(250 * time.Millisecond)
			if es := stored(t, h, in.ID); len(es) != 2 || es[1].Text != text || !es[1].Partial {
				t.Fatalf("after %q and 250 ms, the store holds %+v; want the partial reply %q", d, es, text)
			}
		}
		close(h.sp.stream)
	})
}

// copyStore copies every session (live and closed) and entry of src to dst.
func copyStore(t *testing.T, src, dst *store.Memory) {
	t.Helper()
	rows, _ := src.Restorable(t.Context())
	closed, _, _ := src.Closed(t.Context(), store.ListQuery{Limit: 1000})
	var b store.Batch
	for _, row := range append(rows, closed...) {
		b.Sessions = append(b.Sessions, row)
		es, _, _ := src.HistoryFor(t.Context(), row.Owner, row.ID, 0, 1<<20)
		for _, e := range es {
			b.Entries = append(b.Entries, store.SessionEntry{SessionID: row.ID, Entry: e})
		}
	}
	if err := dst.Apply(t.Context(), b); err != nil {
		t.Fatal(err)
	}
}

// TestSuspendAndRestore: at shutdown a store that outlives the process gets
// its chat sessions suspended (one "session suspended" record each, no
// "session closed"); terminal-only sessions close. The next registry
// restores them detached, with their TTL counted from its start.
func TestSuspendAndRestore(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := store.NewMemory()
		h := newHarness(t, func(c *Config) { c.Store = st; c.SuspendOnShutdown = true })
		v := &recViewer{}
		a, _ := h.r.Create(v, NewSession{Title: "a"})
		b, _ := h.r.Create(v, NewSession{Title: "b"})
		h.r.DetachViewer(v, workers.ReasonDetach)
		h.r.Exec(t.Context(), &recViewer{}, a.ID, "/x")
		term, err := h.r.AttachTerminal(t.Context(), anon, "", TerminalOptions{})
		if err != nil {
			t.Fatal(err)
		}
		h.advance(30 * time.Second)
		h.r.Shutdown(context.Background())
		h.r.Wait()
		if err := h.r.FlushStore(t.Context()); err != nil {
			t.Fatal(err)
		}
		for _, sid := range []string{a.ID, b.ID} {
			if recs := h.logs.Records("session suspended"); !hasSID(recs, sid) {
				t.Fatalf("no session suspended record for %s: %v", sid, recs)
			}
			if recs := h.closedRecords(sid); len(recs) != 0 {
				t.Fatalf("suspended session logged closed: %v", recs)
			}
		}
		if recs := h.closedRecords(term.SessionID); len(recs) != 1 {
			t.Fatalf("terminal-only session: %v", recs)
		}

		h2 := newHarness(t, func(c *Config) { c.Store = st; c.DetachedTTL = time.Minute })
		if n, err := h2.r.Claim(t.Context(), "n", time.Hour); n != 2 || err != nil {
			t.Fatalf("Claim = %d, %v", n, err)
		}
		res, err := h2.r.Resume(&recViewer{}, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		wantKinds(t, "a's history", res.History, "slash:/x", "slash_output:/x")
		h2.r.Leave(nil, a.ID)
		h2.advance(59 * time.Second)
		if _, ok := h2.r.Get(anon, b.ID); !ok {
			t.Fatal("b expired before its TTL counted from the restore")
		}
		h2.advance(2 * time.Second)
		if _, ok := h2.r.Get(anon, b.ID); ok {
			t.Fatal("b outlived its TTL")
		}
		h2.wantOneClose(b.ID, EndDetachedTTL)
	})
}

func hasSID(recs []testkit.Record, sid string) bool {
	for _, r := range recs {
		if r["sid"] == sid {
			return true
		}
	}
	return false
}

// TestRestoreBeyondCapacity: more restorable sessions than MaxSessions: the
// most recently active come back, the others are stored closed (lru_evict).
func TestRestoreBeyondCapacity(t *testing.T) {
	t.Parallel()
	st := store.NewMemory()
	base := time.Now().Add(-time.Hour)
	var b store.Batch
	for i := range 5 {
		b.Sessions = append(b.Sessions, store.Session{ID: "s" + string(rune('0'+i)), State: store.StateSuspended,
			CreatedAt: base, LastActive: base.Add(time.Duration(i) * time.Minute)})
	}
	st.Apply(t.Context(), b)
	h := newHarness(t, func(c *Config) { c.Store = st; c.MaxSessions = 3 })
	if n, _ := h.r.Claim(t.Context(), "n", time.Hour); n != 3 {
		t.Fatalf("restored %d, want 3", n)
	}
	for _, id := range []string{"s2", "s3", "s4"} {
		if _, ok := h.r.Get(anon, id); !ok {
			t.Fatalf("%s (recently active) not restored", id)
		}
	}
	h.r.journal.flush(t.Context())
	closed, _, _ := st.Closed(t.Context(), store.ListQuery{})
	if len(closed) != 2 || closed[0].EndReason != string(EndLRUEvict) {
		t.Fatalf("closed after the restore: %+v", closed)
	}
}

// TestClosedIsNotDeleted: a closed session stays in the store with its end
// reason; it can be listed, renamed, paged, reopened (with its history and
// the notice of its end) and deleted.
func TestClosedIsNotDeleted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	v := &recViewer{}
	in, _ := h.r.Create(v, NewSession{Title: "first"})
	sid := in.ID
	h.r.Exec(t.Context(), v, sid, "/one")
	h.r.Close(anon, sid, EndAdminReap)

	closed, more, err := h.r.ListClosed(t.Context(), anon, time.Time{}, 10)
	if err != nil || more || len(closed) != 1 || closed[0].ID != sid || closed[0].EndReason != "admin_reap" || closed[0].ClosedAt.IsZero() {
		t.Fatalf("ListClosed = %+v %v %v", closed, more, err)
	}
	if err := h.r.Rename(t.Context(), anon, sid, "renamed"); err != nil {
		t.Fatal(err)
	}
	es, _, err := h.r.History(t.Context(), anon, sid, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	wantKinds(t, "closed history", es, "slash:/one", "slash_output:/one", "notice:"+endNotices[EndAdminReap])

	v2 := &recViewer{}
	res, err := h.r.Reopen(t.Context(), v2, sid)
	if err != nil {
		t.Fatal(err)
	}
	if res.State != StateAttached || res.Title != "renamed" {
		t.Fatalf("reopened: %+v", res.Info)
	}
	wantKinds(t, "reopened history", res.History, kinds(es)...)
	if recs := h.logs.Records("session reopened"); len(recs) != 1 || recs[0]["sid"] != sid {
		t.Fatalf("session reopened records: %v", recs)
	}
	out, err := h.r.Exec(t.Context(), v2, sid, "/two")
	if err != nil || out != "/two" {
		t.Fatalf("Exec after reopen: %q %v", out, err)
	}
	if es := stored(t, h, sid); es[len(es)-1].Seq != 5 {
		t.Fatalf("seq after reopen does not go on: %+v", es)
	}

	if err := h.r.Delete(t.Context(), anon, sid); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	if recs := h.closedRecords(sid); len(recs) != 2 || recs[1]["end_reason"] != "client_close" {
		t.Fatalf("close records of its two lives: %v", recs) // the second closed by the delete
	}
	if _, err := h.r.Reopen(t.Context(), v2, sid); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Reopen after Delete: %v", err)
	}
	if err := h.r.Delete(t.Context(), anon, sid); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Delete twice: %v", err)
	}
	if _, _, err := h.r.History(t.Context(), anon, sid, 0, 10); !errors.Is(err, ErrNotFound) {
		t.Fatalf("History after Delete: %v", err)
	}
	if hits, _ := h.r.Search(t.Context(), anon, "one", 10); len(hits) != 0 {
		t.Fatalf("a deleted session is found: %+v", hits)
	}
}

// TestHistoryPaging: memory keeps the latest HistoryMessages entries
// (what resume returns); History pages through all of them, memory and
// store alike.
func TestHistoryPaging(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.HistoryMessages = 10 })
	v := &recViewer{}
	in, _ := h.r.Create(v, NewSession{Title: ""})
	for range 30 {
		h.r.Exec(t.Context(), v, in.ID, "/x")
	}
	res, _ := h.r.Resume(v, in.ID)
	if len(res.History) != 10 || res.History[0].Seq != 51 {
		t.Fatalf("resume returned %d entries from seq %d", len(res.History), res.History[0].Seq)
	}
	var all []Message
	before := uint64(0)
	for pages := 0; ; pages++ {
		page, more, err := h.r.History(t.Context(), anon, in.ID, before, 25)
		if err != nil {
			t.Fatal(err)
		}
		all = append(page, all...)
		if !more {
			break
		}
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		before = page[0].Seq
	}
	if len(all) != 60 {
		t.Fatalf("paged %d entries, want 60", len(all))
	}
	for i, e := range all {
		if e.Seq != uint64(i+1) {
			t.Fatalf("entry %d has seq %d", i, e.Seq)
		}
	}
}

// TestRetention: Run deletes closed sessions older than HistoryRetention,
// and only those (the bubble's clock stands in for days).
func TestRetention(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.HistoryRetention = time.Hour; c.PruneInterval = 10 * time.Minute })
		v := &recViewer{}
		old, _ := h.r.Create(v, NewSession{Title: "old"})
		h.r.Close(anon, old.ID, EndClientClose)
		live, _ := h.r.Create(v, NewSession{Title: "live"})
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		wg.Go(func() { h.r.Run(ctx) })
		defer func() { cancel(); wg.Wait() }()

		h.advance(50 * time.Minute)
		if _, _, err := h.r.History(t.Context(), anon, old.ID, 0, 1); err != nil {
			t.Fatalf("pruned before its retention: %v", err)
		}
		h.advance(20 * time.Minute)
		if _, _, err := h.r.History(t.Context(), anon, old.ID, 0, 1); !errors.Is(err, ErrNotFound) {
			t.Fatalf("not pruned after its retention: %v", err)
		}
		if _, ok := h.r.Get(anon, live.ID); !ok {
			t.Fatal("a live session was pruned")
		}
		if recs := h.logs.Records("history pruned"); len(recs) != 1 {
			t.Fatalf("history pruned records: %v", recs)
		}
	})
}

// flakyStore is a memory store whose writes fail while down is set, as a
// full disk's would (the real disk is filled in the e2e suite).
type flakyStore struct {
	*store.Memory
	mu   sync.Mutex
	down bool
}

func (f *flakyStore) setDown(d bool) { f.mu.Lock(); f.down = d; f.mu.Unlock() }

func (f *flakyStore) Apply(ctx context.Context, b store.Batch) error {
	f.mu.Lock()
	down := f.down
	f.mu.Unlock()
	if down {
		return errors.New("database or disk is full")
	}
	return f.Memory.Apply(ctx, b)
}

// TestStoreFailureKeepsChat: while the store fails, chat works from memory
// and one ERROR record says so; once it recovers, everything queued is
// written and one INFO record says so.
func TestStoreFailureKeepsChat(t *testing.T) {
	t.Parallel()
	fs := &flakyStore{Memory: store.NewMemory()}
	h := newHarness(t, func(c *Config) { c.Store = fs })
	v := &recViewer{}
	in, _ := h.r.Create(v, NewSession{Title: ""})
	h.r.journal.flush(t.Context())
	fs.setDown(true)
	for range 20 {
		if _, err := h.r.Exec(t.Context(), v, in.ID, "/x"); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, 5*time.Second, "the WARN record", func() bool { return len(h.logs.Records("store write failed")) > 0 })
	res, _ := h.r.Resume(v, in.ID)
	if len(res.History) != 40 {
		t.Fatalf("history from memory: %d entries", len(res.History))
	}
	fs.setDown(false)
	testkit.WaitFor(t, 10*time.Second, "writes resumed", func() bool { return len(h.logs.Records("store writes resumed")) == 1 })
	if recs := h.logs.Records("store write failed"); len(recs) != 1 || recs[0]["level"] != "WARN" {
		t.Fatalf("failure records: %v", recs)
	}
	if es := stored(t, h, in.ID); len(es) != 40 {
		t.Fatalf("stored %d entries after recovery, want 40", len(es))
	}
}

// TestFlushStoreReportsLoss: a store still failing at the end loses what
// is queued, and one ERROR record says so.
func TestFlushStoreReportsLoss(t *testing.T) {
	t.Parallel()
	fs := &flakyStore{Memory: store.NewMemory()}
	h := newHarness(t, func(c *Config) { c.Store = fs })
	fs.setDown(true)
	v := &recViewer{}
	in, _ := h.r.Create(v, NewSession{Title: ""})
	h.r.Exec(t.Context(), v, in.ID, "/x")
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if err := h.r.FlushStore(ctx); err == nil {
		t.Fatal("FlushStore of a failing store succeeded")
	}
	if recs := h.logs.Records("store: changes lost at shutdown"); len(recs) != 1 || recs[0]["entries"] != float64(2) {
		t.Fatalf("loss records: %v", recs)
	}
}

// TestReplyKeepsItsPlace: a reply follows its prompt in the history even
// when a command ran while it streamed.
func TestReplyKeepsItsPlace(t *testing.T) {
	t.Parallel()
	h, v, in := streamingTurn(t)
	h.sp.stream <- "a"
	if _, err := h.r.Exec(t.Context(), v, in.ID, "/meanwhile"); err != nil {
		t.Fatal(err)
	}
	close(h.sp.stream)
	h.r.Wait()
	want := []string{"prompt:q", "reply:a", "slash:/meanwhile", "slash_output:/meanwhile"}
	res, _ := h.r.Resume(v, in.ID)
	wantKinds(t, "resume", res.History, want...)
	wantKinds(t, "store", stored(t, h, in.ID), want...)
}

// TestCommandErrorBeforeWorkerExit: a command whose worker dies while
// running it reads, live and stored, as the command, its error, then the
// worker's exit, whichever the worker's pipes told first.
func TestCommandErrorBeforeWorkerExit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	v := &recViewer{}
	in, _ := h.r.Create(v, NewSession{Title: ""})
	if _, err := h.r.Exec(t.Context(), v, in.ID, "/crash"); err == nil {
		t.Fatal("/crash succeeded")
	}
	res, _ := h.r.Resume(v, in.ID)
	want := []string{"slash:/crash", "error:worker crashed: worker closed its stdout", "notice:worker exited, code 0"}
	wantKinds(t, "resume", res.History, want...)
	wantKinds(t, "store", stored(t, h, in.ID), want...)
	if evs := v.ofType("worker.exited"); len(evs) != 1 {
		t.Fatalf("worker.exited events: %+v", evs)
	}
}

// TestDeltaNotBehindRegistryLock: a turn's deltas after its first reach
// the viewers while another call holds the registry's lock: they take
// only the session's stream lock, so 300 streams do not queue every
// other call behind them (BENCHMARKS.md, issue 28).
func TestDeltaNotBehindRegistryLock(t *testing.T) {
	t.Parallel()
	h, v, _ := streamingTurn(t)
	unlock := lockAfterFirstDelta(t, h, v)
	h.sp.stream <- " second"
	testkit.WaitFor(t, 5*time.Second, "the second delta while r.mu is held", func() bool { return len(v.ofType("message.delta")) == 2 })
	unlock()
	close(h.sp.stream)
	h.r.Wait()
	evs := v.ofType("message.complete")
	if len(evs) != 1 || evs[0].Payload.(map[string]any)["text"] != "first second" {
		t.Fatalf("message.complete: %+v", evs)
	}
}

// lockAfterFirstDelta streams the turn's first delta ("first", which
// gives the reply its seq under r.mu), waits for v to see it, then takes
// the registry's lock and returns its unlock; the lock is given back at
// the test's end if it was not.
func lockAfterFirstDelta(t *testing.T, h *harness, v *recViewer) (unlock func()) {
	t.Helper()
	h.sp.stream <- "first"
	testkit.WaitFor(t, 5*time.Second, "the first delta", func() bool { return len(v.ofType("message.delta")) == 1 })
	h.r.mu.Lock()
	var once sync.Once
	unlock = func() { once.Do(h.r.mu.Unlock) }
	t.Cleanup(unlock)
	return unlock
}

// TestDeltaEventsCarryTheirText: each message.delta carries its own
// delta's text (a *Delta, the tail of the reply so far, which stays
// itself while the reply grows past it), and message.complete the whole.
func TestDeltaEventsCarryTheirText(t *testing.T) {
	t.Parallel()
	h, v, _ := streamingTurn(t)
	deltas := []string{"first", " sec\"ond\n", strings.Repeat("long ", 300), "é🙂", "", " last"}
	for _, d := range deltas {
		h.sp.stream <- d
	}
	close(h.sp.stream)
	h.r.Wait()
	var got []string
	for _, ev := range v.ofType("message.delta") {
		got = append(got, ev.Payload.(*Delta).Text)
	}
	if !slices.Equal(got, deltas) {
		t.Fatalf("message.delta texts %q, want %q", got, deltas)
	}
	if evs := v.ofType("message.complete"); len(evs) != 1 || evs[0].Payload.(map[string]any)["text"] != strings.Join(deltas, "") {
		t.Fatalf("message.complete: %+v", evs)
	}
}

// TestDeltaEventOneAllocation: a message.delta event is one allocation
// (an event, its encoding and a map payload were five).
func TestDeltaEventOneAllocation(t *testing.T) {
	var ev *Event
	if n := testing.AllocsPerRun(100, func() { ev = NewDeltaEvent("sid", 1, "turn", "text") }); n != 1 || ev.Payload.(*Delta).Text != "text" {
		t.Fatalf("NewDeltaEvent: %v allocations, want 1", n)
	}
}

// TestLateCheckpointKeepsTheCompleteReply: a checkpoint whose timer
// fired as the turn completed, its goroutine running after the
// completion, leaves the complete reply in the store: a partial reply
// never replaces it.
func TestLateCheckpointKeepsTheCompleteReply(t *testing.T) {
	t.Parallel()
	h, v, in := streamingTurn(t)
	h.sp.stream <- "first"
	testkit.WaitFor(t, 5*time.Second, "the first delta", func() bool { return len(v.ofType("message.delta")) == 1 })
	h.r.mu.Lock()
	tr := h.r.sessions[in.ID].turn
	h.r.mu.Unlock()
	h.sp.stream <- " second"
	close(h.sp.stream)
	h.r.Wait()
	if es := stored(t, h, in.ID); len(es) != 2 || es[1].Partial || es[1].Text != "first second" {
		t.Fatalf("stored before the late checkpoint: %+v", es)
	}
	tr.checkpoint() // the timer's, late
	es := stored(t, h, in.ID)
	if r := es[len(es)-1]; r.Text != "first second" || r.Partial || r.Interrupted || r.Status != "complete" {
		t.Fatalf("the stored reply after a late checkpoint: %+v", r)
	}
}

// TestCheckpointRacingCompletion: a checkpoint that found the turn not
// done, and queues its partial reply after letting go of the stream lock,
// is queued before the complete reply: the turn's completion waits for
// it, and the store keeps the complete reply.
func TestCheckpointRacingCompletion(t *testing.T) {
	t.Parallel()
	h, v, in := streamingTurn(t)
	decided, release := make(chan struct{}), make(chan struct{})
	h.sp.stream <- "first"
	testkit.WaitFor(t, 5*time.Second, "the first delta", func() bool { return len(v.ofType("message.delta")) == 1 })
	h.r.mu.Lock()
	s := h.r.sessions[in.ID]
	tr := s.turn
	s.stream.Lock()
	tr.ckptDecided = func() { close(decided); <-release } // the checkpoint armed by the first delta
	s.stream.Unlock()
	h.r.mu.Unlock()
	select {
	case <-decided:
	case <-time.After(5 * time.Second):
		t.Fatal("no checkpoint in 5 s")
	}
	h.sp.stream <- " second"
	close(h.sp.stream) // the turn completes while the checkpoint has yet to queue
	waited := make(chan struct{})
	go func() { h.r.Wait(); close(waited) }()
	// The completion waits for the checkpoint; without that order it
	// would be done, its reply queued, within this bound, and the
	// checkpoint's partial reply queued over it when it is released.
	select {
	case <-waited:
	case <-time.After(500 * time.Millisecond):
	}
	close(release)
	<-waited
	es := stored(t, h, in.ID)
	if r := es[len(es)-1]; r.Text != "first second" || r.Partial || r.Interrupted || r.Status != "complete" {
		t.Fatalf("the stored reply after a checkpoint raced the completion: %+v", r)
	}
}

// TestCheckpointNotBehindRegistryLock: a streaming reply's checkpoint
// reaches the store while another call holds the registry's lock (it
// takes only the session's stream lock), as the interrupted reply with
// the text so far.
func TestCheckpointNotBehindRegistryLock(t *testing.T) {
	t.Parallel()
	h, v, in := streamingTurn(t)
	unlock := lockAfterFirstDelta(t, h, v)
	h.sp.stream <- " second"
	testkit.WaitFor(t, 5*time.Second, "the checkpoint of the second delta while r.mu is held", func() bool {
		es := stored(t, h, in.ID)
		return len(es) == 2 && es[1].Text == "first second"
	})
	unlock()
	if es := stored(t, h, in.ID); !es[1].Interrupted || es[1].Status != "interrupted" || es[1].Role != store.RoleAssistant {
		t.Fatalf("the checkpointed reply: %+v", es[1])
	}
	close(h.sp.stream)
	h.r.Wait()
}
