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
    /// A binary COPY the database sent that does not read as asked (`crate::pg_copy`).
    #[error("reading a binary COPY: {0}")]
    Copy(#[from] crate::pg_copy::CopyError),
    /// A packed day of step records that does not unpack: written by a newer version, or
    /// damaged.
    #[error("packed step records of meter {meter_id} on {day}: {error}")]
    Pack {
        meter_id: i64,
        day: chrono::NaiveDate,
        error: wattledger_domain::step_pack::PackError,
    },
}

pub type StoreResult<T> = Result<T, StoreError>;

impl StoreError {
    /// Two transactions that met on the same rows and one was chosen to give way (a deadlock,
    /// a serialization failure: SQLSTATE class 40), or the database could not be reached: the
    /// same request sent again later can succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Database(sqlx::Error::Database(e)) => {
                e.code().is_some_and(|c| c.starts_with("40"))
            }
            StoreError::Database(
                sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::PoolClosed,
            ) => true,
            _ => false,
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    /// A database error with only a SQLSTATE, as PostgreSQL sends one.
    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    struct Sqlstate(&'static str);

    impl sqlx::error::DatabaseError for Sqlstate {
        fn message(&self) -> &str {
            self.0
        }
        fn code(&self) -> Option<Cow<'_, str>> {
            Some(Cow::Borrowed(self.0))
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    fn db(code: &'static str) -> StoreError {
        StoreError::Database(sqlx::Error::Database(Box::new(Sqlstate(code))))
    }

    #[test]
    fn a_deadlock_or_a_serialization_failure_is_worth_sending_again_and_bad_data_is_not() {
        // 40P01 deadlock_detected (also what Citus's distributed deadlock detector raises),
        // 40001 serialization_failure.
        for code in ["40P01", "40001"] {
            assert!(db(code).is_transient(), "{code}");
            assert!(!db(code).is_refused_data(), "{code}");
        }
        assert!(StoreError::Database(sqlx::Error::PoolTimedOut).is_transient());
        // 23505 unique_violation, 22003 numeric_value_out_of_range, 42P01 undefined_table.
        for code in ["23505", "22003"] {
            assert!(!db(code).is_transient(), "{code}");
            assert!(db(code).is_refused_data(), "{code}");
        }
        assert!(!db("42P01").is_transient());
        assert!(!StoreError::NotFound.is_transient());
    }
}
