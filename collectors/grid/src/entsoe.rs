//! ENTSO-E Transparency Platform day-ahead prices (documentType A44): the
//! `Publication_MarketDocument` XML, `TimeSeries/Period{timeInterval, resolution,
//! Point{position, price.amount}}` in `currency_Unit.name` per `price_Measure_Unit.name`.
//!
//! Facts (GRID-NOTES.md): resolutions PT60M and PT15M both occur; under curveType A03 a
//! position whose price equals the previous one is omitted and must be forward-filled; and
//! several TimeSeries may cover the same interval — the first (lowest
//! `classificationSequence_AttributeInstanceComponent.position`) wins. Prices per MWh become
//! prices per kWh exactly.

use crate::{parse_time, shape, SignalError};
use chrono::{DateTime, Duration, Utc};
use quick_xml::events::Event;
use rust_decimal::Decimal;
use std::collections::BTreeMap;
use std::str::FromStr;
use wattledger_domain::signals::{Point, Series, Signal, Status};

#[derive(Debug, Default)]
struct Period {
    start: Option<DateTime<Utc>>,
    end: Option<DateTime<Utc>>,
    resolution: Option<Duration>,
    points: BTreeMap<i64, Decimal>,
}

#[derive(Debug, Default)]
struct TimeSeries {
    currency: Option<String>,
    unit: Option<String>,
    curve: Option<String>,
    rank: i64,
    periods: Vec<Period>,
}

fn resolution(s: &str) -> Option<Duration> {
    match s {
        "PT15M" => Some(Duration::minutes(15)),
        "PT30M" => Some(Duration::minutes(30)),
        "PT60M" | "PT1H" => Some(Duration::hours(1)),
        "P1D" => Some(Duration::days(1)),
        _ => None,
    }
}

/// ENTSO-E writes interval ends without seconds (`2026-10-01T22:00Z`).
fn instant(s: &str) -> Option<DateTime<Utc>> {
    parse_time(s)
}

