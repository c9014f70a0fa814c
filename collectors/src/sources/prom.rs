//! The Prometheus text exposition format (version 0.0.4), as exporters write it.
//!
//! Written here rather than taken from `prometheus-parse` 0.2: that crate matches metric
//! names with `\w+` (so vLLM's and SGLang's `vllm:prompt_tokens_total` are silently
//! dropped), splits labels on `,` and `=` without honouring quotes, and merges histogram
//! buckets of different label sets. This parser keeps every sample with its own labels.

use std::collections::HashMap;

/// One sample line: `name{labels} value [timestamp]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Labels,
    pub value: f64,
    pub timestamp_ms: Option<i64>,
}

impl Sample {
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A parsed scrape: samples in order, with the `# TYPE` and `# HELP` of each family.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scrape {
    pub samples: Vec<Sample>,
    pub types: HashMap<String, String>,
    pub help: HashMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct ParseError {
    pub line: usize,
    pub reason: LineError,
}

/// What is wrong with a sample line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    #[error("expected a metric name")]
    NoName,
    #[error("expected a value")]
    NoValue,
    #[error("'{0}' is not a number")]
    NotANumber(String),
    #[error("'{0}' is not a timestamp")]
    NotATimestamp(String),
    #[error("unexpected text after the timestamp")]
    TrailingText,
    #[error("expected a label name")]
    NoLabelName,
    #[error("expected '=' after a label name")]
    NoEquals,
    #[error("expected a quoted label value")]
    UnquotedValue,
    #[error("unterminated label value")]
    Unterminated,
    #[error("expected ',' or '}}' after a label")]
    NoSeparator,
}

/// Parses a whole scrape. A malformed line is an error naming its line number: a scrape
/// that cannot be read completely is not half-used.
pub fn parse(text: &str) -> Result<Scrape, ParseError> {
    let mut scrape = Scrape::default();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let mut parts = comment.trim_start().splitn(3, char::is_whitespace);
            match (parts.next(), parts.next(), parts.next()) {
                (Some("TYPE"), Some(name), Some(kind)) => {
                    scrape.types.insert(name.to_owned(), kind.trim().to_owned());
                }
                (Some("HELP"), Some(name), text) => {
                    scrape
                        .help
                        .insert(name.to_owned(), unescape_help(text.unwrap_or("").trim()));
                }
                _ => {}
            }
            continue;
        }
        scrape
            .samples
            .push(sample(line).map_err(|reason| ParseError {
                line: i + 1,
                reason,
            })?);
    }
    Ok(scrape)
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

fn sample(line: &str) -> Result<Sample, LineError> {
    let name_end = line.find(|c: char| !is_name_char(c)).unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() || !name.starts_with(is_name_start) {
        return Err(LineError::NoName);
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        let (parsed, remaining) = label_set(after)?;
        labels = parsed;
        rest = remaining;
    }
    let mut fields = rest.split_whitespace();
    let value = fields.next().ok_or(LineError::NoValue)?;
    let value = go_float(value).ok_or_else(|| LineError::NotANumber(value.into()))?;
    let timestamp_ms = match fields.next() {
        Some(t) => Some(
            t.parse::<i64>()
                .map_err(|_| LineError::NotATimestamp(t.into()))?,
        ),
        None => None,
    };
    if fields.next().is_some() {
        return Err(LineError::TrailingText);
    }
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
        timestamp_ms,
    })
}

/// A sample's labels in the order the exporter wrote them.
type Labels = Vec<(String, String)>;

/// Parses `name="value",...}` and returns the labels and what follows the `}`.
fn label_set(mut s: &str) -> Result<(Labels, &str), LineError> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start();
        if let Some(rest) = s.strip_prefix('}') {
            return Ok((labels, rest));
        }
        let name_end = s
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        let name = &s[..name_end];
        if name.is_empty() {
            return Err(LineError::NoLabelName);
        }
        s = s[name_end..].trim_start();
        s = s.strip_prefix('=').ok_or(LineError::NoEquals)?.trim_start();
        s = s.strip_prefix('"').ok_or(LineError::UnquotedValue)?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => return Err(LineError::Unterminated),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => return Err(LineError::Unterminated),
            }
        };
        labels.push((name.to_owned(), value));
        s = s[end + 1..].trim_start();
        if let Some(rest) = s.strip_prefix(',') {
            s = rest;
        } else if !s.starts_with('}') {
            return Err(LineError::NoSeparator);
        }
    }
}

fn unescape_help(s: &str) -> String {
    s.replace("\\n", "\n").replace("\\\\", "\\")
}

/// Go's float syntax as exporters print it: `1.5`, `8.128902e+06`, `NaN`, `+Inf`, `-Inf`.
fn go_float(s: &str) -> Option<f64> {
    match s {
        "NaN" => Some(f64::NAN),
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ => s.parse::<f64>().ok().filter(|v| v.is_finite()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_with_colons_labels_with_escapes_and_scientific_values() {
        let s = parse(concat!(
            "# HELP sglang:prompt_tokens_total Number of prefill tokens processed.\n",
            "# TYPE sglang:prompt_tokens_total counter\n",
            "sglang:prompt_tokens_total{model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 8.128902e+06\n",
            "x{a=\"1,2=3\",b=\"say \\\"hi\\\"\\n\",c=\"C:\\\\dir\"} -Inf 1395066363000\n",
            "bare 12.47\n",
        ))
        .unwrap();
        assert_eq!(s.samples.len(), 3);
        assert_eq!(s.samples[0].name, "sglang:prompt_tokens_total");
        assert_eq!(s.samples[0].value, 8_128_902.0);
        assert_eq!(s.types["sglang:prompt_tokens_total"], "counter");
        assert_eq!(s.samples[1].label("a"), Some("1,2=3"));
        assert_eq!(s.samples[1].label("b"), Some("say \"hi\"\n"));
        assert_eq!(s.samples[1].label("c"), Some("C:\\dir"));
        assert_eq!(s.samples[1].timestamp_ms, Some(1_395_066_363_000));
        assert!(s.samples[1].value.is_infinite());
        assert!(s.samples[2].labels.is_empty());
    }

    #[test]
    fn malformed_lines_are_errors_with_their_line() {
        let e = parse("ok 1\nbad{a=1} 2\n").unwrap_err();
        assert_eq!((e.line, &e.reason), (2, &LineError::UnquotedValue));
        assert_eq!(e.to_string(), "line 2: expected a quoted label value");
        assert!(parse("x{a=\"1\"} abc").is_err());
        assert!(parse("x{a=\"unterminated} 1").is_err());
        assert!(parse("9x 1").is_err());
    }

    proptest! {
        #[test]
        fn label_values_round_trip(value in "[ -~\\n]{0,40}", v in -1.0e12f64..1.0e12) {
            let escaped = value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
            let line = format!("m:x_total{{k=\"{escaped}\",z=\"1\"}} {v:e}");
            let s = parse(&line).unwrap();
            prop_assert_eq!(s.samples[0].label("k"), Some(value.as_str()));
            prop_assert_eq!(s.samples[0].value, v);
        }

        #[test]
        fn never_panics(text in "\\PC{0,200}") {
            let _ = parse(&text);
        }
    }
}
