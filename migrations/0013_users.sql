-- Dashboard users: a login name, an argon2 password hash (PHC string) and a role; a tenant
-- user is bound to one tenant, as a tenant token is.

CREATE TABLE users (
    id              bigserial PRIMARY KEY,
    username        text NOT NULL UNIQUE CHECK (username ~ '^[a-z0-9][a-z0-9._@-]{0,63}$'),
    password_hash   text NOT NULL CHECK (password_hash LIKE '$argon2id$%'),
    role            text NOT NULL CHECK (role IN ('admin', 'finance', 'operator', 'tenant')),
    tenant_id       bigint REFERENCES tenants (id),
    disabled        boolean NOT NULL DEFAULT false,
    created_at      timestamptz NOT NULL DEFAULT now(),
    last_login_at   timestamptz,
    CHECK ((role = 'tenant') = (tenant_id IS NOT NULL))
);
