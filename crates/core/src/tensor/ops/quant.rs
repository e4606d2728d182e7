use serde::{Deserialize, Serialize};

use super::{CoreOps, TensorMeta, unsupported};
use crate::error::Result;
use crate::tensor::{DType, Dequant, MemCategory, checks};

/// How many scales a quantized tensor carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum QuantGranularity {
    /// One scale for the whole tensor: scales are [1, 1].
    PerTensor,
    /// One scale per output channel, i.e. per column of a [in, out] weight: scales are [1, cols].
    PerChannel,
}

/// The scale that maps `absmax` onto ±127: absmax · (1/127), the constant rounded to f32 first
/// so every backend computes it with one correctly rounded multiply (WGSL's division is not
/// correctly rounded; its multiplication is). A zero or non-finite range gets scale 1, so no
/// scale is ever zero (an all-zero channel quantizes to zeros and reads back as zeros).
pub fn scale_for_absmax(absmax: f32) -> f32 {
    if absmax > 0.0 && absmax.is_finite() { absmax * (1.0 / 127.0) } else { 1.0 }
}

/// v → clamp(round_half_even(v / scale), −127, 127): the one rounding rule (WGSL's `round`
/// rounds half to even too). NaN quantizes to 0.
///
/// Rounds with the 1.5·2²³ trick (adding and subtracting it leaves a value of magnitude
/// ≤ 2²² rounded half to even by the FPU) instead of `round_ties_even`, which on baseline
/// x86-64 is a libm call that stops the loop from vectorising; the ±128 clamp first keeps the
/// value in the trick's range without changing the result.
#[inline]
pub fn quantize_value(v: f32, scale: f32) -> i8 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 · 2²³
    let t = (v / scale).clamp(-128.0, 128.0); // NaN stays NaN
    // NaN → the saturating cast gives 0.
    ((t + MAGIC) - MAGIC).clamp(-127.0, 127.0) as i8
}

/// INT8 quantization. Symmetric: a value v is stored as q = clamp(round(v / scale), −127, 127)
/// (`quantize_value`), and read back as q · scale. I8 tensors take one byte per element (the
/// GPU packs four per 32-bit word), so the ledger counts an int8 weight at a quarter of its
/// f32 size. A backend that does not implement this family refuses every method by name.
pub trait QuantOps: CoreOps {
    /// Why int8 cannot be computed on this backend, or None when it can.
    fn quant_unavailable(&self) -> Option<String> {
        Some("int8 quantization is not implemented in this version of gpulab".into())
    }

    /// Which int8 GEMM kernel runs here (e.g. "AVX-512 VNNI", "portable", "dot4I8Packed"), for
    /// reports and benchmarks; None where int8 is unavailable.
    fn int8_kernel(&self) -> Option<String> {
        None
    }

    /// Overwrites an I8 tensor with host values (the int8 counterpart of `write_f32`).
    fn write_i8(&mut self, t: &mut Self::Tensor, data: &[i8]) -> Result<()> {
        let _ = (t, data);
        Err(unsupported(self, "write_i8", "int8 quantization is not implemented yet"))
    }

    /// The values of an I8 tensor.
    fn read_i8(&mut self, t: &Self::Tensor) -> Result<Vec<i8>> {
        let _ = t;
        Err(unsupported(self, "read_i8", "int8 quantization is not implemented yet"))
    }

    /// The values of an I32 tensor (an int8 GEMM's accumulators).
    fn read_i32(&mut self, t: &Self::Tensor) -> Result<Vec<i32>> {
        let _ = t;
        Err(unsupported(self, "read_i32", "int8 quantization is not implemented yet"))
    }

    /// f32 `x` → i8 `q` (same shape), writing the f32 `scales` it chose (`scale_for_absmax` of
    /// the whole tensor or of each column, see `QuantGranularity`).
    fn quantize(&mut self, x: &Self::Tensor, q: &mut Self::Tensor, scales: &mut Self::Tensor, granularity: QuantGranularity) -> Result<()> {
        let _ = (x, q, scales, granularity);
        Err(unsupported(self, "quantize", "int8 quantization is not implemented yet"))
    }

    /// f32 `x` → i8 `q` with `scales` given ([1, 1] or [1, cols] f32), not chosen from `x`:
    /// static activation quantization with calibrated scales (`quant::Observer`). Values beyond
    /// the calibrated range saturate at ±127.
    fn quantize_with(&mut self, x: &Self::Tensor, q: &mut Self::Tensor, scales: &Self::Tensor) -> Result<()> {
        let _ = (x, q, scales);
        Err(unsupported(self, "quantize_with", "int8 quantization is not implemented yet"))
    }

