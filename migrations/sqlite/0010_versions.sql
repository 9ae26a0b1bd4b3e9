-- The lifecycle of a server's generations (docs/versions.md): each generation is a numbered
-- version of its server, says what started it and how an operator reviewed it; servers may
-- require approval before a version is served and remember their documentation drift checks;
-- the call log keeps what repairing a failing tool needs.

-- Versions are numbered per server, 1, 2, … in the order the generations were created. The
-- trigger numbers every new generation, so no insert can forget it or race another.
ALTER TABLE generations ADD COLUMN version INTEGER;
UPDATE generations SET version = (
    SELECT COUNT(*) FROM generations AS earlier
    WHERE earlier.server_id = generations.server_id AND earlier.id <= generations.id
);
CREATE UNIQUE INDEX generations_by_version ON generations (server_id, version);
CREATE TRIGGER generations_number AFTER INSERT ON generations WHEN NEW.version IS NULL
BEGIN
    UPDATE generations
    SET version = (SELECT COALESCE(MAX(version), 0) + 1 FROM generations WHERE server_id = NEW.server_id)
    WHERE id = NEW.id;
END;

-- What started a generation: 'registration', 'regenerate' (an operator), 'drift' (changed
-- documentation) or 'repair' (a targeted regeneration of failing tools), with a detail.
ALTER TABLE generations ADD COLUMN triggered_by TEXT NOT NULL DEFAULT 'registration';
ALTER TABLE generations ADD COLUMN trigger_detail TEXT;
UPDATE generations SET triggered_by = 'regenerate' WHERE version > 1;
-- An operator's decision on a version that awaited approval: {"decision", "reason", "at"}.
ALTER TABLE generations ADD COLUMN review TEXT;
-- A targeted regeneration: {"tools": [...], "failures": [...]} as the compiler was given them.
ALTER TABLE generations ADD COLUMN repair TEXT;

-- NULL: [generation] require_approval decides.
ALTER TABLE servers ADD COLUMN require_approval INTEGER;
-- The last documentation drift check: {"status", "checked_at", "error", "last_event"}.
ALTER TABLE servers ADD COLUMN drift TEXT;

CREATE TABLE drift_events (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    server_id     TEXT NOT NULL REFERENCES servers (id) ON DELETE CASCADE,
    detected_at   INTEGER NOT NULL,
    -- JSON array of {"url", "before_sha256", "after_sha256", "before_bytes", "after_bytes"}.
    changes       TEXT NOT NULL,
    -- The candidate generation the change started, if one could start.
    generation_id INTEGER
);
CREATE INDEX drift_events_by_server ON drift_events (server_id, id DESC);

-- 1 when the agent received an error result (a handler's own `isError` result included), so a
-- tool's error rate can be read from the log.
ALTER TABLE calls ADD COLUMN is_error INTEGER NOT NULL DEFAULT 0;
UPDATE calls SET is_error = 1 WHERE outcome IN ('error', 'denied', 'timeout', 'limit');
-- A failed call's arguments, with secrets redacted and cut to a few KB: repair context.
ALTER TABLE calls ADD COLUMN arguments TEXT;
-- No index for reading a tool's recent calls: they are read when a server is first used and in
-- the admin view, from one server's calls (calls_by_server), and every call would pay for one.
