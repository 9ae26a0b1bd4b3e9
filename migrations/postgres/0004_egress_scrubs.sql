-- How many credential values the egress took out of a request's response before the handler saw
-- it: a count above 0 says the upstream echoes credentials.
ALTER TABLE egress ADD COLUMN scrubs BIGINT NOT NULL DEFAULT 0;
