//! Charts as server-rendered SVG: a daily stacked bar chart with a line overlaid, and a line
//! over time against a limit. Pure: data in, markup out; every chart has a title and a
//! description, and the page shows its figures in a table beside it.

use std::fmt::Write;

/// Colours of the series, in order (readable on white, distinct for common colour blindness).
const PALETTE: [&str; 8] = [
    "#2563eb", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6", "#0ea5e9", "#84cc16", "#f97316",
];

pub struct Stacked<'a> {
    pub title: &'a str,
    pub description: &'a str,
    /// X labels (e.g. days).
    pub labels: Vec<String>,
    /// Series name and one value per label.
    pub series: Vec<(String, Vec<f64>)>,
    /// An optional line on its own scale (e.g. gCO2e/kWh), one value per label.
    pub line: Option<(String, Vec<Option<f64>>)>,
    pub unit: &'a str,
}

pub fn colour(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A rounded-up axis maximum (1, 2 or 5 × 10^n).
fn nice(max: f64) -> f64 {
    if max <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(max.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * p >= max {
            return m * p;
        }
    }
    10.0 * p
}

pub fn stacked(c: &Stacked) -> String {
    let (w, h) = (760.0, 260.0);
    let (left, right, top, bottom) = (56.0, 56.0, 12.0, 28.0);
    let n = c.labels.len().max(1);
    let totals: Vec<f64> = (0..n)
        .map(|i| {
            c.series
                .iter()
                .map(|s| s.1.get(i).copied().unwrap_or(0.0))
                .sum()
        })
        .collect();
    let ymax = nice(totals.iter().copied().fold(0.0, f64::max));
    let plot_w = w - left - right;
    let plot_h = h - top - bottom;
    let slot = plot_w / n as f64;
    let bar = (slot * 0.7).max(1.0);
    let y = |v: f64| top + plot_h - v / ymax * plot_h;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg class="chart" viewBox="0 0 {w} {h}" role="img" aria-labelledby="chart-title chart-desc" xmlns="http://www.w3.org/2000/svg"><title id="chart-title">{}</title><desc id="chart-desc">{}</desc>"#,
        esc(c.title),
        esc(c.description)
    );
    y_axis(
        &mut svg,
        ymax,
        &y,
        (left, w - right),
        top + plot_h / 2.0,
        c.unit,
    );
    for i in 0..c.labels.len() {
        let x = left + slot * i as f64 + (slot - bar) / 2.0;
        let mut base = 0.0;
        for (si, (name, values)) in c.series.iter().enumerate() {
            let v = values.get(i).copied().unwrap_or(0.0);
            if v <= 0.0 {
                continue;
            }
            let (y0, y1) = (y(base), y(base + v));
            let _ = write!(
                svg,
                r#"<rect x="{x:.1}" y="{y1:.1}" width="{bar:.1}" height="{:.1}" fill="{}"><title>{} {}: {} {}</title></rect>"#,
                (y0 - y1).max(0.5),
                colour(si),
                esc(&c.labels[i]),
                esc(name),
                short(v),
                esc(c.unit)
            );
            base += v;
        }
        // Every few labels, so that they do not collide.
        let every = (n / 10).max(1);
        if i % every == 0 {
            let _ = write!(
                svg,
                r##"<text x="{:.1}" y="{}" font-size="11" text-anchor="middle" fill="#6b7280">{}</text>"##,
                x + bar / 2.0,
                h - 8.0,
                esc(&c.labels[i])
            );
        }
    }
    if let Some((name, values)) = &c.line {
        let lmax = nice(values.iter().flatten().copied().fold(0.0, f64::max));
        let ly = |v: f64| top + plot_h - v / lmax * plot_h;
        let points: Vec<String> = values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| {
                v.map(|v| format!("{:.1},{:.1}", left + slot * (i as f64 + 0.5), ly(v)))
            })
            .collect();
        if !points.is_empty() {
            let _ = write!(
                svg,
                r##"<polyline points="{}" fill="none" stroke="#111827" stroke-width="2" stroke-dasharray="5 3"><title>{}</title></polyline>"##,
                points.join(" "),
                esc(name)
            );
            for k in [0, 2, 4] {
                let v = lmax * f64::from(k) / 4.0;
                let _ = write!(
                    svg,
                    r##"<text x="{}" y="{:.1}" font-size="11" fill="#111827">{}</text>"##,
                    w - right + 6.0,
                    ly(v) + 4.0,
                    short(v)
                );
            }
        }
    }
    svg.push_str("</svg>");
    svg
}

