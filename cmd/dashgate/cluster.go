package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/workers"
	"golang.org/x/sys/unix"
)

// nodeIDs returns the id this node holds its sessions under (every node
// claims them, a node alone too) and the id it shows a cluster (the
// dashgate_node cookie, its heartbeats; "" for a node alone on its own
// store). With --node-id both are that. Else the node's id is the one kept
// in the state dir (keptNodeID), so that a restart claims its own sessions
// back at once instead of waiting for their leases to lapse; with a
// postgres:// store (which several nodes share) it is also the cluster's.
// The caller closes held (nil with --node-id) when it stops.
func nodeIDs(cfg config) (node, cluster string, held *os.File, err error) {
	if cfg.NodeID != "" {
		return cfg.NodeID, cfg.NodeID, nil, nil
	}
	node, held, err = keptNodeID(cfg.StateDir)
	if err != nil {
		return "", "", nil, err
	}
	if isPostgresURL(cfg.Store) {
		cluster = node
	}
	return node, cluster, held, nil
}

// keptNodeID is the node id kept in <state-dir>/node-id (0600, no
// symlink), made on first use from the host name and a random suffix. The
// returned file holds an exclusive lock on it for the run: a second
// dashgate on the same state directory takes the next free one
// (node-id-2, ...), as with the store files, so two running nodes never
// share an id.
func keptNodeID(stateDir string) (string, *os.File, error) {
	for i := 1; i <= maxStoreSlots; i++ {
		name := "node-id"
		if i > 1 {
			name += "-" + strconv.Itoa(i)
		}
		path := filepath.Join(stateDir, name)
		if err := refuseSymlinks(path); err != nil {
			return "", nil, err
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return "", nil, fmt.Errorf("node id %s: %w", path, err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				continue
			}
			return "", nil, fmt.Errorf("node id %s: lock: %w", path, err)
		}
		b, err := io.ReadAll(f)
		if err != nil {
			f.Close()
			return "", nil, fmt.Errorf("node id %s: %w", path, err)
		}
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, f, nil
		}
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "node"
		}
		id := host + "-" + randomToken()[:8]
		if _, err := f.WriteAt([]byte(id+"\n"), 0); err != nil {
			f.Close()
			return "", nil, fmt.Errorf("node id %s: %w", path, err)
		}
		return id, f, nil
	}
	return "", nil, fmt.Errorf("every node id file in %s is in use (%d dashgates run on it)", stateDir, maxStoreSlots)
}

// heartbeat writes the node's heartbeat (its id, address and load, see
// nodeLoad of reg's admin view and mgr) at once and every interval until ctx ends, so
// the other nodes' admin pages see it live, with its sessions' children.
// The load is read once per heartbeat. The first failure logs
// one WARN and the recovery one INFO; the failures between are not
// logged again.
func heartbeat(ctx context.Context, nodes store.Nodes, node, addr string, reg interface{ Admin() sessions.AdminView }, mgr procLister, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		hctx, cancel := context.WithTimeout(ctx, interval)
		err := nodes.Heartbeat(hctx, node, addr, nodeLoad(reg.Admin(), mgr), time.Now())
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			log.Warn("node heartbeat failed: the other nodes will see this one as gone", "node", node, "err", err)
			failing = true
		case err == nil && failing:
			log.Info("node heartbeat written again", "node", node)
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sessionLister is the registry as nodeLoad reads it (its AdminView).
type sessionLister interface{ List() []sessions.Info }

// procLister is the worker manager as nodeLoad reads it.
type procLister interface{ Procs() []*workers.Proc }

// nodeLoad is what the node's heartbeat says it runs: its live sessions
// (counted), its children (counted, and listed up to
// store.MaxNodeWorkers, by pid, each with its session's owner), from one
// snapshot of each; no process stats are read.
func nodeLoad(reg sessionLister, mgr procLister) store.NodeLoad {
	list := reg.List()
	owner := make(map[string]string, len(list))
	for _, s := range list {
		owner[s.ID] = s.Owner
	}
	procs := mgr.Procs()
	slices.SortFunc(procs, func(a, b *workers.Proc) int { return a.PID() - b.PID() })
	load := store.NodeLoad{Sessions: len(list), Workers: len(procs)}
	for _, p := range procs[:min(len(procs), store.MaxNodeWorkers)] {
		load.List = append(load.List, store.NodeWorker{
			PID: p.PID(), SessionID: p.SessionID(), User: owner[p.SessionID()], Kind: string(p.Kind()), StartedAt: p.StartedAt(),
		})
	}
	return load
}

// liveNodes answers web's NodeLive: whether a node's newest heartbeat is
// younger than within. It reads the nodes from the store when asked and
// its last read is over liveNodesFresh old (a request whose node cookie
// names another node: rare), bounded by liveNodesTimeout; until a read
// succeeds, every node counts as live (a browser is not moved on a guess).
//
// within is --node-expiry minus --node-heartbeat: a dead node's lease
// (renewed as often as it heartbeats, for --node-expiry) lapses no sooner
// than that after its last heartbeat, so by the time another node can
// adopt its sessions it already counts as gone here, and the request
// that follows the adoption re-pins the browser. A live node's heartbeat
// is at most --node-heartbeat plus liveNodesFresh old when read.
type liveNodes struct {
	nodes  store.Nodes
	within time.Duration

	mu   sync.Mutex
	at   time.Time            // the last successful read; zero: none yet
	seen map[string]time.Time // node id -> its newest heartbeat, as of at
}

const (
	liveNodesFresh   = time.Second
	liveNodesTimeout = 2 * time.Second
)

// Live reports whether node id heartbeated within l.within of now.
func (l *liveNodes) Live(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.at) > liveNodesFresh {
		ctx, cancel := context.WithTimeout(context.Background(), liveNodesTimeout)
		ns, err := l.nodes.Nodes(ctx, time.Now(), l.within)
		cancel()
		if err == nil {
			l.at, l.seen = time.Now(), make(map[string]time.Time, len(ns))
			for _, n := range ns {
				l.seen[n.ID] = n.LastSeen
			}
		}
	}
	if l.at.IsZero() {
		return true
	}
	seen, ok := l.seen[id]
	return ok && time.Since(seen) < l.within
}
