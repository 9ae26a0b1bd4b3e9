-- Code mode. A server's code-mode settings (JSON, NULL: off). In the call log, a script run is
-- a call of the tool `code_execution` that keeps (the start of) its code, and every tool call
-- a script makes names the script's execution id in `parent_execution_id` and came `via`
-- 'script'. The parent is not a foreign key: a script's tool calls may be logged under another
-- server, and each call is written when it ends, children before their parent.
-- SQLite cannot change a CHECK constraint in place, so `calls` and `egress` are rebuilt as in
-- 0004.

ALTER TABLE servers ADD COLUMN code_mode TEXT;

CREATE TABLE calls_new (
    execution_id  TEXT PRIMARY KEY NOT NULL,
    server_id     TEXT NOT NULL REFERENCES servers (id) ON DELETE CASCADE,
    generation_id INTEGER NOT NULL,
    tool          TEXT NOT NULL,
    -- 'mcp', 'admin' or 'script': which door the call came through.
    via           TEXT NOT NULL CHECK (via IN ('mcp', 'admin', 'script')),
    started_at    INTEGER NOT NULL,
    duration_us   INTEGER NOT NULL,
    outcome       TEXT NOT NULL CHECK (outcome IN
                      ('ok', 'error', 'denied', 'timeout', 'limit', 'busy', 'shutting_down', 'cancelled')),
    error         TEXT,
    fetches       INTEGER NOT NULL,
    console       TEXT NOT NULL DEFAULT '',
    parent_execution_id TEXT,
    code          TEXT
);
INSERT INTO calls_new (execution_id, server_id, generation_id, tool, via, started_at, duration_us, outcome, error,
                       fetches, console)
    SELECT execution_id, server_id, generation_id, tool, via, started_at, duration_us, outcome, error, fetches, console
    FROM calls;

CREATE TABLE egress_new (
    execution_id TEXT NOT NULL REFERENCES calls_new (execution_id) ON DELETE CASCADE,
    seq          INTEGER NOT NULL,
    method       TEXT NOT NULL,
    host         TEXT NOT NULL,
    path         TEXT NOT NULL,
    allowed      INTEGER NOT NULL,
    status       INTEGER,
    bytes        INTEGER NOT NULL DEFAULT 0,
    duration_us  INTEGER NOT NULL,
    -- Operator-facing reason for a denial or an error; handlers never see it.
    reason       TEXT,
    -- The names of the credentials the egress added to a request (never their values).
    credentials  TEXT,
    PRIMARY KEY (execution_id, seq)
);
INSERT INTO egress_new SELECT execution_id, seq, method, host, path, allowed, status, bytes, duration_us, reason,
                              credentials FROM egress;

DROP TABLE egress;
DROP TABLE calls;
ALTER TABLE calls_new RENAME TO calls;
ALTER TABLE egress_new RENAME TO egress;
CREATE INDEX calls_by_server ON calls (server_id, started_at DESC);
CREATE INDEX calls_by_parent ON calls (parent_execution_id) WHERE parent_execution_id IS NOT NULL;
