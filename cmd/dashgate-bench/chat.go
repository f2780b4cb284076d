package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/dashgate/dashgate/internal/testkit"
)

func dialChat(ctx context.Context, t *target) (*testkit.Chat, error) {
	ch, _, err := testkit.DialChat(ctx, t.WSURL("ws/chat"), testkit.DialOptions{Token: t.Token})
	return ch, err
}

// echo runs `/echo x` in sid, checks its output and returns how long it
// took.
func echo(ctx context.Context, ch *testkit.Chat, sid string) (time.Duration, error) {
	t0 := time.Now()
	out, err := ch.Slash(ctx, sid, "/echo x")
	if err == nil && out != "x" {
		err = fmt.Errorf("/echo x answered %q", out)
	}
	return time.Since(t0), err
}

// openSessions creates n sessions on sockets of at most 100 sessions each
// (a socket's limit); with exec, each runs /echo, which spawns its worker.
// The caller closes the sockets.
func openSessions(ctx context.Context, t *target, n int, exec bool) (socks []*testkit.Chat, sids []string, err error) {
	for i := 0; err == nil && i < n; i++ {
		if i%100 == 0 {
			var ch *testkit.Chat
			if ch, err = dialChat(ctx, t); err != nil {
				break
			}
			socks = append(socks, ch)
		}
		var sid string
		if sid, err = socks[len(socks)-1].CreateSession(ctx, "bench"); err == nil && exec {
			_, err = echo(ctx, socks[len(socks)-1], sid)
		}
		sids = append(sids, sid)
	}
	return socks, sids, err
}

func closeAll(socks []*testkit.Chat) (err error) {
	for _, ch := range socks {
		err = errors.Join(err, ch.Close())
	}
	return err
}

// slashExec: slash.exec on a new session (the call spawns the built-in
// worker; then session.close), and on one warm session after 20 warm-up
// calls.
func slashExec(cold, warm int) group {
	figs := []*Figure{
		fig(fmt.Sprintf("slash.exec cold, new session (%d/run), median", cold), "ms", "<= 20"),
		fig(fmt.Sprintf("slash.exec warm (%d/run) p50", warm), "ms", "<= 1"),
		fig("  slash.exec warm p99", "ms", ""),
	}
	return group{name: "exec", figs: figs, run: func(ctx context.Context, t *target, r int) ([]float64, error) {
		ch, err := dialChat(ctx, t)
		if err != nil {
			return nil, err
		}
		defer ch.Close()
		// session times calls /echo in a new session, then closes it.
		session := func(calls int, ds *[]time.Duration) error {
			sid, err := ch.CreateSession(ctx, "exec")
			for i := 0; err == nil && i < calls; i++ {
				var d time.Duration
				d, err = echo(ctx, ch, sid)
				*ds = append(*ds, d)
			}
			return errors.Join(err, ch.Call(ctx, "session.close", map[string]string{"session_id": sid}, nil))
		}
		var colds, warms []time.Duration
		for i := 0; err == nil && i < cold; i++ {
			err = session(1, &colds)
		}
		if err = errors.Join(err, session(20+warm, &warms)); err != nil {
			return nil, err
		}
		w := ms(warms[20:])
		return []float64{percentile(ms(colds), 50), percentile(w, 50), percentile(w, 99)}, nil
	}}
}

