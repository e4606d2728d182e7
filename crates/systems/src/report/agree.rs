//! Does a report's prose agree with its own numbers? Every number its verdict prints must equal,
//! at the precision printed, a number the report holds (a figure, a table cell, a setting, a
//! point of a short chart series, a marker) or one derived from two of its figures and table
//! cells by a named formula (ratio, difference, percent change), in the same or a common unit
//! scale (a fraction printed as a percentage, seconds as milliseconds, bytes as MiB). A sentence
//! that invents a number, or rounds one figure two ways ("SLO 100.0 %" beside "99.68 %"), fails.
//! The test that runs every exercise (`tests/it/agreement.rs`) calls `disagreements`.

use super::{Cell, Report};

/// A number as printed in prose: its value and how many decimals it was printed with.
#[derive(Clone, Debug, PartialEq)]
pub struct Printed {
    pub value: f64,
    /// Decimals printed; negative for a suffix that rounds to tens or more ("12.5k": −2).
    pub decimals: i32,
    /// The text as printed, for the message.
    pub text: String,
}

/// Numbers a sentence prints: digits not glued to a letter ("fp16", "x86" and "libnvidia-ml.so.1"
/// are names), with "," as a thousands separator only before exactly three digits ("2,080"; "128,64"
/// is a list), a leading "−" or "-" as a sign, and an exponent ("3.8e-7").
pub fn numbers_in(text: &str) -> Vec<Printed> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let glued = |c: Option<&char>| c.is_some_and(|c| c.is_alphabetic() || *c == '_' || *c == '.' || *c == '/');
    while i < chars.len() {
        if !chars[i].is_ascii_digit() || (i > 0 && (chars[i - 1].is_ascii_digit() || glued(chars.get(i - 1)))) {
            i += 1;
            continue;
        }
        let start = i;
        let mut s = String::new();
        while i < chars.len() {
            let c = chars[i];
            if c.is_ascii_digit() {
                s.push(c);
                i += 1;
            } else if c == ','
                && chars.get(i + 1..i + 4).is_some_and(|d| d.iter().all(char::is_ascii_digit))
                && !chars.get(i + 4).is_some_and(char::is_ascii_digit)
                && !s.contains('.')
            {
                i += 1;
            } else if c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit) && !s.contains(['.', 'e']) {
                s.push('.');
                i += 1;
            } else if c == 'e'
                && !s.contains('e')
                && (chars.get(i + 1).is_some_and(char::is_ascii_digit)
                    || (matches!(chars.get(i + 1), Some('-' | '+')) && chars.get(i + 2).is_some_and(char::is_ascii_digit)))
            {
                s.push('e');
                if matches!(chars[i + 1], '-' | '+') {
                    s.push(chars[i + 1]);
                    i += 1;
                }
                i += 1;
            } else {
                break;
            }
        }
        // A number glued to letters after it ("8B", "3rd") is a name, unless it is a unit
        // written without a space ("32%", "1.5x", "16ms", "3s").
        let after: String = chars[i..].iter().take_while(|c| c.is_alphabetic()).collect();
        let unit_ok = after.is_empty()
            || matches!(
                after.as_str(),
                "x" | "ms" | "s" | "µs" | "us" | "ns" | "k" | "M" | "G" | "MiB" | "KiB" | "GiB" | "GB" | "MB" | "KB"
            );
        let negative = start > 0 && matches!(chars[start - 1], '-' | '−') && !(start > 1 && chars[start - 2].is_alphanumeric());
        if unit_ok && let Ok(v) = s.parse::<f64>() {
            let scale: f64 = match after.as_str() {
                "k" => 1e3,
                "M" => 1e6,
                "G" => 1e9,
                _ => 1.0,
            };
            // "3.8e-7" is printed to the 8th decimal; "12.5k" to the hundreds.
            let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
            let decimals = m.split_once('.').map_or(0, |(_, f)| f.len()) as i32 - e.parse::<i32>().unwrap_or(0) - scale.log10() as i32;
            let shown: String = chars[if negative { start - 1 } else { start }..i].iter().collect();
            let value = if negative { -v } else { v } * scale;
            out.push(Printed { value, decimals, text: format!("{shown}{after}") });
        }
    }
    out
}

/// Unit changes a sentence may make of a value: none, a fraction as a percentage, seconds as
/// ms/µs/ns, bytes as KiB/MiB/GiB, minutes and hours.
const SCALES: [f64; 15] =
    [1.0, 100.0, 0.01, 1e3, 1e-3, 1e6, 1e-6, 1e9, 1e-9, 1.0 / 1024.0, 1.0 / 1048576.0, 1.0 / 1073741824.0, 1.0 / 60.0, 1.0 / 3600.0, 60.0];

