//! The autocast policy, as PyTorch's AMP applies it to an MLP:
//! - f32 master weights (the optimizer updates those); a 16-bit working copy is cast from them
//!   once per step, in one pass per weight;
//! - matmuls, forward and backward, take 16-bit operands and sum products in f32; their
//!   epilogues (bias + ReLU forward, the ReLU mask backward, the rounding to 16 bits) are fused
//!   into the matmul, so no f32 copy of an activation is ever stored;
//! - softmax, the loss, the bias-gradient sums and the optimizer run in f32;
//! - with a `GradScaler`, the loss gradient is multiplied by the scale inside the fused
//!   softmax-cross-entropy kernel (free), and unscaling is one fused pass per gradient that
//!   also flags inf/NaN.

use serde::{Deserialize, Serialize};

use super::step::{Phases, StepBuffers, no_scaler};
use crate::error::Result;
use crate::nn::{Accumulators, AmpConfig, GradScaler, GradScalerState, Mlp, MlpConfig, ScalerStep, Totals};
use crate::tensor::{Backend, DType, Epilogue, MemCategory, TensorMeta};

/// What a mixed-precision run adds to its report. All measured in this run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct AmpReport {
    pub label: String,
    /// (step, loss scale in effect for that step), every step; empty without a scaler.
    pub scale_history: Vec<[f64; 2]>,
    /// Steps whose gradients overflowed, so the optimizer step was skipped.
    pub skipped_steps: Vec<u64>,
    /// Gradient elements (16-bit activation gradients) that were nonzero in f32 before rounding.
    pub grad_elements_nonzero: u64,
    /// Of those, how many rounded to zero in 16 bits (underflow).
    pub grad_elements_flushed: u64,
}

impl AmpReport {
    pub fn flushed_fraction(&self) -> f64 {
        self.grad_elements_flushed as f64 / self.grad_elements_nonzero.max(1) as f64
    }
}

/// Per-batch-size buffers in 16 bits: the input, the hidden activations and the activation
/// gradients. The logits and their gradient stay f32 (softmax and loss are f32 ops).
pub struct AmpWorkspace<B: Backend> {
    pub batch: usize,
    x: B::Tensor,
    y: B::Tensor,
    acts: Vec<B::Tensor>,
    logits: B::Tensor,
    grad_logits: Option<B::Tensor>,
    grads: Vec<B::Tensor>,
    /// Loss, correct count and [#nonzero, #flushed] over the 16-bit activation gradients.
    acc: Accumulators<B>,
}

impl<B: Backend> AmpWorkspace<B> {
    pub fn new(b: &mut B, cfg: &MlpConfig, dt: DType, batch: usize, with_grads: bool) -> Result<Self> {
        let widths = cfg.widths();
        let hidden = &widths[1..widths.len() - 1];
        let acts = hidden.iter().map(|&w| b.zeros([batch, w], dt, MemCategory::Activations)).collect::<Result<_>>()?;
        let grads = if with_grads { widths[1..].iter().map(|&w| b.zeros([batch, w], dt, MemCategory::Activations)).collect::<Result<_>>()? } else { Vec::new() };
        Ok(AmpWorkspace {
            batch,
            x: b.zeros([batch, cfg.input], dt, MemCategory::Inputs)?,
            y: b.zeros([1, batch], DType::U32, MemCategory::Inputs)?,
            acts,
            logits: b.zeros([batch, cfg.classes], DType::F32, MemCategory::Activations)?,
            grad_logits: if with_grads { Some(b.zeros([batch, cfg.classes], DType::F32, MemCategory::Activations)?) } else { None },
            grads,
            acc: Accumulators::new(b, batch, true)?,
        })
    }
}

impl<B: Backend> StepBuffers<B> for AmpWorkspace<B> {
    fn rows(&self) -> usize {
        self.batch
    }

    /// The input tensors: writing f32 rows into the 16-bit `x` rounds them on the host (no
    /// cast pass, half the upload).
    fn inputs(&mut self) -> (&mut B::Tensor, &mut B::Tensor) {
        (&mut self.x, &mut self.y)
    }

    fn logits(&self) -> &B::Tensor {
        &self.logits
    }

    fn accumulators(&mut self) -> &mut Accumulators<B> {
        &mut self.acc
    }

    fn score(&mut self, b: &mut B) -> Result<()> {
        self.acc.record(b, &self.logits, &self.y, None, 1.0)
    }
}

/// The mixed-precision state of a training run: the 16-bit weight copies, the scaler and what
/// happened to it.
pub struct Amp<B: Backend> {
    pub dt: DType,
    pub cfg: AmpConfig,
    w16: Vec<B::Tensor>,
    found_inf: B::Tensor,
    pub scaler: Option<GradScaler>,
    pub report: AmpReport,
}