    /// out (f32) = q · scale, where q is i8 (from `quantize`) or i32 (from `matmul_i8`) and
    /// `scales` is [1, 1] or [1, cols] f32.
    fn dequantize(&mut self, q: &Self::Tensor, scales: &Self::Tensor, out: &mut Self::Tensor) -> Result<()> {
        let _ = (q, scales, out);
        Err(unsupported(self, "dequantize", "int8 quantization is not implemented yet"))
    }

    /// c (i32) = op(a)·op(b) with a, b i8, products accumulated exactly in i32 (wrapping past
    /// ±2³¹, which needs k > 133 000 at ±127); shapes as for `CoreOps::matmul`. Rescaling to
    /// f32 is a `dequantize` with the product of the scales.
    fn matmul_i8(&mut self, a: &Self::Tensor, b: &Self::Tensor, c: &mut Self::Tensor, trans_a: bool, trans_b: bool) -> Result<()> {
        let _ = (a, b, c, trans_a, trans_b);
        Err(unsupported(self, "matmul_i8", "int8 quantization is not implemented yet"))
    }

    /// out (f32) = epilogue(op(a)·op(b)) with a, b i8: the i32 sums of `matmul_i8`, each
    /// finished into f32 by `epi` (`Dequant`: · scale, + bias, ReLU) where it is computed, so
    /// no i32 tensor is written. Equal bit for bit to `matmul_i8_dequant_unfused` (this
    /// default, for a backend without a fused kernel).
    fn matmul_i8_dequant(
        &mut self,
        a: &Self::Tensor,
        b: &Self::Tensor,
        out: &mut Self::Tensor,
        trans_a: bool,
        trans_b: bool,
        epi: Dequant<'_, Self::Tensor>,
    ) -> Result<()> {
        matmul_i8_dequant_unfused(self, a, b, out, trans_a, trans_b, epi)
    }
}

/// `matmul_i8_dequant` as separate ops: `matmul_i8` into an i32 tensor, then `dequantize`,
/// `bias_add`, `relu`. The default of every backend without a fused kernel, and what the fused
/// kernels are tested against.
pub fn matmul_i8_dequant_unfused<B: QuantOps + ?Sized>(
    be: &mut B,
    a: &B::Tensor,
    b: &B::Tensor,
    out: &mut B::Tensor,
    trans_a: bool,
    trans_b: bool,
    epi: Dequant<'_, B::Tensor>,
) -> Result<()> {
    if let Some(why) = be.quant_unavailable() {
        return Err(unsupported(be, "matmul_i8_dequant", &why));
    }
    checks::matmul_i8_dequant(a, b, out, trans_a, trans_b, &epi)?;
    let mut acc = be.empty(out.shape(), DType::I32, MemCategory::Activations)?;
    be.matmul_i8(a, b, &mut acc, trans_a, trans_b)?;
    // The separate ops take one scale tensor: s_x · s_W[col] formed on the host (one read).
    let combined = match epi.act_scale {
        Some(act) => {
            let sx = be.read_f32(act)?[0];
            let s: Vec<f32> = be.read_f32(epi.scales)?.iter().map(|w| sx * w).collect();
            Some(be.upload_f32(&s, epi.scales.shape(), MemCategory::Activations)?)
        }
        None => None,
    };
    be.dequantize(&acc, combined.as_ref().unwrap_or(epi.scales), out)?;
    if let Some(bias) = epi.bias {
        be.bias_add(out, bias)?;
    }
    if epi.relu {
        be.relu(out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn quantize_value_rounds_half_to_even_and_saturates() {
        let reference = |v: f32, s: f32| {
            let q = (v / s).round_ties_even();
            if q.is_nan() { 0 } else { q.clamp(-127.0, 127.0) as i8 }
        };
        let mut vals = vec![
            0.5f32,
            1.5,
            2.5,
            -0.5,
            -1.5,
            -2.5,
            126.5,
            -126.5,
            127.5,
            -127.5,
            128.0,
            1e30,
            -1e30,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -0.0,
            0.49999997,
        ];
        vals.extend((0..20000).map(|i| (i as f32 - 10000.0) * 0.0137));
        for &v in &vals {
            for s in [1.0f32, 0.01, 0.37, 3.0] {
                assert_eq!(super::quantize_value(v, s), reference(v, s), "{v} / {s}");
            }
        }
    }
}