// reap: a socket whose session has a worker sends a close frame; timed
// until kill(pid, 0) fails with ESRCH, polled every 250 µs (the worker is
// dashgate's child: reaped). Sub-rows: dashgate's duration_ms of those
// closes, from its log.
func reap(n int) group {
	figs := []*Figure{
		fig(fmt.Sprintf("socket closed → worker reaped (%d/run) p99", n), "ms", "<= 100"),
		fig("  socket closed → worker reaped p50", "ms", ""),
		fig("  dashgate's worker close (log duration_ms) p50", "ms", ""),
		fig("  dashgate's worker close (log duration_ms) p99", "ms", ""),
	}
	closes := func(t *target) (out []float64) {
		for _, rec := range t.Log.Records("worker closed") {
			if d, ok := rec.Int("duration_ms"); ok && rec.Str("reason") == "detach" {
				out = append(out, float64(d))
			}
		}
		return out
	}
	return group{name: "reap", figs: figs, run: func(ctx context.Context, t *target, r int) ([]float64, error) {
		before := len(closes(t))
		var ds []time.Duration
		for range n {
			socks, sids, err := openSessions(ctx, t, 1, true)
			var ss []testkit.APISession
			if err == nil {
				ss, err = t.Sessions(ctx)
			}
			i := slices.IndexFunc(ss, func(s testkit.APISession) bool { return s.SessionID == sids[0] && s.WorkerPID > 0 })
			if err == nil && i < 0 {
				err = errors.New("the session has no worker")
			}
			t0 := time.Now()
			if err = errors.Join(err, closeAll(socks)); err == nil {
				err = every(ctx, 250*time.Microsecond, 10*time.Second, func() (bool, error) { return testkit.Reaped(ss[i].WorkerPID), nil })
			}
			if err != nil {
				return nil, err
			}
			ds = append(ds, time.Since(t0))
		}
		var cs []float64 // logged once the worker was reaped: wait for the last ones
		if err := poll(ctx, 10*time.Second, func() (bool, error) { cs = closes(t)[before:]; return len(cs) >= n, nil }); err != nil {
			return nil, fmt.Errorf("%d of %d worker closed records logged: %w", len(cs), n, err)
		}
		return []float64{percentile(ms(ds), 99), percentile(ms(ds), 50), percentile(cs, 50), percentile(cs, 99)}, nil
	}}
}

// churn: n cycles on clients at once, between a quiet baseline and the
// leak check: dial /ws/chat, session.create, /echo, a close frame, or
// (every dropEvery-th; 0: none) the TCP connection closed without one.
// The soak (dropEvery > 0) runs once.
func churn(name string, n, clients, dropEvery int) group {
	rate := fig(fmt.Sprintf("session churn (%d cycles/run, %d clients)", n, clients), "cycles/s", ">= 200")
	runs, settle := 0, 20*time.Second
	if dropEvery > 0 {
		rate = fig(fmt.Sprintf("soak: %d cycles, every %dth dropped without close frame", n, dropEvery), "cycles/s", "")
		runs, settle = 1, 30*time.Second
	}
	cycles := func(ctx context.Context, t *target, n, conc, dropEvery int) error {
		return parallel(ctx, n, conc, func(ctx context.Context, i int) error {
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			socks, _, err := openSessions(ctx, t, 1, true)
			if dropEvery > 0 && i%dropEvery == dropEvery-1 && len(socks) > 0 {
				return errors.Join(err, socks[0].Drop(false))
			}
			return errors.Join(err, closeAll(socks))
		})
	}
	return group{name: name, runs: runs,
		figs: []*Figure{rate, fig("  "+name+": leaked workers", "count", "<= 0"), fig("  "+name+": zombies", "count", "<= 0"),
			fig("  "+name+": fds left over", "count", "<= 2"), fig("  "+name+": goroutines left over", "count", "<= 5")},
		setup: func(ctx context.Context, t *target) error { return cycles(ctx, t, 20, 2, 0) }, // warm-up
		run: func(ctx context.Context, t *target, r int) ([]float64, error) {
			base, err := t.baseline(ctx)
			t0 := time.Now()
			if err == nil {
				err = cycles(ctx, t, n, clients, dropEvery)
			}
			d := time.Since(t0)
			if err != nil {
				return nil, err
			}
			end, err := t.settle(ctx, base, settle)
			return []float64{float64(n) / d.Seconds(), float64(end.workers), float64(end.zombies),
				float64(max(0, end.fds-base.fds)), float64(max(0, end.goroutines-base.goroutines))}, err
		}}
}

