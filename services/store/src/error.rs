//! Store errors. Validation of user input happens before the store; what reaches here as an
//! error is either "not found" (scoped away or absent) or the database failing.

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("not found")]
    NotFound,
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration error: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A database name that is not letters, digits and `_` (it cannot be bound).
    #[error("invalid database name {0:?}")]
    DatabaseName(String),
    /// A table of the schema that `distribution::TABLES` does not place (a migration added it
    /// without saying where it lives on a distributed PostgreSQL).
    #[error("table {0} is not classified in store::distribution::TABLES")]
    Unclassified(String),
}

pub type StoreResult<T> = Result<T, StoreError>;

impl StoreError {
    /// The database refused the data itself (a value it cannot hold, a broken constraint:
    /// SQLSTATE classes 22 and 23), as opposed to being unreachable: sending the same again
    /// fails again.
    pub fn is_refused_data(&self) -> bool {
        match self {
            StoreError::Database(sqlx::Error::Database(e)) => e
                .code()
                .is_some_and(|c| c.starts_with("22") || c.starts_with("23")),
            _ => false,
        }
    }
}