impl<B: Backend> Amp<B> {
    /// None for f32 runs; an error naming the reason when the backend cannot run `cfg`'s type.
    pub fn new(b: &mut B, model: &Mlp<B>, cfg: AmpConfig) -> Result<Option<Self>> {
        let Some(dt) = cfg.precision.dtype16() else { return Ok(None) };
        if let Some(why) = b.amp_unavailable(dt) {
            return Err(crate::error::Error::Unsupported(format!("{} training is unavailable on {}: {why}", dt.name(), b.info().label())));
        }
        let w16 = model.weights.iter().map(|w| b.zeros(w.value.shape(), dt, MemCategory::Parameters)).collect::<Result<_>>()?;
        let scaler = if cfg.scaling() { Some(GradScaler::new(cfg.scaler)?) } else { None };
        Ok(Some(Amp {
            dt,
            cfg,
            w16,
            found_inf: b.zeros([1, 1], DType::U32, MemCategory::Other)?,
            scaler,
            report: AmpReport { label: cfg.label(), ..Default::default() },
        }))
    }
}

impl<B: Backend> Phases<B> for Amp<B> {
    type Buffers = AmpWorkspace<B>;

    fn buffers(&self, b: &mut B, cfg: &MlpConfig, rows: usize, training: bool) -> Result<AmpWorkspace<B>> {
        AmpWorkspace::new(b, cfg, self.dt, rows, training)
    }

    /// Casts the f32 master weights into their 16-bit working copies.
    fn refresh_weights(&mut self, b: &mut B, model: &Mlp<B>) -> Result<()> {
        for (w, lo) in model.weights.iter().zip(self.w16.iter_mut()) {
            b.cast(&w.value, lo, None)?;
        }
        Ok(())
    }

    /// Forward pass of `ws.x` into `ws.logits`.
    fn forward(&self, b: &mut B, model: &Mlp<B>, ws: &mut AmpWorkspace<B>) -> Result<()> {
        let last = self.w16.len() - 1;
        for i in 0..=last {
            let bias = Epilogue::Bias { bias: &model.biases[i].value, relu: i < last };
            let (done, rest) = ws.acts.split_at_mut(i);
            let input = if i == 0 { &ws.x } else { &done[i - 1] };
            let out = if i < last { &mut rest[0] } else { &mut ws.logits };
            b.matmul16(input, &self.w16[i], out, false, false, bias, None)?;
        }
        Ok(())
    }

    /// Loss, correct count and every parameter's f32 gradient (scaled when a scaler runs).
    fn backward(&self, b: &mut B, model: &mut Mlp<B>, ws: &mut AmpWorkspace<B>) -> Result<()> {
        let last = self.w16.len() - 1;
        let scale = self.scaler.as_ref().map_or(1.0, |s| s.scale());
        let grad_scale = scale * self.cfg.loss_weight / ws.batch as f32;
        let grad_logits = ws.grad_logits.as_mut().expect("a training workspace has gradients");
        ws.acc.record(b, &ws.logits, &ws.y, Some(&mut *grad_logits), grad_scale)?;
        b.cast(grad_logits, &mut ws.grads[last], ws.acc.grad16.as_mut())?;
        for i in (0..=last).rev() {
            let input = if i == 0 { &ws.x } else { &ws.acts[i - 1] };
            b.matmul16(input, &ws.grads[i], &mut model.weights[i].grad, true, false, Epilogue::None, None)?;
            b.sum_cols(&ws.grads[i], &mut model.biases[i].grad)?;
            if i > 0 {
                let (before, after) = ws.grads.split_at_mut(i);
                b.matmul16(&after[0], &self.w16[i], &mut before[i - 1], false, true, Epilogue::ReluMask(&ws.acts[i - 1]), ws.acc.grad16.as_mut())?;
            }
        }
        Ok(())
    }

    /// The optimizer step, unless the scaler finds an inf/NaN gradient (then the step is
    /// skipped and the scale backs off). Reads one flag back per step when scaling.
    fn apply_update(&mut self, b: &mut B, model: &mut Mlp<B>, step: u64) -> Result<()> {
        let Some(scaler) = self.scaler.as_mut() else { return model.update(b) };
        self.report.scale_history.push([step as f64, scaler.scale() as f64]);
        b.fill(&mut self.found_inf, 0.0)?;
        let inv = scaler.inv_scale();
        for p in model.weights.iter_mut().chain(model.biases.iter_mut()) {
            b.unscale_check(&mut p.grad, inv, &mut self.found_inf)?;
        }
        let found = b.read_u32(&self.found_inf)?[0] != 0;
        if scaler.update(found) == ScalerStep::Skipped {
            self.report.skipped_steps.push(step);
            return Ok(());
        }
        model.update(b)
    }

    fn absorb(&mut self, totals: &Totals) {
        self.report.grad_elements_nonzero += totals.grad16[0];
        self.report.grad_elements_flushed += totals.grad16[1];
    }

    fn scaler_state(&self) -> Option<GradScalerState> {
        self.scaler.as_ref().map(|s| s.state)
    }

    fn restore_scaler(&mut self, state: GradScalerState) -> Result<()> {
        match self.scaler.as_mut() {
            Some(s) => {
                s.state = state;
                Ok(())
            }
            None => Err(no_scaler()),
        }
    }

    fn into_amp_report(self) -> Option<AmpReport> {
        Some(self.report)
    }
}
