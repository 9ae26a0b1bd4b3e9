-- Prompt-based generation: stage bookkeeping on generations, and fetched documents.

ALTER TABLE generations ADD COLUMN dry_run INTEGER NOT NULL DEFAULT 0;
ALTER TABLE generations ADD COLUMN force INTEGER NOT NULL DEFAULT 0;
-- Milliseconds spent per stage, as a JSON object {"fetching": 12, ...}.
ALTER TABLE generations ADD COLUMN timings TEXT NOT NULL DEFAULT '{}';
-- Non-fatal problems (a page that could not be fetched, truncation), as a JSON array of strings.
ALTER TABLE generations ADD COLUMN warnings TEXT NOT NULL DEFAULT '[]';
-- Whitelist candidates that were not admitted, as a JSON array of {"domain", "source", "reason"}.
ALTER TABLE generations ADD COLUMN refused_domains TEXT NOT NULL DEFAULT '[]';
ALTER TABLE generations ADD COLUMN llm_requests INTEGER NOT NULL DEFAULT 0;
-- The generation whose plan and handlers a cache hit reused.
ALTER TABLE generations ADD COLUMN cached_from INTEGER;

CREATE INDEX generations_cache_key
    ON generations (prompt_hash, content_hash, model, generator_version, status);

-- Document bodies, stored once per distinct text.
CREATE TABLE documents (
    sha256     TEXT PRIMARY KEY NOT NULL,
    text       TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

-- Which documents a generation fetched, and how.
CREATE TABLE generation_documents (
    generation_id   INTEGER NOT NULL REFERENCES generations (id) ON DELETE CASCADE,
    position        INTEGER NOT NULL,
    url             TEXT NOT NULL,
    source_url      TEXT NOT NULL,
    final_url       TEXT NOT NULL,
    content_type    TEXT NOT NULL,
    sha256          TEXT NOT NULL REFERENCES documents (sha256),
    bytes           INTEGER NOT NULL,
    chars           INTEGER NOT NULL,
    truncated       INTEGER NOT NULL,
    summarised      INTEGER NOT NULL,
    discovered_urls TEXT NOT NULL DEFAULT '[]',
    fetched_at      INTEGER NOT NULL,
    PRIMARY KEY (generation_id, position)
);
