//! GEMM shape classes: which kernel wins depends on the shape (a 64-row batch times a 784-wide
//! layer is not a 1024³ product; a weight gradient has a short output and a long K), so the
//! tuner (tuning.rs) times the candidates once per class and the GEMMs look their variant up
//! by the shape they are given.

use serde::{Deserialize, Serialize};

/// A dimension at least this long is "large": the tiled kernels' 64-wide blocks then fill
/// more than one workgroup along it.
pub const LARGE: usize = 128;
/// The lengths the tuner times a small and a large dimension at: mid-class, multiples of 8
/// (the vector loads every real shape of that class may or may not get; the kernel compiled
/// for them is the one timed), and small enough that tuning stays a fraction of a second on
/// llvmpipe for the eight classes.
const SMALL_LEN: usize = 64;
const LARGE_LEN: usize = 256;

/// Each of M, N and K small (< `LARGE`) or large: eight classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ShapeClass {
    pub m_large: bool,
    pub n_large: bool,
    pub k_large: bool,
}

impl ShapeClass {
    pub const COUNT: usize = 8;

    pub fn of(m: usize, n: usize, k: usize) -> Self {
        ShapeClass { m_large: m >= LARGE, n_large: n >= LARGE, k_large: k >= LARGE }
    }

    pub fn index(self) -> usize {
        self.m_large as usize | (self.n_large as usize) << 1 | (self.k_large as usize) << 2
    }

    pub fn from_index(i: usize) -> Self {
        ShapeClass { m_large: i & 1 != 0, n_large: i & 2 != 0, k_large: i & 4 != 0 }
    }

    pub fn all() -> impl Iterator<Item = ShapeClass> {
        (0..Self::COUNT).map(Self::from_index)
    }

    /// The largest class: what a big product (the benchmarks' n³) runs.
    pub const LARGEST: ShapeClass = ShapeClass { m_large: true, n_large: true, k_large: true };

    /// The (M, N, K) the tuner times for this class.
    pub fn representative(self) -> (usize, usize, usize) {
        let len = |large: bool| if large { LARGE_LEN } else { SMALL_LEN };
        (len(self.m_large), len(self.n_large), len(self.k_large))
    }

    /// "M≥128 N<128 K≥128".
    pub fn name(self) -> String {
        let d = |large: bool| if large { format!("≥{LARGE}") } else { format!("<{LARGE}") };
        format!("M{} N{} K{}", d(self.m_large), d(self.n_large), d(self.k_large))
    }
}

/// One kernel variant per shape class (indexed by `ShapeClass::index`); what the tuner
/// caches for an adapter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ByClass<V> {
    pub variants: [V; ShapeClass::COUNT],
}

impl<V: Copy + PartialEq> ByClass<V> {
    /// The same variant for every shape (a variant set by hand, or the only candidate).
    pub fn uniform(v: V) -> Self {
        ByClass { variants: [v; ShapeClass::COUNT] }
    }

    pub fn class(&self, c: ShapeClass) -> V {
        self.variants[c.index()]
    }

    /// The variant a GEMM of this shape runs.
    pub fn get(&self, m: usize, n: usize, k: usize) -> V {
        self.class(ShapeClass::of(m, n, k))
    }

    /// "tiled" when one variant serves every class, else each variant with its classes:
    /// "reg-block (M<128 N<128 K<128, …); tiled (…)".
    pub fn describe(&self, name: impl Fn(V) -> String) -> String {
        let mut groups: Vec<(V, Vec<String>)> = Vec::new();
        for c in ShapeClass::all() {
            let v = self.class(c);
            match groups.iter_mut().find(|(g, _)| *g == v) {
                Some((_, cs)) => cs.push(c.name()),
                None => groups.push((v, vec![c.name()])),
            }
        }
        if let [(v, _)] = &groups[..] {
            return name(*v);
        }
        groups.iter().map(|(v, cs)| format!("{} ({})", name(*v), cs.join(", "))).collect::<Vec<_>>().join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_split_each_dimension_at_large_and_round_trip() {
        assert_eq!(ShapeClass::of(64, 784, 127), ShapeClass { m_large: false, n_large: true, k_large: false });
        assert_eq!(ShapeClass::of(128, 1, 4096).index(), 0b101);
        for c in ShapeClass::all() {
            assert_eq!(ShapeClass::from_index(c.index()), c);
            let (m, n, k) = c.representative();
            assert_eq!(ShapeClass::of(m, n, k), c, "{} is timed inside its own class", c.name());
        }
        assert_eq!(ShapeClass::all().count(), ShapeClass::COUNT);
        assert_eq!(ShapeClass::of(4096, 4096, 4096), ShapeClass::LARGEST);
    }

    /// The cache holds a `ByClass` under a new key; a value of the old one-variant format
    /// (a bare name) is a miss to measure again, never an error.
    #[test]
    fn a_choice_round_trips_through_the_cache_format_and_old_values_are_a_miss() {
        use super::super::tuning::MatmulVariant;
        let mut c = ByClass::uniform(MatmulVariant::RegBlock);
        c.variants[3] = MatmulVariant::Tiled;
        let json = serde_json::to_value(c).unwrap();
        assert_eq!(serde_json::from_value::<ByClass<MatmulVariant>>(json).unwrap(), c);
        assert!(serde_json::from_value::<ByClass<MatmulVariant>>(serde_json::json!("reg-block")).is_err());
    }

    #[test]
    fn a_choice_looks_up_by_shape_and_describes_itself() {
        let mut c = ByClass::uniform("a");
        assert_eq!(c.describe(|v| v.to_string()), "a");
        c.variants[ShapeClass::LARGEST.index()] = "b";
        assert_eq!(c.get(1000, 1000, 1000), "b");
        assert_eq!(c.get(1000, 1000, 10), "a");
        let d = c.describe(|v| v.to_string());
        assert!(d.starts_with("a (M<128 N<128 K<128,") && d.ends_with("; b (M≥128 N≥128 K≥128)"), "{d}");
    }
}
