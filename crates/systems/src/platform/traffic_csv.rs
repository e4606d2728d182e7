//! Traffic replayed from a CSV file. The format (documented in lesson 10):
//!
//! ```text
//! hour,rps
//! 0,8.5
//! 0.25,9.1
//! ```
//!
//! A header line `hour,rps`, then one row per point: simulated hours from the start (increasing,
//! the first 0) and offered requests per second (≥ 0). The rate is linear between points and
//! holds the last value after the last one. The points are copied into the scenario, so its JSON
//! replays the run without the CSV file.

use serde::{Deserialize, Serialize};

use gpulab_core::error::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RatePoint {
    pub hour: f64,
    pub rps: f64,
}

/// Most rows a replay may have.
pub const MAX_ROWS: usize = 200_000;
/// The largest traffic CSV file read (`MAX_ROWS` rows of two numbers fit easily).
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// The points of a CSV in the format above; an error names the line and the field.
pub fn parse(text: impl AsRef<[u8]>) -> Result<Vec<RatePoint>> {
    let text = text.as_ref();
    let bad = |line: u64, msg: String| Error::InvalidConfig(format!("traffic CSV line {line}: {msg}"));
    let mut r = csv::ReaderBuilder::new().has_headers(true).trim(csv::Trim::All).from_reader(text);
    let headers = r.headers().map_err(|e| bad(1, format!("cannot read the header: {e}")))?.clone();
    if headers.iter().collect::<Vec<_>>() != ["hour", "rps"] {
        return Err(bad(1, format!("the header must be `hour,rps`, found `{}`", headers.iter().collect::<Vec<_>>().join(","))));
    }
    let mut points: Vec<RatePoint> = Vec::new();
    for rec in r.records() {
        let rec = rec.map_err(|e| bad(e.position().map_or(0, |p| p.line()), format!("{e}")))?;
        let line = rec.position().map_or(0, |p| p.line());
        if points.len() >= MAX_ROWS {
            return Err(bad(line, format!("more than {MAX_ROWS} rows")));
        }
        let field = |i: usize, name: &str| -> Result<f64> {
            let raw = rec.get(i).ok_or_else(|| bad(line, format!("field {name} is missing")))?;
            let v: f64 = raw.parse().map_err(|_| bad(line, format!("field {name}: {raw:?} is not a number")))?;
            if v.is_finite() { Ok(v) } else { Err(bad(line, format!("field {name}: {raw:?} is not finite"))) }
        };
        let (hour, rps) = (field(0, "hour")?, field(1, "rps")?);
        if rec.len() > 2 {
            return Err(bad(line, format!("{} fields; expected 2 (hour,rps)", rec.len())));
        }
        match points.last() {
            None if hour != 0.0 => return Err(bad(line, format!("field hour: the first row must be at hour 0, not {hour}"))),
            Some(p) if hour <= p.hour => return Err(bad(line, format!("field hour: {hour} does not increase (previous row {})", p.hour))),
            _ => {}
        }
        if !(0.0..=10_000.0).contains(&rps) {
            return Err(bad(line, format!("field rps: {rps} is outside 0..=10000")));
        }
        points.push(RatePoint { hour, rps });
    }
    if points.is_empty() {
        return Err(bad(1, "no rows after the header".into()));
    }
    Ok(points)
}

/// The replayed rate at `h` hours: linear between points, the last value after the last.
pub fn rate_at(points: &[RatePoint], h: f64) -> f64 {
    let i = points.partition_point(|p| p.hour <= h);
    match (i.checked_sub(1).and_then(|j| points.get(j)), points.get(i)) {
        (Some(a), Some(b)) => a.rps + (b.rps - a.rps) * (h - a.hour) / (b.hour - a.hour),
        (Some(a), None) => a.rps,
        (None, Some(b)) => b.rps,
        (None, None) => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_interpolates() {
        let p = parse("hour,rps\n0,10\n1, 20\n").unwrap();
        assert_eq!(p, vec![RatePoint { hour: 0.0, rps: 10.0 }, RatePoint { hour: 1.0, rps: 20.0 }]);
        assert_eq!(rate_at(&p, 0.5), 15.0);
        assert_eq!(rate_at(&p, 5.0), 20.0);
        assert_eq!(rate_at(&p, 0.0), 10.0);
    }

    #[test]
    fn malformed_rows_name_the_line_and_field() {
        for (text, want) in [
            ("hour,rate\n0,1\n", "line 1: the header must be `hour,rps`"),
            ("hour,rps\n0,1\n1,abc\n", "line 3: field rps: \"abc\" is not a number"),
            ("hour,rps\n0,1\n0.5\n", "line 3"),
            ("hour,rps\n1,1\n", "line 2: field hour: the first row must be at hour 0"),
            ("hour,rps\n0,1\n2,1\n1,1\n", "line 4: field hour: 1 does not increase"),
            ("hour,rps\n0,-5\n", "line 2: field rps: -5 is outside"),
            ("hour,rps\n0,1,2\n", "line 2"),
            ("hour,rps\n", "no rows"),
            ("hour,rps\n0,NaN\n", "line 2: field rps"),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }
}
