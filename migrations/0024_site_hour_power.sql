-- A site-hour's power profile per class of meters (domain::headroom): the site's facility
-- meters (`facility`), its IT meters (`it`: its node meters, or its GPUs where it has none)
-- and the GPUs held by jobs of each kind. Per minute of the hour, the sum across the class's
-- meters of each one's highest reading in that minute (NULL where none reported), and the
-- sum of each meter's own peak over the hour. Measured headroom, coincidence and ramp rates
-- are read from these; written by the attribution worker with the site-hour, replaced when
-- the hour is recomputed.
CREATE TABLE site_hour_power (
    site_id       bigint NOT NULL REFERENCES sites (id),
    hour          timestamptz NOT NULL,
    class         text NOT NULL CHECK (class IN ('facility', 'it', 'training', 'inference',
                                                 'batch', 'interactive')),
    minutes_mw    bigint[] NOT NULL CHECK (cardinality(minutes_mw) = 60),
    parts_peak_mw bigint NOT NULL CHECK (parts_peak_mw >= 0),
    PRIMARY KEY (site_id, hour, class)
);

-- The hour's site peak: its facility meters' highest minute where it has them, else its IT
-- peak x static PUE (as site energy is counted). What tokens per megawatt divide by.
ALTER TABLE site_hours ADD COLUMN site_peak_mw bigint;
