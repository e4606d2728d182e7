//! Small statistics over measured samples, in one place so every figure uses the same rule.

/// The median of `v` (sorts it in place); 0 for no samples. An even count averages the two
/// middle values.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    if v.len() % 2 == 1 { v[m] } else { (v[m - 1] + v[m]) / 2.0 }
}

/// The q-quantile (0–1) by nearest rank; sorts `v`. None when empty.
pub fn quantile(v: &mut [f64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    Some(v[rank - 1])
}

/// Fewest repeats of a measurement whose spread `compare` will judge.
pub const MIN_REPEATS: usize = 3;

/// Repeated measurements of one quantity: how many, their median and their middle half
/// (the lower and upper quartiles by nearest rank; with 3 samples, the minimum and maximum).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    pub n: usize,
    pub low: f64,
    pub median: f64,
    pub high: f64,
}

impl Spread {
    /// None for no finite samples (non-finite ones are left out).
    pub fn of(samples: &[f64]) -> Option<Spread> {
        let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        let (low, high) = (quantile(&mut v, 0.25)?, quantile(&mut v, 0.75)?);
        Some(Spread { n: v.len(), low, median: median(&mut v), high })
    }
}

/// How one measured quantity compares with another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compared {
    /// Every sample of the middle half above the other's: higher outside noise.
    Higher,
    Lower,
    /// The middle halves overlap: the difference is inside the spread.
    WithinNoise,
    /// Fewer than `MIN_REPEATS` samples on a side: no spread to judge (the medians still say
    /// which was higher in this one measurement).
    Unrepeated,
}

/// The one rule every verdict that compares two measured figures uses: with at least
/// `MIN_REPEATS` samples each, `a` is higher (lower) when its middle half lies wholly above
/// (below) `b`'s, and within noise when the two overlap; with fewer, `Unrepeated`.
pub fn compare(a: &Spread, b: &Spread) -> Compared {
    if a.n < MIN_REPEATS || b.n < MIN_REPEATS {
        Compared::Unrepeated
    } else if a.low > b.high {
        Compared::Higher
    } else if a.high < b.low {
        Compared::Lower
    } else {
        Compared::WithinNoise
    }
}

#[cfg(test)]
mod tests {
    use super::{Compared, Spread, compare, median};

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }

    #[test]
    fn spread_is_the_middle_half() {
        let s = Spread::of(&[5.0, 1.0, 3.0]).unwrap();
        assert_eq!((s.n, s.low, s.median, s.high), (3, 1.0, 3.0, 5.0), "3 samples: min, median, max");
        let s = Spread::of(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 100.0, f64::NAN]).unwrap();
        assert_eq!((s.n, s.low, s.high), (8, 2.0, 6.0), "an outlier and a NaN stay outside the middle half");
        assert_eq!(Spread::of(&[f64::NAN]), None);
    }

    #[test]
    fn overlapping_samples_are_within_noise_and_separated_ones_are_not() {
        let of = |v: &[f64]| Spread::of(v).unwrap();
        let base = of(&[100.0, 104.0, 98.0, 102.0]);
        assert_eq!(compare(&of(&[101.0, 107.0, 99.0, 105.0]), &base), Compared::WithinNoise);
        assert_eq!(compare(&of(&[130.0, 128.0, 133.0]), &base), Compared::Higher);
        assert_eq!(compare(&base, &of(&[130.0, 128.0, 133.0])), Compared::Lower);
        assert_eq!(compare(&of(&[130.0, 128.0]), &base), Compared::Unrepeated, "two samples have no spread to judge");
    }
}
