-- What MCP hosts show besides the names: a server's description (sent as the `instructions` of
-- its MCP serverInfo), a tool's human-readable title, and a tool's output schema (its results
-- are checked against it and sent as `structuredContent`). All optional, so existing rows keep
-- NULL and read back as before.

ALTER TABLE servers ADD COLUMN description TEXT;
ALTER TABLE tools ADD COLUMN title TEXT;
ALTER TABLE tools ADD COLUMN output_schema TEXT;
