-- A job belongs to one site, and jobs, their allocations and their token records are keyed
-- by it, so that a distributed PostgreSQL (Citus, deploy/citus/distribute.sql) keeps a
-- site's jobs on the shard of its samples and ledger. A job's site is the site of the GPUs it
-- holds (or, for a job reported before its GPUs are known, the site its record names); a
-- job on two sites' GPUs is two jobs, as two clusters' schedulers report it.
--
-- Job ids still come from one sequence, so links to a job by id do not change; a job's key
-- still names one job fleet-wide: the job ingest refuses a key held at another site, under
-- a lock on the key (the database can only hold keys unique per site).

ALTER TABLE jobs ADD COLUMN site_id bigint REFERENCES sites (id);

-- Each job's site from its allocations' meters, else from the admission decision it came
-- from, else the only site there is.
UPDATE jobs j SET site_id = s.site_id
FROM (SELECT a.job_id, min(m.site_id) AS site_id, count(DISTINCT m.site_id) AS sites
      FROM allocations a JOIN meters m ON m.id = a.meter_id GROUP BY a.job_id) s
WHERE s.job_id = j.id;
UPDATE jobs j SET site_id = d.site_id
FROM admission_decisions d
WHERE j.site_id IS NULL AND d.job_id = j.id AND d.site_id IS NOT NULL;
UPDATE jobs SET site_id = (SELECT min(id) FROM sites)
WHERE site_id IS NULL AND (SELECT count(*) FROM sites) = 1;

DO $$
DECLARE
    spanning bigint;
    unplaced bigint;
BEGIN
    SELECT count(*) INTO spanning FROM (
        SELECT a.job_id FROM allocations a JOIN meters m ON m.id = a.meter_id
        GROUP BY a.job_id HAVING count(DISTINCT m.site_id) > 1) x;
    SELECT count(*) INTO unplaced FROM jobs WHERE site_id IS NULL;
    IF spanning > 0 OR unplaced > 0 THEN
        RAISE EXCEPTION 'jobs by site: % jobs hold GPUs at several sites and % jobs have no GPUs to place them; report each again per site (or with its site) before upgrading',
            spanning, unplaced;
    END IF;
END $$;

ALTER TABLE jobs ALTER COLUMN site_id SET NOT NULL;

-- The keys that refer to jobs(id) go first: they depend on its primary key.
ALTER TABLE allocations DROP CONSTRAINT allocations_job_id_fkey;
ALTER TABLE token_records DROP CONSTRAINT token_records_job_id_fkey;
ALTER TABLE ledger DROP CONSTRAINT ledger_job_id_fkey;
-- A local table on Citus cannot refer to a distributed one: a decision's job is kept as its
-- id, set when the scheduler reports the job (store::admission::link_jobs).
ALTER TABLE admission_decisions DROP CONSTRAINT admission_decisions_job_id_fkey;

ALTER TABLE jobs DROP CONSTRAINT jobs_pkey;
ALTER TABLE jobs ADD PRIMARY KEY (site_id, id);
ALTER TABLE jobs DROP CONSTRAINT jobs_key_key;
ALTER TABLE jobs ADD UNIQUE (site_id, key);
-- Lookups by id alone (a job's page, a decision's job) and by key alone (token records,
-- the ingest's fleet-wide key check).
CREATE INDEX jobs_id ON jobs (id);
CREATE INDEX jobs_key ON jobs (key);

ALTER TABLE allocations ADD COLUMN site_id bigint;
UPDATE allocations a SET site_id = j.site_id FROM jobs j WHERE j.id = a.job_id;
ALTER TABLE allocations ALTER COLUMN site_id SET NOT NULL;
ALTER TABLE allocations DROP CONSTRAINT allocations_pkey;
ALTER TABLE allocations ADD PRIMARY KEY (site_id, id);
ALTER TABLE allocations DROP CONSTRAINT allocations_job_id_meter_id_start_at_key;
ALTER TABLE allocations ADD UNIQUE (site_id, job_id, meter_id, start_at);
ALTER TABLE allocations ADD FOREIGN KEY (site_id, job_id) REFERENCES jobs (site_id, id);
-- A job's GPUs by its id alone (its page, the tokens' dirty marking).
CREATE INDEX allocations_job ON allocations (job_id);

ALTER TABLE token_records ADD COLUMN site_id bigint;
UPDATE token_records t SET site_id = j.site_id FROM jobs j WHERE j.id = t.job_id;
ALTER TABLE token_records ALTER COLUMN site_id SET NOT NULL;
ALTER TABLE token_records DROP CONSTRAINT token_records_pkey;
ALTER TABLE token_records ADD PRIMARY KEY (site_id, id);
ALTER TABLE token_records DROP CONSTRAINT token_records_job_id_tenant_id_start_at_key;
ALTER TABLE token_records ADD UNIQUE NULLS NOT DISTINCT (site_id, job_id, tenant_id, start_at);
ALTER TABLE token_records ADD FOREIGN KEY (site_id, job_id) REFERENCES jobs (site_id, id);

-- A ledger row of a job is at the job's site: attribution writes a job's energy at the site
-- of the GPUs it held.
ALTER TABLE ledger ADD FOREIGN KEY (site_id, job_id) REFERENCES jobs (site_id, id);
