//! Closed sets of names (a meter's kind, a job's kind, a verdict): one declaration gives the
//! enum, its names in the API's JSON and OpenAPI schema, `as_str`/`parse`/`Display`, and its
//! `text` column.
//!
//! The store reads and writes the enum directly from a `text` column (its CHECK constraint
//! lists the names); a value outside the set read from the database is a decode error naming
//! it, not a silent default. A Postgres enum type would need a migration per new name, and
//! `sqlx::Type`'s derive for an enum names a Postgres type of its own: so the enum encodes as
//! its name and decodes through its `parse`, as `text`.

/// A closed set of names, for the readers that take any of them (an API field, a query
/// parameter, a form) and answer a bad one with the list of good ones.
pub trait Named: Sized + Copy {
    const NAMES: &'static [&'static str];
    fn parse(s: &str) -> Option<Self>;

    /// The refusal of a name outside the set.
    fn expected() -> String {
        format!("must be one of: {}", Self::NAMES.join(", "))
    }
}

/// Declares an enum whose variants each have a name: ordered as declared (the discriminant
/// indexes per-variant arrays), serialised and documented by that name, with `ALL`, `NAMES`,
/// `as_str`, `parse`, `Display` and the text column.
macro_rules! names {
    (
        $(#[$meta:meta])*
        $vis:vis enum $ty:ident {
            $($(#[$vmeta:meta])* $variant:ident = $name:tt,)+
        }
    ) => {
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord,
            serde::Serialize, serde::Deserialize,
        )]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        // After the derives, so a declaration may use their attributes (`schema(as = …)`).
        $(#[$meta])*
        $vis enum $ty {
            $($(#[$vmeta])* #[serde(rename = $name)] $variant,)+
        }

        impl $ty {
            /// Every variant, in declaration order.
            pub const ALL: [$ty; [$($name),+].len()] = [$($ty::$variant),+];
            /// The names, in [`Self::ALL`]'s order.
            pub const NAMES: [&'static str; [$($name),+].len()] = [$($name),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $name,)+
                }
            }

            pub fn parse(s: &str) -> Option<$ty> {
                match s {
                    $($name => Some($ty::$variant),)+
                    _ => None,
                }
            }
        }

        impl $crate::names::Named for $ty {
            const NAMES: &'static [&'static str] = &$ty::NAMES;
            fn parse(s: &str) -> Option<Self> {
                $ty::parse(s)
            }
        }

        impl $crate::input::field::Field for $ty {
            fn read(
                v: Option<&serde_json::Value>,
            ) -> Result<Self, Vec<$crate::input::record::Problem>> {
                let s = <String as $crate::input::field::Field>::read(v)?;
                <$ty as $crate::names::Named>::parse(&s)
                    .map_or_else(|| $crate::input::field::refused(<$ty as $crate::names::Named>::expected()), Ok)
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        $crate::names::text_column!($ty);
    };
}

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

pub(crate) use {names, text_column};
