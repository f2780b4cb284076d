-- The agent a session talks to (issue 40): its name as --agent gave it
-- ('' for the built-in worker) and the agent's own id of the conversation
-- (an Agent Client Protocol sessionId, for session/load after the agent
-- process was reaped; '' until the agent gave one).

-- +goose Up
ALTER TABLE sessions
	ADD COLUMN agent         text NOT NULL DEFAULT '',
	ADD COLUMN agent_session text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE sessions DROP COLUMN agent_session, DROP COLUMN agent;
