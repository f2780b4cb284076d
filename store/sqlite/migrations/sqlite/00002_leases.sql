-- Ownership as data: the node that holds a session, until when, and the
-- epoch its writes must carry. A session written before this step is
-- unowned (node ''), its lease long expired, at epoch 0.

-- +goose Up
ALTER TABLE sessions ADD COLUMN node TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN lease_until INTEGER NOT NULL DEFAULT -9223372036854775808;
ALTER TABLE sessions ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
-- Claim and Renew read a node's sessions and the expired ones that are not closed.
CREATE INDEX sessions_lease ON sessions (node, lease_until) WHERE state <> 'closed';
