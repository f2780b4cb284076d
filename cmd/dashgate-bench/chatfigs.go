package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// exec: slash.exec on a new session (the built-in worker is spawned by the
// call) and on a warm one.
func (b *bench) exec(ctx context.Context) {
	cold := b.fig("exec_cold", fmt.Sprintf("slash.exec cold, new session (%d/run), median", b.cfg.ColdExecs), "ms", Target{"<=", 20})
	warm := b.fig("exec_warm", fmt.Sprintf("slash.exec warm (%d/run) p50", b.cfg.WarmExecs), "ms", Target{"<=", 1})
	warm99 := b.fig("exec_warm_p99", "  slash.exec warm p99", "ms", Target{})
	b.withTarget(ctx, "exec", nil, func(t *target) error {
		ch, err := dialChat(ctx, t)
		if err != nil {
			return err
		}
		defer ch.close()
		for run := range b.cfg.Runs {
			var colds, warms []time.Duration
			for range b.cfg.ColdExecs {
				sid, err := ch.create(ctx)
				if err != nil {
					return err
				}
				t0 := time.Now()
				out, err := ch.exec(ctx, sid, "/echo cold")
				d := time.Since(t0)
				if err != nil {
					return err
				}
				if out != "cold" {
					return fmt.Errorf("/echo cold answered %q", out)
				}
				colds = append(colds, d)
				if err := ch.call(ctx, "session.close", map[string]any{"session_id": sid}, nil); err != nil {
					return err
				}
			}
			sid, err := ch.create(ctx)
			if err != nil {
				return err
			}
			for i := range 20 + b.cfg.WarmExecs {
				t0 := time.Now()
				out, err := ch.exec(ctx, sid, "/echo warm")
				d := time.Since(t0)
				if err != nil {
					return err
				}
				if out != "warm" {
					return fmt.Errorf("/echo warm answered %q", out)
				}
				if i >= 20 {
					warms = append(warms, d)
				}
			}
			if err := ch.call(ctx, "session.close", map[string]any{"session_id": sid}, nil); err != nil {
				return err
			}
			b.add(cold, percentile(ms(colds), 50))
			b.add(warm, percentile(ms(warms), 50))
			b.add(warm99, percentile(ms(warms), 99))
			b.logf("exec run %d: cold %.2f ms, warm p50 %.3f ms", run, percentile(ms(colds), 50), percentile(ms(warms), 50))
		}
		return nil
	})
}

// workerPID finds the worker of sid in /admin/api/sessions.
func workerPID(ctx context.Context, t *target, sid string) (int, error) {
	list, err := t.sessions(ctx)
	if err != nil {
		return 0, err
	}
	for _, s := range list {
		if s.SessionID == sid {
			if s.WorkerPID == 0 {
				return 0, fmt.Errorf("session %s has no worker", sid)
			}
			return s.WorkerPID, nil
		}
	}
	return 0, fmt.Errorf("session %s not listed", sid)
}

func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 2 {
		return 0
	}
	p, _ := strconv.Atoi(f[1])
	return p
}

// waitReaped waits until pid is gone: kill(pid, 0) == ESRCH when dashgate
// is local (the worker is its child, so ESRCH means reaped), else until
// /admin/api/workers no longer lists it.
func waitReaped(ctx context.Context, t *target, pid int, local bool) error {
	if local {
		return poll(ctx, 10*time.Second, 250*time.Microsecond, func() (bool, error) { return gone(pid), nil })
	}
	return poll(ctx, 10*time.Second, 2*time.Millisecond, func() (bool, error) {
		ws, err := t.workers(ctx)
		if err != nil {
			return false, err
		}
		for _, w := range ws {
			if w.PID == pid {
				return false, nil
			}
		}
		return true, nil
	})
}

