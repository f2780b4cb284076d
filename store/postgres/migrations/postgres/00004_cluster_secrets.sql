-- Secrets every node of a cluster shares (issue 41): the first node that
-- asks for a name stores its candidate; every other node gets that one.
-- The key that signs login cookies ("cookie") lives here, so a login made
-- on one node is valid on every node of the cluster, and on no other
-- dashgate.

-- +goose Up
CREATE TABLE cluster_secrets (
	name   text PRIMARY KEY,
	secret bytea NOT NULL
);

-- +goose Down
DROP TABLE cluster_secrets;
