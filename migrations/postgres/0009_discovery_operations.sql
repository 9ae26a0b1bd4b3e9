-- A discovery-mode version's operations, one row each (docs/openapi.md), so serving reads one
-- operation when it is described or called, and only the light columns (name, request,
-- summary, required arguments) with the search index when the server is first searched.
-- `discovery` keeps the search index and the executor. Existing versions are carried over
-- from the whole-API column they were stored in, which is then dropped.
CREATE TABLE discovery_operations (
    generation_id BIGINT NOT NULL REFERENCES generations(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    -- The operation's place in the search index's documents.
    position BIGINT NOT NULL,
    method TEXT NOT NULL,
    path TEXT NOT NULL,
    -- Its title, else its description, cut to 160 characters: what a search hit shows.
    summary TEXT NOT NULL,
    -- Its required arguments, a JSON array of names.
    required TEXT NOT NULL,
    -- The tool a listed tool would be (schemas, annotations, handler without the executor), JSON.
    tool TEXT NOT NULL,
    PRIMARY KEY (generation_id, name),
    UNIQUE (generation_id, position)
);

INSERT INTO discovery_operations (generation_id, name, position, method, path, summary, required, tool)
SELECT d.generation_id,
       o.value -> 'tool' ->> 'name',
       o.position - 1,
       o.value ->> 'method',
       o.value ->> 'path',
       left(coalesce(o.value -> 'tool' ->> 'title', o.value -> 'tool' ->> 'description', ''), 160),
       coalesce((o.value -> 'tool' -> 'input_schema' -> 'required')::text, '[]'),
       (o.value -> 'tool')::text
FROM discovery d, json_array_elements(d.operations::json) WITH ORDINALITY AS o(value, position);

ALTER TABLE discovery DROP COLUMN operations;
