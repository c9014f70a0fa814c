-- Token counts of inference jobs per interval; tenant set for shared endpoints.

CREATE TABLE token_records (
    id                  bigserial PRIMARY KEY,
    job_id              bigint NOT NULL REFERENCES jobs (id),
    tenant_id           bigint REFERENCES tenants (id),
    start_at            timestamptz NOT NULL,
    end_at              timestamptz NOT NULL,
    prompt_tokens       bigint NOT NULL CHECK (prompt_tokens >= 0),
    generated_tokens    bigint NOT NULL CHECK (generated_tokens >= 0),
    received_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE NULLS NOT DISTINCT (job_id, tenant_id, start_at),
    CHECK (end_at >= start_at)
);
CREATE INDEX token_records_time ON token_records (start_at);
