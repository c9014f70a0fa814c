-- Admission decisions the database refused to store (a value it cannot hold, a broken
-- constraint): kept here, with why, instead of being retried forever in front of every
-- later decision. The record is JSON text with every string escaped, so whatever the
-- decision held can be written here even when its own columns could not take it.
CREATE TABLE admission_dead_letters (
    decision_id uuid PRIMARY KEY,
    decided_at  timestamptz NOT NULL,
    record      text NOT NULL,
    error       text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
