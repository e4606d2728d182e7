//! The one op timer: every speed figure (benchmarks, kernel tuning, peaks) is the median of
//! synchronised runs after a warm-up, on seeded random inputs.

use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::Result;
use crate::stats::median;
use crate::tensor::{DType, MemCategory, prelude::*};

pub fn random_matrix(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(-1.0..1.0)).collect()
}

/// Median seconds of `runs` calls of `op` after one warm-up call, the device synchronised
/// before and after each so the time is the device's work, not only its recording.
pub fn time_op<B: Backend>(b: &mut B, runs: usize, mut op: impl FnMut(&mut B) -> Result<()>) -> Result<f64> {
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
    Ok(median(&mut times))
}

/// Median seconds of `runs` n×n×n matmuls (after a warm-up), and the product.
pub fn time_matmul<B: Backend>(b: &mut B, a: &[f32], bm: &[f32], n: usize, runs: usize) -> Result<(f64, Vec<f32>)> {
    let ta = b.upload_f32(a, [n, n], MemCategory::Inputs)?;
    let tb = b.upload_f32(bm, [n, n], MemCategory::Inputs)?;
    let mut tc = b.zeros([n, n], DType::F32, MemCategory::Activations)?;
    let s = time_op(b, runs, |b| b.matmul(&ta, &tb, &mut tc, false, false, false))?;
    Ok((s, b.read_f32(&tc)?))
}
