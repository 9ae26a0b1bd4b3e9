-- One row that `/readyz` rewrites to find out whether the catalog can still be written (a full
-- disk fails only writes, and only a write tells).

CREATE TABLE write_probe (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    at INTEGER NOT NULL
);
