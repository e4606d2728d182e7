//! The 16-bit and int8 GEMMs' speed as a multiple of f32's, per backend and size: derived from
//! measured rows (the chosen variants on a GPU), so `gpulab bench` only prints them.

use super::MatmulRow;
use gpulab_core::device::gpu::Matmul16Variant;

/// One derived ratio: `dtype`'s GOP/s ÷ f32's GFLOP/s on `backend` at size `n`.
#[derive(Clone, Debug, PartialEq)]
pub struct SpeedRatio {
    pub n: usize,
    pub dtype: String,
    pub backend: String,
    pub ratio: f64,
}

/// Every non-f32 row (a GPU's chosen variant only) that has an f32 row of its backend and size.
pub fn speed_ratios(rows: &[MatmulRow]) -> Vec<SpeedRatio> {
    let variant_row = |r: &MatmulRow| Matmul16Variant::ALL.iter().any(|v| r.variant.starts_with(v.label()));
    let chosen = |r: &&MatmulRow| !variant_row(r) || r.variant.ends_with("(chosen)");
    rows.iter()
        .filter(|r| r.dtype != "f32")
        .filter(chosen)
        .filter_map(|other| {
            let f = rows.iter().find(|r| {
                r.dtype == "f32"
                    && r.n == other.n
                    && r.backend == other.backend
                    && (r.variant == "gemm crate" || r.variant.ends_with("(chosen)"))
            })?;
            Some(SpeedRatio { n: other.n, dtype: other.dtype.clone(), backend: other.backend.clone(), ratio: other.gflops / f.gflops })
        })
        .collect()
}
