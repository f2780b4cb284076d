package main

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/dashgate/dashgate/store"
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

// heartbeat writes the node's heartbeat (its id and address) at once and
// every interval until ctx ends, so the other nodes' admin pages see it
// live. The first failure logs one WARN and the recovery one INFO; the
// failures between are not logged again.
func heartbeat(ctx context.Context, nodes store.Nodes, node, addr string, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		hctx, cancel := context.WithTimeout(ctx, interval)
		err := nodes.Heartbeat(hctx, node, addr, time.Now())
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
