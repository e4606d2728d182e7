//! Mixed-precision ops on the CPU. This CPU has no fast 16-bit arithmetic, so 16-bit operands
//! are widened to f32 (exactly) and multiplied by the f32 GEMM; results are rounded to the
//! output type with the same round-to-nearest-even as the GPU kernels.

use super::{CpuTensor, Storage, ops};
use crate::error::{Result, ensure_shape};
use crate::tensor::{DType, Epilogue, TensorMeta, checks, float16};

pub fn unavailable(dtype: DType) -> Option<String> {
    (!dtype.is_16bit()).then(|| format!("{} is not a 16-bit type", dtype.name()))
}

fn dtype16(op: &'static str, t: &CpuTensor) -> Result<DType> {
    let dt = t.dtype();
    ensure_shape(dt.is_16bit(), op, || format!("expected an f16 or bf16 tensor, got {}", dt.name()))?;
    Ok(dt)
}

fn widened(t: &CpuTensor) -> Vec<f32> {
    match &t.data {
        Storage::Bits16(bits, dt) => float16::decode(*dt, bits),
        _ => t.f32().to_vec(),
    }
}

fn stats_add(stats: Option<&mut CpuTensor>, nonzero: u64, flushed: u64) -> Result<()> {
    if let Some(s) = stats {
        checks::acc_index("stats", s, 1, DType::U32)?;
        let v = s.u32_mut();
        v[0] = v[0].wrapping_add(nonzero as u32);
        v[1] = v[1].wrapping_add(flushed as u32);
    }
    Ok(())
}

/// Rounds `src` into 16-bit `out`, counting nonzero values and those that became zero.
fn round_into(src: &[f32], out: &mut [u16], dt: DType) -> (u64, u64) {
    let (mut nonzero, mut flushed) = (0, 0);
    for (o, &v) in out.iter_mut().zip(src) {
        *o = float16::round_bits(dt, v);
        if v != 0.0 {
            nonzero += 1;
            flushed += float16::is_zero_bits(*o) as u64;
        }
    }
    (nonzero, flushed)
}

pub fn cast(x: &CpuTensor, out: &mut CpuTensor, stats: Option<&mut CpuTensor>) -> Result<()> {
    ensure_shape(x.shape() == out.shape(), "cast", || format!("{:?} into {:?}", x.shape(), out.shape()))?;
    match (&x.data, &mut out.data) {
        (Storage::F32(src), Storage::Bits16(dst, dt)) => {
            let (nz, fl) = round_into(src, dst, *dt);
            stats_add(stats, nz, fl)
        }
        (Storage::Bits16(src, dt), Storage::F32(dst)) => {
            dst.iter_mut().zip(src).for_each(|(d, &s)| *d = float16::widen(*dt, s));
            Ok(())
        }
        _ => Err(crate::error::Error::Shape { op: "cast", detail: format!("cannot cast {} to {}", x.dtype().name(), out.dtype().name()) }),
    }
}

#[allow(clippy::too_many_arguments)]
pub fn matmul16(a: &CpuTensor, b: &CpuTensor, c: &mut CpuTensor, ta: bool, tb: bool, epi: Epilogue<'_, CpuTensor>, stats: Option<&mut CpuTensor>, threads: usize) -> Result<()> {
    let (m, n, k) = checks::matmul16(a, b, c, ta, tb)?;
    let dt = dtype16("matmul16", a)?;
    let mut acc = vec![0.0f32; m * n];
    ops::gemm(&widened(a), &widened(b), &mut acc, m, n, k, ta, tb, false, threads);
    match epi {
        Epilogue::None => {}
        Epilogue::Bias { bias, relu } => {
            checks::bias_for("matmul16", c, bias)?;
            ops::bias_add(&mut acc, bias.f32(), n);
            if relu {
                ops::map_inplace(&mut acc, |v| v.max(0.0));
            }
        }
        Epilogue::ReluMask(act) => {
            ensure_shape(act.shape() == [m, n] && act.dtype() == dt, "matmul16", || format!("ReLU mask {:?} {} for output {:?}", act.shape(), act.dtype().name(), [m, n]))?;
            ops::zip_inplace(&mut acc, &widened(act), |g, a| if a > 0.0 { g } else { 0.0 });
        }
    }
    match &mut c.data {
        Storage::F32(out) => {
            out.copy_from_slice(&acc);
            let nz = acc.iter().filter(|v| **v != 0.0).count() as u64;
            stats_add(stats, nz, 0)
        }
        Storage::Bits16(out, odt) => {
            let (nz, fl) = round_into(&acc, out, *odt);
            stats_add(stats, nz, fl)
        }
        Storage::U32(_) => unreachable!("checks::matmul16 rejects u32 outputs"),
    }
}

pub fn unscale_check(g: &mut CpuTensor, inv_scale: f32, found: &mut CpuTensor) -> Result<()> {
    checks::f32s("unscale_check", &[g])?;
    checks::acc_index("unscale_check", found, 0, DType::U32)?;
    let mut bad = false;
    for v in g.f32_mut() {
        bad |= !v.is_finite();
        *v *= inv_scale;
    }
    if bad {
        found.u32_mut()[0] = 1;
    }
    Ok(())
}
