-- AMD support on the server (issue 33): two changes the AMD collectors need, each one
-- statement group below.

-- Other names collectors report for a device model. NVML names a GPU by its marketing name
-- ('NVIDIA H100 80GB HBM3'), which is the device model's key; amd-smi gives no name and the
-- AMD device metrics exporter a part number or PCI device id ('102-G30211-00', '0x74a1').
-- A meter whose device_model is an alias is priced, given embodied carbon and admitted as
-- the model the alias names. An alias is never also a device model's key (the ingest
-- refuses both ways), so a name resolves to one model.
CREATE TABLE device_model_aliases (
    alias         text PRIMARY KEY,
    device_model  text NOT NULL REFERENCES device_models (key),
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX device_model_aliases_model ON device_model_aliases (device_model);

-- Every name a meter's device_model may carry, with the model it resolves to: joined
-- wherever device_models is joined to meters.
CREATE VIEW device_model_names AS
    SELECT key AS name, key AS device_model FROM device_models
    UNION ALL
    SELECT alias, device_model FROM device_model_aliases;

-- A sample whose counter the agent partly estimated from power readings (the GPU's energy
-- counter stuck, or reset). Attribution counts the step's energy as estimated
-- (`counter_estimated`). A constant default adds the column without rewriting the table.
ALTER TABLE samples ADD COLUMN counter_estimated boolean NOT NULL DEFAULT false;
