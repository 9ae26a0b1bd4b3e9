-- Credentials for upstream APIs, per server. The value is only ever stored sealed
-- (XChaCha20-Poly1305, nonce || ciphertext) under a key kept outside the catalog.
CREATE TABLE credentials (
    server_id TEXT NOT NULL REFERENCES servers(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    binding TEXT NOT NULL,
    sealed BLOB NOT NULL,
    fingerprint TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    rotated_at INTEGER NOT NULL,
    PRIMARY KEY (server_id, name)
);

-- The names of the credentials the egress added to a request (never their values).
ALTER TABLE egress ADD COLUMN credentials TEXT;
