//! This adapter's peak compute and memory bandwidth, from two short micro-benchmarks (a large
//! matmul and a large buffer copy), kept in gpulab's disk cache (`gpulab_core::cache`) so they are
//! measured once per adapter, driver and gpulab version.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::bench;
use gpulab_core::cache::{CacheKey, DiskCache};
use gpulab_core::error::Result;
use gpulab_core::stats::median;
use gpulab_core::tensor::{Backend, DType, MemCategory};

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Peaks {
    /// Measured FLOP/s of an n×n×n matmul (median of runs).
    pub flops_per_s: f64,
    /// Measured bytes/s of a buffer copy, bytes read + written (median of runs).
    pub bytes_per_s: f64,
    /// How the runs were timed (entries cached before this field existed were wall-timed).
    #[serde(default)]
    pub timing: PeakTiming,
}

/// The clock the peak micro-benchmarks were timed with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum PeakTiming {
    /// GPU timestamp queries around the kernels: the GPU's own time, without the submit,
    /// the driver and the wait.
    GpuTimestamps,
    /// Wall time around submit and wait (the adapter has no timestamp queries): includes the
    /// submission overhead, so the peaks read a little low.
    #[default]
    WallClock,
}

impl PeakTiming {
    pub fn describe(self) -> &'static str {
        match self {
            PeakTiming::GpuTimestamps => "timed with GPU timestamps",
            PeakTiming::WallClock => "timed by wall clock around submit + wait (no GPU timestamps here)",
        }
    }
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

/// Median of three runs of each micro-benchmark (after a warm-up), timed with the GPU's
/// timestamp queries where the adapter has them (the backend's busy time around each run),
/// else by wall clock around submit and wait like `bench::time_op`.
pub fn measure<B: Backend>(b: &mut B) -> Result<Peaks> {
    let n = MATMUL_N;
    let a = b.upload_f32(&bench::random_matrix(n * n, 1), [n, n], MemCategory::Inputs)?;
    let m = b.upload_f32(&bench::random_matrix(n * n, 2), [n, n], MemCategory::Inputs)?;
    let mut c = b.zeros([n, n], DType::F32, MemCategory::Activations)?;
    let (matmul_s, t1) = time_gpu(b, RUNS, |b| b.matmul(&a, &m, &mut c, false, false, false))?;
    let flops = 2.0 * (n * n * n) as f64;
    let src = b.zeros([1, COPY_FLOATS], DType::F32, MemCategory::Activations)?;
    let mut dst = b.zeros([1, COPY_FLOATS], DType::F32, MemCategory::Activations)?;
    let bytes = 2.0 * (COPY_FLOATS * 4) as f64;
    let (copy_s, t2) = time_gpu(b, RUNS, |b| b.copy(&src, &mut dst))?;
    b.reset_memory_peaks();
    let timing =
        if t1 == PeakTiming::GpuTimestamps && t2 == PeakTiming::GpuTimestamps { PeakTiming::GpuTimestamps } else { PeakTiming::WallClock };
    Ok(Peaks { flops_per_s: flops / matmul_s, bytes_per_s: bytes / copy_s, timing })
}

/// Median seconds of `runs` runs of `op` after a warm-up: GPU busy seconds from timestamps when
/// every run has them, else wall seconds around submit and wait.
fn time_gpu<B: Backend>(b: &mut B, runs: usize, mut op: impl FnMut(&mut B) -> Result<()>) -> Result<(f64, PeakTiming)> {
    let (mut gpu, mut wall) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for i in 0..=runs {
        b.sync()?;
        b.reset_busy_clock()?; // start each run's GPU clock from zero
        let t = Instant::now();
        op(b)?;
        b.flush()?;
        b.sync()?;
        let w = t.elapsed().as_secs_f64().max(1e-9);
        let busy = b.take_busy_seconds()?;
        if i > 0 {
            wall.push(w);
            if let Some(s) = busy.filter(|s| *s > 0.0) {
                gpu.push(s);
            }
        }
    }
    Ok(if gpu.len() == wall.len() { (median(&mut gpu), PeakTiming::GpuTimestamps) } else { (median(&mut wall), PeakTiming::WallClock) })
}
