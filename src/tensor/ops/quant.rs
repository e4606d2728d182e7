use serde::{Deserialize, Serialize};

use super::{BackendBase, unsupported};
use crate::error::Result;

/// How many scales a quantized tensor carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum QuantGranularity {
    /// One scale for the whole tensor: scales are [1, 1].
    PerTensor,
    /// One scale per output channel, i.e. per column of a [in, out] weight: scales are [1, cols].
    PerChannel,
}

/// INT8 quantization (declared now so the INT8 issue only implements it). Symmetric: a value
/// v is stored as q = clamp(round(v / scale), −127, 127), and read back as q · scale. I8
/// tensors take one byte per element (the GPU packs four per 32-bit word), so the ledger
/// counts an int8 weight at a quarter of its f32 size. Until a backend implements this family
/// every method refuses by name.
pub trait QuantOps: BackendBase {
    /// Why int8 cannot be computed on this backend, or None when it can.
    fn quant_unavailable(&self) -> Option<String> {
        Some("int8 quantization is not implemented in this version of gpulab".into())
    }

    /// f32 `x` → i8 `q` (same shape), writing the f32 `scales` it chose (absmax / 127 per
    /// tensor or per column, see `QuantGranularity`; a zero range gets scale 1).
    fn quantize(&mut self, x: &Self::Tensor, q: &mut Self::Tensor, scales: &mut Self::Tensor, granularity: QuantGranularity) -> Result<()> {
        let _ = (x, q, scales, granularity);
        Err(unsupported(self, "quantize", "int8 quantization is not implemented yet"))
    }

    /// out (f32) = q · scale, where q is i8 (from `quantize`) or i32 (from `matmul_i8`) and
    /// `scales` is [1, 1] or [1, cols] f32.
    fn dequantize(&mut self, q: &Self::Tensor, scales: &Self::Tensor, out: &mut Self::Tensor) -> Result<()> {
        let _ = (q, scales, out);
        Err(unsupported(self, "dequantize", "int8 quantization is not implemented yet"))
    }

    /// c (i32) = op(a)·op(b) with a, b i8, products accumulated exactly in i32; shapes as for
    /// `CoreOps::matmul`. Rescaling to f32 is a `dequantize` with the product of the scales.
    fn matmul_i8(&mut self, a: &Self::Tensor, b: &Self::Tensor, c: &mut Self::Tensor, trans_a: bool, trans_b: bool) -> Result<()> {
        let _ = (a, b, c, trans_a, trans_b);
        Err(unsupported(self, "matmul_i8", "int8 quantization is not implemented yet"))
    }
}
