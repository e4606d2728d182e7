//! This adapter's peak compute and memory bandwidth, from two short micro-benchmarks (a large
//! matmul and a large buffer copy), kept in gpulab's disk cache (`crate::cache`) so they are
//! measured once per adapter, driver and gpulab version.

use serde::{Deserialize, Serialize};

use crate::bench;
use crate::cache::{CacheKey, DiskCache};
use crate::error::Result;
use crate::tensor::{Backend, DType, MemCategory};

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Peaks {
    /// Measured FLOP/s of an n×n×n matmul (median of runs).
    pub flops_per_s: f64,
    /// Measured bytes/s of a buffer copy, bytes read + written (median of runs).
    pub bytes_per_s: f64,
}

impl Peaks {
    /// Arithmetic intensity (FLOPs per byte) where the two roofs meet.
    pub fn ridge(&self) -> f64 {
        self.flops_per_s / self.bytes_per_s.max(1.0)
    }
}

const MATMUL_N: usize = 512;
const COPY_FLOATS: usize = 8 << 20; // 32 MiB
const RUNS: usize = 3;

/// The cache file of the peaks (one entry per adapter, driver and gpulab version).
const CACHE_FILE: &str = "peaks.json";

/// The cached peaks for this backend, or a fresh measurement (a second or two) that is then
/// cached. Returns whether they came from the cache.
pub fn measure_or_cached<B: Backend>(b: &mut B) -> Result<(Peaks, bool)> {
    let key = CacheKey::new("peaks", &b.info());
    let cache = DiskCache::named(CACHE_FILE);
    if let Some(p) = cache.as_ref().and_then(|c| c.get(&key)) {
        return Ok((p, true));
    }
    let p = measure(b)?;
    if let Some(c) = cache {
        // An unwritable cache only means measuring again next time.
        let _ = c.put(&key, &p);
    }
    Ok((p, false))
}

/// Median of three runs of each micro-benchmark (after a warm-up), timed by the benchmark's
/// own timer (`bench::time_op`) so `gpulab bench` and the roofline measure the same way.
pub fn measure<B: Backend>(b: &mut B) -> Result<Peaks> {
    let n = MATMUL_N;
    let a = bench::random_matrix(n * n, 1);
    let m = bench::random_matrix(n * n, 2);
    let (matmul_s, _) = bench::time_matmul(b, &a, &m, n, RUNS)?;
    let flops = 2.0 * (n * n * n) as f64;
    let src = b.zeros([1, COPY_FLOATS], DType::F32, MemCategory::Activations)?;
    let mut dst = b.zeros([1, COPY_FLOATS], DType::F32, MemCategory::Activations)?;
    let bytes = 2.0 * (COPY_FLOATS * 4) as f64;
    let copy_s = bench::time_op(b, RUNS, |b| b.copy(&src, &mut dst))?;
    b.reset_memory_peaks();
    Ok(Peaks { flops_per_s: flops / matmul_s, bytes_per_s: bytes / copy_s })
}
