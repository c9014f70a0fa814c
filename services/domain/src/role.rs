//! Who a caller is to the API: a dashboard user's or a token's role. The server decides what
//! each may do; the store keeps users' and tokens' roles by these names.

crate::names::names! {
    /// A role. The names are the API's, the tokens' `role` claim and the database's
    /// (migration 0027's CHECK; users hold the first four, 0013's CHECK).
    pub enum Role {
        Admin = "admin",
        Finance = "finance",
        Operator = "operator",
        Tenant = "tenant",
        Scheduler = "scheduler",
        Collector = "collector",
    }
}

impl Role {
    /// A role a dashboard user may hold, from its name; service roles are not among them.
    pub fn of_user(name: &str) -> Option<Role> {
        Role::parse(name).filter(|r| r.is_user())
    }

    /// Whether a dashboard user may hold it: the service roles (scheduler, collector) are
    /// tokens' only.
    pub fn is_user(self) -> bool {
        !matches!(self, Role::Scheduler | Role::Collector)
    }
}

crate::names::names! {
    /// Where a minted API token stands.
    pub enum TokenState {
        Live = "live",
        Expired = "expired",
        Revoked = "revoked",
    }
}
