//! This adapter's peak compute and memory bandwidth, from two short micro-benchmarks (a large
//! matmul and a large buffer copy), cached on disk beside the kernel choices so they are
//! measured once per adapter, driver and gpulab version.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::tensor::{Backend, DType, MemCategory};

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Peaks {
    /// Best measured FLOP/s of an n×n×n matmul.
    pub flops_per_s: f64,
    /// Best measured bytes/s of a buffer copy (bytes read + written).
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

fn cache_file() -> Option<std::path::PathBuf> {
    Some(crate::device::gpu::tuning::cache_dir()?.join("peaks.json"))
}

fn key<B: Backend>(b: &B) -> String {
    let i = b.info();
    format!("{} | {} | {} | gpulab {}", i.name, i.driver, i.api, env!("CARGO_PKG_VERSION"))
}

/// The cached peaks for this backend, or a fresh measurement (a second or two) that is then
/// cached. Returns whether they came from the cache.
pub fn measure_or_cached<B: Backend>(b: &mut B) -> Result<(Peaks, bool)> {
    let k = key(b);
    let mut cache: BTreeMap<String, Peaks> = cache_file().and_then(|f| std::fs::read(f).ok()).and_then(|v| serde_json::from_slice(&v).ok()).unwrap_or_default();
    if let Some(p) = cache.get(&k) {
        return Ok((*p, true));
    }
    let p = measure(b)?;
    cache.insert(k, p);
    if let Some(f) = cache_file()
        && let Some(dir) = f.parent()
    {
        // A cache that cannot be written only means measuring again next time.
        let tmp = dir.join(format!(".peaks.{}.tmp", std::process::id()));
        let ok = std::fs::create_dir_all(dir).is_ok() && serde_json::to_vec_pretty(&cache).ok().is_some_and(|v| std::fs::write(&tmp, v).is_ok()) && std::fs::rename(&tmp, &f).is_ok();
        if !ok {
            let _ = std::fs::remove_file(&tmp);
        }
    }
    Ok((p, false))
}

/// Best of three runs of each micro-benchmark (after a warm-up).
pub fn measure<B: Backend>(b: &mut B) -> Result<Peaks> {
    let n = MATMUL_N;
    let a = b.upload_f32(&crate::bench::random_matrix(n * n, 1), [n, n], MemCategory::Inputs)?;
    let m = b.upload_f32(&crate::bench::random_matrix(n * n, 2), [n, n], MemCategory::Inputs)?;
    let mut c = b.zeros([n, n], DType::F32, MemCategory::Activations)?;
    let flops = 2.0 * (n * n * n) as f64;
    let best_flops = best_of(b, 3, |b| b.matmul(&a, &m, &mut c, false, false, false))?;
    let src = b.zeros([1, COPY_FLOATS], DType::F32, MemCategory::Activations)?;
    let mut dst = b.zeros([1, COPY_FLOATS], DType::F32, MemCategory::Activations)?;
    let bytes = 2.0 * (COPY_FLOATS * 4) as f64;
    let best_copy = best_of(b, 3, |b| b.copy(&src, &mut dst))?;
    b.reset_memory_peaks();
    Ok(Peaks { flops_per_s: flops / best_flops, bytes_per_s: bytes / best_copy })
}

fn best_of<B: Backend>(b: &mut B, runs: usize, mut f: impl FnMut(&mut B) -> Result<()>) -> Result<f64> {
    let mut best = f64::INFINITY;
    for i in 0..=runs {
        b.sync()?;
        let t = Instant::now();
        f(b)?;
        b.sync()?;
        if i > 0 {
            best = best.min(t.elapsed().as_secs_f64().max(1e-9));
        }
    }
    Ok(best)
}
