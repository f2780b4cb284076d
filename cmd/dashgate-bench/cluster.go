package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dashgate/dashgate/internal/testkit"
	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/store/postgres"
	"github.com/dashgate/dashgate/store/sqlite"
	"github.com/dashgate/dashgate/workers/builtin"
)

// Issue 26: a cluster of nodes on one PostgreSQL against one node on
// SQLite, in one run. The group's own instance is the SQLite node (the
// default store, <state-dir>/dashgate.db); its setup starts two nodes
// sharing one PostgreSQL database (testkit.PostgresDB, a database per
// build), each with its own --node-id and --state-dir and the SQLite
// node's token. Each run, in an order that alternates with r:
//
//   - chat: clients sockets (on the one SQLite node, or client i on node
//     i%2), each running cycles of session.create (timed), /echo (spawns
//     the session's worker, not timed), prompt.submit of clusterWords words
//     to message.complete (timed: a turn) and session.close;
//   - failover: node a (--node-expiry 3s --node-heartbeat 1s) makes a
//     session of 4 entries through its chat socket; once the store has
//     them, a gets SIGKILL; from the kill, session.resume on node b every
//     50 ms until it answers (b adopts the session);
//   - start-up: a node started on a PostgreSQL database of stored sessions
//     (half closed, half held by a dead node whose leases lapsed: it claims
//     them), timed from exec to /healthz answering (polled every 2 ms), its
//     RSS then; and one node on an SQLite file of the same sessions.
//
// The PostgreSQL server is stopped when the group is done.
func (b *bench) cluster(clients, cycles, stored int) group {
	const expiry, heartbeat = 3 * time.Second, time.Second
	per := max(1, cycles/clients) * clients
	figs := []*Figure{
		fig(fmt.Sprintf("cluster: chat turn, 1 node on SQLite (%d clients, %d turns of %d words/run) p50", clients, per, clusterWords), "ms", ""),
		fig("  chat turn, 1 node on SQLite p99", "ms", ""),
		fig("cluster: chat turn, 2 nodes on one PostgreSQL p50", "ms", ""),
		fig("  chat turn, 2 nodes on one PostgreSQL p99", "ms", ""),
		fig(fmt.Sprintf("cluster: session.create, 1 node on SQLite (%d/run) p50", per), "ms", ""),
		fig("  session.create, 1 node on SQLite p99", "ms", ""),
		fig("cluster: session.create, 2 nodes on one PostgreSQL p50", "ms", ""),
		fig("  session.create, 2 nodes on one PostgreSQL p99", "ms", ""),
		fig(fmt.Sprintf("cluster: SIGKILL of node a → session.resume served by b (--node-expiry %v)", expiry), "ms", ""),
		fig("  a's lease left at the kill (lease_until − kill)", "ms", ""),
		fig(fmt.Sprintf("  kill → resume − node expiry (%v)", expiry), "ms", ""),
		fig("  kill → resume − a's lease left", "ms", ""),
		fig("  the adopting session.resume call", "ms", ""),
		fig(fmt.Sprintf("cluster: start-up, %d sessions in PostgreSQL (exec → /healthz)", stored), "ms", ""),
		fig("  exec → its \"sessions restored\" record (the claim done), PostgreSQL", "ms", ""),
		fig("  RSS after start-up, PostgreSQL", "MiB", ""),
		fig(fmt.Sprintf("  the bench's own store Claim of the %d not closed (its reset)", stored/2), "ms", ""),
		fig(fmt.Sprintf("cluster: start-up, the same %d sessions in SQLite (exec → /healthz)", stored), "ms", ""),
		fig("  exec → its \"sessions restored\" record, SQLite", "ms", ""),
		fig("  RSS after start-up, SQLite", "MiB", ""),
	}
	type pgNodes struct {
		url   string
		drop  func(context.Context) error
		st    *postgres.Store
		nodes []*target
	}
	byBuild := map[string]*pgNodes{}
	var seedOnce sync.Once
	var seedURL, seedFile string
	var seedDrop func(context.Context) error
	var seedErr error
	seed := func(ctx context.Context) error {
		seedOnce.Do(func() {
			fmt.Fprintf(b.stderr, "dashgate-bench: writing %d sessions to PostgreSQL and SQLite\n", stored)
			if seedURL, seedDrop, seedErr = testkit.PostgresDB(ctx); seedErr != nil {
				return
			}
			seedFile = filepath.Join(b.tmp, "cluster.db")
			seedErr = errors.Join(writeClusterStore(ctx, seedURL, "", stored), writeClusterStore(ctx, "", seedFile, stored))
		})
		return redact(seedErr, seedURL)
	}
	env := []string{builtin.WordDelayEnv + "=" + streamPace.String()}
	args := []string{"--pass-env", builtin.WordDelayEnv}
	return group{name: "cluster", figs: figs, env: env, args: args,
		setup: func(ctx context.Context, t *target) error {
			url, drop, err := testkit.PostgresDB(ctx)
			if err != nil {
				return err
			}
			p := &pgNodes{url: url, drop: drop}
			byBuild[t.build] = p
			if p.st, err = postgres.Open(ctx, url, postgres.Options{}); err != nil {
				return redact(err, url)
			}
			for _, id := range []string{"node1", "node2"} {
				n, err := b.launch(ctx, t, "cluster-"+id, args, env, "--store", url, "--node-id", id)
				if err != nil {
					return redact(err, url)
				}
				p.nodes = append(p.nodes, n)
			}
			return seed(ctx)
		},
		done: func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for _, p := range byBuild {
				for _, n := range p.nodes {
					b.stop("cluster", n)
				}
				if p.st != nil {
					p.st.Close()
				}
				if err := p.drop(ctx); err != nil {
					b.errorf("cluster: drop database: %v", redact(err, p.url))
				}
			}
			if seedDrop != nil {
				if err := seedDrop(ctx); err != nil {
					b.errorf("cluster: drop database: %v", redact(err, seedURL))
				}
			}
			if err := testkit.StopPostgres(); err != nil {
				b.errorf("cluster: stop PostgreSQL: %v", err)
			}
		},
		run: func(ctx context.Context, t *target, r int) ([]float64, error) {
			p := byBuild[t.build]
			vals := make([]float64, len(figs))
			chat := func(at int, nodes []*target) error {
				turns, creates, err := chatLoad(ctx, nodes, clients, per/clients)
				if err == nil {
					vals[at], vals[at+1] = percentile(turns, 50), percentile(turns, 99)
					vals[at+4], vals[at+5] = percentile(creates, 50), percentile(creates, 99)
				}
				return err
			}
			startPG := func() error {
				var err error
				vals[13], vals[14], vals[15], vals[16], err = b.startOn(ctx, t, seedURL, stored, r)
				return redact(err, seedURL)
			}
			startSQLite := func() error {
				var err error
				vals[17], vals[18], vals[19], _, err = b.startOn(ctx, t, seedFile, stored, r)
				return err
			}
			steps := []func() error{
				func() error { return chat(0, []*target{t}) },
				func() error { return chat(2, p.nodes) },
				startPG, startSQLite,
			}
			if r%2 == 1 {
				steps[0], steps[1], steps[2], steps[3] = steps[1], steps[0], steps[3], steps[2]
			}
			for _, f := range steps {
				if err := f(); err != nil {
					return nil, err
				}
			}
			res, err := b.failover(ctx, t, p.st, p.url, p.nodes[1], args, env, expiry, heartbeat, r)
			if err != nil {
				return nil, redact(err, p.url)
			}
			copy(vals[8:], []float64{ms1(res.resume), ms1(res.left), ms1(res.resume - expiry), ms1(res.resume - res.left), ms1(res.call)})
			return vals, nil
		}}
}