/// A series over evenly spaced points (e.g. a day's minutes) against a limit.
pub struct Line<'a> {
    /// Unique on the page: the chart's title and description are referred to by id.
    pub id: &'a str,
    pub title: &'a str,
    pub description: &'a str,
    /// One value per point; `None` where nothing was measured.
    pub values: Vec<Option<f64>>,
    /// The furthest apart, in points, two measured points may be and still be joined: the
    /// meters' own resolution (a PDU polled every 5 minutes measures every fifth minute of
    /// the day). Further apart, they are a gap and the line breaks.
    pub join_within: usize,
    /// Labels at some points: (index, text).
    pub labels: Vec<(usize, String)>,
    /// A horizontal limit drawn dashed (e.g. the power envelope): its name and value.
    pub limit: Option<(String, f64)>,
    pub unit: &'a str,
}

pub fn line(c: &Line) -> String {
    let (w, h) = (760.0, 220.0);
    let (left, right, top, bottom) = (56.0, 16.0, 12.0, 28.0);
    let (plot_w, plot_h) = (w - left - right, h - top - bottom);
    let top_value = c
        .values
        .iter()
        .flatten()
        .copied()
        .chain(c.limit.as_ref().map(|l| l.1))
        .fold(0.0, f64::max);
    let ymax = nice(top_value);
    let n = c.values.len().max(2);
    let x = |i: usize| left + plot_w * i as f64 / (n - 1) as f64;
    let y = |v: f64| top + plot_h - v / ymax * plot_h;
    let id = esc(c.id);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg class="chart" viewBox="0 0 {w} {h}" role="img" aria-labelledby="{id}-title {id}-desc" xmlns="http://www.w3.org/2000/svg"><title id="{id}-title">{}</title><desc id="{id}-desc">{}</desc>"#,
        esc(c.title),
        esc(c.description)
    );
    y_axis(
        &mut svg,
        ymax,
        &y,
        (left, w - right),
        top + plot_h / 2.0,
        c.unit,
    );
    for (i, text) in &c.labels {
        let _ = write!(
            svg,
            r##"<text x="{:.1}" y="{}" font-size="11" text-anchor="middle" fill="#6b7280">{}</text>"##,
            x(*i),
            h - 8.0,
            esc(text)
        );
    }
    // One polyline per run of measured points no further apart than `join_within`; a run of
    // one point (its neighbours beyond a gap) is a dot, so that it still shows.
    let mut runs: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut last: Option<usize> = None;
    for (i, v) in c.values.iter().enumerate() {
        let Some(v) = v else { continue };
        let joined = last.is_some_and(|l| i - l <= c.join_within.max(1));
        match runs.last_mut() {
            Some(run) if joined => run.push((x(i), y(*v))),
            _ => runs.push(vec![(x(i), y(*v))]),
        }
        last = Some(i);
    }
    for run in &runs {
        if let [(px, py)] = run.as_slice() {
            let _ = write!(
                svg,
                r##"<circle cx="{px:.1}" cy="{py:.1}" r="1.5" fill="{}"/>"##,
                colour(0)
            );
            continue;
        }
        let points: Vec<String> = run
            .iter()
            .map(|(px, py)| format!("{px:.1},{py:.1}"))
            .collect();
        let _ = write!(
            svg,
            r##"<polyline points="{}" fill="none" stroke="{}" stroke-width="1.5"/>"##,
            points.join(" "),
            colour(0)
        );
    }
    if let Some((name, v)) = &c.limit {
        let yy = y(*v);
        let _ = write!(
            svg,
            r##"<line x1="{left}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ef4444" stroke-width="1.5" stroke-dasharray="6 4"><title>{}: {} {}</title></line>"##,
            w - right,
            esc(name),
            short(*v),
            esc(c.unit)
        );
    }
    svg.push_str("</svg>");
    svg
}

/// The value axis: five gridlines from 0 to `ymax` across `(x0, x1)` with their values, and
/// the unit written up the left edge at height `mid`.
fn y_axis(
    svg: &mut String,
    ymax: f64,
    y: &dyn Fn(f64) -> f64,
    (x0, x1): (f64, f64),
    mid: f64,
    unit: &str,
) {
    for k in 0..=4 {
        let v = ymax * f64::from(k) / 4.0;
        let yy = y(v);
        let _ = write!(
            svg,
            r##"<line x1="{x0}" x2="{x1}" y1="{yy:.1}" y2="{yy:.1}" stroke="#e5e7eb"/><text x="{}" y="{:.1}" font-size="11" text-anchor="end" fill="#6b7280">{}</text>"##,
            x0 - 6.0,
            yy + 4.0,
            short(v)
        );
    }
    let _ = write!(
        svg,
        r##"<text x="12" y="{mid}" font-size="11" fill="#6b7280" transform="rotate(-90 12 {mid})">{}</text>"##,
        esc(unit)
    );
}

