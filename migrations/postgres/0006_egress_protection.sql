-- What the egress's upstream protection did with a request: waited for the origin's Retry-After
-- or the server's rate limit for it (and how long, in waited_ms), refused it for either or for an
-- open circuit breaker, or let it through as the breaker's probe (retry_after_wait,
-- retry_after_refused, breaker_open, breaker_probe, upstream_limit_wait, upstream_limit_refused).
-- And how the HTTP cache took part in a GET: hit, revalidated, miss or stored. NULL: not at all.
ALTER TABLE egress ADD COLUMN decision TEXT;
ALTER TABLE egress ADD COLUMN waited_ms BIGINT;
ALTER TABLE egress ADD COLUMN cache TEXT;
