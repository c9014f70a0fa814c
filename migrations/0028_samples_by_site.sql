-- The sample tables carry their meter's site, first in their keys, so that a distributed
-- PostgreSQL (Citus, deploy/citus/distribute.sql) can shard them by site with the ledger and
-- the site-hours: a batch of one agent, its dirty marking and an attribution run of one
-- site then touch one shard. On a single PostgreSQL the keys work as before: every query
-- names the site with the meter.
--
-- A meter's site is fixed once it is registered (the meters ingest refuses a move): rows
-- keyed by the old site would otherwise stay behind it.
--
-- Upgrade cost: the UPDATE rewrites every stored sample once, and the new primary key is
-- built on every partition, under an exclusive lock; plan the upgrade in a quiet hour.

ALTER TABLE samples ADD COLUMN site_id bigint;
UPDATE samples s SET site_id = m.site_id FROM meters m WHERE m.id = s.meter_id;
ALTER TABLE samples ALTER COLUMN site_id SET NOT NULL;
ALTER TABLE samples DROP CONSTRAINT samples_pkey;
ALTER TABLE samples ADD PRIMARY KEY (site_id, meter_id, ts, raw);

-- A conflict is only recorded for a registered meter, and meters are never deleted, so
-- every row finds its site (SET NOT NULL fails the upgrade loudly otherwise).
ALTER TABLE sample_conflicts ADD COLUMN site_id bigint;
UPDATE sample_conflicts c SET site_id = m.site_id FROM meters m WHERE m.id = c.meter_id;
ALTER TABLE sample_conflicts ALTER COLUMN site_id SET NOT NULL;
ALTER TABLE sample_conflicts DROP CONSTRAINT sample_conflicts_pkey;
ALTER TABLE sample_conflicts ADD PRIMARY KEY (site_id, id);

ALTER TABLE meter_heads ADD COLUMN site_id bigint;
UPDATE meter_heads h SET site_id = m.site_id FROM meters m WHERE m.id = h.meter_id;
ALTER TABLE meter_heads ALTER COLUMN site_id SET NOT NULL;
ALTER TABLE meter_heads DROP CONSTRAINT meter_heads_pkey;
ALTER TABLE meter_heads ADD PRIMARY KEY (site_id, meter_id);