/// The numbers a report holds: (values any number may match, values derivations start from).
fn held(r: &Report) -> (Vec<f64>, Vec<f64>) {
    let mut base: Vec<f64> = r.figures.iter().map(|f| f.value).collect();
    for t in &r.tables {
        for row in &t.rows {
            for c in row {
                match c {
                    Cell::Num(v) => base.push(*v),
                    Cell::Text(s) => base.extend(numbers_in(s).into_iter().map(|p| p.value)),
                    Cell::Empty => {}
                }
            }
        }
    }
    // A profiled run's timeline: each stage's total (the sum of its spans, per lane) and the
    // lane's wall time, which the diagnosis prints.
    for t in &r.timelines {
        let mut sums: std::collections::BTreeMap<(&str, &str), f64> = Default::default();
        let mut walls: std::collections::BTreeMap<&str, (f64, f64)> = Default::default();
        for s in &t.spans {
            *sums.entry((s.lane.as_str(), s.name.as_str())).or_default() += s.end_s - s.start_s;
            let w = walls.entry(s.lane.as_str()).or_insert((f64::INFINITY, f64::NEG_INFINITY));
            *w = (w.0.min(s.start_s), w.1.max(s.end_s));
        }
        base.extend(sums.values());
        base.extend(walls.values().map(|(a, b)| b - a));
    }
    let mut all = base.clone();
    for v in r.config.values() {
        all.extend(numbers_in(v).into_iter().map(|p| p.value));
    }
    for c in &r.charts {
        all.extend(c.markers.iter().map(|m| m.0));
        all.extend(c.markers.iter().flat_map(|m| numbers_in(&m.1)).map(|p| p.value));
        // Short series only: a number matching one of thousands of points says nothing.
        for s in c.series.iter().filter(|s| s.points.len() <= 64) {
            all.extend(s.points.iter().flat_map(|p| [p[0], p[1]]));
        }
    }
    base.retain(|v| v.is_finite());
    all.retain(|v| v.is_finite());
    base.sort_by(f64::total_cmp);
    base.dedup();
    all.sort_by(f64::total_cmp);
    all.dedup();
    (all, base)
}

/// Whether `v`, in one of the unit scales, prints as `p`.
fn prints_as(v: f64, p: &Printed) -> bool {
    let half = 0.5 * 10f64.powi(-p.decimals);
    SCALES.iter().any(|s| {
        let x = v * s;
        (x - p.value).abs() <= half * (1.0 + 1e-9) + 1e-12 * p.value.abs()
    })
}

/// How `p` is found in the report, or None.
fn explain(p: &Printed, all: &[f64], base: &[f64]) -> Option<String> {
    if let Some(v) = all.iter().find(|v| prints_as(**v, p) || prints_as(-**v, p)) {
        return Some(format!("value {v}"));
    }
    for (i, a) in base.iter().enumerate() {
        // A value against itself gives 1 and 0, which would explain any "100 %" or "0".
        for b in base.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, b)| b) {
            if prints_as(a - b, p) {
                return Some(format!("difference {a} − {b}"));
            }
            if *b != 0.0 {
                if prints_as(a / b, p) {
                    return Some(format!("ratio {a} / {b}"));
                }
                if prints_as(a / b - 1.0, p) {
                    return Some(format!("change {a} / {b} − 1"));
                }
            }
        }
    }
    None
}

/// Every number the verdict prints that the report's own numbers do not give, with where it is.
pub fn disagreements(r: &Report) -> Vec<String> {
    let (all, base) = held(r);
    let mut bad = Vec::new();
    let places = std::iter::once(("summary", &r.verdict.summary)).chain(r.verdict.evidence.iter().map(|e| ("evidence", e)));
    for (place, text) in places {
        for p in numbers_in(text) {
            if explain(&p, &all, &base).is_none() {
                bad.push(format!("{place}: {:?} is in no table, figure, setting or chart of the report — in {text:?}", p.text));
            }
        }
    }
    bad
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Column, Figure, Provenance, Table, Verdict};

    fn nums(s: &str) -> Vec<(f64, i32)> {
        numbers_in(s).into_iter().map(|p| (p.value, p.decimals)).collect()
    }

    #[test]
    fn numbers_are_read_as_printed() {
        assert_eq!(nums("waiting for data 79.4 ms (32 %)"), [(79.4, 1), (32.0, 0)]);
        assert_eq!(nums("fp16 and int8 on x86, libnvidia-ml.so.1"), []);
        assert_eq!(nums("trains 2,080 wide; layers 128,64"), [(2080.0, 0), (128.0, 0), (64.0, 0)]);
        assert_eq!(nums("1.67× faster, −3% slower, 3.8e-7 USD"), [(1.67, 2), (-3.0, 0), (3.8e-7, 8)]);
        assert_eq!(nums("12.5k samples/s; 32%"), [(12500.0, -2), (32.0, 0)]);
        assert_eq!(nums("batch-32 step 3rd"), [(32.0, 0)]);
    }

    fn report(summary: &str) -> Report {
        Report {
            figures: vec![Figure { label: "SLO".into(), value: 99.68, unit: "%".into(), provenance: Provenance::Measured }],
            tables: vec![Table {
                title: "t".into(),
                columns: vec![Column::text("run"), Column::num("time", "s", 3, Provenance::Measured)],
                rows: vec![vec!["layer 2".into(), 0.0795.into()], vec!["b".into(), 0.1524.into()]],
            }],
            verdict: Verdict { summary: summary.into(), evidence: vec![] },
            ..Default::default()
        }
    }

    #[test]
    fn a_number_the_report_holds_or_derives_agrees() {
        for ok in [
            "SLO met: 99.68 %.",
            "SLO 99.7 %.",
            "waiting 79.5 ms against 152.4 ms: 1.92× (52 %); layer 2",
            "the second took 92 % longer",
            "a difference of 72.9 ms",
        ] {
            assert_eq!(disagreements(&report(ok)), Vec::<String>::new(), "{ok}");
        }
    }

    #[test]
    fn a_number_rounded_another_way_or_invented_does_not() {
        assert_eq!(disagreements(&report("SLO 100.0 % (target 99.68 %)")).len(), 1);
        assert_eq!(disagreements(&report("20.0 steps lost")).len(), 1);
    }
}
