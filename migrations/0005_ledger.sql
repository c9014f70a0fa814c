-- The ledger and the attribution bookkeeping around it.

-- One row per hour × site × tenant × job (job NULL = the site's idle energy).
CREATE TABLE ledger (
    hour                    timestamptz NOT NULL,
    site_id                 bigint NOT NULL REFERENCES sites (id),
    tenant_id               bigint NOT NULL REFERENCES tenants (id),
    job_id                  bigint REFERENCES jobs (id),
    model_id                bigint REFERENCES models (id),
    gpu_mj                  bigint NOT NULL,
    node_overhead_mj        bigint NOT NULL,
    idle_mj                 bigint NOT NULL,
    facility_overhead_mj    bigint NOT NULL,
    total_mj                bigint NOT NULL,
    estimated_mj            bigint NOT NULL,
    prompt_tokens           bigint NOT NULL,
    generated_tokens        bigint NOT NULL,
    gpu_ms                  bigint NOT NULL,
    flags                   text[] NOT NULL DEFAULT '{}',
    -- Filled by the cost-and-carbon stage; NULL until a price/intensity is known.
    cost                    numeric(20, 6),
    carbon_g                numeric(20, 3),
    embodied_carbon_g       numeric(20, 3),
    computed_at             timestamptz NOT NULL DEFAULT now(),
    UNIQUE NULLS NOT DISTINCT (site_id, hour, tenant_id, job_id),
    CHECK (total_mj = gpu_mj + node_overhead_mj + idle_mj + facility_overhead_mj)
);
CREATE INDEX ledger_tenant_hour ON ledger (tenant_id, hour);
CREATE INDEX ledger_hour ON ledger (hour);
CREATE INDEX ledger_job ON ledger (job_id) WHERE job_id IS NOT NULL;

-- Site figures per hour: the meters' side of the ledger's invariant and the PUE inputs.
CREATE TABLE site_hours (
    site_id             bigint NOT NULL REFERENCES sites (id),
    hour                timestamptz NOT NULL,
    site_mj             bigint NOT NULL,
    it_mj               bigint NOT NULL,
    gpu_mj              bigint NOT NULL,
    idle_mj             bigint NOT NULL,
    estimated_mj        bigint NOT NULL,
    allocated_gpu_ms    bigint NOT NULL,
    capacity_gpu_ms     bigint NOT NULL,
    flags               text[] NOT NULL DEFAULT '{}',
    run_id              bigint NOT NULL,
    computed_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (site_id, hour)
);

-- Hours whose inputs changed since they were last attributed.
CREATE TABLE dirty_hours (
    site_id     bigint NOT NULL REFERENCES sites (id),
    hour        timestamptz NOT NULL,
    marked_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- A worker's lease: other replicas skip the hour until it expires.
    claimed_until timestamptz,
    PRIMARY KEY (site_id, hour)
);

CREATE TABLE attribution_runs (
    id           bigserial PRIMARY KEY,
    started_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at  timestamptz,
    hours        integer NOT NULL DEFAULT 0,
    rows         integer NOT NULL DEFAULT 0
);
