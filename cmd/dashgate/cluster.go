package main

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/workers"
)

// clusterNodeID is this node's id in a cluster: --node-id, or with a
// postgres:// store (which several nodes share) the host name and the
// start of the instance id; "" for a single node on its own store.
func clusterNodeID(cfg config, instance string) string {
	if cfg.NodeID != "" || !isPostgresURL(cfg.Store) {
		return cfg.NodeID
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "node"
	}
	if len(instance) > 8 {
		instance = instance[:8]
	}
	return host + "-" + instance
}

// heartbeat writes the node's heartbeat (its id, address and load, see
// nodeLoad of reg's admin view and mgr) at once and every interval until ctx ends, so
// the other nodes' admin pages see it live, with its sessions' children.
// The load is read once per heartbeat. The first failure logs
// one WARN and the recovery one INFO; the failures between are not
// logged again.
//
// After each heartbeat it reads the cluster's nodes into live (expiry as
// the admin page's), which web's NodeLive asks.
func heartbeat(ctx context.Context, nodes store.Nodes, node, addr string, reg interface{ Admin() sessions.AdminView }, mgr procLister, interval, expiry time.Duration, live *liveNodes, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		hctx, cancel := context.WithTimeout(ctx, interval)
		err := nodes.Heartbeat(hctx, node, addr, nodeLoad(reg.Admin(), mgr), time.Now())
		if err == nil {
			err = live.refresh(hctx, nodes, expiry)
		}
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

// liveNodes is the cluster's nodes as this node last read them (after each
// heartbeat): which are live. Its zero value knows none. Safe for
// concurrent use.
type liveNodes struct {
	mu   sync.Mutex
	live map[string]bool
}

// Live reports whether node id was live at the last read; false for a node
// never seen, or before the first read.
func (l *liveNodes) Live(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.live[id]
}

// refresh reads the nodes (live: a heartbeat younger than expiry); on an
// error the last read stays.
func (l *liveNodes) refresh(ctx context.Context, nodes store.Nodes, expiry time.Duration) error {
	ns, err := nodes.Nodes(ctx, time.Now(), expiry)
	if err != nil {
		return err
	}
	live := make(map[string]bool, len(ns))
	for _, n := range ns {
		live[n.ID] = n.Live
	}
	l.mu.Lock()
	l.live = live
	l.mu.Unlock()
	return nil
}
