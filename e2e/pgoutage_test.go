package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dashgate/dashgate/internal/testkit"
)

// pgOutage is how long these tests keep PostgreSQL stopped.
const pgOutage = 10 * time.Second

// echoer sends /echo <n> to one session every 200 ms (pacing, not
// synchronisation) until stop, and keeps what went wrong.
type echoer struct {
	c   *chatConn
	sid string

	mu   sync.Mutex
	sent int
	errs []string
	done chan struct{}
	quit chan struct{}
}

func startEchoer(c *chatConn, sid string) *echoer {
	e := &echoer{c: c, sid: sid, done: make(chan struct{}), quit: make(chan struct{})}
	go func() {
		defer close(e.done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for n := 1; ; n++ {
			text := fmt.Sprint(n)
			out, err := e.c.slash(sid, "/echo "+text)
			e.mu.Lock()
			e.sent = n
			if err != nil || out != text {
				e.errs = append(e.errs, fmt.Sprintf("/echo %s: %q, %v", text, out, err))
			}
			e.mu.Unlock()
			select {
			case <-e.quit:
				return
			case <-tick.C:
			}
		}
	}()
	return e
}

// count is how many commands were answered.
func (e *echoer) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sent
}

// waitMore waits until n more commands than now were answered.
func (e *echoer) waitMore(t *testing.T, n int) {
	t.Helper()
	want := e.count() + n
	testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("%d /echo commands answered", want), func() bool { return e.count() >= want })
}

// stop ends the loop and returns how many commands it sent and the
// failures.
func (e *echoer) stop() (int, []string) {
	close(e.quit)
	<-e.done
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sent, e.errs
}

// outage stops the suite's PostgreSQL for pgOutage and starts it again.
func outage(t *testing.T) {
	t.Helper()
	resume := pausePostgres(t)
	select {
	case <-time.After(pgOutage): // the outage's length: the scenario, not a wait for an event
	case <-t.Context().Done():
	}
	resume()
}

// pausePostgres stops the suite's PostgreSQL (each step bounded by a
// minute) and returns what starts it again, which fails the test if it
// cannot; a test that ends before calling it (a failure) has it started
// again by its cleanup, so the server is never left stopped.
func pausePostgres(t *testing.T) (resume func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := testkit.PausePostgres(ctx); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	var err error
	start := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err = testkit.ResumePostgres(ctx)
		})
	}
	t.Cleanup(start)
	return func() {
		t.Helper()
		if start(); err != nil {
			t.Fatal(err)
		}
	}
}

// storedEntries is the count and the largest seq of sid's entries in
// PostgreSQL.
func storedEntries(t *testing.T, url, sid string) (count, maxSeq int, err error) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close(context.Background())
	err = conn.QueryRow(ctx, `SELECT count(*), coalesce(max(seq), 0) FROM entries WHERE session_id = $1`, sid).Scan(&count, &maxSeq)
	return count, maxSeq, err
}

// errorEvents are the error events chat got for sid.
func errorEvents(c *chatConn, sid string) []testkit.Event {
	var out []testkit.Event
	for _, ev := range c.Events() {
		if ev.Type() == "error" && ev.SessionID() == sid {
			out = append(out, ev)
		}
	}
	return out
}