// clusterWords is the length of a chat turn's prompt: the echo agent
// streams it back, one delta a word, paced by streamPace.
const clusterWords = 100

// chatLoad runs clients sockets at once, client i on nodes[i%len(nodes)],
// each cycles times: session.create (timed), /echo (spawns the session's
// worker), prompt.submit to message.complete (timed), session.close. It
// returns the turns' and the creates' times in ms.
func chatLoad(ctx context.Context, nodes []*target, clients, cycles int) (turns, creates []float64, err error) {
	var mu sync.Mutex
	prompt := strings.TrimSpace(strings.Repeat("w ", clusterWords))
	err = parallel(ctx, clients, clients, func(ctx context.Context, i int) error {
		ch, err := dialChat(ctx, nodes[i%len(nodes)])
		if err != nil {
			return err
		}
		defer ch.Close()
		for range cycles {
			t0 := time.Now()
			sid, err := ch.CreateSession(ctx, "cluster")
			dc := time.Since(t0)
			if err == nil {
				_, err = echo(ctx, ch, sid)
			}
			t1 := time.Now()
			if err == nil {
				err = ch.Call(ctx, "prompt.submit", map[string]string{"session_id": sid, "text": prompt}, nil)
			}
			if err == nil {
				_, err = ch.WaitEvent(ctx, "message.complete", sid)
			}
			dt := time.Since(t1)
			if err == nil {
				err = ch.Call(ctx, "session.close", map[string]string{"session_id": sid}, nil)
			}
			if err != nil {
				return err
			}
			mu.Lock()
			creates, turns = append(creates, ms1(dc)), append(turns, ms1(dt))
			mu.Unlock()
		}
		return nil
	})
	return turns, creates, err
}