// reap: a socket whose session has a worker closes; time until the worker
// is reaped.
func (b *bench) reap(ctx context.Context) {
	p99 := b.fig("reap_p99", fmt.Sprintf("socket closed → worker reaped (%d/run) p99", b.cfg.ReapSamples), "ms", Target{"<=", 100})
	p50 := b.fig("reap_p50", "  socket closed → worker reaped p50", "ms", Target{})
	close50 := b.fig("reap_close_p50", "  dashgate's worker close (log duration_ms) p50", "ms", Target{})
	close99 := b.fig("reap_close_p99", "  dashgate's worker close (log duration_ms) p99", "ms", Target{})
	b.withTarget(ctx, "reap", nil, func(t *target) error {
		seen := 0 // "worker closed" records of earlier runs
		for run := range b.cfg.Runs {
			var ds []time.Duration
			for range b.cfg.ReapSamples {
				ch, err := dialChat(ctx, t)
				if err != nil {
					return err
				}
				sid, err := ch.create(ctx)
				if err == nil {
					_, err = ch.exec(ctx, sid, "/echo reap")
				}
				var pid int
				if err == nil {
					pid, err = workerPID(ctx, t, sid)
				}
				if err != nil {
					ch.close()
					return err
				}
				local := t.pid > 0 && parentOf(pid) == t.pid
				t0 := time.Now()
				if err := ch.close(); err != nil {
					return fmt.Errorf("close chat socket: %w", err)
				}
				if err := waitReaped(ctx, t, pid, local); err != nil {
					return fmt.Errorf("worker %d not reaped: %w", pid, err)
				}
				ds = append(ds, time.Since(t0))
			}
			b.add(p99, percentile(ms(ds), 99))
			b.add(p50, percentile(ms(ds), 50))
			if t.proc != nil {
				// How long Proc.Close took inside dashgate, from its
				// one record per worker close.
				var cs []float64
				recs := logRecords(t.proc.logPath)
				for _, rec := range recs {
					if rec["msg"] == "worker closed" && rec["reason"] == "detach" {
						if d, ok := rec["duration_ms"].(float64); ok {
							cs = append(cs, d)
						}
					}
				}
				if len(cs) > seen {
					b.add(close50, percentile(cs[seen:], 50))
					b.add(close99, percentile(cs[seen:], 99))
				}
				seen = len(cs)
			}
			b.logf("reap run %d: p50 %.2f ms p99 %.2f ms", run, percentile(ms(ds), 50), percentile(ms(ds), 99))
		}
		return nil
	})
}

// cycle is one churn cycle: a chat socket, session.create, slash.exec, and
// the socket's end (a close frame, or with drop the TCP connection closed
// without one).
func cycle(ctx context.Context, t *target, drop bool) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	ch, err := dialChat(ctx, t)
	if err != nil {
		return err
	}
	sid, err := ch.create(ctx)
	if err == nil {
		var out string
		out, err = ch.exec(ctx, sid, "/echo churn")
		if err == nil && out != "churn" {
			err = fmt.Errorf("/echo churn answered %q", out)
		}
	}
	if drop {
		ch.drop()
		return err
	}
	if cerr := ch.close(); err == nil && cerr != nil {
		err = fmt.Errorf("close chat socket: %w", cerr)
	}
	return err
}

