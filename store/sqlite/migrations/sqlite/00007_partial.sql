-- A streaming reply's checkpoints (issue 43): the registry stores the text
-- of a reply still being written every 250 ms (store.Entry.Partial), so
-- that a crash loses little of it; each checkpoint rewrote the entry's
-- search index too (its whole text, deleted and inserted again), the index
-- work of a reply growing with the square of its length. A partial entry
-- is not indexed: the triggers index an entry when it is written without
-- partial (its last write: the reply complete, stopped or failed), and
-- take out of the index only what is in it. Store.Open marks every
-- partial entry not partial (a crash's last checkpoint, indexed then).

-- +goose Up
ALTER TABLE entries ADD COLUMN partial INTEGER NOT NULL DEFAULT 0;
-- Open's sweep finds them without reading every entry.
CREATE INDEX entries_partial ON entries (id) WHERE partial <> 0;

DROP TRIGGER entries_fts_insert;
DROP TRIGGER entries_fts_delete;
DROP TRIGGER entries_fts_update;

-- +goose StatementBegin
CREATE TRIGGER entries_fts_insert AFTER INSERT ON entries WHEN new.partial = 0 BEGIN
	INSERT INTO entries_fts (rowid, text, names) VALUES (new.id, new.text, new.names);
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER entries_fts_delete AFTER DELETE ON entries WHEN old.partial = 0 BEGIN
	INSERT INTO entries_fts (entries_fts, rowid, text, names) VALUES ('delete', old.id, old.text, old.names);
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER entries_fts_update AFTER UPDATE OF text, names, partial ON entries BEGIN
	INSERT INTO entries_fts (entries_fts, rowid, text, names) SELECT 'delete', old.id, old.text, old.names WHERE old.partial = 0;
	INSERT INTO entries_fts (rowid, text, names) SELECT new.id, new.text, new.names WHERE new.partial = 0;
END;
-- +goose StatementEnd

-- +goose Down
UPDATE entries SET partial = 0 WHERE partial <> 0;
DROP INDEX entries_partial;

DROP TRIGGER entries_fts_insert;
DROP TRIGGER entries_fts_delete;
DROP TRIGGER entries_fts_update;

-- +goose StatementBegin
CREATE TRIGGER entries_fts_insert AFTER INSERT ON entries BEGIN
	INSERT INTO entries_fts (rowid, text, names) VALUES (new.id, new.text, new.names);
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER entries_fts_delete AFTER DELETE ON entries BEGIN
	INSERT INTO entries_fts (entries_fts, rowid, text, names) VALUES ('delete', old.id, old.text, old.names);
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER entries_fts_update AFTER UPDATE OF text, names ON entries BEGIN
	INSERT INTO entries_fts (entries_fts, rowid, text, names) VALUES ('delete', old.id, old.text, old.names);
	INSERT INTO entries_fts (rowid, text, names) VALUES (new.id, new.text, new.names);
END;
-- +goose StatementEnd

ALTER TABLE entries DROP COLUMN partial;
