//! Mixed-precision ops on the CPU. This CPU has no fast 16-bit arithmetic, so 16-bit operands
//! are widened to f32 (exactly) and multiplied by the f32 GEMM; results are rounded to the
//! output type with the same round-to-nearest-even as the GPU kernels.

use super::{CpuTensor, Storage, ops};
use crate::error::{Error, Result};
use crate::tensor::{DType, Epilogue, TensorMeta, checks, float16};

pub fn unavailable(dtype: DType) -> Option<String> {
    (!dtype.is_16bit()).then(|| format!("{} is not a 16-bit type", dtype.name()))
}

fn widened(t: &CpuTensor) -> Vec<f32> {
    match &t.data {
        Storage::Bits16(bits, dt) => float16::decode(*dt, bits),
        _ => t.f32().to_vec(),
    }
}

/// Adds to stats that `checks` already validated.
fn stats_add(stats: Option<&mut CpuTensor>, nonzero: u64, flushed: u64) -> Result<()> {
    if let Some(s) = stats {
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
    checks::cast(x, out, stats.as_deref())?;
    match (&x.data, &mut out.data) {
        (Storage::F32(src), Storage::Bits16(dst, dt)) => {
            let (nz, fl) = round_into(src, dst, *dt);
            stats_add(stats, nz, fl)
        }
        (Storage::Bits16(src, dt), Storage::F32(dst)) => {
            dst.iter_mut().zip(src).for_each(|(d, &s)| *d = float16::widen(*dt, s));
            Ok(())
        }
        _ => Err(Error::Internal(format!("checks::cast let {} → {} through", x.dtype().name(), out.dtype().name()))),
    }
}

#[allow(clippy::too_many_arguments)]
pub fn matmul16(a: &CpuTensor, b: &CpuTensor, c: &mut CpuTensor, ta: bool, tb: bool, epi: Epilogue<'_, CpuTensor>, stats: Option<&mut CpuTensor>, threads: usize) -> Result<()> {
    let (m, n, k) = checks::matmul16(a, b, c, ta, tb, &epi, stats.as_deref())?;
    let mut acc = vec![0.0f32; m * n];
    ops::gemm(&widened(a), &widened(b), &mut acc, m, n, k, ta, tb, false, threads);
    match epi {
        Epilogue::None => {}
        Epilogue::Bias { bias, relu } => {
            ops::bias_add(&mut acc, bias.f32(), n);
            if relu {
                ops::map_inplace(&mut acc, |v| v.max(0.0));
            }
        }
        Epilogue::ReluMask(act) => {
            ops::zip_inplace(&mut acc, &widened(act), |g, a| if a > 0.0 { g } else { 0.0 });
        }
    }
    match &mut c.data {
        // checks::matmul16 allows stats only with a 16-bit output.
        Storage::F32(out) => {
            out.copy_from_slice(&acc);
            Ok(())
        }
        Storage::Bits16(out, odt) => {
            let (nz, fl) = round_into(&acc, out, *odt);
            stats_add(stats, nz, fl)
        }
        _ => Err(Error::Internal("checks::matmul16 let an integer output through".into())),
    }
}

pub fn unscale_check(g: &mut CpuTensor, inv_scale: f32, found: &mut CpuTensor) -> Result<()> {
    checks::unscale_check(g, found)?;
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
