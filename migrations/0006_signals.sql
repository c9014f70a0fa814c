-- Grid signals (carbon intensity, electricity price) and what the ledger needs to turn
-- energy into money and carbon.

-- One value of one signal over [start_at, end_at). A provider's revision of a value
-- replaces it (same key) and dirties the hours it touches.
CREATE TABLE signal_points (
    region      text NOT NULL,
    signal      text NOT NULL CHECK (signal IN ('carbon', 'price')),
    -- carbon: 'average' | 'marginal'; price: the currency (ISO 4217).
    basis       text NOT NULL,
    status      text NOT NULL CHECK (status IN ('actual', 'forecast')),
    source      text NOT NULL,
    start_at    timestamptz NOT NULL,
    end_at      timestamptz NOT NULL CHECK (end_at > start_at),
    -- g CO2e per kWh, or currency units per kWh.
    value       numeric(20, 9) NOT NULL,
    estimated   boolean NOT NULL DEFAULT false,
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (region, signal, basis, status, source, start_at),
    CHECK (signal <> 'carbon' OR basis IN ('average', 'marginal')),
    CHECK (signal <> 'price' OR basis ~ '^[A-Z]{3}$'),
    CHECK (signal <> 'carbon' OR value >= 0)
);
CREATE INDEX signal_points_lookup ON signal_points (region, signal, basis, start_at);

-- Per site: where its prices come from (a bidding zone is often not the carbon zone), and
-- what to use for an hour no signal covers (the row is flagged, never silently zero).
ALTER TABLE sites
    ADD COLUMN price_region            text,
    ADD COLUMN fallback_price          numeric(20, 9) CHECK (fallback_price IS NULL OR fallback_price >= 0),
    ADD COLUMN fallback_intensity_g    numeric(20, 9) CHECK (fallback_intensity_g IS NULL OR fallback_intensity_g >= 0);

-- Marginal (MOER) carbon beside the location-based average, for decisions and what-ifs.
ALTER TABLE ledger
    ADD COLUMN carbon_marginal_g       numeric(20, 3);
