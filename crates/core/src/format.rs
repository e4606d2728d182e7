//! One way to print a number, shared by the lab, the CLI and every report writer: counts as
//! integers ("12", "1 worker"), money with significant digits ("$0.38 per million
//! predictions", never "$0.000000377" or "0.0000 USD"), measured quantities (durations, rates,
//! shares) with four significant digits and no trailing zeros.

/// Significant digits of a measured figure: enough to tell 99.68 % from 100 %, few enough to read.
pub const DIGITS: u32 = 4;

/// Strips the zeros (and a bare point) after a decimal point: "2.50" → "2.5", "3.0" → "3".
fn trim(s: String) -> String {
    if s.contains('.') && !s.contains('e') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s }
}

/// Decimals that show `v` with `digits` significant digits (0 for |v| ≥ 10^(digits−1)).
fn decimals_for(v: f64, digits: u32) -> usize {
    let mag = v.abs().log10().floor() as i32;
    (digits as i32 - 1 - mag).max(0) as usize
}

/// `v` with at most `digits` significant digits, trailing zeros dropped; whole numbers at or
/// above 10^digits keep all their digits ("12346", not "1.235e4"). Below 1e-6 it uses an
/// exponent ("3.8e-9"), where a row of zeros would hide the digits.
pub fn sig(v: f64, digits: u32) -> String {
    let digits = digits.max(1);
    if !v.is_finite() {
        return format!("{v}");
    }
    if v == 0.0 {
        return "0".into();
    }
    if v.abs() < 1e-6 {
        return format!("{:.*e}", digits as usize - 1, v).replace(".0e", "e");
    }
    let s = trim(format!("{v:.*}", decimals_for(v, digits)));
    // -0.0004 at 3 decimals rounds to "-0" — show it as "0".
    if s == "-0" { "0".into() } else { s }
}

/// A figure as printed anywhere: whole numbers as integers ("12"), others with `DIGITS`
/// significant digits ("9.9", "152.4", "0.3772", "99.68").
pub fn number(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e15 { format!("{v:.0}") } else { sig(v, DIGITS) }
}

/// A count as an integer: "12".
pub fn count(n: u64) -> String {
    n.to_string()
}

/// A count with its noun: "1 worker", "4 workers" (`word` singular, an `s` added otherwise).
pub fn plural(n: u64, word: &str) -> String {
    if n == 1 { format!("1 {word}") } else { format!("{n} {word}s") }
}

/// US dollars: two decimals from $1 up ("$12.40", "$1234.50"), two significant digits below
/// ("$0.38", "$0.0038"), "$0" for nothing.
pub fn money(usd: f64) -> String {
    if !usd.is_finite() {
        return format!("${usd}");
    }
    let sign = if usd < 0.0 { "-" } else { "" };
    let a = usd.abs();
    if a == 0.0 {
        "$0".into()
    } else if a >= 1.0 {
        format!("{sign}${a:.2}")
    } else {
        format!("{sign}${}", sig(a, 2))
    }
}

/// The scale money per item is printed at: the first of per item, per thousand, per million,
/// per billion at which the smallest non-zero value of `usd_each` reaches a cent ("$0.38 per
/// million" for $3.8e-7 each). Returns the factor and its word ("", "thousand ", …).
pub fn money_scale(usd_each: &[f64]) -> (f64, &'static str) {
    const SCALES: [(f64, &str); 4] = [(1.0, ""), (1e3, "thousand "), (1e6, "million "), (1e9, "billion ")];
    let least = usd_each.iter().map(|v| v.abs()).filter(|v| v.is_finite() && *v > 0.0).fold(f64::INFINITY, f64::min);
    if !least.is_finite() {
        return SCALES[0];
    }
    SCALES.iter().copied().find(|(s, _)| least * s >= 0.01).unwrap_or(SCALES[3])
}

/// What a table column of prices per item is headed and scaled by: ("per million epochs",
/// 1e6) where the smallest non-zero price is a fraction of a cent (`money_scale`). `item` is
/// singular.
pub fn money_per_unit(usd_each: &[f64], item: &str) -> (String, f64) {
    let (scale, word) = money_scale(usd_each);
    (if scale == 1.0 { format!("per {item}") } else { format!("per {word}{item}s") }, scale)
}

/// Prices per item compared side by side, at one scale (`money_scale`): "$27.20 per million
/// epochs" beside "$9.10 per million epochs". `item` is singular.
pub fn money_per_all(usd_each: &[f64], item: &str) -> Vec<String> {
    let (per, scale) = money_per_unit(usd_each, item);
    // One number of decimals for all: two significant digits of the smallest, cents at least.
    let least = usd_each.iter().map(|v| (v * scale).abs()).filter(|v| v.is_finite() && *v > 0.0).fold(f64::INFINITY, f64::min);
    let d = if least.is_finite() { decimals_for(least, 2).max(2) } else { 2 };
    usd_each
        .iter()
        .map(|v| {
            let x = v * scale;
            let m = if x == 0.0 || !x.is_finite() || usd_each.len() == 1 {
                money(x)
            } else {
                format!("{}${:.d$}", if x < 0.0 { "-" } else { "" }, x.abs())
            };
            format!("{m} {per}")
        })
        .collect()
}

