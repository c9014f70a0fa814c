-- A statement line's badput and hourly carbon-free energy (domain::badput, domain::cfe), as
-- the ledger rows it sums carry them, so the statement JSON and FOCUS 1.4's x_ columns show
-- them. Lines closed before this migration have none (0): a month closed again after its
-- hours are re-attributed bills the same energy and adds them.
ALTER TABLE statement_lines
    ADD COLUMN badput_mj      bigint NOT NULL DEFAULT 0,
    -- The line's share of its hours' carbon-free energy, and the energy of the hours whose
    -- figure is known (the score's denominator).
    ADD COLUMN carbon_free_mj bigint NOT NULL DEFAULT 0,
    ADD COLUMN cfe_mj         bigint NOT NULL DEFAULT 0;
