-- Demand response (domain::demand_response): a grid operator's event at a site — a window of
-- whole hours (at most a day) and either a power cap or a reduction below baseline, with an
-- optional price per kWh shed in the site's currency — and the baseline method its outcome
-- is measured by. `key` is the grid operator's event id (or the site's own name for it):
-- posting an event again is idempotent.
CREATE TABLE grid_events (
    id              bigserial PRIMARY KEY,
    key             text NOT NULL UNIQUE,
    site_id         bigint NOT NULL REFERENCES sites (id),
    starts_at       timestamptz NOT NULL CHECK (extract(epoch FROM starts_at)::bigint % 3600 = 0),
    ends_at         timestamptz NOT NULL CHECK (extract(epoch FROM ends_at)::bigint % 3600 = 0),
    target_cap_w    bigint CHECK (target_cap_w > 0),
    reduction_w     bigint CHECK (reduction_w > 0),
    price_per_kwh   numeric(12, 6) CHECK (price_per_kwh >= 0),
    baseline_method text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    created_by      text NOT NULL,
    CHECK ((target_cap_w IS NULL) <> (reduction_w IS NULL)),
    CHECK (ends_at > starts_at AND ends_at <= starts_at + interval '24 hours')
);
CREATE INDEX grid_events_site ON grid_events (site_id, starts_at);

-- A flexible job admission moved out of an event's window, and the energy (mJ) it was
-- estimated to draw in the window had it started when it asked: the tenant's contribution.
ALTER TABLE admission_decisions
    ADD COLUMN grid_event_id bigint REFERENCES grid_events (id),
    ADD COLUMN moved_mj bigint CHECK (moved_mj >= 0),
    ADD CHECK ((grid_event_id IS NULL) = (moved_mj IS NULL));
CREATE INDEX admission_decisions_grid_event ON admission_decisions (grid_event_id)
    WHERE grid_event_id IS NOT NULL;

-- A tenant's share of an event's credit is a statement line of its own: a negative cost and
-- no energy, so statements never change metered energy.
ALTER TABLE statement_lines DROP CONSTRAINT statement_lines_class_check;
ALTER TABLE statement_lines ADD CONSTRAINT statement_lines_class_check
    CHECK (class IN ('training', 'inference', 'batch', 'interactive', 'idle_share', 'platform',
                     'demand_response_credit'));
