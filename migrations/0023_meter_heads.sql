-- Each meter's two newest sample times (distinct), kept by the transaction that adds its
-- samples (store::dirty::mark_for_samples). A batch that appends to a meter, the normal case
-- (an agent's next step), finds there the neighbours dirty marking needs, instead of looking
-- them up in the samples index: at fleet size a batch holds one step of ~10,000 meters, and
-- those lookups were most of its cost. Late data still looks them up.
--
-- Older than the truth is safe (a retention drop, a concurrent batch not yet seen): the
-- marked span only grows.
CREATE TABLE meter_heads (
    meter_id bigint PRIMARY KEY REFERENCES meters(id) ON DELETE CASCADE,
    last_ts timestamptz NOT NULL,
    prev_ts timestamptz CHECK (prev_ts < last_ts)
) WITH (fillfactor = 50); -- every batch rewrites its meters' rows: room for HOT updates

INSERT INTO meter_heads (meter_id, last_ts, prev_ts)
SELECT m.id, h.ts[1], h.ts[2]
FROM meters m
CROSS JOIN LATERAL (
    SELECT array_agg(ts ORDER BY ts DESC) AS ts
    FROM (SELECT DISTINCT ts FROM (SELECT ts FROM samples s WHERE s.meter_id = m.id
                                   ORDER BY ts DESC LIMIT 3) newest
          ORDER BY ts DESC LIMIT 2) two
) h
WHERE h.ts IS NOT NULL;
