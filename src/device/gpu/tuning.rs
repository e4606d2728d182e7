//! Per-adapter kernel choice: time each matmul variant once on a mid-sized problem, keep the
//! faster, and remember it on disk keyed by adapter name + driver + gpulab version, so the
//! measurement costs a second once rather than on every start.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::GpuBackend;
use crate::error::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MatmulVariant {
    /// Each invocation keeps a 4×4 block in registers; no workgroup memory.
    RegBlock,
    /// 64×64 tiles staged in workgroup memory.
    Tiled,
}

impl MatmulVariant {
    pub const ALL: [MatmulVariant; 2] = [MatmulVariant::RegBlock, MatmulVariant::Tiled];

    pub fn name(self) -> &'static str {
        match self {
            MatmulVariant::RegBlock => "reg-block",
            MatmulVariant::Tiled => "tiled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.name() == s)
    }
}

/// Where the choices live: the user's cache folder, or GPULAB_CACHE_DIR.
fn cache_file() -> Option<PathBuf> {
    Some(cache_dir()?.join("kernel-choices.json"))
}

/// gpulab's cache folder: GPULAB_CACHE_DIR, else the user's cache folder.
pub fn cache_dir() -> Option<PathBuf> {
    std::env::var_os("GPULAB_CACHE_DIR").map(PathBuf::from).or_else(|| dirs::cache_dir().map(|d| d.join("gpulab")))
}

fn cache_key(gpu: &GpuBackend) -> String {
    let s = gpu.summary();
    format!("{} | {} {} | {} | gpulab {}", s.name, s.driver, s.driver_info, s.backend, env!("CARGO_PKG_VERSION"))
}

fn load_cache() -> BTreeMap<String, MatmulVariant> {
    cache_file().and_then(|f| std::fs::read(f).ok()).and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
}

/// Writes the cache atomically (temp file + rename); a cache that cannot be written is not an
/// error, only a repeated measurement next time.
fn store_cache(map: &BTreeMap<String, MatmulVariant>) {
    let Some(file) = cache_file() else { return };
    let Some(dir) = file.parent() else { return };
    let tmp = dir.join(format!(".kernel-choices.{}.tmp", std::process::id()));
    let ok = std::fs::create_dir_all(dir).is_ok()
        && serde_json::to_vec_pretty(map).ok().is_some_and(|b| std::fs::write(&tmp, b).is_ok())
        && std::fs::rename(&tmp, &file).is_ok();
    if !ok {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// The variant to use on this adapter: GPULAB_MATMUL_VARIANT if set, else the cached choice,
/// else a fresh measurement.
pub fn choose(gpu: &mut GpuBackend) -> Result<MatmulVariant> {
    if let Ok(v) = std::env::var("GPULAB_MATMUL_VARIANT") {
        return MatmulVariant::parse(&v).ok_or_else(|| {
            Error::InvalidConfig(format!("GPULAB_MATMUL_VARIANT={v:?} is not one of: reg-block, tiled"))
        });
    }
    let key = cache_key(gpu);
    let mut cache = load_cache();
    if let Some(v) = cache.get(&key) {
        return Ok(*v);
    }
    let timings = measure(gpu, 384, 3)?;
    let best = timings.iter().min_by(|a, b| a.1.total_cmp(&b.1)).map(|t| t.0).unwrap_or(MatmulVariant::RegBlock);
    cache.insert(key, best);
    store_cache(&cache);
    Ok(best)
}

/// Median seconds of an n×n×n matmul for each variant (after a warm-up run).
pub fn measure(gpu: &mut GpuBackend, n: usize, reps: usize) -> Result<Vec<(MatmulVariant, f64)>> {
    let before = gpu.matmul_variant();
    let (a, b) = (crate::bench::random_matrix(n * n, 1), crate::bench::random_matrix(n * n, 2));
    let mut out = Vec::new();
    for v in MatmulVariant::ALL {
        gpu.set_matmul_variant(v);
        let timed = crate::bench::time_matmul(gpu, &a, &b, n, reps);
        gpu.set_matmul_variant(before);
        out.push((v, timed?.0));
    }
    Ok(out)
}
