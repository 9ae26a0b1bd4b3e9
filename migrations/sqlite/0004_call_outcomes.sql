-- Two more call outcomes: `shutting_down` (a call the daemon refused because it was stopping,
-- logged as `busy` before) and `cancelled` (the client went away mid-call, logged as `error`).
-- SQLite cannot change a CHECK constraint in place, so `calls` and `egress` are rebuilt. The new
-- tables are filled and the old ones dropped child first, so the cascade from `calls` to
-- `egress` has nothing left to delete; renaming `calls_new` updates `egress_new`'s reference.

CREATE TABLE calls_new (
    execution_id  TEXT PRIMARY KEY NOT NULL,
    server_id     TEXT NOT NULL REFERENCES servers (id) ON DELETE CASCADE,
    generation_id INTEGER NOT NULL,
    tool          TEXT NOT NULL,
    -- 'mcp' or 'admin': which door the call came through.
    via           TEXT NOT NULL CHECK (via IN ('mcp', 'admin')),
    started_at    INTEGER NOT NULL,
    duration_us   INTEGER NOT NULL,
    outcome       TEXT NOT NULL CHECK (outcome IN
                      ('ok', 'error', 'denied', 'timeout', 'limit', 'busy', 'shutting_down', 'cancelled')),
    error         TEXT,
    fetches       INTEGER NOT NULL,
    console       TEXT NOT NULL DEFAULT ''
);
INSERT INTO calls_new
    SELECT execution_id, server_id, generation_id, tool, via, started_at, duration_us,
           CASE
               WHEN outcome = 'busy' AND error = 'the daemon is shutting down' THEN 'shutting_down'
               WHEN outcome = 'error' AND error LIKE 'cancelled: the client went away%' THEN 'cancelled'
               ELSE outcome
           END,
           error, fetches, console
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
    PRIMARY KEY (execution_id, seq)
);
INSERT INTO egress_new SELECT execution_id, seq, method, host, path, allowed, status, bytes, duration_us, reason FROM egress;

DROP TABLE egress;
DROP TABLE calls;
ALTER TABLE calls_new RENAME TO calls;
ALTER TABLE egress_new RENAME TO egress;
CREATE INDEX calls_by_server ON calls (server_id, started_at DESC);
