//! Times on the wire.

/// Timestamps to the millisecond: sources read at sub-second intervals, and the server keys
/// samples by (meter, ts), so two readings a few ms apart must stay apart.
pub mod rfc3339_ms {
    use chrono::{DateTime, SecondsFormat, Utc};
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&t.to_rfc3339_opts(SecondsFormat::Millis, true))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        // Parsed from the text where it lies, borrowed or not: no String per sample.
        struct Rfc3339;
        impl serde::de::Visitor<'_> for Rfc3339 {
            type Value = DateTime<Utc>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an RFC 3339 time")
            }

            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
                DateTime::parse_from_rfc3339(s)
                    .map(|t| t.to_utc())
                    .map_err(E::custom)
            }
        }
        d.deserialize_str(Rfc3339)
    }
}
