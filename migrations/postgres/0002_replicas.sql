-- Several replicas on one catalog (docs/replicas.md).
--
-- Every change a replica must see is announced on the channel `mcpbootd_changes` when it
-- commits, by triggers, so no code path can forget it: `mount <replica> <server id>` when what a
-- mount is built from changed (the served generation, the access token, code mode, credentials,
-- or the server came or went), `status <replica> <server id>` when a server's status changed
-- (generation progress for event streams). `<replica>` is the writer's `application_name`, so a
-- replica can skip what it did itself.

CREATE FUNCTION announce_server_change() RETURNS trigger LANGUAGE plpgsql AS $$
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
CREATE TRIGGER servers_announce AFTER INSERT OR UPDATE OR DELETE ON servers
    FOR EACH ROW EXECUTE FUNCTION announce_server_change();

CREATE FUNCTION announce_credentials_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    replica TEXT := coalesce(current_setting('application_name', true), '');
BEGIN
    PERFORM pg_notify('mcpbootd_changes',
                      'mount ' || replica || ' ' || CASE WHEN TG_OP = 'DELETE' THEN OLD.server_id ELSE NEW.server_id END);
    RETURN NULL;
END
$$;
CREATE TRIGGER credentials_announce AFTER INSERT OR UPDATE OR DELETE ON credentials
    FOR EACH ROW EXECUTE FUNCTION announce_credentials_change();

-- A running generation belongs to the replica holding its lease, which renews it while the job
-- runs; once it expires (the replica died) another replica claims the job and runs it again.
ALTER TABLE generations ADD COLUMN lease_owner TEXT;
ALTER TABLE generations ADD COLUMN lease_expires_at BIGINT;
-- The replica checking this server's documentation for drift, until when.
ALTER TABLE servers ADD COLUMN drift_lease_owner TEXT;
ALTER TABLE servers ADD COLUMN drift_lease_expires_at BIGINT;
-- Every replica looks for abandoned jobs every few seconds: only unfinished generations are indexed.
CREATE INDEX generations_running ON generations (lease_expires_at)
    WHERE status IN ('pending', 'fetching', 'planning', 'compiling', 'testing');
