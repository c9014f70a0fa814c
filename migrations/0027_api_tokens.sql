-- API tokens minted by `wattledger token mint` or `POST /v1/tokens`: each token's id (its
-- `jti` claim) and what it grants, so an admin can list the live ones and revoke one. The
-- token itself is never stored: it is shown once, and a copy of this table grants nothing.
-- Revoking sets revoked_at and notifies every replica (channel wattledger_token_revoked),
-- each of which keeps the revoked ids in memory.
CREATE TABLE api_tokens (
    jti         uuid PRIMARY KEY,
    sub         text NOT NULL CHECK (length(sub) BETWEEN 1 AND 256),
    role        text NOT NULL
                CHECK (role IN ('admin', 'finance', 'operator', 'tenant', 'scheduler', 'collector')),
    -- The tenant key a tenant token is bound to (a key, not an id: the token carries the key).
    tenant      text CHECK (length(tenant) BETWEEN 1 AND 256),
    issued_at   timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    minted_by   text NOT NULL,
    note        text NOT NULL DEFAULT '',
    revoked_at  timestamptz,
    revoked_by  text,
    CHECK ((role = 'tenant') = (tenant IS NOT NULL)),
    CHECK (expires_at > issued_at),
    CHECK ((revoked_at IS NULL) = (revoked_by IS NULL))
);
-- What each replica reloads: the revoked tokens that have not expired yet.
CREATE INDEX api_tokens_revoked ON api_tokens (expires_at) WHERE revoked_at IS NOT NULL;