// cycles runs n cycles on conc clients (every dropEvery-th one dropped; 0:
// none) and returns how long they took. Failures are recorded; past 50 the
// run stops.
func (b *bench) cycles(ctx context.Context, t *target, what string, n, conc, dropEvery int) (time.Duration, int) {
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for ctx.Err() == nil && failed.Load() < 50 {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				drop := dropEvery > 0 && i%dropEvery == dropEvery-1
				if err := cycle(ctx, t, drop); err != nil {
					if failed.Add(1) <= 10 {
						b.errorf("%s: cycle %d: %v", what, i, err)
					}
				}
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f > 10 {
		b.errorf("%s: %d cycles failed in all", what, f)
	}
	return time.Since(start), int(failed.Load())
}

// baseline waits until dashgate is quiet (no worker, no zombie, the same
// figures twice in a row) and returns its snapshot.
func baseline(ctx context.Context, t *target) (snapshot, error) {
	var last snapshot
	same := 0
	err := poll(ctx, 20*time.Second, 50*time.Millisecond, func() (bool, error) {
		s, err := t.snapshot(ctx)
		if err != nil {
			return false, err
		}
		if s == last && s.Workers == 0 && s.Zombies == 0 {
			same++
		} else {
			same = 0
		}
		last = s
		return same >= 2, nil
	})
	if errors.Is(err, errPollTimeout) {
		return last, fmt.Errorf("dashgate not quiet after 20s: %+v", last)
	}
	return last, err
}

type leakFigs struct{ workers, zombies, fds, goroutines *Figure }

func (b *bench) leakFigs(prefix, what string) leakFigs {
	return leakFigs{
		workers:    b.leakFig(prefix+"_workers", what+": leaked workers", 0),
		zombies:    b.leakFig(prefix+"_zombies", what+": zombies", 0),
		fds:        b.leakFig(prefix+"_fds", what+": fds left over", 2),
		goroutines: b.leakFig(prefix+"_goroutines", what+": goroutines left over", 5),
	}
}

func (b *bench) addLeaks(l leakFigs, base, end snapshot) {
	b.add(l.workers, float64(end.Workers))
	b.add(l.zombies, float64(end.Zombies))
	b.add(l.fds, float64(max(0, end.FDs-base.FDs)))
	b.add(l.goroutines, float64(max(0, end.Goroutines-base.Goroutines)))
}

// churn: create, exec, close socket, as fast as conc clients go.
func (b *bench) churn(ctx context.Context) {
	rate := b.fig("churn_rate", fmt.Sprintf("session churn (%d cycles/run, %d clients)", b.cfg.ChurnCycles, b.cfg.Concurrency), "cycles/s", Target{">=", 200})
	leaks := b.leakFigs("churn", "  churn")
	b.withTarget(ctx, "churn", nil, func(t *target) error {
		b.cycles(ctx, t, "churn warm-up", 20, 2, 0)
		for run := range b.cfg.Runs {
			base, err := baseline(ctx, t)
			if err != nil {
				return err
			}
			d, failed := b.cycles(ctx, t, "churn", b.cfg.ChurnCycles, b.cfg.Concurrency, 0)
			if failed > 0 {
				return fmt.Errorf("%d churn cycles failed", failed)
			}
			end, err := t.settle(ctx, base, 2, 5, 20*time.Second)
			if err != nil {
				return err
			}
			r := float64(b.cfg.ChurnCycles) / d.Seconds()
			b.add(rate, r)
			b.addLeaks(leaks, base, end)
			b.logf("churn run %d: %.0f cycles/s; base %+v end %+v", run, r, base, end)
		}
		return nil
	})
}

// soak: many churn cycles, some dropped abruptly, then the leak check.
func (b *bench) soak(ctx context.Context) {
	rate := b.fig("soak_rate", fmt.Sprintf("soak: %d cycles, every %dth dropped without close frame", b.cfg.SoakCycles, b.cfg.SoakDropEvery), "cycles/s", Target{})
	leaks := b.leakFigs("soak", "  soak")
	b.withTarget(ctx, "soak", nil, func(t *target) error {
		b.cycles(ctx, t, "soak warm-up", 20, 2, 0)
		base, err := baseline(ctx, t)
		if err != nil {
			return err
		}
		d, failed := b.cycles(ctx, t, "soak", b.cfg.SoakCycles, b.cfg.Concurrency, b.cfg.SoakDropEvery)
		if failed > 0 {
			return fmt.Errorf("%d soak cycles failed", failed)
		}
		end, err := t.settle(ctx, base, 2, 5, 30*time.Second)
		if err != nil {
			return err
		}
		b.add(rate, float64(b.cfg.SoakCycles)/d.Seconds())
		b.addLeaks(leaks, base, end)
		b.logf("soak: %.0f cycles/s; base %+v end %+v", float64(b.cfg.SoakCycles)/d.Seconds(), base, end)
		return nil
	})
}

// openSessions creates n sessions on sockets of at most 100 sessions each
// (a socket's limit) and returns the sockets and session ids.
func openSessions(ctx context.Context, t *target, n int) ([]*chat, []string, error) {
	var socks []*chat
	var sids []string
	for len(sids) < n {
		if len(sids)%100 == 0 {
			ch, err := dialChat(ctx, t)
			if err != nil {
				return socks, sids, err
			}
			socks = append(socks, ch)
		}
		sid, err := socks[len(socks)-1].create(ctx)
		if err != nil {
			return socks, sids, err
		}
		sids = append(sids, sid)
	}
	return socks, sids, nil
}

func closeAll(socks []*chat) error {
	var first error
	for _, ch := range socks {
		if err := ch.close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// stableRSS samples dashgate's RSS five times, 100 ms apart, and returns
// the median.
func stableRSS(ctx context.Context, t *target) (float64, error) {
	var xs []float64
	err := poll(ctx, time.Minute, 100*time.Millisecond, func() (bool, error) {
		v, err := t.rss(ctx)
		xs = append(xs, v)
		return len(xs) >= 5, err
	})
	return percentile(xs, 50), err
}

// metricAtLeast waits until the /metrics sample name reaches n.
func metricAtLeast(ctx context.Context, t *target, name string, n int) error {
	var v float64
	err := poll(ctx, 60*time.Second, 20*time.Millisecond, func() (bool, error) {
		m, err := t.metrics(ctx)
		v = m[name]
		return v >= float64(n), err
	})
	if err != nil {
		return fmt.Errorf("%s = %v, want %d: %w", name, v, n, err)
	}
	return nil
}

// memory: dashgate's RSS growth per idle detached session and per attached
// session with a worker, on a fresh dashgate per run; and the built-in
// worker's RSS.
func (b *bench) memory(ctx context.Context) {
	nd, na := b.cfg.DetachedSessions, b.cfg.AttachedSessions
	if b.shared != nil {
		// within the defaults of a dashgate this tool did not start
		// (--max-workers 64, --max-sessions 1000)
		na, nd = min(na, 32), min(nd, 500)
	}
	det := b.fig("rss_detached", fmt.Sprintf("dashgate RSS per idle detached session (%d sessions)", nd), "KiB", Target{"<=", 16})
	att := b.fig("rss_attached", fmt.Sprintf("dashgate RSS per attached session with a worker (%d)", na), "KiB", Target{"<=", 64})
	wrss := b.fig("worker_rss", "built-in worker RSS (median of the workers)", "MiB", Target{"<=", 10})
	for run := range b.cfg.Runs {
		b.withTarget(ctx, "memory-detached", []string{"--max-sessions", strconv.Itoa(nd + 100)}, func(t *target) error {
			b.cycles(ctx, t, "memory warm-up", 5, 1, 0)
			if _, err := baseline(ctx, t); err != nil {
				return err
			}
			rss0, err := stableRSS(ctx, t)
			if err != nil {
				return err
			}
			socks, _, err := openSessions(ctx, t, nd)
			cerr := closeAll(socks)
			if err != nil {
				return err
			}
			if cerr != nil {
				return cerr
			}
			if err := metricAtLeast(ctx, t, `dashgate_sessions{state="detached"}`, nd); err != nil {
				return err
			}
			rss1, err := stableRSS(ctx, t)
			if err != nil {
				return err
			}
			b.add(det, (rss1-rss0)/float64(nd)/1024)
			b.logf("memory run %d: detached: rss %.1f -> %.1f MiB", run, rss0/(1<<20), rss1/(1<<20))
			return nil
		})
		b.withTarget(ctx, "memory-attached", []string{"--max-workers", strconv.Itoa(na + 16)}, func(t *target) error {
			b.cycles(ctx, t, "memory warm-up", 5, 1, 0)
			base, err := baseline(ctx, t)
			if err != nil {
				return err
			}
			rss0, err := stableRSS(ctx, t)
			if err != nil {
				return err
			}
			socks, sids, err := openSessions(ctx, t, na)
			defer closeAll(socks)
			if err != nil {
				return err
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			var first error
			sem := make(chan struct{}, 4)
			for i, sid := range sids {
				ch := socks[i/100]
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					if _, err := ch.exec(ctx, sid, "/echo attached"); err != nil {
						mu.Lock()
						if first == nil {
							first = err
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if first != nil {
				return first
			}
			if err := metricAtLeast(ctx, t, `dashgate_workers{kind="chat"}`, na); err != nil {
				return err
			}
			rss1, err := stableRSS(ctx, t)
			if err != nil {
				return err
			}
			ws, err := t.workers(ctx)
			if err != nil {
				return err
			}
			var rs []float64
			for _, w := range ws {
				if w.Kind == "chat" && w.RSSBytes > 0 {
					rs = append(rs, float64(w.RSSBytes)/(1<<20))
				}
			}
			b.add(att, (rss1-rss0)/float64(na)/1024)
			b.add(wrss, percentile(rs, 50))
			b.logf("memory run %d: attached: rss %.1f -> %.1f MiB; worker rss median %.1f MiB", run, rss0/(1<<20), rss1/(1<<20), percentile(rs, 50))
			if err := closeAll(socks); err != nil {
				return err
			}
			end, err := t.settle(ctx, base, 2, 5, 30*time.Second)
			if err != nil {
				return err
			}
			if end.Workers > 0 || end.Zombies > 0 {
				return fmt.Errorf("after closing the attached sessions' sockets: %+v", end)
			}
			return nil
		})
	}
}

// admin: GET /admin with many sessions.
func (b *bench) admin(ctx context.Context) {
	f := b.fig("admin_ms", fmt.Sprintf("GET /admin with %d sessions, median of %d", b.cfg.AdminSessions, b.cfg.AdminGets), "ms", Target{"<=", 50})
	b.withTarget(ctx, "admin", []string{"--max-sessions", strconv.Itoa(b.cfg.AdminSessions + 100)}, func(t *target) error {
		socks, _, err := openSessions(ctx, t, b.cfg.AdminSessions)
		cerr := closeAll(socks)
		if err != nil {
			return err
		}
		if cerr != nil {
			return cerr
		}
		c := &http.Client{Timeout: 30 * time.Second}
		defer c.CloseIdleConnections()
		for run := range b.cfg.Runs {
			var ds []time.Duration
			for i := range b.cfg.AdminGets + 1 {
				req, _ := http.NewRequestWithContext(ctx, "GET", t.url("http", "admin"), nil)
				req.Header = t.authHeader()
				req.Header.Set("Accept", "text/html")
				t0 := time.Now()
				resp, err := c.Do(req)
				if err != nil {
					return err
				}
				n, err := drain(resp)
				d := time.Since(t0)
				if err != nil {
					return err
				}
				if resp.StatusCode != http.StatusOK || n < int64(b.cfg.AdminSessions)*24 {
					return fmt.Errorf("GET /admin: %s, %d bytes", resp.Status, n)
				}
				if i > 0 { // the first one warms the connection
					ds = append(ds, d)
				}
			}
			b.add(f, percentile(ms(ds), 50))
			b.logf("admin run %d: median %.1f ms", run, percentile(ms(ds), 50))
		}
		return nil
	})
}

// idle: many idle chat sockets held with pings every second.
func (b *bench) idle(ctx context.Context) {
	n := b.cfg.IdleSockets
	f := b.fig("idle_rss", fmt.Sprintf("dashgate RSS, %d idle chat sockets held %v, pings 1 s", n, b.cfg.IdleHold), "MiB", Target{"<=", 300})
	peak := b.fig("idle_rss_peak", "  peak RSS while held", "MiB", Target{})
	per := b.fig("idle_per_socket", "  RSS growth per idle socket", "KiB", Target{})
	for run := range b.cfg.Runs {
		b.withTarget(ctx, "idle", []string{"--ws-ping-interval", "1s"}, func(t *target) error {
			rss0, err := stableRSS(ctx, t)
			if err != nil {
				return err
			}
			socks := make([]*chat, n)
			var next atomic.Int64
			var wg sync.WaitGroup
			var mu sync.Mutex
			var first error
			for range 32 {
				wg.Go(func() {
					for {
						i := int(next.Add(1) - 1)
						if i >= n {
							return
						}
						ch, err := dialChat(ctx, t)
						if err != nil {
							mu.Lock()
							if first == nil {
								first = fmt.Errorf("socket %d: %w", i, err)
							}
							mu.Unlock()
							return
						}
						socks[i] = ch
					}
				})
			}
			wg.Wait()
			defer func() {
				for _, ch := range socks {
					if ch != nil {
						ch.drop()
					}
				}
			}()
			if first != nil {
				return first
			}
			var top float64
			hold := time.Now().Add(b.cfg.IdleHold)
			err = poll(ctx, b.cfg.IdleHold+time.Minute, time.Second, func() (bool, error) {
				v, err := t.rss(ctx)
				top = max(top, v)
				return !time.Now().Before(hold), err
			})
			if err != nil {
				return err
			}
			rss1, err := t.rss(ctx)
			if err != nil {
				return err
			}
			dead := 0
			for i, ch := range socks {
				if ok, why := ch.alive(); !ok {
					if dead++; dead <= 3 {
						b.errorf("idle: socket %d ended while held: %v", i, why)
					}
				}
			}
			if dead > 0 {
				return fmt.Errorf("%d of %d idle sockets ended while held", dead, n)
			}
			b.add(f, rss1/(1<<20))
			b.add(peak, max(top, rss1)/(1<<20))
			b.add(per, (rss1-rss0)/float64(n)/1024)
			b.logf("idle run %d: rss %.1f -> %.1f MiB (peak %.1f)", run, rss0/(1<<20), rss1/(1<<20), top/(1<<20))
			// close them properly, concurrently
			next.Store(0)
			for range 32 {
				wg.Go(func() {
					for {
						i := int(next.Add(1) - 1)
						if i >= n {
							return
						}
						socks[i].close()
						socks[i] = nil
					}
				})
			}
			wg.Wait()
			return nil
		})
	}
}
