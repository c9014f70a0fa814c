-- A job naming a model the server does not know (a pod labelled with a model nobody
-- registered yet) is kept, not refused: refusing it dead-lettered the pod's whole job and left
-- its energy to the platform. The name it gave is kept here until `POST /v1/ingest/models`
-- registers it, which gives the job its model and recomputes its hours.
-- Each subcommand alone: a distributed PostgreSQL (Citus) runs no ADD CONSTRAINT beside another.
ALTER TABLE jobs ADD COLUMN unknown_model text;
ALTER TABLE jobs ADD CONSTRAINT jobs_unknown_model_check
    CHECK (unknown_model IS NULL OR (model_id IS NULL AND length(unknown_model) BETWEEN 1 AND 256));
-- A pool's phase is kept while its model is unknown: the phase counts its tokens either way.
ALTER TABLE jobs DROP CONSTRAINT jobs_phase_has_model;
ALTER TABLE jobs ADD CONSTRAINT jobs_phase_has_model
    CHECK (phase IS NULL OR model_id IS NOT NULL OR unknown_model IS NOT NULL);
CREATE INDEX jobs_unknown_model ON jobs (unknown_model) WHERE unknown_model IS NOT NULL;
