use super::BackendBase;
use crate::error::Result;
use crate::tensor::{AdamW, DType, HostData, MemCategory, OptStep, ParamRefs, Sgd, Shape, checks};

/// The f32 ops, host transfers and submission control: everything a full-precision training
/// step needs.
///
/// Outputs are passed as `&mut` and must not alias inputs. GPU backends only *record* ops;
/// `flush` submits what was recorded and `read_*` waits for it.
pub trait CoreOps: BackendBase {
    /// A zero-filled tensor of any dtype (I8/I32 included: of CoreOps only zeros and copy take
    /// them; their host transfers and math are `QuantOps`).
    fn zeros(&mut self, shape: Shape, dtype: DType, cat: MemCategory) -> Result<Self::Tensor>;
    /// A tensor the next op overwrites whole (a GEMM's or cast's output): its contents are
    /// unspecified, so a backend may skip the clear (a GPU saves a dispatch). Zeros by default.
    fn empty(&mut self, shape: Shape, dtype: DType, cat: MemCategory) -> Result<Self::Tensor> {
        self.zeros(shape, dtype, cat)
    }
    fn upload_f32(&mut self, data: &[f32], shape: Shape, cat: MemCategory) -> Result<Self::Tensor>;
    fn upload_u32(&mut self, data: &[u32], shape: Shape, cat: MemCategory) -> Result<Self::Tensor>;
    /// Overwrites a tensor's contents (e.g. the next input batch) without reallocating.
    fn write_f32(&mut self, t: &mut Self::Tensor, data: &[f32]) -> Result<()>;
    fn write_u32(&mut self, t: &mut Self::Tensor, data: &[u32]) -> Result<()>;
    fn read_f32(&mut self, t: &Self::Tensor) -> Result<Vec<f32>>;
    fn read_u32(&mut self, t: &Self::Tensor) -> Result<Vec<u32>>;
    /// Reads several tensors with one wait: on a GPU one staging buffer, one submit, one map.
    /// Each comes back as `read_f32` (f32 and 16-bit, widened) or `read_u32` would return it.
    fn read_many(&mut self, ts: &[&Self::Tensor]) -> Result<Vec<HostData>>;
    /// Appends the f32 values of several f32 (or 16-bit, widened) tensors to `out`, with one
    /// wait, as `read_many` would read them. The CPU copies straight from the tensors (one
    /// copy, no temporary per tensor): the gradient staging of data-parallel training.
    fn read_f32_into(&mut self, ts: &[&Self::Tensor], out: &mut Vec<f32>) -> Result<()> {
        for h in self.read_many(ts)? {
            out.extend_from_slice(h.f32()?);
        }
        Ok(())
    }

