//! Verdicts that compare two measured figures, in one place: the samples a training run already
//! has (its epochs), and the words for `stats::compare`'s answer. A difference inside the spread
//! reads "within noise"; too few repeats read "one measurement", so the same settings run twice
//! cannot give opposite conclusions outside noise.

use gpulab_core::stats::{Compared, MIN_REPEATS, Spread, compare};
use gpulab_systems::report::{Cell, Column, Provenance};
use gpulab_systems::train::{TrainReport, Window};

/// A run's throughput samples (samples/s), one per epoch: the first epoch, which pays one-time
/// costs (allocations, caches, thread start-up), is left out when 4 or more ran.
pub fn epoch_throughputs(t: &TrainReport) -> Vec<f64> {
    let all: Vec<f64> = t.epochs.iter().map(|e| e.samples_per_s).collect();
    if all.len() >= 4 { all[1..].to_vec() } else { all }
}

/// The spread of a run's epoch throughputs.
pub fn throughput_spread(t: &TrainReport) -> Option<Spread> {
    Spread::of(&epoch_throughputs(t))
}

/// A run's throughput samples (samples/s), one per log window: the first window, which pays
/// one-time costs (the loader filling its queue, first allocations), is left out when 4 or
/// more ran.
pub fn window_throughputs(windows: &[Window]) -> Vec<f64> {
    let all: Vec<f64> = windows.iter().map(|w| w.samples_per_s).filter(|v| v.is_finite() && *v > 0.0).collect();
    if all.len() >= 4 { all[1..].to_vec() } else { all }
}

/// A run's repeats for its throughput: its epochs where at least `MIN_REPEATS` count, else its
/// log windows (a short run of one or two epochs still has several windows to judge noise by).
pub fn run_spread(t: &TrainReport, windows: &[Window]) -> Option<Spread> {
    let epochs = epoch_throughputs(t);
    if epochs.len() >= MIN_REPEATS { Spread::of(&epochs) } else { Spread::of(&window_throughputs(windows)).or_else(|| Spread::of(&epochs)) }
}

/// A table's two columns for a spread: the lower and upper quartile of `what`.
pub fn spread_columns(what: &str, unit: &str, decimals: usize) -> [Column; 2] {
    let d = || Provenance::derived("the middle half of the repeats (nearest-rank quartiles; with 3, min and max)");
    [
        Column::num(&format!("{what}, lower quartile"), unit, decimals, d()),
        Column::num(&format!("{what}, upper quartile"), unit, decimals, d()),
    ]
}

/// The cells under `spread_columns`: empty under three repeats (no spread to show).
pub fn spread_cells(s: Option<&Spread>) -> [Cell; 2] {
    match s.filter(|s| s.n >= MIN_REPEATS) {
        Some(s) => [Cell::Num(s.low), Cell::Num(s.high)],
        None => [Cell::Empty, Cell::Empty],
    }
}

/// Without repeats to judge, a ratio within this margin of 1 reads "no different".
pub const ONCE_MARGIN: f64 = 0.05;

/// How `a` compares with `b`, as a verdict says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judged {
    Higher,
    Lower,
    WithinNoise,
    /// From fewer than `stats::MIN_REPEATS` repeats: the direction by `ONCE_MARGIN` alone.
    OnceHigher,
    OnceLower,
    OnceSame,
}

/// `a` against `b` by their spreads (`stats::compare`); where either has too few repeats, by
/// `ratio` (a / b, the figure the verdict prints) and `ONCE_MARGIN`.
pub fn judge(a: Option<&Spread>, b: Option<&Spread>, ratio: f64) -> Judged {
    let c = match (a, b) {
        (Some(a), Some(b)) => compare(a, b),
        _ => Compared::Unrepeated,
    };
    match c {
        Compared::Higher => Judged::Higher,
        Compared::Lower => Judged::Lower,
        Compared::WithinNoise => Judged::WithinNoise,
        Compared::Unrepeated if ratio > 1.0 + ONCE_MARGIN => Judged::OnceHigher,
        Compared::Unrepeated if ratio < 1.0 - ONCE_MARGIN => Judged::OnceLower,
        Compared::Unrepeated => Judged::OnceSame,
    }
}

impl Judged {
    pub fn higher(self) -> bool {
        matches!(self, Judged::Higher | Judged::OnceHigher)
    }
    pub fn lower(self) -> bool {
        matches!(self, Judged::Lower | Judged::OnceLower)
    }
    /// A short qualifier after a printed ratio: "within noise", "one measurement" or nothing.
    pub fn tag(self) -> &'static str {
        match self {
            Judged::Higher | Judged::Lower => "",
            Judged::WithinNoise => " (within noise)",
            Judged::OnceHigher | Judged::OnceLower | Judged::OnceSame => " (one measurement)",
        }
    }
    /// The verdict's words: `higher`, `lower` or `same` ("faster", "slower", "no faster"),
    /// "within noise", or the word with "in one measurement" where the spread could not be judged.
    pub fn words(self, higher: &str, lower: &str, same: &str, repeats: &str) -> String {
        let once = |w: &str| format!("{w} in one measurement (under three {repeats}: too few to judge noise)");
        match self {
            Judged::Higher => higher.into(),
            Judged::Lower => lower.into(),
            Judged::WithinNoise => format!("within noise (the middle halves of the {repeats} overlap)"),
            Judged::OnceHigher => once(higher),
            Judged::OnceLower => once(lower),
            Judged::OnceSame => once(same),
        }
    }
}

/// The rule restated for the verdicts' property tests (independently of `judge`): "up",
/// "down" or "noise" with 3 or more repeats each, else "up", "down" or "same" by 5%.
#[cfg(test)]
pub fn restated(a: Option<Spread>, b: Option<Spread>, ratio: f64) -> &'static str {
    match (a.filter(|s| s.n >= 3), b.filter(|s| s.n >= 3)) {
        (Some(x), Some(y)) if x.low > y.high => "up",
        (Some(x), Some(y)) if x.high < y.low => "down",
        (Some(_), Some(_)) => "noise",
        _ if ratio > 1.05 => "up",
        _ if ratio < 0.95 => "down",
        _ => "same",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_the_repeats_of_a_short_run() {
        let w = |samples_per_s| Window { samples_per_s, ..Default::default() };
        assert_eq!(window_throughputs(&[w(50.0), w(100.0), w(110.0), w(90.0)]), [100.0, 110.0, 90.0], "the first window left out");
        assert_eq!(window_throughputs(&[w(50.0), w(100.0), w(f64::NAN)]), [50.0, 100.0], "under four windows, all that are numbers");
    }

    #[test]
    fn judged_by_spread_where_repeated_and_by_the_ratio_once() {
        let s = |v: &[f64]| Spread::of(v);
        let base = s(&[100.0, 101.0, 99.0]);
        assert_eq!(judge(s(&[120.0, 121.0, 119.0]).as_ref(), base.as_ref(), 1.2), Judged::Higher);
        assert_eq!(judge(s(&[80.0, 130.0, 100.0]).as_ref(), base.as_ref(), 1.03), Judged::WithinNoise);
        assert_eq!(judge(s(&[120.0]).as_ref(), base.as_ref(), 1.2), Judged::OnceHigher);
        assert_eq!(judge(None, None, 0.97), Judged::OnceSame);
        assert!(Judged::OnceLower.words("faster", "slower", "no faster", "epochs").starts_with("slower in one measurement"));
    }
}