/// Parses a day-ahead price document for `region` (the bidding zone's EIC code or a name).
pub fn parse(xml: &str, region: &str) -> Result<Series, SignalError> {
    let mut reader = quick_xml::Reader::from_str(xml);
    reader.config_mut().trim_text(true);
    let mut path: Vec<String> = Vec::new();
    let mut series: Vec<TimeSeries> = Vec::new();
    let mut position: Option<i64> = None;
    let mut doc_type = None;
    loop {
        let event = reader
            .read_event()
            .map_err(|e| shape(format!("not XML: {e}")))?;
        match event {
            Event::Start(e) => {
                let name = String::from_utf8_lossy(e.local_name().as_ref()).into_owned();
                match name.as_str() {
                    "TimeSeries" => series.push(TimeSeries::default()),
                    "Period" => {
                        if let Some(ts) = series.last_mut() {
                            ts.periods.push(Period::default());
                        }
                    }
                    "Point" => position = None,
                    _ => {}
                }
                path.push(name);
            }
            Event::End(_) => {
                path.pop();
            }
            Event::Text(t) => {
                let text = t
                    .unescape()
                    .map_err(|e| shape(format!("bad XML text: {e}")))?
                    .into_owned();
                let leaf = path.last().map(String::as_str).unwrap_or("");
                let parent = path.iter().rev().nth(1).map(String::as_str).unwrap_or("");
                let ts = series.last_mut();
                match (parent, leaf, ts) {
                    ("Publication_MarketDocument", "type", _) => doc_type = Some(text),
                    (_, "currency_Unit.name", Some(ts)) => ts.currency = Some(text),
                    (_, "price_Measure_Unit.name", Some(ts)) => ts.unit = Some(text),
                    (_, "curveType", Some(ts)) => ts.curve = Some(text),
                    (_, "classificationSequence_AttributeInstanceComponent.position", Some(ts)) => {
                        ts.rank = text.parse().unwrap_or(0)
                    }
                    ("timeInterval", "start", Some(ts)) if path.iter().any(|p| p == "Period") => {
                        if let Some(p) = ts.periods.last_mut() {
                            p.start = instant(&text);
                        }
                    }
                    ("timeInterval", "end", Some(ts)) if path.iter().any(|p| p == "Period") => {
                        if let Some(p) = ts.periods.last_mut() {
                            p.end = instant(&text);
                        }
                    }
                    ("Period", "resolution", Some(ts)) => {
                        if let Some(p) = ts.periods.last_mut() {
                            p.resolution = resolution(&text);
                        }
                    }
                    ("Point", "position", _) => position = text.parse().ok(),
                    ("Point", "price.amount", Some(ts)) => {
                        let price = Decimal::from_str(&text)
                            .map_err(|_| shape(format!("price.amount {text:?} is not a number")))?;
                        let pos = position.ok_or_else(|| shape("a Point without a position"))?;
                        if let Some(p) = ts.periods.last_mut() {
                            p.points.insert(pos, price);
                        }
                    }
                    _ => {}
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if let Some(t) = doc_type.filter(|t| t != "A44") {
        return Err(shape(format!(
            "document type {t} is not A44 (day-ahead prices)"
        )));
    }
    if series.is_empty() {
        return Err(shape(
            "no TimeSeries (an Acknowledgement_MarketDocument says why)",
        ));
    }
    let currency = series[0].currency.clone().unwrap_or_else(|| "EUR".into());
    let mut by_start: BTreeMap<DateTime<Utc>, (i64, Point)> = BTreeMap::new();
    for ts in &series {
        let per = match ts.unit.as_deref() {
            Some("MWH") | None => Decimal::from(1000),
            Some("KWH") => Decimal::ONE,
            Some(u) => return Err(SignalError::Unit(format!("price per {u}"))),
        };
        if ts.currency.as_deref().unwrap_or("EUR") != currency {
            return Err(SignalError::Unit("TimeSeries in two currencies".into()));
        }
        for p in &ts.periods {
            let (Some(start), Some(end), Some(step)) = (p.start, p.end, p.resolution) else {
                return Err(shape("a Period without timeInterval or a known resolution"));
            };
            let slots = (end - start).num_seconds() / step.num_seconds();
            let mut last: Option<Decimal> = None;
            for pos in 1..=slots {
                let price = match p.points.get(&pos) {
                    Some(v) => Some(*v),
                    // A03: an omitted position repeats the previous price. Other curves
                    // leave a gap, which stays a gap.
                    None if ts.curve.as_deref() == Some("A03") => last,
                    None => None,
                };
                last = price.or(last);
                let Some(price) = price else { continue };
                let s = start + step * (pos - 1) as i32;
                let point = Point {
                    start: s,
                    end: s + step,
                    value: price / per,
                    estimated: false,
                };
                match by_start.get(&s) {
                    Some((rank, _)) if *rank <= ts.rank => {}
                    _ => {
                        by_start.insert(s, (ts.rank, point));
                    }
                }
            }
        }
    }
    Ok(Series {
        signal: Signal::Price { currency },
        // The day-ahead auction's result is the price energy bought on it is settled at:
        // published the day before, but an actual price, not a forecast of one.
        status: Status::Actual,
        region: region.to_owned(),
        source: "entsoe".into(),
        points: by_start.into_values().map(|(_, p)| p).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Built to the published schema (no real response with a known licence was found,
    /// GRID-NOTES.md): a PT60M A03 series with positions 3 and 4 omitted, a PT15M series
    /// for the same day ranked second, and the namespaces real documents carry.
    const DOC: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<Publication_MarketDocument xmlns="urn:iec62325.351:tc57wg16:451-3:publicationdocument:7:3">
  <mRID>3f0a</mRID><revisionNumber>1</revisionNumber><type>A44</type>
  <period.timeInterval><start>2026-10-01T22:00Z</start><end>2026-10-02T22:00Z</end></period.timeInterval>
  <TimeSeries>
    <mRID>1</mRID>
    <classificationSequence_AttributeInstanceComponent.position>1</classificationSequence_AttributeInstanceComponent.position>
    <in_Domain.mRID codingScheme="A01">10Y1001A1001A82H</in_Domain.mRID>
    <currency_Unit.name>EUR</currency_Unit.name>
    <price_Measure_Unit.name>MWH</price_Measure_Unit.name>
    <curveType>A03</curveType>
    <Period>
      <timeInterval><start>2026-10-01T22:00Z</start><end>2026-10-02T04:00Z</end></timeInterval>
      <resolution>PT60M</resolution>
      <Point><position>1</position><price.amount>85.12</price.amount></Point>
      <Point><position>2</position><price.amount>79.40</price.amount></Point>
      <Point><position>5</position><price.amount>-3.05</price.amount></Point>
      <Point><position>6</position><price.amount>91</price.amount></Point>
    </Period>
  </TimeSeries>
  <TimeSeries>
    <mRID>2</mRID>
    <classificationSequence_AttributeInstanceComponent.position>2</classificationSequence_AttributeInstanceComponent.position>
    <currency_Unit.name>EUR</currency_Unit.name>
    <price_Measure_Unit.name>MWH</price_Measure_Unit.name>
    <curveType>A03</curveType>
    <Period>
      <timeInterval><start>2026-10-02T04:00Z</start><end>2026-10-02T05:00Z</end></timeInterval>
      <resolution>PT15M</resolution>
      <Point><position>1</position><price.amount>100</price.amount></Point>
      <Point><position>3</position><price.amount>120.5</price.amount></Point>
    </Period>
    <Period>
      <timeInterval><start>2026-10-01T22:00Z</start><end>2026-10-01T23:00Z</end></timeInterval>
      <resolution>PT60M</resolution>
      <Point><position>1</position><price.amount>999</price.amount></Point>
    </Period>
  </TimeSeries>
</Publication_MarketDocument>"#;

    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).unwrap()
    }

    #[test]
    fn hourly_and_quarter_hourly_with_forward_fill_in_eur_per_kwh() {
        let s = parse(DOC, "DE-LU").unwrap();
        assert_eq!(
            s.signal,
            Signal::Price {
                currency: "EUR".into()
            }
        );
        let hourly: Vec<(String, Decimal)> = s
            .points
            .iter()
            .filter(|p| p.end - p.start == Duration::hours(1))
            .map(|p| (p.start.format("%H:%M").to_string(), p.value))
            .collect();
        assert_eq!(
            hourly,
            vec![
                ("22:00".into(), d("0.08512")),
                ("23:00".into(), d("0.0794")),
                ("00:00".into(), d("0.0794")),
                ("01:00".into(), d("0.0794")),
                ("02:00".into(), d("-0.00305")),
                ("03:00".into(), d("0.091")),
            ],
            "positions 3 and 4 repeat position 2; the second-ranked 999 loses"
        );
        let quarters: Vec<Decimal> = s
            .points
            .iter()
            .filter(|p| p.end - p.start == Duration::minutes(15))
            .map(|p| p.value)
            .collect();
        assert_eq!(quarters, vec![d("0.1"), d("0.1"), d("0.1205"), d("0.1205")]);
    }

    #[test]
    fn other_documents_are_refused() {
        let ack = r#"<Acknowledgement_MarketDocument><type>A44</type><Reason><code>999</code><text>No matching data found</text></Reason></Acknowledgement_MarketDocument>"#;
        assert!(parse(ack, "DE-LU")
            .unwrap_err()
            .to_string()
            .contains("no TimeSeries"));
        let a65 = DOC.replacen("<type>A44</type>", "<type>A65</type>", 1);
        assert!(parse(&a65, "DE-LU")
            .unwrap_err()
            .to_string()
            .contains("A65"));
    }
}
