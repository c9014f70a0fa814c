//! A budget's closed sets of names: what it limits and over what period. The names are the
//! API's and the database's (migrations 0009 and 0011's CHECKs).

crate::names::names! {
    /// What a budget limits; one budget may limit several.
    pub enum BudgetMetric {
        Kwh = "kwh",
        Cost = "cost",
        CarbonKg = "carbon_kg",
    }
}

crate::names::names! {
    /// The period a budget counts over.
    pub enum BudgetPeriod {
        /// The calendar month (UTC), renewed each month.
        Month = "month",
        /// Its own `[starts_at, ends_at)`.
        Custom = "custom",
    }
}