// Issue 26, faults: PostgreSQL stopped for 10 s while a chat runs /echo
// every 200 ms. Live chat goes on from memory: no error reply, no error
// event. With the default backlog, once PostgreSQL is back the stored
// history holds every entry (seq 1 to the last, two per command); with
// --store-backlog 5 it lacks some, and exactly one ERROR record counts
// them. The lease's ttl (--node-expiry) is 30 s here, longer than the
// outage and the renewal after it: this test is the journal's; the lapse
// of a shorter lease is TestPostgresOutageRefusesNewWork's.
func TestPostgresOutageChatGoesOn(t *testing.T) {
	if os.Getenv(testkit.EnvE2E) != "1" {
		t.Skip("stops PostgreSQL for 10 s, twice: set DASHGATE_E2E=1 to run it")
	}
	for _, tc := range []struct {
		name    string
		backlog []string
	}{
		{"default backlog", nil},
		{"backlog of 5", []string{"--store-backlog", "5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storeURL := testkit.Postgres(t)
			flags := append([]string{"--node-expiry", "30s", "--node-heartbeat", "5s"}, tc.backlog...)
			d := startLeasedNode(t, storeURL, "a", filepath.Join(t.TempDir(), "state"), "", flags...)
			// Written while the store is down, retried: nothing lost yet.
			d.allowErrors = []string{"store write failed", "store entries dropped"}
			chat := openChat(t, "chat", d.WSURL("/ws/chat"), bearer())
			sid := chat.createSession("outage")
			e := startEchoer(chat, sid)
			e.waitMore(t, 5)
			mark := d.Log.Mark()
			outage(t)
			e.waitMore(t, 5)
			sent, errs := e.stop()
			if len(errs) > 0 {
				t.Fatalf("live chat failed during the outage (%d of %d commands): %q", len(errs), sent, errs)
			}
			if evs := errorEvents(chat, sid); len(evs) > 0 {
				t.Fatalf("error events during the outage: %v", evs)
			}
			if len(d.Log.Records("store write failed")) == 0 {
				t.Fatalf("no write failed while PostgreSQL was stopped: the outage did not happen\n%s", d.logText())
			}
			want := 2 * sent // each /echo: the command and its output

			if tc.backlog == nil {
				var n, last int
				var err error
				if !testkit.Until(30*time.Second, func() bool {
					n, last, err = storedEntries(t, storeURL, sid)
					return err == nil && n == want
				}) {
					t.Fatalf("stored entries %d (last seq %d, %v); want all %d\n%s", n, last, err, want, d.logText())
				}
				if last != want {
					t.Fatalf("stored entries %d, last seq %d; want seq 1 to %d", n, last, want)
				}
				if recs := d.Log.Records("store entries dropped"); len(recs) != 0 {
					t.Fatalf("entries dropped with the default backlog: %v", recs)
				}
				return
			}

			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			rec, err := d.Log.WaitRecord(ctx, mark, func(r testkit.Record) bool { return r.Msg() == "store entries dropped" })
			if err != nil {
				t.Fatalf("no record counted the loss: %v\n%s", err, d.logText())
			}
			// Every entry queued after the drops is written once the
			// store is back: the loss is what the store lacks.
			var n int
			if !testkit.Until(30*time.Second, func() bool {
				n, _, err = storedEntries(t, storeURL, sid)
				dropped, _ := rec.Int("dropped_entries")
				return err == nil && n+dropped == want
			}) {
				t.Fatalf("stored %d of %d entries (%v); the record counts %v dropped", n, want, err, rec["dropped_entries"])
			}
			var counting []testkit.Record
			for _, r := range d.Log.Records("") {
				if _, ok := r["dropped_entries"]; ok && r.Str("level") == "ERROR" {
					counting = append(counting, r)
				}
			}
			if dropped, _ := rec.Int("dropped_entries"); len(counting) != 1 || rec.Str("level") != "ERROR" || dropped == 0 ||
				!strings.Contains(fmt.Sprint(rec["lost"]), sid) {
				t.Fatalf("ERROR records counting the loss: %v; want exactly one, with dropped_entries > 0 and the session", counting)
			}
		})
	}
}

