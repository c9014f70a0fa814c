-- Monthly chargeback: month closes, the statements they froze, site reconciliations, export
-- files, and an audit trail of closes and reopenings.

-- One row per close of a month; a reopening ends it (it is never deleted), and closing again
-- makes the next version.
CREATE TABLE month_closes (
    id              bigserial PRIMARY KEY,
    month           date NOT NULL CHECK (extract(day FROM month) = 1),
    version         integer NOT NULL CHECK (version >= 1),
    closed_at       timestamptz NOT NULL,
    closed_by       text NOT NULL,
    -- Who issues the statements (FOCUS InvoiceIssuerName / ProviderName), as at close.
    issuer_name     text NOT NULL,
    reopened_at     timestamptz,
    reopened_by     text,
    reopen_reason   text,
    UNIQUE (month, version),
    CHECK ((reopened_at IS NULL) = (reopened_by IS NULL))
);
-- At most one close in force per month.
CREATE UNIQUE INDEX month_closes_in_force ON month_closes (month) WHERE reopened_at IS NULL;

-- A tenant's statement for a closed month in one currency. Names as they were at close.
CREATE TABLE statements (
    id              bigserial PRIMARY KEY,
    close_id        bigint NOT NULL REFERENCES month_closes (id),
    tenant_id       bigint NOT NULL REFERENCES tenants (id),
    tenant_key      text NOT NULL,
    tenant_name     text NOT NULL,
    currency        char(3) NOT NULL,
    number          text NOT NULL UNIQUE,
    billed_cost     numeric(20, 6) NOT NULL,
    energy_kwh      numeric(20, 6) NOT NULL,
    gpu_hours       numeric(20, 4) NOT NULL,
    UNIQUE (close_id, tenant_id, currency)
);
CREATE INDEX statements_tenant ON statements (tenant_id);

CREATE TABLE statement_lines (
    statement_id        bigint NOT NULL REFERENCES statements (id),
    line_no             integer NOT NULL CHECK (line_no >= 1),
    -- The month the energy was used: the statement's month, or an earlier one (adjustment).
    period              date NOT NULL,
    site_id             bigint NOT NULL REFERENCES sites (id),
    site_key            text NOT NULL,
    model_key           text,
    class               text NOT NULL CHECK (class IN ('training', 'inference', 'batch',
                                                       'interactive', 'idle_share', 'platform')),
    energy_mj           bigint NOT NULL,
    energy_cost         numeric(20, 6) NOT NULL,
    gpu_time_cost       numeric(20, 6) NOT NULL,
    carbon_g            numeric(20, 3) NOT NULL,
    embodied_g          numeric(20, 3) NOT NULL,
    prompt_tokens       bigint NOT NULL,
    generated_tokens    bigint NOT NULL,
    gpu_ms              bigint NOT NULL,
    billed_energy_cost  numeric(20, 6) NOT NULL,
    billed_gpu_time_cost numeric(20, 6) NOT NULL,
    energy_kwh          numeric(20, 6) NOT NULL,
    gpu_hours           numeric(20, 4) NOT NULL,
    PRIMARY KEY (statement_id, line_no)
);
CREATE INDEX statement_lines_period ON statement_lines (period);

CREATE TABLE site_reconciliations (
    close_id        bigint NOT NULL REFERENCES month_closes (id),
    site_id         bigint NOT NULL REFERENCES sites (id),
    site_key        text NOT NULL,
    site_name       text NOT NULL,
    grid_region     text NOT NULL,
    metered_mj      bigint NOT NULL,
    attributed_mj   bigint NOT NULL,
    unallocated_mj  bigint NOT NULL,
    adjustments_mj  bigint NOT NULL,
    PRIMARY KEY (close_id, site_id),
    CHECK (metered_mj = attributed_mj + unallocated_mj)
);

-- The export files of a close, byte for byte as written, with their SHA-256.
CREATE TABLE chargeback_exports (
    close_id        bigint NOT NULL REFERENCES month_closes (id),
    format          text NOT NULL CHECK (format IN ('csv', 'focus', 'json')),
    file_name       text NOT NULL,
    content         bytea NOT NULL,
    sha256          text NOT NULL,
    PRIMARY KEY (close_id, format)
);

CREATE TABLE chargeback_audit (
    id          bigserial PRIMARY KEY,
    month       date NOT NULL,
    action      text NOT NULL CHECK (action IN ('closed', 'reopened')),
    actor       text NOT NULL,
    reason      text,
    version     integer NOT NULL,
    at          timestamptz NOT NULL DEFAULT now()
);
