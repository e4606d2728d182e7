//! The int8 GEMM timed beside the f32 one: i8 operands (the ±127 range quantize produces), i32
//! products, every result checked exactly against an independent kernel.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::matmul::{MatmulRow, time_op};
use gpulab_core::device::CpuBackend;
use gpulab_core::device::gpu::GpuBackend;
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::{DType, MemCategory, prelude::*};

pub fn random_i8(n: usize, seed: u64) -> Vec<i8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(-127..=127)).collect()
}

/// Median seconds of `runs` n×n×n int8 matmuls (after a warm-up), and the product.
pub fn time_matmul_i8<B: Backend>(b: &mut B, a: &[i8], bm: &[i8], n: usize, runs: usize) -> Result<(f64, Vec<i32>)> {
    let mut ta = b.zeros([n, n], DType::I8, MemCategory::Inputs)?;
    b.write_i8(&mut ta, a)?;
    let mut tb = b.zeros([n, n], DType::I8, MemCategory::Inputs)?;
    b.write_i8(&mut tb, bm)?;
    let mut tc = b.zeros([n, n], DType::I32, MemCategory::Activations)?;
    let s = time_op(b, runs, |b| b.matmul_i8(&ta, &tb, &mut tc, false, false))?;
    Ok((s, b.read_i32(&tc)?))
}

/// Largest |x − ref| / (|ref| + 1): 0 when the int8 product is exact.
fn max_rel_err(out: &[i32], reference: &[i32]) -> Result<f64> {
    if out.len() != reference.len() {
        return Err(Error::Internal(format!("int8 product of {} values against a reference of {}", out.len(), reference.len())));
    }
    Ok(out.iter().zip(reference).map(|(&x, &r)| (x as f64 - r as f64).abs() / ((r as f64).abs() + 1.0)).fold(0.0, f64::max))
}

/// The int8 rows for one size: the CPU's fastest kernel (checked against the portable one)
/// and the GPU's (checked against the CPU's).
pub fn rows_i8(
    n: usize,
    runs: usize,
    cpu: bool,
    gpu: Option<&mut GpuBackend>,
    on_row: &mut dyn FnMut(&MatmulRow),
) -> Result<Vec<MatmulRow>> {
    let a = random_i8(n * n, 1);
    let bm = random_i8(n * n, 2);
    let flops = 2.0 * (n as f64).powi(3);
    let mut cpu_b = CpuBackend::new();
    let (cpu_s, reference) = time_matmul_i8(&mut cpu_b, &a, &bm, n, runs)?;
    let mut rows = Vec::new();
    let mut push = |row: MatmulRow| {
        on_row(&row);
        rows.push(row);
    };
    if cpu {
        let kernel = cpu_b.int8_kernel().unwrap_or_default();
        cpu_b.set_int8_portable(true);
        let (_, portable) = time_matmul_i8(&mut cpu_b, &a, &bm, n, 1)?;
        let err = max_rel_err(&reference, &portable)?;
        push(MatmulRow {
            backend: cpu_b.info().label(),
            variant: kernel,
            dtype: "int8".into(),
            software: false,
            n,
            gflops: flops / cpu_s / 1e9,
            median_s: cpu_s,
            runs,
            max_rel_err: err,
        });
    }
    if let Some(g) = gpu {
        push(row_on(g, &a, &bm, &reference, n, runs)?);
    }
    Ok(rows)
}

/// The int8 row of backend `b` for one size (CUDA's comes from `bench_matmul_on`), checked
/// against the CPU's `reference` product of `a` and `bm`.
pub fn row_on<B: Backend>(b: &mut B, a: &[i8], bm: &[i8], reference: &[i32], n: usize, runs: usize) -> Result<MatmulRow> {
    let (s, out) = time_matmul_i8(b, a, bm, n, runs)?;
    let err = max_rel_err(&out, reference)?;
    let info = b.info();
    Ok(MatmulRow {
        backend: info.label(),
        variant: b.int8_kernel().unwrap_or_default(),
        dtype: "int8".into(),
        software: info.software,
        n,
        gflops: 2.0 * (n as f64).powi(3) / s / 1e9,
        median_s: s,
        runs,
        max_rel_err: err,
    })
}

/// `row_on` with its own CPU reference.
pub fn row_checked<B: Backend>(b: &mut B, n: usize, runs: usize) -> Result<MatmulRow> {
    let (a, bm) = (random_i8(n * n, 1), random_i8(n * n, 2));
    let (_, reference) = time_matmul_i8(&mut CpuBackend::new(), &a, &bm, n, 1)?;
    row_on(b, &a, &bm, &reference, n, runs)
}
