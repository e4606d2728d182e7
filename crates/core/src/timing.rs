//! The one op timer: every speed figure (benchmarks, kernel tuning, peaks) is the median of
//! synchronised runs after a warm-up, on seeded random inputs; `time_op_spread` keeps the
//! runs' spread too, for a verdict that compares two timings (`stats::compare`).

use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::Result;
use crate::stats::{Spread, median};
use crate::tensor::{DType, MemCategory, prelude::*};

pub fn random_matrix(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(-1.0..1.0)).collect()
}

/// Seconds of each of `runs` calls of `op` after one warm-up call, the device synchronised
/// before and after each so the time is the device's work, not only its recording.
pub fn time_op_samples<B: Backend>(b: &mut B, runs: usize, mut op: impl FnMut(&mut B) -> Result<()>) -> Result<Vec<f64>> {
    let mut times = Vec::with_capacity(runs);
    for i in 0..=runs {
        b.sync()?;
        let t = Instant::now();
        op(b)?;
        b.sync()?;
        if i > 0 {
            times.push(t.elapsed().as_secs_f64().max(1e-9));
        }
    }
    Ok(times)
}

/// The median and spread of `time_op_samples` (n = 0 and zeros for no runs, which
/// `stats::compare` reads as unrepeated).
pub fn time_op_spread<B: Backend>(b: &mut B, runs: usize, op: impl FnMut(&mut B) -> Result<()>) -> Result<Spread> {
    let times = time_op_samples(b, runs, op)?;
    Ok(Spread::of(&times).unwrap_or(Spread { n: 0, low: 0.0, median: 0.0, high: 0.0 }))
}

/// Median seconds of `runs` calls of `op` (`time_op_samples`).
pub fn time_op<B: Backend>(b: &mut B, runs: usize, op: impl FnMut(&mut B) -> Result<()>) -> Result<f64> {
    Ok(median(&mut time_op_samples(b, runs, op)?))
}

/// Median seconds of `runs` n×n×n matmuls (after a warm-up), and the product.
pub fn time_matmul<B: Backend>(b: &mut B, a: &[f32], bm: &[f32], n: usize, runs: usize) -> Result<(f64, Vec<f32>)> {
    let (mut s, c) = time_matmul_samples(b, a, bm, n, runs)?;
    Ok((median(&mut s), c))
}

/// `time_matmul` with each run's seconds, for a spread (`stats::Spread`).
pub fn time_matmul_samples<B: Backend>(b: &mut B, a: &[f32], bm: &[f32], n: usize, runs: usize) -> Result<(Vec<f64>, Vec<f32>)> {
    let ta = b.upload_f32(a, [n, n], MemCategory::Inputs)?;
    let tb = b.upload_f32(bm, [n, n], MemCategory::Inputs)?;
    let mut tc = b.zeros([n, n], DType::F32, MemCategory::Activations)?;
    let s = time_op_samples(b, runs, |b| b.matmul(&ta, &tb, &mut tc, false, false, false))?;
    Ok((s, b.read_f32(&tc)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::cpu::CpuBackend;

    /// Each run is kept, so a verdict can judge two timings by their spread.
    #[test]
    fn the_spread_keeps_every_run() {
        let mut b = CpuBackend::new();
        let mut calls = 0;
        let s = time_op_spread(&mut b, 5, |_| {
            calls += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!((calls, s.n), (6, 5), "one warm-up call, five timed");
        assert!(s.low <= s.median && s.median <= s.high && s.low > 0.0, "{s:?}");
        assert_eq!(time_op_spread(&mut b, 0, |_| Ok(())).unwrap().n, 0);
    }
}
