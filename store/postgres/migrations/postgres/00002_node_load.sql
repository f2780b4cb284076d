-- Each node's load as its last heartbeat said (store.NodeLoad): the count
-- of its live sessions and of its children, and those children (at most
-- store.MaxNodeWorkers) as a JSON array of
-- {"pid","session_id","user","kind","started_at"}. A node of the last
-- release, which writes none of them, reads as running nothing.

-- +goose Up
ALTER TABLE nodes
	ADD COLUMN sessions integer NOT NULL DEFAULT 0,
	ADD COLUMN workers  integer NOT NULL DEFAULT 0,
	ADD COLUMN worker_list jsonb NOT NULL DEFAULT '[]';

-- +goose Down
ALTER TABLE nodes DROP COLUMN worker_list, DROP COLUMN workers, DROP COLUMN sessions;
