-- Admission: each tenant's policy, budgets as admission checks them, and every decision.

-- Share of an inference job's nominal draw counted against the site's envelope: inference
-- replicas rarely peak together (POLCA); training and batch count in full.
ALTER TABLE sites
    ADD COLUMN inference_power_factor numeric(4, 3) NOT NULL DEFAULT 0.75
        CHECK (inference_power_factor > 0 AND inference_power_factor <= 1);

-- A device's typical draw under load (W), for jobs with no history to learn from.
ALTER TABLE device_models
    ADD COLUMN typical_power_w integer CHECK (typical_power_w IS NULL OR typical_power_w > 0);

CREATE TABLE admission_policies (
    tenant_id                 bigint PRIMARY KEY REFERENCES tenants (id),
    -- Defer a flexible job only when the best slot saves more than this percentage.
    threshold_pct             numeric(6, 3) NOT NULL DEFAULT 10 CHECK (threshold_pct >= 0),
    -- Weight of carbon against price in that saving (1 = carbon only, 0 = price only).
    carbon_weight             numeric(4, 3) NOT NULL DEFAULT 1
        CHECK (carbon_weight >= 0 AND carbon_weight <= 1),
    basis                     text NOT NULL DEFAULT 'marginal' CHECK (basis IN ('marginal', 'average')),
    -- Priority classes that skip the envelope and the window; and those that skip budgets.
    bypass_priorities         text[] NOT NULL DEFAULT '{}',
    budget_bypass_priorities  text[] NOT NULL DEFAULT '{}',
    updated_at                timestamptz NOT NULL DEFAULT now()
);

-- Budgets per tenant (optionally per model) per calendar month or custom range. Carbon is
-- operational, location-based CO2e, as the ledger's carbon_g.
CREATE TABLE budgets (
    id               bigserial PRIMARY KEY,
    key              text NOT NULL UNIQUE,
    tenant_id        bigint NOT NULL REFERENCES tenants (id),
    model_id         bigint REFERENCES models (id),
    period           text NOT NULL DEFAULT 'month' CHECK (period IN ('month', 'custom')),
    starts_at        timestamptz,
    ends_at          timestamptz,
    limit_kwh        numeric(20, 6) CHECK (limit_kwh IS NULL OR limit_kwh > 0),
    limit_cost       numeric(20, 6) CHECK (limit_cost IS NULL OR limit_cost > 0),
    currency         char(3),
    limit_carbon_kg  numeric(20, 6) CHECK (limit_carbon_kg IS NULL OR limit_carbon_kg > 0),
    hard             boolean NOT NULL DEFAULT false,
    thresholds_pct   integer[] NOT NULL DEFAULT '{50,80,100}',
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CHECK (limit_kwh IS NOT NULL OR limit_cost IS NOT NULL OR limit_carbon_kg IS NOT NULL),
    CHECK ((limit_cost IS NULL) = (currency IS NULL)),
    CHECK (period <> 'custom' OR (starts_at IS NOT NULL AND ends_at > starts_at))
);
CREATE INDEX budgets_tenant ON budgets (tenant_id);

CREATE TABLE admission_decisions (
    id           uuid PRIMARY KEY,
    decided_at   timestamptz NOT NULL,
    tenant_id    bigint NOT NULL REFERENCES tenants (id),
    -- Where the question came from: 'api', 'slurm', 'kubernetes'.
    source       text NOT NULL,
    job_name     text NOT NULL DEFAULT '',
    -- The scheduler's key where known at submission (Kubernetes); Slurm assigns ids later.
    job_key      text,
    kind         text NOT NULL,
    priority     text NOT NULL,
    gpus         integer NOT NULL,
    decision     text NOT NULL CHECK (decision IN ('admit', 'defer', 'reject')),
    site_id      bigint REFERENCES sites (id),
    start_at     timestamptz,
    end_at       timestamptz,
    -- Draw reserved against the site's envelope over [start_at, end_at).
    reserved_w   bigint,
    request      jsonb NOT NULL,
    answer       jsonb NOT NULL,
    -- The job this decision became, joined when the scheduler reports it.
    job_id       bigint REFERENCES jobs (id),
    CHECK (decision = 'reject' OR (site_id IS NOT NULL AND start_at IS NOT NULL AND end_at > start_at))
);
CREATE INDEX admission_decisions_tenant ON admission_decisions (tenant_id, decided_at DESC);
CREATE INDEX admission_decisions_reserving ON admission_decisions (end_at)
    WHERE decision <> 'reject';
CREATE INDEX admission_decisions_unjoined ON admission_decisions (decided_at)
    WHERE job_id IS NULL AND decision <> 'reject';

