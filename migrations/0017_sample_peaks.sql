-- Step records: the agent reads its meters fast (1 Hz) and sends one record per meter per
-- step, the counter at the step boundary with the mean (power_mw) and the peak of the power
-- readings of the step that ends there. The peak is what a minute's mean hides (a training
-- job's synchronous swings): the power envelope and the operator page read it. Raw readings
-- leave it null. Nullable, no default: adding it rewrites no partition.
ALTER TABLE samples ADD COLUMN peak_mw bigint CHECK (peak_mw >= 0);

ALTER TABLE sample_conflicts
    ADD COLUMN stored_peak_mw bigint,
    ADD COLUMN sent_peak_mw bigint;
