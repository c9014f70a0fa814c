-- Jobs and their GPU allocations, as schedulers report them.

CREATE TABLE jobs (
    id          bigserial PRIMARY KEY,
    -- Stable scheduler key: slurm:<cluster>:<jobid>, k8s:<namespace>/<pod-uid>, ...
    key         text NOT NULL UNIQUE,
    name        text NOT NULL DEFAULT '',
    tenant_id   bigint NOT NULL REFERENCES tenants (id),
    model_id    bigint REFERENCES models (id),
    kind        text NOT NULL CHECK (kind IN ('training', 'inference', 'batch', 'interactive')),
    priority    text NOT NULL DEFAULT 'normal',
    submit_at   timestamptz,
    start_at    timestamptz NOT NULL,
    end_at      timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CHECK (end_at IS NULL OR end_at >= start_at)
);
CREATE INDEX jobs_tenant ON jobs (tenant_id, start_at);

-- A job's share of one GPU (or MIG instance) over an interval; end NULL = still running.
CREATE TABLE allocations (
    id          bigserial PRIMARY KEY,
    job_id      bigint NOT NULL REFERENCES jobs (id),
    meter_id    bigint NOT NULL REFERENCES meters (id),
    share       numeric(7, 6) NOT NULL CHECK (share > 0 AND share <= 1),
    start_at    timestamptz NOT NULL,
    end_at      timestamptz,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (job_id, meter_id, start_at),
    CHECK (end_at IS NULL OR end_at > start_at)
);
CREATE INDEX allocations_meter_time ON allocations (meter_id, start_at);
