-- Disaggregated serving and efficiency by GPU generation (issue 33, slices 3 and 4).
--
-- A serving pool of a disaggregated deployment (prefill on some GPUs, decode on others) is a
-- job with a phase, bound to the one model the deployment serves; its tokens count only in
-- its phase (domain::phase). A job without one is not a pool of such a deployment.
ALTER TABLE jobs
    ADD COLUMN phase text CHECK (phase IN ('prefill', 'decode', 'both')),
    ADD CONSTRAINT jobs_phase_has_model CHECK (phase IS NULL OR model_id IS NOT NULL);

-- Each model-serving ledger row's energy and tokens over the device models its job ran on,
-- split by the job's GPU energy on each (domain::attribution::devices); written and replaced
-- with the ledger rows of its hours. The device model is the one the GPU meters report.
CREATE TABLE ledger_devices (
    site_id          bigint NOT NULL REFERENCES sites (id),
    hour             timestamptz NOT NULL,
    tenant_id        bigint NOT NULL REFERENCES tenants (id),
    job_id           bigint NOT NULL,
    model_id         bigint NOT NULL REFERENCES models (id),
    device_model     text NOT NULL,
    gpu_mj           bigint NOT NULL,
    total_mj         bigint NOT NULL,
    prompt_tokens    bigint NOT NULL CHECK (prompt_tokens >= 0),
    generated_tokens bigint NOT NULL CHECK (generated_tokens >= 0),
    PRIMARY KEY (site_id, hour, tenant_id, job_id, device_model),
    FOREIGN KEY (site_id, job_id) REFERENCES jobs (site_id, id)
);
