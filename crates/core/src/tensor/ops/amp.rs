use super::{BackendBase, unsupported};
use crate::error::Result;
use crate::tensor::scaler::{AmpOptimizer, ScalerRule};
use crate::tensor::{DType, Epilogue, ParamRefs};

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

    /// g *= scale, the loss scale held in the scaler state (`tensor::scaler`): the loss
    /// gradient is scaled without the host knowing the scale.
    fn scale_by_loss_scale(&mut self, g: &mut Self::Tensor, state: &Self::Tensor) -> Result<()> {
        let _ = (g, state);
        Err(unsupported(self, "scale_by_loss_scale", "mixed precision is not implemented here"))
    }

    /// GradScaler's unscale: g *= the state's inv_scale, and the state's FOUND_INF word = 1 if
    /// any g was inf or NaN — one pass for both, no read-back.
    fn unscale_check(&mut self, g: &mut Self::Tensor, state: &mut Self::Tensor) -> Result<()> {
        let _ = (g, state);
        Err(unsupported(self, "unscale_check", "mixed precision is not implemented here"))
    }

    /// One optimizer step of an f32 master parameter `p` (state `slots`: SGD's velocity, or
    /// AdamW's two moments), a no-op when the state's FOUND_INF is set (PyTorch's fused path).
    /// AdamW's bias correction uses t = the state's STEPS + 1 (skipped steps do not count). With
    /// `w16`, the updated weight is also rounded into that 16-bit copy in the same pass.
    fn amp_update(
        &mut self,
        p: &mut Self::Tensor,
        g: &Self::Tensor,
        slots: &mut [Self::Tensor],
        opt: AmpOptimizer<'_, Self::Tensor>,
        state: &Self::Tensor,
        w16: Option<&mut Self::Tensor>,
    ) -> Result<()> {
        let _ = (p, g, slots, opt, state, w16);
        Err(unsupported(self, "amp_update", "mixed precision is not implemented here"))
    }

    /// `unscale_check` on every gradient of a step, in order (this default); a backend may
    /// unscale several in one launch.
    fn unscale_checks(&mut self, grads: &mut [&mut Self::Tensor], state: &mut Self::Tensor) -> Result<()> {
        for g in grads.iter_mut() {
            self.unscale_check(g, state)?;
        }
        Ok(())
    }

    /// `amp_update` on every parameter of a step, in order (this default), each with its own
    /// 16-bit copy if it has one; a backend may update several in one launch, with each
    /// element's result the same bits.
    fn amp_updates(
        &mut self,
        params: &mut [ParamRefs<'_, Self::Tensor>],
        opt: AmpOptimizer<'_, Self::Tensor>,
        state: &Self::Tensor,
    ) -> Result<()> {
        for p in params.iter_mut() {
            self.amp_update(p.value, p.grad, p.state, opt, state, p.w16.as_deref_mut())?;
        }
        Ok(())
    }

    /// After a step's updates: `scaler::update_words` on the device (one thread), and the step's
    /// log entry into `log[0, slot]`.
    fn scaler_update(&mut self, state: &mut Self::Tensor, rule: ScalerRule, log: &mut Self::Tensor, slot: usize) -> Result<()> {
        let _ = (state, rule, log, slot);
        Err(unsupported(self, "scaler_update", "mixed precision is not implemented here"))
    }
}
