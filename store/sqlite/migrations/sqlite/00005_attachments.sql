-- Files attached to prompts (issue 42). Their bytes are rows of their
-- own, written when the page uploads them (before the prompt that names
-- them, and maybe before its session's row: no foreign key), and deleted
-- with their session by trigger, whichever way it goes (Delete, Prune, a
-- batch's deletes). A prompt's entry names them (attachments: a JSON
-- array of {id, name, type, kind, size}; '' for none) and search finds
-- it by their names too: entries_fts is made again with a second column,
-- names (one a line), and filled from entries.

-- +goose Up
CREATE TABLE attachments (
	id         TEXT PRIMARY KEY,
	session_id TEXT NOT NULL,
	owner      TEXT NOT NULL,
	name       TEXT NOT NULL,
	type       TEXT NOT NULL,
	kind       TEXT NOT NULL,
	size       INTEGER NOT NULL,
	created_at INTEGER NOT NULL,
	data       BLOB NOT NULL
);
CREATE INDEX attachments_session ON attachments (session_id);

-- +goose StatementBegin
CREATE TRIGGER attachments_session_delete AFTER DELETE ON sessions BEGIN
	DELETE FROM attachments WHERE session_id = old.id;
END;
-- +goose StatementEnd

ALTER TABLE entries ADD COLUMN attachments TEXT NOT NULL DEFAULT '';
ALTER TABLE entries ADD COLUMN names TEXT NOT NULL DEFAULT '';

DROP TRIGGER entries_fts_insert;
DROP TRIGGER entries_fts_delete;
DROP TRIGGER entries_fts_update;
DROP TABLE entries_fts;
CREATE VIRTUAL TABLE entries_fts USING fts5 (
	text,
	names,
	content = 'entries',
	content_rowid = 'id',
	tokenize = 'unicode61 remove_diacritics 0',
	prefix = '1 2 3'
);
INSERT INTO entries_fts (entries_fts) VALUES ('rebuild');

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

-- +goose Down
DROP TRIGGER entries_fts_insert;
DROP TRIGGER entries_fts_delete;
DROP TRIGGER entries_fts_update;
DROP TABLE entries_fts;
CREATE VIRTUAL TABLE entries_fts USING fts5 (
	text,
	content = 'entries',
	content_rowid = 'id',
	tokenize = 'unicode61 remove_diacritics 0',
	prefix = '1 2 3'
);
INSERT INTO entries_fts (entries_fts) VALUES ('rebuild');

-- +goose StatementBegin
CREATE TRIGGER entries_fts_insert AFTER INSERT ON entries BEGIN
	INSERT INTO entries_fts (rowid, text) VALUES (new.id, new.text);
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER entries_fts_delete AFTER DELETE ON entries BEGIN
	INSERT INTO entries_fts (entries_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER entries_fts_update AFTER UPDATE OF text ON entries BEGIN
	INSERT INTO entries_fts (entries_fts, rowid, text) VALUES ('delete', old.id, old.text);
	INSERT INTO entries_fts (rowid, text) VALUES (new.id, new.text);
END;
-- +goose StatementEnd

ALTER TABLE entries DROP COLUMN names;
ALTER TABLE entries DROP COLUMN attachments;
DROP TRIGGER attachments_session_delete;
DROP TABLE attachments;
