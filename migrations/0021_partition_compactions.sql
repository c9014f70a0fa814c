-- Step partitions whose index was rebuilt once their month ended (store::compaction). Agents
-- append each meter's records in the middle of the (meter_id, ts, raw) index, so its pages
-- split half full while the month is written; rebuilt once, they are packed to the fill
-- factor. One row per partition: it is rebuilt once.
CREATE TABLE partition_compactions (
    name                text PRIMARY KEY,
    compacted_at        timestamptz NOT NULL DEFAULT now(),
    index_bytes_before  bigint NOT NULL,
    index_bytes_after   bigint NOT NULL
);
