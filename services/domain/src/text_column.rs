//! A closed set of names stored as a `text` column (its CHECK constraint lists them): the
//! store reads and writes the domain's enum directly, and a value outside the set read from
//! the database is a decode error naming it, not a silent default.
//!
//! A Postgres enum type would need a migration per new name; `sqlx::Type`'s derive for an enum
//! names a Postgres type of its own. So: the enum encodes as its name and decodes through its
//! `parse`, as `text`.

/// Implements sqlx's `Type`, `Encode`, `Decode` and `PgHasArrayType` for `$ty` (which has
/// `as_str(self) -> &'static str` and `parse(&str) -> Option<Self>`) as `text`.
macro_rules! text_column {
    ($ty:ty) => {
        #[cfg(feature = "sqlx")]
        impl sqlx::Type<sqlx::Postgres> for $ty {
            fn type_info() -> sqlx::postgres::PgTypeInfo {
                <&str as sqlx::Type<sqlx::Postgres>>::type_info()
            }
            fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
                <&str as sqlx::Type<sqlx::Postgres>>::compatible(ty)
            }
        }

        #[cfg(feature = "sqlx")]
        impl sqlx::postgres::PgHasArrayType for $ty {
            fn array_type_info() -> sqlx::postgres::PgTypeInfo {
                <&str as sqlx::postgres::PgHasArrayType>::array_type_info()
            }
        }

        #[cfg(feature = "sqlx")]
        impl<'q> sqlx::Encode<'q, sqlx::Postgres> for $ty {
            fn encode_by_ref(
                &self,
                buf: &mut sqlx::postgres::PgArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                <&str as sqlx::Encode<sqlx::Postgres>>::encode(self.as_str(), buf)
            }
        }

        #[cfg(feature = "sqlx")]
        impl<'r> sqlx::Decode<'r, sqlx::Postgres> for $ty {
            fn decode(
                value: sqlx::postgres::PgValueRef<'r>,
            ) -> Result<Self, sqlx::error::BoxDynError> {
                let s = <&str as sqlx::Decode<sqlx::Postgres>>::decode(value)?;
                <$ty>::parse(s).ok_or_else(|| format!("'{s}' is not a {}", stringify!($ty)).into())
            }
        }
    };
}

pub(crate) use text_column;
