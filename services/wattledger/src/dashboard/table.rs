//! Sortable tables without script: a header links to the same page sorted by its column
//! (`?sort=energy&dir=asc`), keeping the page's other query parameters; the server sorts.

use rust_decimal::Decimal;
use std::cmp::Ordering;

/// A cell's value for sorting.
#[derive(Debug, Clone, PartialEq)]
pub enum Key {
    Text(String),
    Num(Decimal),
}

impl Key {
    fn cmp(&self, other: &Key) -> Ordering {
        match (self, other) {
            (Key::Num(a), Key::Num(b)) => a.cmp(b),
            (Key::Text(a), Key::Text(b)) => a.to_lowercase().cmp(&b.to_lowercase()),
            (Key::Num(_), Key::Text(_)) => Ordering::Less,
            (Key::Text(_), Key::Num(_)) => Ordering::Greater,
        }
    }
}

pub struct Column {
    pub key: &'static str,
    pub label: &'static str,
    pub numeric: bool,
}

impl Column {
    /// A column of words: sorts A to Z first.
    pub const fn text(key: &'static str, label: &'static str) -> Column {
        Column {
            key,
            label,
            numeric: false,
        }
    }

    /// A column of figures: sorts biggest first.
    pub const fn num(key: &'static str, label: &'static str) -> Column {
        Column {
            key,
            label,
            numeric: true,
        }
    }
}

/// A header cell as the template shows it.
pub struct Header {
    pub label: String,
    pub href: String,
    /// `ascending`, `descending` or `none` (ARIA).
    pub sort: &'static str,
    pub numeric: bool,
}

/// How a table is sorted: the column key and the direction, from the query.
pub struct Sort {
    pub param: &'static str,
    pub column: usize,
    pub descending: bool,
}

impl Sort {
    /// The column named by `value` (`energy`, or `energy.asc`), else `default` descending.
    pub fn parse(
        param: &'static str,
        value: Option<&str>,
        columns: &[Column],
        default: usize,
    ) -> Sort {
        let (name, dir) = value
            .map(|v| v.split_once('.').unwrap_or((v, "")))
            .unwrap_or(("", ""));
        match columns.iter().position(|c| c.key == name) {
            Some(column) => Sort {
                param,
                column,
                descending: dir != "asc",
            },
            None => Sort {
                param,
                column: default,
                descending: columns[default].numeric,
            },
        }
    }

    pub fn apply<T>(&self, rows: &mut [(Vec<Key>, T)]) {
        rows.sort_by(|a, b| {
            let o = a.0[self.column].cmp(&b.0[self.column]);
            if self.descending {
                o.reverse()
            } else {
                o
            }
        });
    }

    /// Header links: a column sorts by itself, numbers biggest first; clicking the current
    /// column flips it. `others` are the page's other query parameters, already encoded.
    pub fn headers(&self, columns: &[Column], others: &str) -> Vec<Header> {
        columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let current = i == self.column;
                let descending = if current { !self.descending } else { c.numeric };
                let value = format!("{}.{}", c.key, if descending { "desc" } else { "asc" });
                let sep = if others.is_empty() { "" } else { "&" };
                Header {
                    label: c.label.to_owned(),
                    href: format!("?{others}{sep}{}={value}", self.param),
                    sort: match (current, self.descending) {
                        (false, _) => "none",
                        (true, true) => "descending",
                        (true, false) => "ascending",
                    },
                    numeric: c.numeric,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COLS: [Column; 2] = [
        Column::text("name", "Name"),
        Column::num("energy", "Energy"),
    ];

    #[test]
    fn sorts_by_the_named_column_and_links_flip_it() {
        let mut rows = vec![
            (vec![Key::Text("b".into()), Key::Num(Decimal::from(1))], "b"),
            (vec![Key::Text("A".into()), Key::Num(Decimal::from(3))], "a"),
        ];
        let s = Sort::parse("sort", None, &COLS, 1);
        s.apply(&mut rows);
        assert_eq!(rows[0].1, "a", "default: energy, biggest first");
        let s = Sort::parse("sort", Some("name.asc"), &COLS, 1);
        s.apply(&mut rows);
        assert_eq!(rows[0].1, "a", "names case-insensitively");
        let h = s.headers(&COLS, "from=2026-11-01");
        assert_eq!(h[0].href, "?from=2026-11-01&sort=name.desc");
        assert_eq!((h[0].sort, h[1].sort), ("ascending", "none"));
        assert_eq!(h[1].href, "?from=2026-11-01&sort=energy.desc");
        let s = Sort::parse("sort", Some("bogus"), &COLS, 1);
        assert!(s.descending && s.column == 1);
    }
}
