-- Connected accounts: a user's own tokens (or API key) for a server's per-user credential,
-- sealed like every credential value, one row per (server, credential, issuer, subject).
CREATE TABLE connections (
    id TEXT PRIMARY KEY,
    server_id TEXT NOT NULL,
    credential TEXT NOT NULL,
    issuer TEXT NOT NULL,
    subject TEXT NOT NULL,
    sealed_access BLOB NOT NULL,
    sealed_refresh BLOB,
    scopes TEXT NOT NULL DEFAULT '',
    connected_at INTEGER NOT NULL,
    expires_at INTEGER,
    last_used_at INTEGER,
    -- Bumped on every refresh, so a replica that holds an older token can tell.
    version INTEGER NOT NULL DEFAULT 1,
    -- A refresh in progress: the replica doing it and until when it may (one at a time).
    refresh_owner TEXT,
    refresh_until INTEGER,
    FOREIGN KEY (server_id, credential) REFERENCES credentials(server_id, name) ON DELETE CASCADE,
    UNIQUE (server_id, credential, issuer, subject)
);

-- Connect links and the browser flows they start. A row is found by the sha256 of its secret
-- (the link's token, then each step's OAuth state), so the catalog holds nothing a reader could
-- replay; `step` says which secret is live, and a spent row is deleted.
CREATE TABLE connect_flows (
    secret_sha256 TEXT PRIMARY KEY,
    step TEXT NOT NULL,
    server_id TEXT,
    credential TEXT,
    issuer TEXT NOT NULL,
    subject TEXT,
    sealed_verifier BLOB,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    FOREIGN KEY (server_id, credential) REFERENCES credentials(server_id, name) ON DELETE CASCADE
);
CREATE INDEX connect_flows_expiry ON connect_flows (expires_at);
