-- The first schema of the PostgreSQL backend: what store/sqlite holds after
-- its step 2 (sessions with their lease, entries), plus the words of each
-- entry for full-text search and the nodes' heartbeats. A released step is
-- never edited; a change is a new file.
--
-- Times are bigint unix nanoseconds (timestamptz keeps microseconds, and a
-- time read back must equal the one written); the zero time.Time is the
-- smallest bigint, so it sorts before every real time.

-- +goose Up
CREATE TABLE sessions (
	id          text PRIMARY KEY,
	owner       text NOT NULL,
	title       text NOT NULL,
	created_at  bigint NOT NULL,
	last_active bigint NOT NULL,
	state       text NOT NULL,
	end_reason  text NOT NULL,
	closed_at   bigint NOT NULL,
	model       text NOT NULL,
	node        text NOT NULL DEFAULT '',
	lease_until bigint NOT NULL DEFAULT -9223372036854775808,
	epoch       bigint NOT NULL DEFAULT 0
);
-- Closed lists one owner's closed sessions newest first.
CREATE INDEX sessions_closed ON sessions (owner, closed_at, id) WHERE state = 'closed';
-- Prune deletes closed sessions by closed_at, across owners.
CREATE INDEX sessions_prune ON sessions (closed_at) WHERE state = 'closed';
-- RestorableFor reads one owner's sessions that are not closed.
CREATE INDEX sessions_restorable ON sessions (owner) WHERE state <> 'closed';
-- Claim and Release read a node's sessions and the expired ones that are not closed.
CREATE INDEX sessions_lease ON sessions (node, lease_until) WHERE state <> 'closed';

CREATE TABLE entries (
	-- The order entries were first written: Search's newest first. A
	-- rewritten checkpoint keeps its id.
	id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	session_id    text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	seq           bigint NOT NULL,
	role          text NOT NULL,
	kind          text NOT NULL,
	text          text NOT NULL,
	at            bigint NOT NULL,
	turn_id       text NOT NULL,
	interrupted   boolean NOT NULL,
	input_tokens  bigint, -- NULL with output_tokens: no usage reported
	output_tokens bigint,
	code          bigint NOT NULL,
	status        text NOT NULL,
	data          text NOT NULL, -- JSON object or ''
	-- The text's words, case-folded, as Apply computes them (runs of
	-- letters and digits, the same words store/sqlite indexes), whatever
	-- the database's locale and text search configuration.
	words         tsvector NOT NULL,
	UNIQUE (session_id, seq)
);
CREATE INDEX entries_words ON entries USING gin (words);

-- Each node's last heartbeat (store.Nodes).
CREATE TABLE nodes (
	id        text PRIMARY KEY,
	addr      text NOT NULL,
	last_seen bigint NOT NULL
);