// parallel runs f(0..n-1), conc at once; the first error cancels the rest.
func parallel(ctx context.Context, n, conc int, f func(ctx context.Context, i int) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(conc)
	for i := 0; i < n && ctx.Err() == nil; i++ {
		g.Go(func() error {
			if err := f(ctx, i); err != nil {
				return fmt.Errorf("%d: %w", i, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// memory: dashgate's RSS growth per idle detached session (sessions
// created, sockets closed, until /metrics counts them detached) or, with
// attached, per attached session with a worker (until /metrics counts the
// workers), then the built-in worker's RSS; a fresh dashgate per run,
// measured from after 5 warm-up cycles and a quiet baseline.
func memory(n int, attached bool) group {
	figs := []*Figure{fig(fmt.Sprintf("dashgate RSS per idle detached session (%d sessions)", n), "KiB", "<= 16")}
	args, metric := []string{"--max-sessions", strconv.Itoa(n + 100)}, `dashgate_sessions{state="detached"}`
	if attached {
		figs = []*Figure{fig(fmt.Sprintf("dashgate RSS per attached session with a worker (%d)", n), "KiB", "<= 64"),
			fig("built-in worker RSS (median of the workers)", "MiB", "<= 10")}
		args, metric = []string{"--max-workers", strconv.Itoa(n + 16)}, `dashgate_workers{kind="chat"}`
	}
	return group{name: "memory", fresh: true, args: args, figs: figs,
		run: func(ctx context.Context, t *target, r int) ([]float64, error) {
			for i := 0; i < 5; i++ { // warm-up
				socks, _, err := openSessions(ctx, t, 1, true)
				if err = errors.Join(err, closeAll(socks)); err != nil {
					return nil, err
				}
			}
			_, err := t.baseline(ctx)
			var rss0, rss1 float64
			if err == nil {
				rss0, err = t.stableRSS(ctx)
			}
			var socks []*testkit.Chat
			if err == nil {
				socks, _, err = openSessions(ctx, t, n, attached)
			}
			defer closeAll(socks) // after an error
			if !attached {
				err = errors.Join(err, closeAll(socks))
			}
			if err == nil {
				err = poll(ctx, time.Minute, func() (bool, error) {
					v, err := t.metric(ctx, metric)
					return v >= float64(n), err
				})
			}
			if err == nil {
				rss1, err = t.stableRSS(ctx)
			}
			var ws []testkit.APIWorker
			if err == nil && attached {
				ws, err = t.Workers(ctx)
			}
			var rs []float64
			for _, w := range ws {
				if w.Kind == "chat" && w.RSSBytes > 0 {
					rs = append(rs, float64(w.RSSBytes)/(1<<20))
				}
			}
			vals := []float64{(rss1 - rss0) / float64(n) / 1024, percentile(rs, 50)}
			return vals[:len(figs)], errors.Join(err, closeAll(socks))
		}}
}

// admin: GET /admin with many detached sessions, on one keep-alive
// connection, the first GET not counted.
func admin(sessions, gets int) group {
	return group{name: "admin", args: []string{"--max-sessions", strconv.Itoa(sessions + 100)},
		figs: []*Figure{fig(fmt.Sprintf("GET /admin with %d sessions, median of %d", sessions, gets), "ms", "<= 50")},
		setup: func(ctx context.Context, t *target) error {
			socks, _, err := openSessions(ctx, t, sessions, false)
			return errors.Join(err, closeAll(socks))
		},
		run: func(ctx context.Context, t *target, r int) ([]float64, error) {
			c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}
			defer c.CloseIdleConnections()
			var ds []time.Duration
			for range gets + 1 {
				t0 := time.Now()
				body, err := t.get(ctx, c, "admin")
				if err == nil && len(body) < sessions*24 {
					err = fmt.Errorf("GET /admin: %d bytes for %d sessions", len(body), sessions)
				}
				if err != nil {
					return nil, err
				}
				ds = append(ds, time.Since(t0))
			}
			return []float64{percentile(ms(ds[1:]), 50)}, nil
		}}
}

// idle: n idle chat sockets (dialled 32 at a time), each read by its
// reader goroutine (pings answered), held with pings every second; RSS
// sampled every second; every socket must still be open at the end.
func idle(n int, hold time.Duration) group {
	figs := []*Figure{
		fig(fmt.Sprintf("dashgate RSS, %d idle chat sockets held %v, pings 1 s", n, hold), "MiB", "<= 300"),
		fig("  peak RSS while held", "MiB", ""),
		fig("  RSS growth per idle socket", "KiB", ""),
	}
	return group{name: "idle", fresh: true, args: []string{"--ws-ping-interval", "1s"}, figs: figs,
		run: func(ctx context.Context, t *target, r int) ([]float64, error) {
			rss0, err := t.stableRSS(ctx)
			socks := make([]*testkit.Chat, n) // each written by one goroutine
			defer func() {                    // dropped after an error, else closed below
				for _, ch := range socks {
					if ch != nil {
						ch.Drop(false)
					}
				}
			}()
			if err == nil {
				err = parallel(ctx, n, 32, func(ctx context.Context, i int) (err error) {
					socks[i], err = dialChat(ctx, t)
					return err
				})
			}
			var rss, peak float64
			until := time.Now().Add(hold)
			if err == nil {
				err = every(ctx, time.Second, hold+time.Minute, func() (bool, error) {
					v, err := t.rss()
					rss, peak = v, max(peak, v)
					return !time.Now().Before(until), err
				})
			}
			for i := 0; err == nil && i < n; i++ {
				if socks[i].Err() != nil {
					err = fmt.Errorf("idle socket %d of %d ended while held: %w", i, n, socks[i].Err())
				}
			}
			if err != nil {
				return nil, err
			}
			err = parallel(ctx, n, 32, func(ctx context.Context, i int) error {
				ch := socks[i]
				socks[i] = nil
				return ch.Close()
			})
			return []float64{rss / (1 << 20), peak / (1 << 20), (rss - rss0) / float64(n) / 1024}, err
		}}
}

// get GETs path with the token on c and returns the body; a status other
// than 200 is an error.
func (t *target) get(ctx context.Context, c *http.Client, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL(path), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+t.Token)
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET /%s: %s", path, resp.Status)
	}
	return body, err
}

// noKeepAlive leaves no connection of its own open in dashgate.
var noKeepAlive = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

// metric reads the sample name (`name{labels}`) of /metrics; 0 if absent.
func (t *target) metric(ctx context.Context, name string) (float64, error) {
	body, err := t.get(ctx, noKeepAlive, "metrics")
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, name+" "); ok && err == nil {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, err
}

// poll polls cond for at most d (testkit.PollErr).
func poll(ctx context.Context, d time.Duration, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return testkit.PollErr(ctx, cond)
}

// every calls f at once and then every d, for at most limit, until it is
// done or fails. It is a sampling clock (RSS every 100 ms or 1 s, a pid
// every 250 µs), part of what a figure means, not a wait for an event:
// testkit.Poll's backoff would change the figures' resolution.
func every(ctx context.Context, d, limit time.Duration, f func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		if done, err := f(); done || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// rss is dashgate's resident set size in bytes.
func (t *target) rss() (float64, error) {
	u, err := testkit.ReadUsage(t.PID())
	return float64(u.RSSBytes), err
}

// stableRSS is the median of 5 samples of dashgate's RSS 100 ms apart.
func (t *target) stableRSS(ctx context.Context) (float64, error) {
	var xs []float64
	err := every(ctx, 100*time.Millisecond, time.Minute, func() (bool, error) {
		v, err := t.rss()
		xs = append(xs, v)
		return len(xs) >= 5, err
	})
	return percentile(xs, 50), err
}

// snapshot is what a leak check compares: the workers /admin/api/workers
// lists, dashgate's zombie children, its fds and its goroutines (/metrics).
type snapshot struct{ workers, zombies, fds, goroutines int }

// snapshots polls snapshots for at most d until ok holds and returns the
// last one; the error wraps context.DeadlineExceeded if ok never held.
func (t *target) snapshots(ctx context.Context, d time.Duration, ok func(snapshot) bool) (last snapshot, err error) {
	err = poll(ctx, d, func() (bool, error) {
		ws, err1 := t.Workers(ctx)
		zs, err2 := testkit.ZombieChildren(t.PID())
		fds, err3 := os.ReadDir(fmt.Sprintf("/proc/%d/fd", t.PID()))
		g, err4 := t.metric(ctx, "go_goroutines")
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return false, err
		}
		last = snapshot{len(ws), len(zs), len(fds), int(g)}
		return ok(last), nil
	})
	return last, err
}

// baseline waits up to 20 s until dashgate is quiet (no worker, no zombie,
// the same snapshot twice in a row) and returns that snapshot.
func (t *target) baseline(ctx context.Context) (snapshot, error) {
	var prev snapshot
	s, err := t.snapshots(ctx, 20*time.Second, func(s snapshot) bool {
		quiet := s == prev && s.workers == 0 && s.zombies == 0
		prev = s
		return quiet
	})
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("dashgate not quiet after 20s: %+v", s)
	}
	return s, err
}

// settle polls up to d until the snapshot is back within the tolerances of
// base (no worker, no zombie, fds +2, goroutines +5) and returns the last
// one: what is left counts.
func (t *target) settle(ctx context.Context, base snapshot, d time.Duration) (snapshot, error) {
	s, err := t.snapshots(ctx, d, func(s snapshot) bool {
		return s.workers == 0 && s.zombies == 0 && s.fds <= base.fds+2 && s.goroutines <= base.goroutines+5
	})
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		err = nil
	}
	return s, err
}
