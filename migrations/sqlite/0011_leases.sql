-- The lease columns of the PostgreSQL catalog (migrations/postgres/0002_replicas.sql), so both
-- catalogs have the same tables. A SQLite catalog has one daemon, which holds every lease.
ALTER TABLE generations ADD COLUMN lease_owner TEXT;
ALTER TABLE generations ADD COLUMN lease_expires_at INTEGER;
ALTER TABLE servers ADD COLUMN drift_lease_owner TEXT;
ALTER TABLE servers ADD COLUMN drift_lease_expires_at INTEGER;
