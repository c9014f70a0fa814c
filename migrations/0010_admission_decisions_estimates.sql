-- Replicas reload reservations every couple of seconds (those decided since their last look)
-- and all of them every half minute. The estimate and model a reservation counts against
-- budgets become columns, so that reload reads plain columns instead of taking each
-- answer's JSON apart, and the incremental reload reads by decision time.
ALTER TABLE admission_decisions
    ADD COLUMN model           text,
    ADD COLUMN est_kwh         numeric(20, 6),
    ADD COLUMN est_cost        numeric(20, 6),
    ADD COLUMN est_currency    text,
    ADD COLUMN est_carbon_kg   numeric(20, 6);

UPDATE admission_decisions SET
    model = request ->> 'model',
    est_kwh = (answer #>> '{estimate_at_start,kwh}')::numeric,
    est_cost = (answer #>> '{estimate_at_start,cost}')::numeric,
    est_currency = answer #>> '{estimate_at_start,currency}',
    est_carbon_kg = (answer #>> '{estimate_at_start,carbon_average_kg}')::numeric;

CREATE INDEX admission_decisions_decided ON admission_decisions (decided_at)
    WHERE decision <> 'reject';
