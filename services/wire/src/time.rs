//! Times on the wire.

/// Timestamps to the millisecond: sources read at sub-second intervals, and the server keys
/// samples by (meter, ts), so two readings a few ms apart must stay apart.
pub mod rfc3339_ms {
    use chrono::{DateTime, SecondsFormat, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&t.to_rfc3339_opts(SecondsFormat::Millis, true))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        // Borrowed when the JSON has no escapes (the hot path: one allocation less per sample).
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        DateTime::parse_from_rfc3339(&s)
            .map(|t| t.to_utc())
            .map_err(serde::de::Error::custom)
    }
}
