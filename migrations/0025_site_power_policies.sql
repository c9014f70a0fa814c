-- A site's power policy for admission (domain::admission::oversubscription): how far each
-- workload class may be over-subscribed against the site's envelope, and the per-GPU power
-- cap the site may apply to fit a job now rather than later. A class's factor is fixed
-- (1 = counted in full) or NULL = measured: 1 + the class's measured headroom over the last
-- `measured_days` at `measured_percentile`, never above `measured_cap`. A site without a row
-- has the defaults below. Replaces sites.inference_power_factor, a share no one measured.
CREATE TABLE site_power_policies (
    site_id             bigint PRIMARY KEY REFERENCES sites (id),
    training_factor     numeric(5, 3) DEFAULT 1 CHECK (training_factor BETWEEN 1 AND 4),
    inference_factor    numeric(5, 3) CHECK (inference_factor BETWEEN 1 AND 4),
    batch_factor        numeric(5, 3) DEFAULT 1 CHECK (batch_factor BETWEEN 1 AND 4),
    interactive_factor  numeric(5, 3) DEFAULT 1 CHECK (interactive_factor BETWEEN 1 AND 4),
    measured_cap        numeric(5, 3) NOT NULL DEFAULT 1.25 CHECK (measured_cap BETWEEN 1 AND 4),
    measured_percentile numeric(6, 3) NOT NULL DEFAULT 99.9
        CHECK (measured_percentile > 0 AND measured_percentile <= 100),
    measured_days       integer NOT NULL DEFAULT 7 CHECK (measured_days BETWEEN 1 AND 90),
    power_cap_w         integer CHECK (power_cap_w BETWEEN 50 AND 5000),
    updated_at          timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE sites DROP COLUMN inference_power_factor;