/// A price per item at a scale that reads: "$0.38 per million predictions" for $3.8e-7 each,
/// "$0.012 per prediction" where one item already costs a cent or so. `item` is singular.
pub fn money_per(usd_each: f64, item: &str) -> String {
    money_per_all(&[usd_each], item).remove(0)
}

/// A duration in the unit that reads: "1 h 12 min", "3 min 12 s", "9.9 s", "152.4 ms", "3.2 µs".
pub fn duration(secs: f64) -> String {
    if !secs.is_finite() {
        return format!("{secs} s");
    }
    let a = secs.abs();
    if a >= 3600.0 {
        let m = (secs / 60.0).round() as i64;
        format!("{} h {} min", m / 60, m % 60)
    } else if a >= 60.0 {
        let s = secs.round() as i64;
        format!("{} min {} s", s / 60, s % 60)
    } else if a >= 1.0 || a == 0.0 {
        format!("{} s", sig(secs, DIGITS - 1))
    } else if a >= 1e-3 {
        format!("{} ms", sig(secs * 1e3, DIGITS))
    } else if a >= 1e-6 {
        format!("{} µs", sig(secs * 1e6, DIGITS))
    } else {
        format!("{} ns", sig(secs * 1e9, DIGITS))
    }
}

/// The unit durations shown side by side (a table's column, a sentence comparing two) are
/// printed in, and its factor from seconds: the one in which the largest is under 1000 ("µs",
/// 1e6 for 0.77 µs beside 11.8 µs), seconds from one second up.
pub fn time_unit(secs: &[f64]) -> (&'static str, f64) {
    let most = secs.iter().map(|v| v.abs()).filter(|v| v.is_finite() && *v > 0.0).fold(0.0, f64::max);
    if most >= 1.0 {
        ("s", 1.0)
    } else if most >= 1e-3 {
        ("ms", 1e3)
    } else if most >= 1e-6 {
        ("µs", 1e6)
    } else {
        ("ns", 1e9)
    }
}

/// Decimals a column of values needs for the smallest non-zero one to show `DIGITS`
/// significant digits (0 where it is 1000 or more; at most 6).
pub fn decimals_of(values: &[f64]) -> usize {
    let least = values.iter().map(|v| v.abs()).filter(|v| v.is_finite() && *v > 0.0).fold(f64::INFINITY, f64::min);
    if least.is_finite() { decimals_for(least, DIGITS).min(6) } else { 0 }
}

/// `secs` in the unit and decimals a table of `all` shows them with (`time_unit`,
/// `decimals_of`), so a sentence reads its figures as the table beside it does.
pub fn durations_as(secs: &[f64], all: &[f64]) -> Vec<String> {
    let (unit, f) = time_unit(all);
    let d = decimals_of(&all.iter().map(|s| s * f).collect::<Vec<_>>());
    secs.iter().map(|s| format!("{:.*} {unit}", d, s * f)).collect()
}

/// Durations compared side by side: one unit and one number of decimals, so both figures read
/// alike: "6.002 µs" and "4.870 µs", never "6.002 µs" beside "4.87 µs" or "0.9 ms".
pub fn durations(secs: &[f64]) -> Vec<String> {
    durations_as(secs, secs)
}

/// "value unit" for a figure: money for "USD"/"$", money per item for "USD per item"
/// (`money_per`: "$0.38 per million predictions"), "%" without a space before it is spelled as
/// the reports spell it ("32 %"), no unit bare.
pub fn with_unit(v: f64, unit: &str) -> String {
    if let Some(item) = unit.trim().strip_prefix("USD per ") {
        return money_per(v, item);
    }
    match unit.trim() {
        "USD" | "$" => money(v),
        "" => number(v),
        u => format!("{} {u}", number(v)),
    }
}

/// `v` at a column's fixed `decimals`, unless that would leave fewer than two significant
/// digits of a non-zero value ("0.000", "0.0004"; below 1 at no decimals): then two
/// significant digits ("0.00038").
pub fn fixed(v: f64, decimals: usize) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    let shows_two_digits = if decimals == 0 { 1.0 } else { 10f64.powi(1 - decimals as i32) };
    if v != 0.0 && v.abs() < shows_two_digits {
        return sig(v, 2);
    }
    format!("{v:.decimals$}")
}

