-- Files attached to prompts (issue 42). Their bytes are rows of their
-- own, written when the page uploads them (before the prompt that names
-- them, and maybe before its session's row: no foreign key), and deleted
-- with their session by trigger, whichever way it goes (Delete, Prune, a
-- batch's deletes). A prompt's entry names them (attachments: a JSON
-- array of {id, name, type, kind, size}; '' for none); Apply puts the
-- words of their names into the entry's words, so search finds it by them.

-- +goose Up
CREATE TABLE attachments (
	id         text PRIMARY KEY,
	session_id text NOT NULL,
	owner      text NOT NULL,
	name       text NOT NULL,
	type       text NOT NULL,
	kind       text NOT NULL,
	size       bigint NOT NULL,
	created_at bigint NOT NULL,
	data       bytea NOT NULL
);
CREATE INDEX attachments_session ON attachments (session_id);

-- +goose StatementBegin
CREATE FUNCTION attachments_session_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	DELETE FROM attachments WHERE session_id = OLD.id;
	RETURN OLD;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER attachments_session_delete AFTER DELETE ON sessions
	FOR EACH ROW EXECUTE FUNCTION attachments_session_delete();

ALTER TABLE entries ADD COLUMN attachments text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE entries DROP COLUMN attachments;
DROP TRIGGER attachments_session_delete ON sessions;
DROP FUNCTION attachments_session_delete();
DROP TABLE attachments;
