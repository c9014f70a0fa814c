-- Dashboard sessions, kept server-side so that signing out, a password reset, a change of
-- role or tenant, and disabling a user end them at once (a stateless cookie would live on
-- until it expired). The cookie carries a random token; only its SHA-256 is stored, so a
-- copy of this table signs nobody in.
CREATE TABLE dashboard_sessions (
    token_sha256    text PRIMARY KEY CHECK (token_sha256 ~ '^[0-9a-f]{64}$'),
    user_id         bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL
);
CREATE INDEX dashboard_sessions_user ON dashboard_sessions (user_id);
CREATE INDEX dashboard_sessions_expiry ON dashboard_sessions (expires_at);

-- Failed sign-ins per submitted user name and per client address: the growing delays
-- against password guessing. Keyed by what was typed, so an unknown name is throttled
-- exactly as a known one (the answer tells nothing about who exists). In the database
-- rather than in memory, so replicas behind a load balancer count together.
CREATE TABLE login_failures (
    kind            text NOT NULL CHECK (kind IN ('user', 'address')),
    key             text NOT NULL,
    failures        integer NOT NULL CHECK (failures > 0),
    last_failure_at timestamptz NOT NULL,
    blocked_until   timestamptz,
    PRIMARY KEY (kind, key)
);