/// A chart tick or point label: short, with k/M/G for large numbers ("1.2k", "3.5M").
pub fn compact(v: f64) -> String {
    let a = v.abs();
    if !v.is_finite() {
        format!("{v}")
    } else if a >= 1e9 {
        format!("{}G", sig(v / 1e9, 3))
    } else if a >= 1e6 {
        format!("{}M", sig(v / 1e6, 3))
    } else if a >= 1e4 {
        format!("{}k", sig(v / 1e3, 3))
    } else if a >= 1000.0 {
        format!("{v:.0}")
    } else {
        sig(v, 3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_integers() {
        assert_eq!(number(12.0), "12");
        assert_eq!(number(-3.0), "-3");
        assert_eq!(number(2080.0), "2080");
        assert_eq!(count(12), "12");
        assert_eq!(plural(1, "worker"), "1 worker");
        assert_eq!(plural(4, "worker"), "4 workers");
        assert_eq!(plural(0, "step"), "0 steps");
    }

    #[test]
    fn measured_figures_have_four_significant_digits() {
        assert_eq!(number(99.6812), "99.68");
        assert_eq!(number(152.43), "152.4");
        assert_eq!(number(9.9), "9.9");
        assert_eq!(number(0.377_21), "0.3772");
        assert_eq!(number(12345.6), "12346");
        assert_eq!(number(0.000_123_456), "0.0001235");
        assert_eq!(number(-0.5), "-0.5");
        assert_eq!(number(f64::NAN), "NaN");
        assert_eq!(number(f64::INFINITY), "inf");
        // Near 100 % four digits keep a missed target from reading as met.
        assert_eq!(number(99.96), "99.96");
        assert_eq!(sig(3.77e-9, 2), "3.8e-9");
        assert_eq!(sig(-0.00004, 1), "-0.00004");
    }

    #[test]
    fn money_reads_as_money() {
        assert_eq!(money(0.3772), "$0.38");
        assert_eq!(money(12.4), "$12.40");
        assert_eq!(money(0.0), "$0");
        assert_eq!(money(0.003_77), "$0.0038");
        assert_eq!(money(-2.0), "-$2.00");
        assert_eq!(money_per(3.77e-7, "prediction"), "$0.38 per million predictions");
        assert_eq!(money_per(2.5e-5, "prediction"), "$0.025 per thousand predictions");
        assert_eq!(money_per(0.05, "epoch"), "$0.05 per epoch");
        assert_eq!(money_per(0.0, "epoch"), "$0 per epoch");
        assert_eq!(with_unit(0.000_000_377, "USD"), "$3.8e-7");
        assert_eq!(with_unit(1e-5, "USD"), "$0.00001");
        assert_eq!(with_unit(3.05e-9, "USD per prediction"), "$3.05 per billion predictions");
    }

    #[test]
    fn compared_figures_share_a_unit_and_digits() {
        assert_eq!(durations(&[6.002e-6, 4.87e-6]), ["6.002 µs", "4.870 µs"]);
        assert_eq!(durations(&[9.0e-4, 6.002e-6]), ["900.000 µs", "6.002 µs"], "the unit the largest reads under 1000 in");
        assert_eq!(durations_as(&[4.654e-6], &[7.735e-7, 1.18e-5]), ["4.6540 µs"], "in the unit of the table beside it");
        assert_eq!(durations(&[0.15243, 0.00994]), ["152.430 ms", "9.940 ms"]);
        assert_eq!(durations(&[2.5, 1.25]), ["2.500 s", "1.250 s"]);
        assert_eq!(money_per_all(&[2.72e-5, 9.1e-6], "epoch"), ["$27.20 per million epochs", "$9.10 per million epochs"]);
        assert_eq!(money_per_all(&[0.5, 0.003], "epoch"), ["$500.00 per thousand epochs", "$3.00 per thousand epochs"]);
        assert_eq!(money_per_all(&[1.549e-9, 3.83e-10], "prediction"), ["$1.55 per billion predictions", "$0.38 per billion predictions"]);
        assert_eq!(money_per_all(&[1.5e-3, 2.72e-5], "epoch"), ["$1.500 per thousand epochs", "$0.027 per thousand epochs"]);
        assert_eq!(money_scale(&[3.05e-9]), (1e9, "billion "));
        assert_eq!(money_scale(&[0.0, f64::NAN]), (1.0, ""));
    }

    #[test]
    fn durations_pick_their_unit() {
        assert_eq!(duration(43.04), "43 s");
        assert_eq!(duration(9.94), "9.94 s");
        assert_eq!(duration(0.15243), "152.4 ms");
        assert_eq!(duration(3.2e-6), "3.2 µs");
        assert_eq!(duration(192.0), "3 min 12 s");
        assert_eq!(duration(4320.0), "1 h 12 min");
        assert_eq!(duration(0.0), "0 s");
    }

    #[test]
    fn fixed_columns_never_hide_a_small_value() {
        assert_eq!(fixed(1.23456, 3), "1.235");
        assert_eq!(fixed(0.0, 3), "0.000");
        assert_eq!(fixed(0.000_377, 4), "0.00038");
        assert_eq!(fixed(0.003_12, 3), "0.0031");
        assert_eq!(fixed(0.0123, 3), "0.012");
        assert_eq!(fixed(5.0, 0), "5");
        assert_eq!(fixed(5.4, 0), "5");
        assert_eq!(fixed(0.4, 0), "0.4");
    }

    #[test]
    fn compact_labels() {
        assert_eq!(compact(1234.0), "1234");
        assert_eq!(compact(12_345.0), "12.3k");
        assert_eq!(compact(3_500_000.0), "3.5M");
        assert_eq!(compact(2.0e9), "2G");
        assert_eq!(compact(0.5), "0.5");
        assert_eq!(compact(65_530.0), "65.5k");
    }
}
