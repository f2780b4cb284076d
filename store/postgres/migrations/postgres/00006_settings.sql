-- Per-user settings (issue 42): one row an owner ("" the anonymous
-- user), its settings a JSON object (store.Settings' fields; a field
-- absent is one the user has not chosen). PutSettings merges the fields
-- it sets into doc with jsonb || in one statement.

-- +goose Up
CREATE TABLE settings (
	owner text PRIMARY KEY,
	doc   jsonb NOT NULL DEFAULT '{}'
);

-- +goose Down
DROP TABLE settings;
