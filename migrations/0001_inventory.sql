-- Inventory: tenants, sites, models and the meter tree (facility ⊇ node ⊇ gpu ⊇ mig).
-- Every row has a stable external `key` that collectors and schedulers use; numeric ids are
-- internal.

CREATE TABLE tenants (
    id          bigserial PRIMARY KEY,
    key         text NOT NULL UNIQUE,
    name        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE sites (
    id                      bigserial PRIMARY KEY,
    key                     text NOT NULL UNIQUE,
    name                    text NOT NULL,
    grid_region             text NOT NULL,
    currency                char(3) NOT NULL,
    power_envelope_w        bigint NOT NULL CHECK (power_envelope_w > 0),
    -- Used when the site has no facility meter, and for steps the meter missed.
    static_pue              numeric(6, 4) NOT NULL CHECK (static_pue >= 1 AND static_pue <= 5),
    idle_policy             text NOT NULL CHECK (idle_policy IN ('platform', 'proportional')),
    platform_tenant_id      bigint NOT NULL REFERENCES tenants (id),
    -- Static node model: overhead assumed for a node step without a node reading.
    node_static_overhead_w  numeric(10, 3) NOT NULL DEFAULT 0 CHECK (node_static_overhead_w >= 0),
    -- Sample intervals longer than this are gaps (not interpolated for power meters).
    gap_limit_s             integer NOT NULL DEFAULT 600 CHECK (gap_limit_s >= 60),
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE models (
    id              bigserial PRIMARY KEY,
    key             text NOT NULL UNIQUE,
    name            text NOT NULL,
    -- Token weights for splitting a shared endpoint's energy: prefill × w_p + decode × w_d.
    prefill_weight  numeric(10, 4) NOT NULL DEFAULT 1 CHECK (prefill_weight >= 0),
    decode_weight   numeric(10, 4) NOT NULL DEFAULT 4 CHECK (decode_weight >= 0),
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE meters (
    id              bigserial PRIMARY KEY,
    key             text NOT NULL UNIQUE,
    site_id         bigint NOT NULL REFERENCES sites (id),
    kind            text NOT NULL CHECK (kind IN ('facility', 'node', 'gpu', 'mig')),
    -- facility: none; node: its facility meter or none; gpu: its node; mig: its GPU.
    parent_id       bigint REFERENCES meters (id),
    gpu_uuid        text UNIQUE,
    device_model    text,
    -- MIG instances carry no energy counter of their own; they are shares of the parent GPU.
    mig_profile     text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CHECK (kind <> 'gpu' OR parent_id IS NOT NULL),
    CHECK (kind <> 'mig' OR parent_id IS NOT NULL),
    CHECK (kind <> 'facility' OR parent_id IS NULL)
);
CREATE INDEX meters_site ON meters (site_id, kind);
CREATE INDEX meters_parent ON meters (parent_id);
