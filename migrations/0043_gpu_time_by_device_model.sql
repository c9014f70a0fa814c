-- GPU time per device model (issue 47): what a month's GPU time is priced by. A device
-- model's GPU-hour rate makes a ledger row's GPU-time cost; the ledger keeps the row's sums,
-- and this table their parts, one per device model the row held (or whose idle time it
-- carries), so that a close can publish a GPU-hour price per device model and a FOCUS row per
-- line and device model. Written by attribution with the ledger rows, in the same transaction
-- (store::attribution::replace_ledger): a row's parts add up to its gpu_ms and gpu_time_cost
-- exactly. device_model is NULL for GPUs whose model is not reported. Under the proportional
-- idle policy a row also carries, per device model, its share of idle GPU time's price (no
-- hours), whichever models its own job held.
--
-- Hours attributed before this migration have no parts here until they are attributed again;
-- a close gives what their ledger rows hold and no part explains to an unreported device model.
CREATE TABLE ledger_gpu_time (
    site_id         bigint NOT NULL,
    hour            timestamptz NOT NULL,
    tenant_id       bigint NOT NULL,
    job_id          bigint,
    model_id        bigint,
    device_model    text,
    gpu_ms          bigint NOT NULL CHECK (gpu_ms >= 0),
    gpu_time_cost   numeric(20, 6),
    UNIQUE NULLS NOT DISTINCT (site_id, hour, tenant_id, job_id, device_model)
);
-- A close reads a month of every site, as it reads the ledger (ledger_hour).
CREATE INDEX ledger_gpu_time_hour ON ledger_gpu_time (hour);

-- A statement line's GPU time per device model, as the close froze it: the exact sums from the
-- ledger, and the billed cost and GPU-hours rounded so that a line's parts add up to what the
-- line bills and states. Only this month's usage lines have parts; a line without any (an
-- adjustment, or a close frozen before this migration) is one part of no device model.
CREATE TABLE statement_line_gpu_time (
    statement_id            bigint NOT NULL,
    line_no                 integer NOT NULL,
    device_model            text,
    gpu_ms                  bigint NOT NULL,
    gpu_time_cost           numeric(20, 6) NOT NULL,
    billed_gpu_time_cost    numeric(20, 6) NOT NULL,
    gpu_hours               numeric(20, 4) NOT NULL,
    FOREIGN KEY (statement_id, line_no) REFERENCES statement_lines (statement_id, line_no),
    UNIQUE NULLS NOT DISTINCT (statement_id, line_no, device_model)
);