// failoverResult is one failover's times.
type failoverResult struct{ resume, left, call time.Duration }

// failover starts node a on the database at url, makes a session of 4
// entries there, waits until st has them, kills a (SIGKILL) and polls
// session.resume on node b every 50 ms until it answers.
func (b *bench) failover(ctx context.Context, t *target, st *postgres.Store, url string, nodeB *target, args, env []string, expiry, heartbeat time.Duration, r int) (failoverResult, error) {
	var res failoverResult
	id := fmt.Sprintf("failover-a%d", r)
	a, err := b.launch(ctx, t, "cluster-"+id, args, env, "--store", url, "--node-id", id,
		"--node-expiry", expiry.String(), "--node-heartbeat", heartbeat.String())
	if err != nil {
		return res, err
	}
	defer func() { // a is killed below; or after an error
		a.Kill()
		left, _ := a.Procs()
		for _, p := range left {
			syscall.Kill(p.PID, syscall.SIGKILL)
		}
	}()
	ch, err := dialChat(ctx, a)
	if err != nil {
		return res, err
	}
	defer ch.Drop(false)
	sid, err := ch.CreateSession(ctx, "failover")
	for i := 0; err == nil && i < 2; i++ {
		_, err = ch.Slash(ctx, sid, "/echo entry "+strconv.Itoa(i))
	}
	if err != nil {
		return res, err
	}
	// The journal writes behind: wait for a's row and its 4 entries, so
	// that the kill measures the adoption, not that window.
	var row store.Session
	if err := poll(ctx, 10*time.Second, func() (bool, error) {
		row, err = st.Get(ctx, "", sid)
		return err == nil && row.Node == id && row.LastSeq == 4, nil
	}); err != nil {
		return res, fmt.Errorf("a's session in PostgreSQL: %+v, %v", row, err)
	}
	// The lease of the last renewal (Renew every ttl/3): read it again
	// just before the kill.
	if row, err = st.Get(ctx, "", sid); err != nil {
		return res, err
	}
	if err := syscall.Kill(a.PID(), syscall.SIGKILL); err != nil {
		return res, err
	}
	t0 := time.Now()
	res.left = row.LeaseUntil.Sub(t0)
	cb, err := dialChat(ctx, nodeB)
	if err != nil {
		return res, err
	}
	defer cb.Close()
	var hist struct {
		History []json200 `json:"history"`
	}
	err = every(ctx, 50*time.Millisecond, 2*time.Minute, func() (bool, error) {
		t1 := time.Now()
		err := cb.Call(ctx, "session.resume", map[string]string{"session_id": sid}, &hist)
		res.call = time.Since(t1)
		if rpc := (*testkit.RPCError)(nil); errors.As(err, &rpc) {
			return false, nil // missing while a's lease lives
		}
		return err == nil, err
	})
	res.resume = time.Since(t0)
	if err == nil && len(hist.History) != 4 {
		err = fmt.Errorf("resume on b after the adoption: %d entries, want 4", len(hist.History))
	}
	if err == nil {
		err = cb.Call(ctx, "session.close", map[string]string{"session_id": sid}, nil)
	}
	return res, err
}

