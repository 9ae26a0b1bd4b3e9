-- A server's traffic limits (docs/traffic.md): JSON, each key replacing the daemon's default.
ALTER TABLE servers ADD COLUMN limits TEXT;
