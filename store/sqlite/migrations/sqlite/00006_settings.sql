-- Per-user settings (issue 42): one row an owner ("" the anonymous
-- user), its settings a JSON object (store.Settings' fields; a field
-- absent is one the user has not chosen). PutSettings merges the fields
-- it sets into doc with json_patch in one statement.

-- +goose Up
CREATE TABLE settings (
	owner TEXT PRIMARY KEY,
	doc   TEXT NOT NULL DEFAULT '{}'
);

-- +goose Down
DROP TABLE settings;
