-- OAuth on the mounts. A server's own auth setting (JSON `{"mode": "open"}` or
-- `{"mode": "oauth", "scopes": [...]}`; NULL: a static access token if one is set, else the
-- daemon's `[auth.oauth] required`). A server never has both a setting and a static token: setting
-- one clears the other. In the call log, the OAuth caller: the token's `sub` and its client
-- (`client_id` or `azp`); NULL for calls without an OAuth token.

ALTER TABLE servers ADD COLUMN auth TEXT;
ALTER TABLE calls ADD COLUMN subject TEXT;
ALTER TABLE calls ADD COLUMN client_id TEXT;

-- A server's auth setting decides who may use its mount: a change is announced like a token change.
CREATE OR REPLACE FUNCTION announce_server_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    replica TEXT := coalesce(current_setting('application_name', true), '');
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('mcpbootd_changes', 'mount ' || replica || ' ' || OLD.id);
    ELSIF TG_OP = 'INSERT' THEN
        PERFORM pg_notify('mcpbootd_changes', 'mount ' || replica || ' ' || NEW.id);
        PERFORM pg_notify('mcpbootd_changes', 'status ' || replica || ' ' || NEW.id);
    ELSE
        IF OLD.active_generation_id IS DISTINCT FROM NEW.active_generation_id
           OR OLD.access_token_sha256 IS DISTINCT FROM NEW.access_token_sha256
           OR OLD.auth IS DISTINCT FROM NEW.auth
           OR OLD.code_mode IS DISTINCT FROM NEW.code_mode
           OR OLD.name IS DISTINCT FROM NEW.name THEN
            PERFORM pg_notify('mcpbootd_changes', 'mount ' || replica || ' ' || NEW.id);
        END IF;
        IF OLD.status IS DISTINCT FROM NEW.status THEN
            PERFORM pg_notify('mcpbootd_changes', 'status ' || replica || ' ' || NEW.id);
        END IF;
    END IF;
    RETURN NULL;
END
$$;