// startOn starts a node on the stored sessions at src (a postgres:// URL,
// or an SQLite file copied into its state directory), times exec →
// /healthz answering (polled every 2 ms) and exec → its "sessions
// restored" record, and samples its RSS (MiB), then stops it; claim is
// how long the reset's Claim took (PostgreSQL). Before a PostgreSQL start, the sessions not closed are handed back
// to the dead node under lapsed leases (the last start released them).
func (b *bench) startOn(ctx context.Context, t *target, src string, stored, r int) (up, restored, rss, claim float64, err error) {
	pg := strings.HasPrefix(src, "postgres://")
	dir, err := os.MkdirTemp(b.tmp, "cluster-start-")
	if err != nil {
		return 0, 0, 0, 0, err
	}
	port, err := freePort()
	if err != nil {
		return 0, 0, 0, 0, err
	}
	extra := []string{"--max-sessions", strconv.Itoa(2 * stored), "--addr", "127.0.0.1:" + strconv.Itoa(port)}
	if pg {
		st, err := postgres.Open(ctx, src, postgres.Options{})
		if err != nil {
			return 0, 0, 0, 0, err
		}
		t0 := time.Now()
		got, err := st.Claim(ctx, deadNode, time.Nanosecond, time.Now().Add(-time.Hour))
		claim = ms1(time.Since(t0))
		st.Close()
		if err == nil && len(got) != stored/2 {
			err = fmt.Errorf("%d sessions handed back to the dead node, want %d", len(got), stored/2)
		}
		if err != nil {
			return 0, 0, 0, 0, err
		}
		extra = append(extra, "--store", src, "--node-id", "start-"+strconv.Itoa(r))
	} else {
		if err := os.MkdirAll(filepath.Join(dir, "state"), 0o700); err != nil {
			return 0, 0, 0, 0, err
		}
		if err := copyFile(src, filepath.Join(dir, "state", "dashgate.db")); err != nil {
			return 0, 0, 0, 0, err
		}
	}
	// /healthz, polled from before the exec: a sampling clock of 2 ms.
	healthy := make(chan time.Time, 1)
	pctx, stopPoll := context.WithCancel(ctx)
	polled := make(chan struct{})
	defer func() { stopPoll(); <-polled }()
	go func() {
		defer close(polled)
		c := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
		every(pctx, 2*time.Millisecond, time.Minute, func() (bool, error) {
			res, err := c.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/healthz")
			if err != nil {
				return false, nil
			}
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				healthy <- time.Now()
				return true, nil
			}
			return false, nil
		})
	}()
	n, err := b.launchIn(ctx, t, dir, nil, nil, extra...)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	defer b.stop("cluster", n)
	var at time.Time
	select {
	case at = <-healthy:
	case <-time.After(30 * time.Second):
		return 0, 0, 0, 0, errors.New("/healthz did not answer within 30 s of the start")
	case <-ctx.Done():
		return 0, 0, 0, 0, ctx.Err()
	}
	want := stored / 2
	rs := n.Log.Records("sessions restored")
	if len(rs) != 1 || rs[0]["count"] != float64(want) {
		return 0, 0, 0, 0, fmt.Errorf("sessions restored records %v, want one with count %d", rs, want)
	}
	rat, err := time.Parse(time.RFC3339Nano, rs[0].Str("time"))
	if err != nil {
		return 0, 0, 0, 0, err
	}
	v, err := n.stableRSS(ctx)
	return ms1(at.Sub(n.Started)), ms1(rat.Sub(n.Started)), v / (1 << 20), claim, err
}

