-- A discovery-mode version's whole API (docs/openapi.md): every operation's tool (schemas,
-- plan, annotations) and the full-text index its search ranks them with, as JSON, and the
-- executor every operation's handler ends with, stored once. One row per generation, deleted
-- with it, so versions, rollback and pruning carry it.
CREATE TABLE discovery (
    generation_id INTEGER PRIMARY KEY REFERENCES generations(id) ON DELETE CASCADE,
    operations TEXT NOT NULL,
    search_index TEXT NOT NULL,
    executor TEXT NOT NULL
);
