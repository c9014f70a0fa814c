-- Budget alerts and their delivery. A crossing is a row in budget_events, written in the
-- same transaction as the ledger rows that caused it; the unique key makes it happen once
-- per budget × period × metric × threshold however often attribution recomputes. Each event
-- fans out, in that same transaction, into one webhook_messages row per subscribed endpoint
-- (the outbox), which the dispatcher delivers and retries; every attempt is kept.

CREATE TABLE budget_events (
    id            uuid PRIMARY KEY,
    budget_id     bigint NOT NULL REFERENCES budgets (id) ON DELETE CASCADE,
    tenant_id     bigint NOT NULL REFERENCES tenants (id),
    period_start  timestamptz NOT NULL,
    period_end    timestamptz NOT NULL,
    metric        text NOT NULL CHECK (metric IN ('kwh', 'cost', 'carbon_kg')),
    -- A threshold in percent ('80'), or 'projected' (the 7-day burn rate runs out before
    -- the period ends).
    threshold     text NOT NULL,
    used          numeric(24, 6) NOT NULL,
    limit_value   numeric(20, 6) NOT NULL,
    projected_at  timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (budget_id, period_start, metric, threshold)
);
CREATE INDEX budget_events_tenant ON budget_events (tenant_id, created_at DESC);

CREATE TABLE webhook_endpoints (
    id               uuid PRIMARY KEY,
    tenant_id        bigint NOT NULL REFERENCES tenants (id),
    url              text NOT NULL,
    description      text NOT NULL DEFAULT '',
    -- Event types delivered; empty means all.
    event_types      text[] NOT NULL DEFAULT '{}',
    enabled          boolean NOT NULL DEFAULT true,
    disabled_reason  text,
    -- whsec_… ; while a rotation overlaps, the previous secret signs too until it expires.
    secret           text NOT NULL,
    previous_secret  text,
    previous_until   timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_endpoints_tenant ON webhook_endpoints (tenant_id);

CREATE TABLE webhook_messages (
    -- The webhook-id header: the same on every attempt, the receiver's idempotency key.
    id               text PRIMARY KEY,
    endpoint_id      uuid NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    event_type       text NOT NULL,
    -- The exact body sent (and signed) on every attempt.
    payload          text NOT NULL,
    state            text NOT NULL DEFAULT 'pending'
                     CHECK (state IN ('pending', 'delivered', 'dead', 'cancelled')),
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    created_at       timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz
);
CREATE INDEX webhook_messages_due ON webhook_messages (next_attempt_at) WHERE state = 'pending';
CREATE INDEX webhook_messages_endpoint ON webhook_messages (endpoint_id, created_at DESC);

CREATE TABLE webhook_attempts (
    id           bigserial PRIMARY KEY,
    message_id   text NOT NULL REFERENCES webhook_messages (id) ON DELETE CASCADE,
    attempt      integer NOT NULL,
    started_at   timestamptz NOT NULL,
    status       integer,
    latency_ms   integer NOT NULL,
    error        text,
    UNIQUE (message_id, attempt)
);
