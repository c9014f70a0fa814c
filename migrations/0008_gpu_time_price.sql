-- Fully loaded cost: a GPU-hour rate per device model (amortised hardware, hosting), in a
-- currency; applied at sites billing in that currency, beside the energy cost.
ALTER TABLE device_models
    ADD COLUMN gpu_hour_rate   numeric(12, 6) CHECK (gpu_hour_rate IS NULL OR gpu_hour_rate >= 0),
    ADD COLUMN rate_currency   char(3),
    ADD CONSTRAINT device_models_rate_currency CHECK ((gpu_hour_rate IS NULL) = (rate_currency IS NULL));

ALTER TABLE ledger
    ADD COLUMN gpu_time_cost   numeric(20, 6);