    /// An f32 tensor's values in place, where the backend keeps them in this process's memory
    /// (the CPU), so a data-parallel replica all-reduces its gradients there instead of
    /// staging a copy out and back (`parallel::reducer`). None elsewhere, and for other dtypes.
    fn host_f32_mut<'t>(&mut self, t: &'t mut Self::Tensor) -> Option<&'t mut [f32]> {
        let _ = t;
        None
    }

    /// c = op(a)·op(b) (+ c when `accumulate`), where op transposes when the flag is set.
    fn matmul(
        &mut self,
        a: &Self::Tensor,
        b: &Self::Tensor,
        c: &mut Self::Tensor,
        trans_a: bool,
        trans_b: bool,
        accumulate: bool,
    ) -> Result<()>;
    /// y[r, c] += bias[c]
    fn bias_add(&mut self, y: &mut Self::Tensor, bias: &Self::Tensor) -> Result<()>;
    /// x = max(x, 0)
    fn relu(&mut self, x: &mut Self::Tensor) -> Result<()>;
    /// y[r, c] = max(y[r, c] + bias[c], 0): the dense layer's epilogue, one pass where the
    /// backend fuses it (a GPU: one dispatch instead of two).
    fn bias_relu(&mut self, y: &mut Self::Tensor, bias: &Self::Tensor) -> Result<()> {
        self.bias_add(y, bias)?;
        self.relu(y)
    }
    /// grad *= (act > 0), where `act` is the ReLU's output.
    fn relu_backward(&mut self, grad: &mut Self::Tensor, act: &Self::Tensor) -> Result<()>;
    /// Fused softmax + cross-entropy. Writes each row's loss into `loss_rows` ([1, rows]) and,
    /// when given, grad = (softmax(logits) − onehot(labels)) · grad_scale.
    fn softmax_xent(
        &mut self,
        logits: &Self::Tensor,
        labels: &Self::Tensor,
        loss_rows: &mut Self::Tensor,
        grad: Option<&mut Self::Tensor>,
        grad_scale: f32,
    ) -> Result<()>;
    /// A batch's loss step: `softmax_xent`, then its loss rows added to loss_sum[0, 0] and its
    /// correct predictions to correct[0, 0] (`accumulate_sum`, `count_correct`), in one pass
    /// where the backend fuses them (a GPU: one dispatch instead of three).
    #[allow(clippy::too_many_arguments)]
    fn loss_step(
        &mut self,
        logits: &Self::Tensor,
        labels: &Self::Tensor,
        loss_rows: &mut Self::Tensor,
        grad: Option<&mut Self::Tensor>,
        grad_scale: f32,
        loss_sum: &mut Self::Tensor,
        correct: &mut Self::Tensor,
    ) -> Result<()> {
        self.softmax_xent(logits, labels, loss_rows, grad, grad_scale)?;
        self.accumulate_sum(loss_rows, loss_sum, 0)?;
        self.count_correct(logits, labels, correct, 0)
    }
    /// out[0, c] = Σ_r x[r, c]  (bias gradients); x may be f32 or 16-bit, the sum is f32.
    fn sum_cols(&mut self, x: &Self::Tensor, out: &mut Self::Tensor) -> Result<()>;
    /// out[0, r] = Σ_c x[r, c]
    fn sum_rows(&mut self, x: &Self::Tensor, out: &mut Self::Tensor) -> Result<()>;
    /// acc[0, index] += Σ x  (running loss sums that are read back only now and then)
    fn accumulate_sum(&mut self, x: &Self::Tensor, acc: &mut Self::Tensor, index: usize) -> Result<()>;
    /// out[0, r] = argmax_c x[r, c] (first maximum wins), as u32.
    fn argmax_rows(&mut self, x: &Self::Tensor, out: &mut Self::Tensor) -> Result<()>;
    /// acc[0, index] += #{r : argmax_c logits[r, c] == labels[r]}, as u32.
    fn count_correct(&mut self, logits: &Self::Tensor, labels: &Self::Tensor, acc: &mut Self::Tensor, index: usize) -> Result<()>;
    fn sgd_step(&mut self, p: &mut Self::Tensor, g: &Self::Tensor, v: &mut Self::Tensor, hp: Sgd) -> Result<()>;
    fn adamw_step(
        &mut self,
        p: &mut Self::Tensor,
        g: &Self::Tensor,
        m: &mut Self::Tensor,
        v: &mut Self::Tensor,
        hp: AdamW,
        step: u32,
    ) -> Result<()>;
    /// One optimizer step over many parameters: `sgd_step`/`adamw_step` on each in order (this
    /// default). A backend may update several in one launch (the GPU: `multi_optim.rs`); each
    /// element's result is the same bits either way.
    fn optimizer_steps(&mut self, params: &mut [ParamRefs<'_, Self::Tensor>], rule: OptStep) -> Result<()> {
        for p in params.iter_mut() {
            checks::opt_slots("optimizer_steps", p.state.len(), rule.slots())?;
            match (rule, &mut *p.state) {
                (OptStep::Sgd(hp), [v]) => self.sgd_step(p.value, p.grad, v, hp)?,
                (OptStep::AdamW(hp, step), [m, v]) => self.adamw_step(p.value, p.grad, m, v, hp, step)?,
                _ => unreachable!("opt_slots checked the state count"),
            }
        }
        Ok(())
    }
    /// Compiles what `optimizer_steps` would run on `params` parameters with `rule`, so the
    /// first timed step does not pay for it. A no-op where nothing is compiled.
    fn prepare_optimizer_steps(&mut self, params: usize, rule: OptStep) -> Result<()> {
        let _ = (params, rule);
        Ok(())
    }
    fn fill(&mut self, t: &mut Self::Tensor, value: f32) -> Result<()>;
    /// t *= alpha
    fn scale(&mut self, t: &mut Self::Tensor, alpha: f32) -> Result<()>;
    fn copy(&mut self, src: &Self::Tensor, dst: &mut Self::Tensor) -> Result<()>;
    /// acc += x, element by element (f32, same shape): gradients summed over micro-batches.
    fn add_to(&mut self, x: &Self::Tensor, acc: &mut Self::Tensor) -> Result<()>;

    /// Compiles whatever the backend compiles lazily (GPU pipelines), so timed work that
    /// follows does not pay for it. A no-op where nothing is compiled.
    fn prepare(&mut self) -> Result<()> {
        Ok(())
    }

    /// Submits recorded work (no-op on the CPU). A training step calls it once.
    fn flush(&mut self) -> Result<()>;
    /// Waits until all submitted work has finished.
    fn sync(&mut self) -> Result<()>;
}
