-- OAuth on the mounts. A server's own auth setting (JSON `{"mode": "open"}` or
-- `{"mode": "oauth", "scopes": [...]}`; NULL: a static access token if one is set, else the
-- daemon's `[auth.oauth] required`). A server never has both a setting and a static token: setting
-- one clears the other. In the call log, the OAuth caller: the token's `sub` and its client
-- (`client_id` or `azp`); NULL for calls without an OAuth token.

ALTER TABLE servers ADD COLUMN auth TEXT;
ALTER TABLE calls ADD COLUMN subject TEXT;
ALTER TABLE calls ADD COLUMN client_id TEXT;
