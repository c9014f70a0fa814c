//! Who may read which rows. Every tenant-visible query takes a `Scope`; the SQL filters on
//! `scope.tenant()` so a tenant cannot reach another tenant's rows even through an id.

/// The rows a caller may read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every tenant's rows (admin, finance, operator).
    All,
    /// One tenant's rows only (a tenant token).
    Tenant(i64),
}

impl Scope {
    /// The tenant id to filter on, or `None` for all tenants. Bound as a nullable parameter:
    /// `($n::bigint IS NULL OR tenant_id = $n)`.
    pub fn tenant(&self) -> Option<i64> {
        match self {
            Scope::All => None,
            Scope::Tenant(id) => Some(*id),
        }
    }

    /// Narrows a scope to one tenant; `None` if the caller may not see that tenant.
    pub fn narrow(&self, tenant: i64) -> Option<Scope> {
        match self {
            Scope::All => Some(Scope::Tenant(tenant)),
            Scope::Tenant(own) if *own == tenant => Some(*self),
            Scope::Tenant(_) => None,
        }
    }
}