fn short(v: f64) -> String {
    if v >= 1_000_000.0 {
        format!("{:.1}M", v / 1_000_000.0)
    } else if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_one_rect_per_positive_value_titles_escaped() {
        let svg = stacked(&Stacked {
            title: "Energy <by> model",
            description: "d",
            labels: vec!["1".into(), "2".into()],
            series: vec![("a&b".into(), vec![1.0, 0.0]), ("c".into(), vec![2.0, 3.0])],
            line: Some(("g/kWh".into(), vec![Some(300.0), None])),
            unit: "kWh",
        });
        assert_eq!(svg.matches("<rect").count(), 3);
        assert!(svg.contains("<title id=\"chart-title\">Energy &lt;by&gt; model</title>"));
        assert!(svg.contains("a&amp;b"));
        assert!(svg.contains("<polyline"));
        assert_eq!(nice(7.3), 10.0);
        // No data: an empty frame, not a panic.
        let empty = stacked(&Stacked {
            title: "t",
            description: "d",
            labels: vec![],
            series: vec![],
            line: None,
            unit: "kWh",
        });
        assert_eq!(empty.matches("<rect").count(), 0);
        assert_eq!(nice(0.0), 1.0);
    }

    /// A gap splits the line; the limit is drawn and named; ids are the chart's own.
    #[test]
    fn a_line_breaks_at_gaps_and_shows_its_limit() {
        let svg = line(&Line {
            id: "power-s1",
            title: "Site <1>",
            description: "d",
            values: vec![Some(1.0), Some(2.0), None, Some(3.0), Some(2.5)],
            join_within: 1,
            labels: vec![(0, "00:00".into())],
            limit: Some(("Envelope".into(), 4.0)),
            unit: "kW",
        });
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("<title>Envelope: 4.0 kW</title>"));
        assert!(svg.contains(r#"<title id="power-s1-title">Site &lt;1&gt;</title>"#));
        // Nothing measured: the frame and the limit, no line.
        let empty = line(&Line {
            id: "e",
            title: "t",
            description: "d",
            values: vec![None; 3],
            join_within: 1,
            labels: vec![],
            limit: Some(("Envelope".into(), 4.0)),
            unit: "kW",
        });
        assert_eq!(empty.matches("<polyline").count(), 0);
    }

    /// Readings every 5 minutes, joined within a 10-minute gap limit, are one line; a
    /// 15-minute hole in them breaks it, and a reading alone between holes is a dot.
    #[test]
    fn a_line_joins_points_at_the_meters_resolution() {
        let every_fifth = |n: usize| -> Vec<Option<f64>> {
            (0..n).map(|i| (i % 5 == 0).then_some(2.0)).collect()
        };
        let chart = |values: Vec<Option<f64>>, join_within: usize| {
            line(&Line {
                id: "p",
                title: "t",
                description: "d",
                values,
                join_within,
                labels: vec![],
                limit: None,
                unit: "kW",
            })
        };
        let svg = chart(every_fifth(60), 10);
        assert_eq!(svg.matches("<polyline").count(), 1, "{svg}");
        // 12 readings in the hour, every one on the line.
        let points = svg
            .split("points=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        assert_eq!(points.split(' ').count(), 12);
        // Joined only within the limit: at one minute, nothing of it is a line.
        assert_eq!(chart(every_fifth(60), 1).matches("<polyline").count(), 0);
        assert_eq!(chart(every_fifth(60), 1).matches("<circle").count(), 12);
        let mut holed = every_fifth(60);
        for v in &mut holed[16..30] {
            *v = None;
        }
        // 0..=15 (4 readings), a hole of 15 minutes, 30..60 (6 readings).
        let svg = chart(holed.clone(), 10);
        assert_eq!(svg.matches("<polyline").count(), 2, "{svg}");
        holed[40] = None;
        holed[35] = None;
        holed[45] = None;
        // 30 alone between 15 and 50: a dot.
        let svg = chart(holed, 10);
        assert_eq!(svg.matches("<circle").count(), 1, "{svg}");
    }
}
