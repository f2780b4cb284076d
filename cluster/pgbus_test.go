package cluster_test

import (
	"context"
	"fmt"
	"log/slog"
	neturl "net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/dashgate/dashgate/cluster"
	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/sessions"
)

// heard records what a subscription was told, in order.
type heard struct {
	mu  sync.Mutex
	got []sessions.Announcement
}

func (h *heard) add(a sessions.Announcement) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got = append(h.got, a)
}

func (h *heard) all() []sessions.Announcement {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]sessions.Announcement(nil), h.got...)
}

// of returns what h heard of session sid.
func (h *heard) of(sid string) []sessions.Announcement {
	var out []sessions.Announcement
	for _, a := range h.all() {
		if a.Change.SessionID == sid {
			out = append(out, a)
		}
	}
	return out
}

// subscribe subscribes a new recorder to b until the test ends.
func subscribe(t *testing.T, b sessions.ChangeBus) *heard {
	h := &heard{}
	t.Cleanup(b.Subscribe(h.add))
	return h
}

// newBus opens a PGBus on url, closed when the test ends.
func newBus(t *testing.T, url string, log *slog.Logger) *cluster.PGBus {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	b, err := cluster.NewPGBus(ctx, url, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// An announcement published on one bus reaches the subscribers of every
// bus on the database, the publisher's own included (a Registry skips
// its own by Origin, as with MemoryBus), each in the order published.
func TestPGBusDeliversInOrder(t *testing.T) {
	t.Parallel()
	url := testkit.Postgres(t)
	a, b := newBus(t, url, nil), newBus(t, url, nil)
	onA, onB, onB2 := subscribe(t, a), subscribe(t, b), subscribe(t, b)

	const n = 100
	var want []sessions.Announcement
	for i := range n {
		an := sessions.Announcement{Origin: "reg-a", Owner: "alice", Change: sessions.Change{
			SessionID: "s1", State: sessions.StateAttached, Title: fmt.Sprintf("title %d", i), EndReason: sessions.EndAdminReap}}
		want = append(want, an)
		a.Publish(an)
	}
	for name, h := range map[string]*heard{"a's own": onA, "b's": onB, "b's second": onB2} {
		testkit.WaitFor(t, 10*time.Second, name+" subscriber hears all "+fmt.Sprint(n), func() bool { return len(h.all()) >= n })
		if got := h.all(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s subscriber heard\n%v\nwant\n%v", name, got, want)
		}
	}
	if d := a.Dropped() + b.Dropped(); d != 0 {
		t.Errorf("dropped %d", d)
	}
}

// A change whose payload would pass NOTIFY's limit arrives as the id hint:
// its session id, state and owner, no title; a normal one after it arrives
// whole.
func TestPGBusLargeChangeIsHint(t *testing.T) {
	t.Parallel()
	url := testkit.Postgres(t)
	a, b := newBus(t, url, nil), newBus(t, url, nil)
	onB := subscribe(t, b)

	big := sessions.Announcement{Origin: "reg-a", Owner: "alice", Change: sessions.Change{
		SessionID: "big", State: sessions.StateClosed, Title: strings.Repeat("x", 10<<10), EndReason: sessions.EndAdminReap}}
	small := sessions.Announcement{Origin: "reg-a", Owner: "alice", Change: sessions.Change{SessionID: "small", State: sessions.StateAttached, Title: "t"}}
	a.Publish(big)
	a.Publish(small)
	testkit.WaitFor(t, 10*time.Second, "b hears the small change after the big one", func() bool { return len(onB.of("small")) == 1 })
	want := []sessions.Announcement{
		{Origin: "reg-a", Owner: "alice", Change: sessions.Change{SessionID: "big", State: sessions.StateClosed}},
		small,
	}
	if got := onB.all(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("b heard %v\nwant %v", got, want)
	}
}

// A reap forwarded to another node (sessions.RemoteReap) round trips
// whole, for a pid and for a session; one too long to send is dropped,
// never cut to a hint (a hint would reap nothing, or the wrong thing),
// and a change after it arrives.
func TestPGBusReapRoundTrips(t *testing.T) {
	t.Parallel()
	url := testkit.Postgres(t)
	a, b := newBus(t, url, nil), newBus(t, url, nil)
	onB := subscribe(t, b)

	worker := sessions.Announcement{Origin: "reg-b", Reap: &sessions.RemoteReap{Node: "node-a", From: "node-b", PID: 4242, By: "carol"}}
	sess := sessions.Announcement{Origin: "reg-b", Reap: &sessions.RemoteReap{Node: "node-a", From: "node-b", SessionID: "s1", By: "admin-token"}}
	huge := sessions.Announcement{Origin: "reg-b", Reap: &sessions.RemoteReap{Node: "node-a", From: "node-b", SessionID: strings.Repeat("x", 10<<10), By: "carol"}}
	after := sessions.Announcement{Origin: "reg-a", Owner: "alice", Change: sessions.Change{SessionID: "after", State: sessions.StateAttached}}
	for _, an := range []sessions.Announcement{worker, sess, huge, after} {
		a.Publish(an)
	}
	testkit.WaitFor(t, 10*time.Second, "b hears the change after the reaps", func() bool { return len(onB.of("after")) == 1 })
	got := onB.all()
	if len(got) != 3 || got[0].Reap == nil || *got[0].Reap != *worker.Reap || got[1].Reap == nil || *got[1].Reap != *sess.Reap ||
		got[0].Origin != "reg-b" || got[2].Reap != nil || got[2].Change != after.Change {
		t.Fatalf("b heard %+v; want the two reaps whole, then the change", got)
	}
	if d := a.Dropped(); d != 1 {
		t.Errorf("dropped %d; want 1 (the reap too long to send)", d)
	}
}

// The listening connection, terminated by the server, comes back by
// itself, with one WARN when lost and one INFO when back, and delivers
// again.
func TestPGBusReconnects(t *testing.T) {
	t.Parallel()
	url := testkit.Postgres(t)
	log, logs := testkit.NewLogger()
	a := newBus(t, url, nil)
	// b's listener is told apart by its application_name.
	b := newBus(t, url+"&application_name=bus-b", log)
	onB := subscribe(t, b)

	admin, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	var killed int
	if err := admin.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = 'bus-b' AND datname = current_database()`).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminate b's listener: %d backends, %v", killed, err)
	}
	testkit.WaitFor(t, 10*time.Second, "b logs its listener lost", func() bool { return len(logs.Records("change bus listener lost")) == 1 })

	// Published while b was down, a sentinel is lost; b hears one again
	// once it listens again.
	i := 0
	testkit.WaitFor(t, 30*time.Second, "b hears a again", func() bool {
		i++
		a.Publish(sessions.Announcement{Origin: "reg-a", Change: sessions.Change{SessionID: fmt.Sprint("sentinel-", i)}})
		return len(onB.all()) > 0
	})
	lost, back := logs.Records("change bus listener lost"), logs.Records("change bus listener back")
	if len(lost) != 1 || len(back) != 1 {
		t.Fatalf("want one lost and one back record, got %v and %v\n%s", lost, back, logs)
	}
	if lost[0].Str("level") != "WARN" || back[0].Str("level") != "INFO" || lost[0].Str("err") == "" || lost[0].Str("channel") != cluster.Channel {
		t.Errorf("records: %v, %v", lost[0], back[0])
	}
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	if pw, _ := u.User.Password(); pw == "" || strings.Contains(logs.String(), pw) {
		t.Errorf("the password is logged:\n%s", logs)
	}
}

// Close returns once every goroutine of the bus is gone, subscriptions not
// stopped by their owner included. Not parallel: it counts goroutines.
func TestPGBusCloseLeavesNoGoroutine(t *testing.T) {
	url := testkit.Postgres(t)
	before := goleak.IgnoreCurrent()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	b, err := cluster.NewPGBus(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &heard{}
	stop := b.Subscribe(h.add)
	b.Subscribe(func(sessions.Announcement) {}) // never stopped: Close ends it
	b.Publish(sessions.Announcement{Origin: "x", Change: sessions.Change{SessionID: "s"}})
	testkit.WaitFor(t, 10*time.Second, "the bus hears its own announcement", func() bool { return len(h.all()) == 1 })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	stop() // after Close: returns at once
	if err := goleak.Find(before); err != nil {
		t.Fatalf("goroutines left after Close: %v", err)
	}
	after := b.Subscribe(func(sessions.Announcement) { t.Error("called after Close") })
	after()
}

// A subscriber that does not keep up loses what passes its queue, counted
// in Dropped, while another subscriber of the same bus hears everything:
// every announcement is either heard by the slow one, in order, or
// counted once.
func TestPGBusDropsBeyondQueue(t *testing.T) {
	t.Parallel()
	url := testkit.Postgres(t)
	b := newBus(t, url, nil)
	release := make(chan struct{})
	var mu sync.Mutex
	var got []int
	t.Cleanup(b.Subscribe(func(a sessions.Announcement) {
		<-release
		var i int
		fmt.Sscan(a.Change.Title, &i)
		mu.Lock()
		got = append(got, i)
		mu.Unlock()
	}))
	fast := subscribe(t, b)
	// In chunks the send queue holds, each heard by the fast subscriber
	// before the next: nothing is lost before the slow one's queue.
	const n, chunk = 3000, 500
	for i := range n {
		b.Publish(sessions.Announcement{Origin: "x", Change: sessions.Change{SessionID: "s", Title: fmt.Sprint(i)}})
		if (i+1)%chunk == 0 {
			testkit.WaitFor(t, 30*time.Second, "the fast subscriber keeps up", func() bool { return len(fast.all()) == i+1 })
		}
	}
	close(release)
	heard := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
	testkit.WaitFor(t, 30*time.Second, "every announcement heard by the slow one or counted", func() bool { return heard()+int(b.Dropped()) == n })
	if b.Dropped() == 0 {
		t.Errorf("nothing dropped of %d with a stuck subscriber", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for k := 1; k < len(got); k++ {
		if got[k] <= got[k-1] {
			t.Fatalf("heard out of order: %d after %d", got[k], got[k-1])
		}
	}
}