// launch starts one more dashgate of t's build for the cluster group, in
// a new directory named for name, with t's token, the defaults of
// runOnce, the group's flags args and environment env, then extra.
func (b *bench) launch(ctx context.Context, t *target, name string, args, env []string, extra ...string) (*target, error) {
	dir, err := os.MkdirTemp(b.tmp, name+"-"+t.build+"-")
	if err != nil {
		return nil, err
	}
	return b.launchIn(ctx, t, dir, args, env, extra...)
}

func (b *bench) launchIn(ctx context.Context, t *target, dir string, args, env []string, extra ...string) (*target, error) {
	i := slices.IndexFunc(b.builds, func(bd build) bool { return bd.label == t.build })
	if i < 0 {
		return nil, fmt.Errorf("no build %q", t.build)
	}
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	all := append(append([]string{"--max-conns-per-ip", "0", "--pty-cmd", "/bin/sh"}, args...), extra...)
	in, err := testkit.Start(sctx, testkit.Options{
		Bin: b.builds[i].bin, Dir: dir, Env: append(testkit.CleanEnv(), env...), Token: t.Token,
		Args:        append(all, b.cfg.args[t.build]...),
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	return &target{Instance: in, build: t.build}, nil
}

// deadNode holds the stored sessions of the start-up figures that are not
// closed, under leases that lapsed.
const deadNode = "dead-node"

// writeClusterStore writes n sessions of 5 entries each to the PostgreSQL
// database at url or, with url "", the SQLite file path: even ones closed
// a day ago, odd ones detached, held (PostgreSQL) by deadNode under a
// lease that ended an hour ago.
func writeClusterStore(ctx context.Context, url, path string, n int) error {
	var st store.Store
	var err error
	if url != "" {
		st, err = postgres.Open(ctx, url, postgres.Options{})
	} else {
		st, err = sqlite.Open(ctx, path, sqlite.Options{})
	}
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
		id := fmt.Sprintf("cluster%08d", i)
		at := base.Add(time.Duration(i) * time.Millisecond)
		s := store.Session{ID: id, Title: "session " + strconv.Itoa(i), CreatedAt: at, LastActive: at, State: "detached"}
		if i%2 == 0 {
			s.State, s.EndReason, s.ClosedAt = store.StateClosed, "user_close", at
		} else if url != "" {
			s.Node, s.LeaseUntil, s.Epoch = deadNode, time.Now().Add(-time.Hour), 1
		}
		batch.Sessions = append(batch.Sessions, s)
		for seq := range 5 {
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
		if len(batch.Sessions) == 500 || i == n-1 {
			if err := st.Apply(ctx, batch); err != nil {
				return err
			}
			batch = store.Batch{}
		}
	}
	return nil
}

// freePort is a TCP port of 127.0.0.1 free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// redact replaces the password of the PostgreSQL URL u in err's text.
func redact(err error, u string) error {
	p, perr := url.Parse(u)
	if err == nil || perr != nil || p.User == nil {
		return err
	}
	if pw, ok := p.User.Password(); ok && pw != "" && strings.Contains(err.Error(), pw) {
		return errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
	}
	return err
}

// ms1 is d in milliseconds.
func ms1(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
