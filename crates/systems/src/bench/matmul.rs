use serde::{Deserialize, Serialize};

pub use gpulab_core::timing::{random_matrix, time_matmul, time_matmul_samples, time_op, time_op_spread};

use gpulab_core::device::CpuBackend;
use gpulab_core::device::gpu::{GpuBackend, MatmulVariant};
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::{DType, MemCategory, prelude::*};

/// The element types `bench_matmul` times.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MatmulDType {
    /// f32 operands and output.
    F32,
    /// i8 operands, exact i32 output (`QuantOps::matmul_i8`).
    Int8,
    /// f16 operands, f32 products and output (`AmpOps::matmul16`).
    F16,
    /// bf16 operands, f32 products and output (`AmpOps::matmul16`).
    BF16,
}

impl MatmulDType {
    pub fn name(self) -> &'static str {
        match self {
            MatmulDType::F32 => "f32",
            MatmulDType::Int8 => "int8",
            MatmulDType::F16 => "f16",
            MatmulDType::BF16 => "bf16",
        }
    }
}

/// One measured GEMM size on one backend and kernel variant.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MatmulRow {
    pub backend: String,
    pub variant: String,
    /// "f32" or "int8".
    pub dtype: String,
    pub software: bool,
    pub n: usize,
    /// 2n³ / median seconds, in 10⁹ operations/s (a multiply and an add per product term:
    /// FLOP/s for f32, integer OP/s for int8). Measured.
    pub gflops: f64,
    pub median_s: f64,
    pub runs: usize,
    /// Largest |out − ref| / (|ref| + 1) over the output. f32: a GPU against the CPU. int8
    /// (must be 0, the product is exact): the CPU's kernel against its portable one, a GPU's
    /// against the CPU's.
    pub max_rel_err: f64,
}

/// Runs the GEMM benchmark on the CPU and/or on `gpu` for each of `dtypes` (every f32 matmul
/// variant), checking each result (see `MatmulRow::max_rel_err`). Sizes run in turn, each
/// size's dtypes one after the other, so their times come from the same minutes.
pub fn bench_matmul(
    sizes: &[usize],
    dtypes: &[MatmulDType],
    runs: usize,
    cpu: bool,
    mut gpu: Option<&mut GpuBackend>,
    mut on_row: impl FnMut(&MatmulRow),
) -> Result<Vec<MatmulRow>> {
    if sizes.is_empty() || sizes.contains(&0) || runs == 0 {
        return Err(Error::InvalidConfig("matmul sizes and runs must be positive".into()));
    }
    if dtypes.is_empty() {
        return Err(Error::InvalidConfig("--dtype needs at least one of f32, f16, bf16, int8".into()));
    }
    let mut rows = Vec::new();
    for &n in sizes {
        for &dt in dtypes {
            match dt {
                MatmulDType::F32 => rows.extend(rows_f32(n, runs, cpu, gpu.as_deref_mut(), &mut on_row)?),
                MatmulDType::Int8 => rows.extend(super::matmul_i8::rows_i8(n, runs, cpu, gpu.as_deref_mut(), &mut on_row)?),
                MatmulDType::F16 => rows.extend(rows_16(DType::F16, n, runs, cpu, gpu.as_deref_mut(), &mut on_row)?),
                MatmulDType::BF16 => rows.extend(rows_16(DType::BF16, n, runs, cpu, gpu.as_deref_mut(), &mut on_row)?),
            }
        }
    }
    Ok(rows)
}

fn rows_f32(n: usize, runs: usize, cpu: bool, gpu: Option<&mut GpuBackend>, on_row: &mut dyn FnMut(&MatmulRow)) -> Result<Vec<MatmulRow>> {
    let mut rows = Vec::new();
    let mut cpu_b = CpuBackend::new();
    let a = random_matrix(n * n, 1);
    let bm = random_matrix(n * n, 2);
    let (cpu_s, reference) = time_matmul(&mut cpu_b, &a, &bm, n, runs)?;
    let flops = 2.0 * (n as f64).powi(3);
    if cpu {
        let row = MatmulRow {
            backend: cpu_b.info().label(),
            variant: "gemm crate".into(),
            dtype: "f32".into(),
            software: false,
            n,
            gflops: flops / cpu_s / 1e9,
            median_s: cpu_s,
            runs,
            max_rel_err: 0.0,
        };
        on_row(&row);
        rows.push(row);
    }
    if let Some(g) = gpu {
        // The variant tuned for this size's shape class.
        let choice = g.matmul_choice();
        let chosen = choice.get(n, n, n);
        for v in MatmulVariant::ALL {
            g.set_matmul_variant(v);
            let (s, out) = time_matmul(g, &a, &bm, n, runs)?;
            let err = max_rel_err(&out, &reference);
            let label = if v == chosen { format!("{} (chosen)", v.name()) } else { v.name().to_string() };
            let row = MatmulRow {
                backend: g.info().label(),
                variant: label,
                dtype: "f32".into(),
                software: g.info().software,
                n,
                gflops: flops / s / 1e9,
                median_s: s,
                runs,
                max_rel_err: err,
            };
            on_row(&row);
            rows.push(row);
        }
        g.set_matmul_choice(choice);
    }
    Ok(rows)
}

