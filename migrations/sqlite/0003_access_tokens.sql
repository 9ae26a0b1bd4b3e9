-- Optional per-server MCP access token, stored as the hex sha256 of the token.
ALTER TABLE servers ADD COLUMN access_token_sha256 TEXT;
