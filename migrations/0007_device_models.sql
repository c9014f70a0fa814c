-- Device models: the embodied (manufacturing) carbon a GPU carries over its expected life,
-- for SCI's M = embodied × time held / lifetime. Keyed by the model name collectors report
-- on GPU meters (`meters.device_model`, e.g. 'NVIDIA H100 80GB HBM3').
CREATE TABLE device_models (
    key             text PRIMARY KEY,
    embodied_kg     numeric(12, 3) NOT NULL CHECK (embodied_kg >= 0),
    lifetime_hours  integer NOT NULL CHECK (lifetime_hours > 0),
    -- Where the figure comes from (an LCA, a vendor PCF, an estimate), for auditors.
    source          text,
    updated_at      timestamptz NOT NULL DEFAULT now()
);