/// The 16-bit rows (`dt`: f16 or bf16) for one size: the CPU's (the reference) and the GPU's,
/// where it runs the type: each 16-bit kernel variant, the chosen one marked.
fn rows_16(
    dt: DType,
    n: usize,
    runs: usize,
    cpu: bool,
    gpu: Option<&mut GpuBackend>,
    on_row: &mut dyn FnMut(&MatmulRow),
) -> Result<Vec<MatmulRow>> {
    let case = super::matmul16::F16Case::new(dt, n, runs)?;
    let mut rows = Vec::new();
    if cpu {
        let cpu_b = CpuBackend::new();
        let path = if dt == DType::BF16 { cpu_b.bf16_path().name() } else { gpulab_core::device::cpu::f16_path_name() };
        rows.push(case.make_row(&cpu_b.info(), path, case.cpu_s, runs, 0.0));
    }
    if let Some(g) = gpu {
        if g.amp_unavailable(dt).is_none() {
            let choice = g.matmul16_choice(dt)?;
            let chosen = choice.get(n, n, n);
            for v in g.matmul16_variants(dt) {
                g.set_matmul16_variant(dt, v);
                let label = if v == chosen { format!("{} (chosen)", v.label()) } else { v.label().to_string() };
                let row = case.row(g, &label, runs, &mut |why| eprintln!("note: {why}"));
                g.set_matmul16_choice(dt, choice);
                rows.extend(row?);
            }
        } else {
            rows.extend(case.row(g, "matmul16 (WGSL)", runs, &mut |why| eprintln!("note: {why}"))?);
        }
    }
    for r in &rows {
        on_row(r);
    }
    Ok(rows)
}

/// Largest |out − ref| / (|ref| + 1): how far a backend's product is from the CPU's.
pub(super) fn max_rel_err(out: &[f32], reference: &[f32]) -> f64 {
    out.iter().zip(reference).map(|(x, r)| ((x - r).abs() / (r.abs() + 1.0)) as f64).fold(0.0, f64::max)
}

/// The rows of one more backend with a single GEMM per type (the CUDA backend's cuBLAS), for
/// f32 and f16 (`dtypes`; int8 is skipped), each product checked against the CPU's.
pub fn bench_matmul_on<B: Backend>(
    b: &mut B,
    variant: &str,
    sizes: &[usize],
    dtypes: &[MatmulDType],
    runs: usize,
    mut on_row: impl FnMut(&MatmulRow),
) -> Result<Vec<MatmulRow>> {
    if sizes.is_empty() || sizes.contains(&0) || runs == 0 {
        return Err(Error::InvalidConfig("matmul sizes and runs must be positive".into()));
    }
    let mut rows = Vec::new();
    for &n in sizes {
        if dtypes.contains(&MatmulDType::F32) {
            let (a, bm) = (random_matrix(n * n, 1), random_matrix(n * n, 2));
            let mut cpu = CpuBackend::new();
            let (ta, tb) = (cpu.upload_f32(&a, [n, n], MemCategory::Inputs)?, cpu.upload_f32(&bm, [n, n], MemCategory::Inputs)?);
            let mut tc = cpu.zeros([n, n], DType::F32, MemCategory::Activations)?;
            cpu.matmul(&ta, &tb, &mut tc, false, false, false)?;
            let reference = cpu.read_f32(&tc)?;
            let (s, out) = time_matmul(b, &a, &bm, n, runs)?;
            let info = b.info();
            let row = MatmulRow {
                backend: info.label(),
                variant: variant.into(),
                dtype: "f32".into(),
                software: info.software,
                n,
                gflops: 2.0 * (n as f64).powi(3) / s / 1e9,
                median_s: s,
                runs,
                max_rel_err: max_rel_err(&out, &reference),
            };
            on_row(&row);
            rows.push(row);
        }
        for (want, dt) in [(MatmulDType::F16, DType::F16), (MatmulDType::BF16, DType::BF16)] {
            if !dtypes.contains(&want) {
                continue;
            }
            let case = super::matmul16::F16Case::new(dt, n, 1)?;
            if let Some(row) = case.row(b, variant, runs, &mut |why| eprintln!("note: {why}"))? {
                on_row(&row);
                rows.push(row);
            }
        }
        if dtypes.contains(&MatmulDType::Int8) {
            match b.quant_unavailable() {
                None => {
                    let row = super::matmul_i8::row_checked(b, n, runs)?;
                    on_row(&row);
                    rows.push(row);
                }
                Some(why) => eprintln!("note: {} times no int8: {why}", b.info().label()),
            }
        }
    }
    Ok(rows)
}
