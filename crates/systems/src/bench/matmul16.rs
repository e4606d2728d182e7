//! The 16-bit GEMM timed beside the f32 one: f16 or bf16 operands, f32 products and output
//! (`AmpOps::matmul16`, the forward GEMM of mixed-precision training). On CUDA it runs on the
//! tensor cores through cuBLAS; elsewhere on the backend's own kernel. Every result is checked
//! against the CPU's matmul16 of the same f16 inputs.

use super::matmul::{MatmulRow, max_rel_err, random_matrix, time_op};
use gpulab_core::device::CpuBackend;
use gpulab_core::error::Result;
use gpulab_core::tensor::{DType, Epilogue, MemCategory, prelude::*};

/// Median seconds of `runs` n×n×n matmuls of `dt` (f16 or bf16) operands (after a warm-up),
/// and the f32 product.
pub fn time_matmul16<B: Backend>(b: &mut B, dt: DType, a: &[f32], bm: &[f32], n: usize, runs: usize) -> Result<(f64, Vec<f32>)> {
    let mut ta = b.zeros([n, n], dt, MemCategory::Inputs)?;
    b.write_f32(&mut ta, a)?; // rounded to 16 bits as it is written
    let mut tb = b.zeros([n, n], dt, MemCategory::Inputs)?;
    b.write_f32(&mut tb, bm)?;
    let mut tc = b.zeros([n, n], DType::F32, MemCategory::Activations)?;
    let s = time_op(b, runs, |b| b.matmul16(&ta, &tb, &mut tc, false, false, Epilogue::None, None))?;
    Ok((s, b.read_f32(&tc)?))
}

/// The inputs of size n and the CPU's product of them (the reference every row is checked
/// against), with the CPU's own median time.
pub struct F16Case {
    pub dt: DType,
    pub n: usize,
    a: Vec<f32>,
    bm: Vec<f32>,
    reference: Vec<f32>,
    pub cpu_s: f64,
}

impl F16Case {
    pub fn new(dt: DType, n: usize, runs: usize) -> Result<Self> {
        let (a, bm) = (random_matrix(n * n, 1), random_matrix(n * n, 2));
        let (cpu_s, reference) = time_matmul16(&mut CpuBackend::new(), dt, &a, &bm, n, runs)?;
        Ok(F16Case { dt, n, a, bm, reference, cpu_s })
    }

    /// One measured row on backend `b` (`variant` names its kernel), or None where the backend
    /// cannot run the type (the reason goes to `skipped`).
    pub fn row<B: Backend>(&self, b: &mut B, variant: &str, runs: usize, skipped: &mut dyn FnMut(String)) -> Result<Option<MatmulRow>> {
        if let Some(why) = b.amp_unavailable(self.dt) {
            skipped(format!("{} GEMM skipped on {}: {why}", self.dt.name(), b.info().label()));
            return Ok(None);
        }
        let (s, out) = time_matmul16(b, self.dt, &self.a, &self.bm, self.n, runs)?;
        Ok(Some(self.make_row(&b.info(), variant, s, runs, max_rel_err(&out, &self.reference))))
    }

    pub fn make_row(&self, info: &gpulab_core::tensor::BackendInfo, variant: &str, s: f64, runs: usize, err: f64) -> MatmulRow {
        MatmulRow {
            backend: info.label(),
            variant: variant.into(),
            dtype: self.dt.name().into(),
            software: info.software,
            n: self.n,
            gflops: 2.0 * (self.n as f64).powi(3) / s / 1e9,
            median_s: s,
            runs,
            max_rel_err: err,
        }
    }
}
