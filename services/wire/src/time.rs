//! Times on the wire.

/// The header every answer of the server carries its time in (RFC 3339, to the millisecond,
/// UTC), stamped when the answer is built: the agent stamps its readings by it
/// (`wattledger-agent`'s clock), so a machine whose clock is wrong still files its energy in
/// the right hours.
pub const SERVER_TIME_HEADER: &str = "wattledger-server-time";

/// A run time as schedulers write it in annotations (`wattledger.io/duration` on a pod or a
/// Kueue Workload): `90m`, `2h`, `1h30m`, `45s`, `2d`, or whole seconds (`3600`); `None` for
/// anything else, overflow included (the admission question's own check bounds the value).
pub fn parse_duration(s: &str) -> Option<i64> {
    let s = s.trim();
    if let Ok(n) = s.parse::<i64>() {
        return Some(n);
    }
    let (mut total, mut num) = (0i64, String::new());
    for c in s.chars() {
        if c.is_ascii_digit() {
            num.push(c);
        } else {
            let n: i64 = num.parse().ok()?;
            num.clear();
            let unit = match c {
                'd' => 86_400,
                'h' => 3600,
                'm' => 60,
                's' => 1,
                _ => return None,
            };
            total = total.checked_add(n.checked_mul(unit)?)?;
        }
    }
    num.is_empty().then_some(total)
}

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

#[cfg(test)]
mod tests {
    use super::parse_duration;

    #[test]
    fn durations_as_annotations_write_them() {
        assert_eq!(parse_duration("3600"), Some(3600));
        assert_eq!(parse_duration(" 90 "), Some(90));
        assert_eq!(parse_duration("1h30m"), Some(5400));
        assert_eq!(parse_duration("2d"), Some(172_800));
        assert_eq!(parse_duration("45s"), Some(45));
        assert_eq!(parse_duration("1h30"), None);
        assert_eq!(parse_duration("1x"), None);
        assert_eq!(parse_duration("h"), None);
        assert_eq!(parse_duration("9999999999999999d"), None);
        assert_eq!(parse_duration("99999999999999999999"), None);
    }
}
