use serde::{Deserialize, Serialize};

use super::{DType, Epilogue, HostData, MemCategory, MemoryReport, Shape};
use crate::error::Result;

/// What a tensor of any backend can tell about itself.
pub trait TensorMeta {
    fn shape(&self) -> Shape;
    fn dtype(&self) -> DType;
    fn numel(&self) -> usize {
        self.shape()[0] * self.shape()[1]
    }
}

/// How a backend describes itself in every output and report.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BackendInfo {
    /// "cpu", "gpu" or "cuda".
    pub kind: String,
    /// Adapter or CPU name.
    pub name: String,
    /// Graphics API (Vulkan, Metal, Dx12, Gl) for GPUs; "native" for the CPU.
    pub api: String,
    pub driver: String,
    /// wgpu's device type: DiscreteGpu, IntegratedGpu, VirtualGpu, Cpu, Other.
    pub device_type: String,
    /// True for adapters that are emulated on the CPU (llvmpipe, WARP, SwiftShader).
    pub software: bool,
    /// Whether per-step GPU busy time can be measured with timestamp queries.
    pub timestamps: bool,
}

impl BackendInfo {
    /// A one-line label, with the software-GPU warning where it applies.
    pub fn label(&self) -> String {
        let warn = if self.software { " [software GPU: runs on your CPU]" } else { "" };
        match self.kind.as_str() {
            "cpu" => format!("CPU: {}", self.name),
            _ => format!("{} {} ({}, {}){warn}", self.kind.to_uppercase(), self.name, self.api, self.device_type),
        }
    }
}

/// SGD with momentum, PyTorch semantics: v = μ·v + (g + wd·p); p -= lr·v.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct Sgd {
    pub lr: f32,
    pub momentum: f32,
    pub weight_decay: f32,
}

/// AdamW (decoupled weight decay), PyTorch semantics; `step` counts from 1.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct AdamW {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
}

/// The op set. The model and training loop are written once against it; the CPU backend is
/// the reference every GPU kernel is tested against.
///
/// Outputs are passed as `&mut` and must not alias inputs. GPU backends only *record* ops;
/// `flush` submits what was recorded and `read_*` waits for it.
pub trait Backend {
    type Tensor: TensorMeta;

    fn info(&self) -> BackendInfo;

    /// A zero-filled tensor.
    fn zeros(&mut self, shape: Shape, dtype: DType, cat: MemCategory) -> Result<Self::Tensor>;
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
    /// out[0, c] = Σ_r x[r, c]  (bias gradients); x may be f32 or 16-bit, the sum is f32.
    fn sum_cols(&mut self, x: &Self::Tensor, out: &mut Self::Tensor) -> Result<()>;
    /// out[0, r] = Σ_c x[r, c]
    fn sum_rows(&mut self, x: &Self::Tensor, out: &mut Self::Tensor) -> Result<()>;
    /// acc[0, index] += Σ x  (running loss sums that are read back only now and then)
    fn accumulate_sum(&mut self, x: &Self::Tensor, acc: &mut Self::Tensor, index: usize) -> Result<()>;
    /// out[0, r] = argmax_c x[r, c] (first maximum wins), as u32.
    fn argmax_rows(&mut self, x: &Self::Tensor, out: &mut Self::Tensor) -> Result<()>;
    /// acc[0, index] += #{r : argmax_c logits[r, c] == labels[r]}, as u32.
    fn count_correct(
        &mut self,
        logits: &Self::Tensor,
        labels: &Self::Tensor,
        acc: &mut Self::Tensor,
        index: usize,
    ) -> Result<()>;
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
    fn fill(&mut self, t: &mut Self::Tensor, value: f32) -> Result<()>;
    /// t *= alpha
    fn scale(&mut self, t: &mut Self::Tensor, alpha: f32) -> Result<()>;
    fn copy(&mut self, src: &Self::Tensor, dst: &mut Self::Tensor) -> Result<()>;

    // Mixed precision (`nn::amp`). F16/BF16 tensors are read and written as f32 through
    // `read_f32`/`write_f32`, which round on the host exactly as the kernels do.

    /// Why `dtype` cannot be computed on this backend, or None when it can.
    fn amp_unavailable(&self, dtype: DType) -> Option<String> {
        Some(format!("{} is not supported by this backend", dtype.name()))
    }
    /// out = round(x) between f32 and a 16-bit type, either way. When `stats` ([1, 2] u32) is
    /// given, it gains [#nonzero inputs, #of those that rounded to zero].
    fn cast(&mut self, x: &Self::Tensor, out: &mut Self::Tensor, stats: Option<&mut Self::Tensor>) -> Result<()> {
        let _ = (x, out, stats);
        Err(crate::error::Error::Unsupported("cast is not supported by this backend".into()))
    }
    /// c = epilogue(op(a)·op(b)) with a, b in one 16-bit type, products summed in f32, the
    /// result stored in c's type (f32, or a's type). `stats` as for `cast`, over the stored values.
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
        Err(crate::error::Error::Unsupported("16-bit matmul is not supported by this backend".into()))
    }
    /// GradScaler's unscale: g *= inv_scale, and found[0, 0] = 1 if any g was inf or NaN —
    /// one pass for both.
    fn unscale_check(&mut self, g: &mut Self::Tensor, inv_scale: f32, found: &mut Self::Tensor) -> Result<()> {
        let _ = (g, inv_scale, found);
        Err(crate::error::Error::Unsupported("gradient unscaling is not supported by this backend".into()))
    }

    /// Compiles whatever the backend compiles lazily (GPU pipelines), so timed work that
    /// follows does not pay for it. A no-op where nothing is compiled.
    fn prepare(&mut self) -> Result<()> {
        Ok(())
    }

    /// Submits recorded work (no-op on the CPU). A training step calls it once.
    fn flush(&mut self) -> Result<()>;
    /// Waits until all submitted work has finished.
    fn sync(&mut self) -> Result<()>;
    /// GPU busy time measured by timestamp queries since the last call, in seconds;
    /// `None` where the backend cannot measure it.
    fn take_busy_seconds(&mut self) -> Result<Option<f64>>;
    fn memory(&self) -> MemoryReport;
    /// Forgets peak memory figures, e.g. between the runs of a sweep.
    fn reset_memory_peaks(&mut self);
}

/// Per-step AdamW factors, computed once on the host so every backend uses the same values.
#[derive(Clone, Copy, Debug)]
pub struct AdamFactors {
    /// 1 − lr·wd (decoupled weight decay)
    pub decay: f32,
    /// lr / (1 − β1^t)
    pub step_size: f32,
    /// √(1 − β2^t)
    pub bias2_sqrt: f32,
}

impl AdamW {
    pub fn factors(&self, step: u32) -> AdamFactors {
        let t = step.max(1) as i32;
        let bc1 = 1.0 - (self.beta1 as f64).powi(t);
        let bc2 = 1.0 - (self.beta2 as f64).powi(t);
        AdamFactors {
            decay: 1.0 - self.lr * self.weight_decay,
            step_size: (self.lr as f64 / bc1) as f32,
            bias2_sqrt: bc2.sqrt() as f32,
        }
    }
}
