-- A site-hour's IT peak: the largest, over the hour's steps, of the sum across the site's
-- node meters (GPU meters where a site has no node meter) of each meter's peak power in
-- that step (its mean, or its reading, where no peak was sent). Each meter's peak within a
-- minute need not coincide with the others', so this bounds the coincident peak from above:
-- what the envelope must hold. NULL where no meter reported power.
ALTER TABLE site_hours ADD COLUMN it_peak_mw bigint;
