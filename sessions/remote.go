package sessions

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// This file is what the admin page of one node of a cluster does with
// the others' sessions: it lists the sessions other nodes hold live (from
// the shared store) and forwards a reap of their sessions and children
// over Config.Changes, and it does the reaps other nodes forward here.

// ErrNoCluster: the registry is not a node of a cluster (no lease claimed,
// or no Config.Changes), so nothing can be forwarded or listed elsewhere.
var ErrNoCluster = errors.New("not a node of a cluster")

// RemoteReap is an admin's reap, asked on one node (From) of what another
// node (Node) holds: a session (SessionID, PID 0) or a chat worker or
// terminal (PID, Node's pid). By names the admin as the reap records do
// (the admin user, or "admin-token" for the admin token). The node that
// holds the target does the reap as a local admin reap of By's, with the
// same records; every other registry ignores it.
type RemoteReap struct {
	Node      string `json:"node"`
	From      string `json:"from"`
	SessionID string `json:"session_id,omitempty"`
	PID       int    `json:"pid,omitempty"`
	By        string `json:"by"`
}

// RemoteSession is a session another live node holds: its Info as stored
// (no viewers, worker or terminal: those are the holder's), and the
// holder.
type RemoteSession struct {
	Info
	Node string `json:"node"`
}

// Node is the id of this node in its cluster ("" before Claim: a node
// alone).
func (a AdminView) Node() string {
	node, _ := a.r.lease.heldBy()
	return node
}

// Elsewhere returns the live sessions other nodes hold under a live lease
// (Node not this node's, LeaseUntil after now), from one store read within
// ctx, in the store's order. A node alone returns nil, nil. Errors: the
// store's.
func (a AdminView) Elsewhere(ctx context.Context, now time.Time) ([]RemoteSession, error) {
	node := a.Node()
	if node == "" || a.r.cfg.Store == nil {
		return nil, nil
	}
	rows, err := a.r.cfg.Store.Restorable(ctx)
	if err != nil {
		return nil, fmt.Errorf("sessions of the other nodes: %w", err)
	}
	var out []RemoteSession
	for _, s := range rows {
		if s.Node == "" || s.Node == node || !s.LeaseUntil.After(now) {
			continue
		}
		out = append(out, RemoteSession{Node: s.Node, Info: Info{
			ID: s.ID, Owner: s.Owner, Title: s.Title, State: State(s.State),
			CreatedAt: s.CreatedAt, LastActive: s.LastActive, Model: s.Model,
		}})
	}
	return out, nil
}

// ForwardReap publishes rr (its From and By set here: this node, and by
// as the records name it) for rr.Node, another node, to do; it returns at
// once, before anything is reaped (the bus is a hint: a lost announcement
// reaps nothing). Only an admin may: for any other by it publishes nothing
// and returns ErrNotFound. ErrNoCluster: a node alone. An error also when
// rr names no node, this node, or not exactly one of a session and a pid.
func (a AdminView) ForwardReap(by Principal, rr RemoteReap) error {
	if !by.Admin {
		return ErrNotFound
	}
	node := a.Node()
	bus := a.r.cfg.Changes
	if node == "" || bus == nil {
		return ErrNoCluster
	}
	switch {
	case rr.Node == "" || rr.Node == node:
		return fmt.Errorf("forward a reap to node %q: not another node", rr.Node)
	case (rr.SessionID == "") == (rr.PID == 0):
		return fmt.Errorf("forward a reap to node %q: a session or a pid, one of them", rr.Node)
	}
	rr.From, rr.By = node, adminName(by)
	bus.Publish(Announcement{Origin: a.r.id, Reap: &rr})
	return nil
}

// remoteReap does rr, heard from the registry origin, when this registry
// holds its target: a session live here ends as Close by an admin would
// end it (end_reason admin_reap); a pid is reaped as ReapWorker would,
// only when rr.Node is this node (a pid means nothing elsewhere). The
// records are a local admin reap's, by=rr.By, and one INFO "remote reap"
// (from_node, by, target, result). One naming nothing held here is
// ignored with a DEBUG record.
func (r *Registry) remoteReap(origin string, rr RemoteReap) {
	node, _ := r.lease.heldBy()
	by := Principal{User: rr.By, Admin: true}
	if rr.By == adminName(AdminPrincipal) {
		by = AdminPrincipal
	}
	log := r.log.With("from_node", rr.From, "by", rr.By)
	var target string
	var err error
	switch {
	case rr.PID != 0 && rr.SessionID == "":
		target = fmt.Sprintf("worker %d", rr.PID)
		if node == "" || rr.Node != node {
			err = ErrNotFound
			break
		}
		err = r.ReapWorker(by, rr.PID)
	case rr.SessionID != "" && rr.PID == 0:
		target = "session " + rr.SessionID
		var closed bool
		if closed, err = r.Close(by, rr.SessionID, EndAdminReap); err == nil && !closed {
			err = ErrNotFound
		}
	default:
		err = errors.New("neither a session nor a pid")
	}
	if err != nil {
		log.Debug("remote reap not for this node", "node", rr.Node, "target", target, "origin", origin, "err", err)
		return
	}
	log.Info("remote reap", "node", rr.Node, "target", target, "result", "reaped")
}

// adminName is how the records name the admin p: its user, or
// "admin-token" for the admin token's principal (as byOf).
func adminName(p Principal) string {
	if p.User == "" {
		return byOf(AdminPrincipal, "")
	}
	return p.User
}
