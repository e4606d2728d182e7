use super::{BackendBase, unsupported};
use crate::error::Result;
use crate::tensor::{DType, Epilogue};

/// Mixed precision (`nn::amp`). F16/BF16 tensors are read and written as f32 through
/// `read_f32`/`write_f32`, which round on the host exactly as the kernels do. Validation of
/// every call lives in `tensor::checks`, so each backend refuses the same calls alike.
pub trait AmpOps: BackendBase {
    /// Why `dtype` cannot be computed on this backend, or None when it can.
    fn amp_unavailable(&self, dtype: DType) -> Option<String> {
        Some(format!("{} is not supported by this backend", dtype.name()))
    }

    /// out = round(x) between f32 and a 16-bit type, either way. `stats` ([1, 2] u32) is only
    /// for f32 → 16-bit: it gains [#nonzero inputs, #of those that rounded to zero].
    fn cast(&mut self, x: &Self::Tensor, out: &mut Self::Tensor, stats: Option<&mut Self::Tensor>) -> Result<()> {
        let _ = (x, out, stats);
        Err(unsupported(self, "cast", "mixed precision is not implemented here"))
    }

    /// c = epilogue(op(a)·op(b)) with a, b in one 16-bit type, products summed in f32, the
    /// result stored in c's type (f32, or a's type). A ReLU mask and `stats` (as for `cast`,
    /// over the stored values) need the 16-bit output (see `checks::matmul16`).
    #[allow(clippy::too_many_arguments)]
    fn matmul16(
        &mut self,
        a: &Self::Tensor,
        b: &Self::Tensor,
        c: &mut Self::Tensor,
        trans_a: bool,
        trans_b: bool,
        epilogue: Epilogue<'_, Self::Tensor>,
        stats: Option<&mut Self::Tensor>,
    ) -> Result<()> {
        let _ = (a, b, c, trans_a, trans_b, epilogue, stats);
        Err(unsupported(self, "matmul16", "mixed precision is not implemented here"))
    }

    /// GradScaler's unscale: g *= inv_scale, and found[0, 0] = 1 if any g was inf or NaN —
    /// one pass for both.
    fn unscale_check(&mut self, g: &mut Self::Tensor, inv_scale: f32, found: &mut Self::Tensor) -> Result<()> {
        let _ = (g, inv_scale, found);
        Err(unsupported(self, "unscale_check", "mixed precision is not implemented here"))
    }
}