// Issue 26, faults: with --node-expiry 3s (renewed every second) and
// PostgreSQL stopped for 10 s, the node's lease on a session lapses: a
// prompt answers 5006 and the session's viewer gets one notice; once
// PostgreSQL is back the same prompt works and the viewer is told. One
// WARN "store unreachable", one WARN "leases unproven", one INFO "leases
// proven".
func TestPostgresOutageRefusesNewWork(t *testing.T) {
	if os.Getenv(testkit.EnvE2E) != "1" {
		t.Skip("stops PostgreSQL for 10 s: set DASHGATE_E2E=1 to run it")
	}
	storeURL := testkit.Postgres(t)
	d := startLeasedNode(t, storeURL, "a", filepath.Join(t.TempDir(), "state"), "", "--node-expiry", "3s", "--node-heartbeat", "1s")
	d.allowErrors = []string{"store write failed"}
	chat := openChat(t, "chat", d.WSURL("/ws/chat"), bearer())
	sid := chat.createSession("lapse")
	chat.mustEcho(sid, "before")
	prompt := func() error {
		return chat.call("prompt.submit", map[string]any{"session_id": sid, "text": "hello"}, nil)
	}
	if err := prompt(); err != nil {
		t.Fatal(err)
	}

	resume := pausePostgres(t)
	stopped := time.Now()
	var refused *testkit.RPCError
	if !testkit.Until(pgOutage-time.Second, func() bool {
		err := prompt()
		return errors.As(err, &refused) && refused.Code == 5006
	}) {
		t.Fatalf("no prompt answered 5006 within %v of PostgreSQL's stop (the lease is 3 s)\n%s", pgOutage-time.Second, d.logText())
	}
	if !strings.Contains(refused.Message, "cannot reach the store") || !strings.Contains(refused.Message, "nothing was done") {
		t.Fatalf("5006's message %q", refused.Message)
	}
	if _, err := chat.slash(sid, "/echo refused"); !errors.As(err, &refused) || refused.Code != 5006 {
		t.Fatalf("/echo after the lapse: %v; want 5006", err)
	}
	lapsed := noticesOf(chat, sid, "cannot reach the store")
	if len(lapsed) != 1 {
		t.Fatalf("lapse notices %v; want one", lapsed)
	}
	select {
	case <-time.After(time.Until(stopped.Add(pgOutage))): // the outage's length
	case <-t.Context().Done():
	}
	resume()

	var last error
	if !testkit.Until(30*time.Second, func() bool { last = prompt(); return last == nil }) {
		t.Fatalf("the prompt still fails after PostgreSQL came back: %v\n%s", last, d.logText())
	}
	// Two notices say the store is back: the lease's ("takes new work
	// again") and the journal's ("saved: …", issue 41), each once.
	testkit.WaitFor(t, 10*time.Second, "the proven notice", func() bool { return len(noticesOf(chat, sid, "takes new work again")) == 1 })
	testkit.WaitFor(t, 10*time.Second, "the saved notice", func() bool { return len(noticesOf(chat, sid, "saved: the conversation store is reachable again")) == 1 })
	// The notices written while PostgreSQL was stopped are stored too.
	testkit.WaitFor(t, 30*time.Second, "the writes resumed", func() bool { return len(d.Log.Records("store writes resumed")) > 0 })
	if n := len(noticesOf(chat, sid, "cannot reach the store")); n != 1 {
		t.Fatalf("%d lapse notices; want one", n)
	}
	for _, c := range []struct{ msg, level string }{
		{"store unreachable", "WARN"}, {"leases unproven", "WARN"}, {"leases proven", "INFO"},
	} {
		recs := d.Log.Records(c.msg)
		if len(recs) != 1 || recs[0].Str("level") != c.level || recs[0].Str("node") != "a" {
			t.Fatalf("%q records %v; want one %s with node a\n%s", c.msg, recs, c.level, d.logText())
		}
	}
}

// noticesOf are the notice events chat got for sid whose text contains
// part.
func noticesOf(c *chatConn, sid, part string) []string {
	var out []string
	for _, ev := range c.Events() {
		if ev.Type() != "notice" || ev.SessionID() != sid {
			continue
		}
		if text, _ := ev.Payload()["text"].(string); strings.Contains(text, part) {
			out = append(out, text)
		}
	}
	return out
}
