-- The schema of dashgate before migrations moved to goose (PRAGMA
-- user_version 1). Every statement is IF NOT EXISTS: a file made then
-- already holds all of it, and this step only records it in goose's table.
-- A released step is never edited; a change is a new file.
--
-- Times are INTEGER unix nanoseconds; the zero time.Time is stored as the
-- smallest int64, so it sorts before every real time.

-- +goose Up
CREATE TABLE IF NOT EXISTS sessions (
	id          TEXT PRIMARY KEY,
	owner       TEXT NOT NULL,
	title       TEXT NOT NULL,
	created_at  INTEGER NOT NULL,
	last_active INTEGER NOT NULL,
	state       TEXT NOT NULL,
	end_reason  TEXT NOT NULL,
	closed_at   INTEGER NOT NULL,
	model       TEXT NOT NULL
);
-- Closed lists one owner's closed sessions newest first.
CREATE INDEX IF NOT EXISTS sessions_closed ON sessions (owner, closed_at, id) WHERE state = 'closed';
-- Prune deletes closed sessions by closed_at, across owners.
CREATE INDEX IF NOT EXISTS sessions_prune ON sessions (closed_at) WHERE state = 'closed';
-- Restorable reads the sessions that are not closed.
CREATE INDEX IF NOT EXISTS sessions_restorable ON sessions (state) WHERE state <> 'closed';

CREATE TABLE IF NOT EXISTS entries (
	id            INTEGER PRIMARY KEY,
	session_id    TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	seq           INTEGER NOT NULL,
	role          TEXT NOT NULL,
	kind          TEXT NOT NULL,
	text          TEXT NOT NULL,
	at            INTEGER NOT NULL,
	turn_id       TEXT NOT NULL,
	interrupted   INTEGER NOT NULL,
	input_tokens  INTEGER, -- NULL with output_tokens: no usage reported
	output_tokens INTEGER,
	code          INTEGER NOT NULL,
	status        TEXT NOT NULL DEFAULT '',
	data          TEXT NOT NULL DEFAULT '', -- JSON object or ''
	UNIQUE (session_id, seq)
);

-- entries_fts indexes entries.text (external content: the text is kept
-- once, in entries); the triggers keep it in step. remove_diacritics 0:
-- a word matches as written, case-folded, as the memory store matches.
CREATE VIRTUAL TABLE IF NOT EXISTS entries_fts USING fts5 (
	text,
	content = 'entries',
	content_rowid = 'id',
	tokenize = 'unicode61 remove_diacritics 0'
);

-- +goose StatementBegin
CREATE TRIGGER IF NOT EXISTS entries_fts_insert AFTER INSERT ON entries BEGIN
	INSERT INTO entries_fts (rowid, text) VALUES (new.id, new.text);
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER IF NOT EXISTS entries_fts_delete AFTER DELETE ON entries BEGIN
	INSERT INTO entries_fts (entries_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER IF NOT EXISTS entries_fts_update AFTER UPDATE OF text ON entries BEGIN
	INSERT INTO entries_fts (entries_fts, rowid, text) VALUES ('delete', old.id, old.text);
	INSERT INTO entries_fts (rowid, text) VALUES (new.id, new.text);
END;
-- +goose StatementEnd
