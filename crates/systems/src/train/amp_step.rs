//! The autocast policy, as PyTorch's AMP applies it to an MLP:
//! - f32 master weights (the optimizer updates those); the optimizer's pass also rounds each
//!   updated weight into its 16-bit working copy, so no separate cast runs per step (one cast
//!   per weight only before the first step);
//! - matmuls, forward and backward, take 16-bit operands and sum products in f32; their
//!   epilogues (bias + ReLU forward, the ReLU mask backward, the rounding to 16 bits) are fused
//!   into the matmul, so no f32 copy of an activation is ever stored;
//! - softmax, the loss, the bias-gradient sums and the optimizer run in f32;
//! - a CNN's convolutions take 16-bit operands (im2col's rounded columns, or the rounded images
//!   of a fused stage) and 16-bit weight copies like the dense layers; ReLU and pooling between
//!   them stay f32 (`nn::cnn`);
//! - the GradScaler runs on the device without a per-step sync (`tensor::scaler`): the loss
//!   gradient is multiplied by the state's scale, unscaling is one fused pass per gradient that
//!   also flags inf/NaN, the optimizer kernels skip when the flag is set, and one `scaler_update`
//!   thread applies PyTorch's growth/backoff rule. The host reads the state and a per-step log
//!   (scale in effect, skipped or not) with the loss totals at each log window, and the state
//!   alone when a checkpoint asks for it.

use serde::{Deserialize, Serialize};

use super::step::{LayerDone, Phases, StepBuffers, no_scaler};
use crate::nn::cnn::StemWorkspace;
use crate::nn::pass::{self, Tape, Weights};
use crate::nn::{Accumulators, AmpConfig, GradScaler, GradScalerState, GradWrite, Mlp, MlpConfig, Optimizer, Param, Totals};
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::scaler::{self, AmpOptimizer, SKIPPED_BIT, ScalerRule, word};
use gpulab_core::tensor::{Backend, DType, HostData, MemCategory, ParamRefs, TensorMeta};

/// Steps the device log holds between two reads; a longer log window reads it early (one sync).
const LOG_SLOTS: usize = 1024;
/// Rows of AdamW's factor table allocated first; doubled when the run goes past them.
const ADAM_TABLE_ROWS: usize = 1024;

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
/// gradients. The logits (the last of `acts`) and their gradient stay f32 (softmax and loss are
/// f32 ops). A CNN's
/// input images stay f32 (its first convolution rounds them) and its dense head reads `head_x`.
pub struct AmpWorkspace<B: Backend> {
    pub batch: usize,
    x: B::Tensor,
    /// A CNN's convolution buffers (16-bit columns where a stage is not fused), and its pooled
    /// maps rounded to 16 bits: the dense head's input.
    stem: Option<(StemWorkspace<B>, B::Tensor)>,
    y: B::Tensor,
    /// Each layer's output: the hidden ones 16-bit, the logits f32.
    acts: Vec<B::Tensor>,
    grad_logits: Option<B::Tensor>,
    grads: Vec<B::Tensor>,
    /// Loss, correct count and [#nonzero, #flushed] over the 16-bit activation gradients.
    acc: Accumulators<B>,
    /// Activation recomputation: `acts` and `grads` hold only the logits' (f32) and their
    /// 16-bit gradient; backward recomputes the hidden outputs (`recomputing`).
    recompute: bool,
}

impl<B: Backend> AmpWorkspace<B> {
    pub fn new(b: &mut B, cfg: &MlpConfig, dt: DType, batch: usize, with_grads: bool) -> Result<Self> {
        Self::build(b, cfg, dt, batch, with_grads, false)
    }

    /// A training workspace for activation recomputation: of the dense layers' outputs and
    /// gradients it holds only the logits' (a CNN's convolution buffers are kept whole).
    pub fn recomputing(b: &mut B, cfg: &MlpConfig, dt: DType, batch: usize) -> Result<Self> {
        Self::build(b, cfg, dt, batch, true, true)
    }

    fn build(b: &mut B, cfg: &MlpConfig, dt: DType, batch: usize, with_grads: bool, recompute: bool) -> Result<Self> {
        let widths = cfg.widths();
        let hidden = if recompute { &[][..] } else { &widths[1..widths.len() - 1] };
        let grad_widths = if recompute { &widths[widths.len() - 1..] } else { &widths[1..] };
        let mut acts: Vec<B::Tensor> = hidden.iter().map(|&w| b.zeros([batch, w], dt, MemCategory::Activations)).collect::<Result<_>>()?;
        let grads = if with_grads {
            grad_widths.iter().map(|&w| b.zeros([batch, w], dt, MemCategory::Activations)).collect::<Result<_>>()?
        } else {
            Vec::new()
        };
        let stem = match &cfg.conv {
            None => None,
            Some(c) => {
                Some((StemWorkspace::new(b, c, batch, with_grads, dt)?, b.zeros([batch, cfg.dense_input()], dt, MemCategory::Activations)?))
            }
        };
        let x_type = if stem.is_some() { DType::F32 } else { dt };
        let x = b.zeros([batch, cfg.input], x_type, MemCategory::Inputs)?;
        let y = b.zeros([1, batch], DType::U32, MemCategory::Inputs)?;
        acts.push(b.zeros([batch, cfg.classes], DType::F32, MemCategory::Activations)?);
        Ok(AmpWorkspace {
            batch,
            x,
            stem,
            y,
            acts,
            grad_logits: if with_grads { Some(b.zeros([batch, cfg.classes], DType::F32, MemCategory::Activations)?) } else { None },
            grads,
            acc: Accumulators::new(b, batch, true)?,
            recompute,
        })
    }
}

impl<B: Backend> AmpWorkspace<B> {
    /// The buffers as the model-level pass borrows them.
    fn tape(&mut self) -> Tape<'_, B> {
        let (stem, head_x) = match self.stem.as_mut() {
            Some((sw, head_x)) => (Some(sw), Some(head_x)),
            None => (None, None),
        };
        Tape {
            x: &self.x,
            stem,
            head_x,
            acts: &mut self.acts,
            grads: &mut self.grads,
            grad16: self.acc.grad16.as_mut(),
            recompute: self.recompute,
        }
    }
}

impl<B: Backend> StepBuffers<B> for AmpWorkspace<B> {
    fn rows(&self) -> usize {
        self.batch
    }

    /// The input tensors: writing f32 rows into an MLP's 16-bit `x` rounds them on the host
    /// (no cast pass, half the upload).
    fn inputs(&mut self) -> (&mut B::Tensor, &mut B::Tensor) {
        (&mut self.x, &mut self.y)
    }

    fn logits(&self) -> &B::Tensor {
        self.acts.last().expect("a model has at least one layer")
    }

    fn accumulators(&mut self) -> &mut Accumulators<B> {
        &mut self.acc
    }

    fn score(&mut self, b: &mut B) -> Result<()> {
        let logits = self.acts.last().expect("a model has at least one layer");
        self.acc.record(b, logits, &self.y, None, 1.0)
    }
}

/// The mixed-precision state of a training run: the 16-bit weight copies, the device scaler
/// state and what happened to it.
pub struct Amp<B: Backend> {
    pub dt: DType,
    pub cfg: AmpConfig,
    w16: Vec<B::Tensor>,
    /// The 16-bit copies of a CNN's convolution weights (empty for an MLP).
    stem_w16: Vec<B::Tensor>,
    /// Whether `w16` holds the rounding of the current master weights (the fused update keeps it
    /// so; false until the first cast).
    w16_fresh: bool,
    /// `[1, STATE_WORDS]` U32, tensor::scaler's layout. Runs without a scaler keep it too: its
    /// step count drives AdamW's bias correction and its flag never rises.
    state: B::Tensor,
    /// `[1, LOG_SLOTS]` U32: per step since the last read, the scale in effect | SKIPPED_BIT.
    log: B::Tensor,
    /// The steps whose log entries have not been read yet, in order (entry i is slot i).
    unlogged: Vec<u64>,
    rule: ScalerRule,
    /// AdamW's factors by on-device step count, and how many rows it has.
    adam_table: Option<(B::Tensor, usize)>,
    /// Optimizer steps before this run's first (a resumed run's), and updates issued since: an
    /// upper bound on the on-device count, which sizes the factor table.
    steps_base: u64,
    issued: u64,
    /// The host's copy of the scaler: its config, and its state as of the last read.
    pub scaler: Option<GradScaler>,
    pub report: AmpReport,
}

impl<B: Backend> Amp<B> {
    /// None for f32 runs; an error naming the reason when the backend cannot run `cfg`'s type.
    pub fn new(b: &mut B, model: &Mlp<B>, cfg: AmpConfig) -> Result<Option<Self>> {
        let Some(dt) = cfg.precision.dtype16() else { return Ok(None) };
        if let Some(why) = b.amp_unavailable(dt) {
            return Err(Error::Unsupported(format!("{} training is unavailable on {}: {why}", dt.name(), b.info().label())));
        }
        let copy = |b: &mut B, w: &Param<B>| b.zeros(w.value.shape(), dt, MemCategory::Parameters);
        let w16 = model.weights.iter().map(|w| copy(b, w)).collect::<Result<_>>()?;
        let stem_w16 = model.stem.iter().flat_map(|s| &s.weights).map(|w| copy(b, w)).collect::<Result<_>>()?;
        let scaler = if cfg.scaling() { Some(GradScaler::new(cfg.scaler)?) } else { None };
        let c = cfg.scaler;
        let rule = ScalerRule {
            scaling: scaler.is_some(),
            growth_factor: c.growth_factor,
            backoff_factor: c.backoff_factor,
            growth_interval: c.growth_interval,
            min_scale: c.min_scale,
        };
        let steps_base = model.step as u64;
        let mut state = b.zeros([1, scaler::STATE_WORDS], DType::U32, MemCategory::OptimizerState)?;
        b.write_u32(&mut state, &scaler::state_words(scaler.map_or(1.0, |s| s.scale()), 0, model.step))?;
        let rows = ADAM_TABLE_ROWS.max(model.step as usize + 1);
        let adam_table = match model.optimizer {
            Optimizer::AdamW(hp) => Some((adam_table(b, hp, rows)?, rows)),
            Optimizer::Sgd(_) => None,
        };
        Ok(Some(Amp {
            dt,
            cfg,
            w16,
            stem_w16,
            w16_fresh: false,
            state,
            log: b.zeros([1, LOG_SLOTS], DType::U32, MemCategory::Other)?,
            unlogged: Vec::new(),
            rule,
            adam_table,
            steps_base,
            issued: 0,
            scaler,
            report: AmpReport { label: cfg.label(), ..Default::default() },
        }))
    }

    /// Takes in the state and log words read back: the scale history and skipped steps of every
    /// step since the last read, and the host's copy of the scaler state.
    fn absorb_window(&mut self, state: &HostData, log: &HostData) -> Result<()> {
        let (state, log) = (state.u32()?, log.u32()?);
        let short = || Error::Internal("the scaler state or log read back short".into());
        for (slot, &step) in self.unlogged.iter().enumerate() {
            let entry = *log.get(slot).ok_or_else(short)?;
            if self.rule.scaling {
                self.report.scale_history.push([step as f64, f32::from_bits(entry & !SKIPPED_BIT) as f64]);
                if entry & SKIPPED_BIT != 0 {
                    self.report.skipped_steps.push(step);
                }
            }
        }
        self.unlogged.clear();
        if let Some(s) = self.scaler.as_mut() {
            s.state = GradScalerState {
                scale: f32::from_bits(*state.get(word::SCALE).ok_or_else(short)?),
                growth_tracker: *state.get(word::TRACKER).ok_or_else(short)?,
            };
        }
        Ok(())
    }

    /// The device state words, read now (a sync).
    fn read_state(&mut self, b: &mut B) -> Result<Vec<u32>> {
        let data = b.read_many(&[&self.state, &self.log])?;
        let [state, log] = data.as_slice() else { return Err(Error::Internal("read_many returned fewer tensors than asked".into())) };
        self.absorb_window(state, log)?;
        Ok(state.u32()?.to_vec())
    }

    /// Grows AdamW's factor table to cover the next step.
    fn ensure_table(&mut self, b: &mut B, opt: Optimizer) -> Result<()> {
        let need = (self.steps_base + self.issued + 1) as usize;
        if let (Optimizer::AdamW(hp), Some((table, rows))) = (opt, self.adam_table.as_mut())
            && need > *rows
        {
            let grown = need.max(2 * *rows);
            *table = adam_table(b, hp, grown)?;
            *rows = grown;
        }
        Ok(())
    }
}

/// The optimizer as the update kernel takes it: AdamW with its factor table.
fn kernel_optimizer<T>(opt: Optimizer, table: Option<&(T, usize)>) -> Result<AmpOptimizer<'_, T>> {
    match (opt, table) {
        (Optimizer::Sgd(hp), _) => Ok(AmpOptimizer::Sgd(hp)),
        (Optimizer::AdamW(hp), Some((table, _))) => Ok(AmpOptimizer::AdamW(hp, table)),
        (Optimizer::AdamW(_), None) => Err(Error::Internal("an AdamW run without its factor table".into())),
    }
}

/// Every parameter for one `amp_updates` call: the dense then the convolution weights with their
/// 16-bit copies, then the biases (no copy), as the per-parameter updates ran them.
fn update_refs<'a, B: Backend>(
    model: &'a mut Mlp<B>,
    w16: &'a mut [B::Tensor],
    stem_w16: &'a mut [B::Tensor],
) -> Vec<ParamRefs<'a, B::Tensor>> {
    let (stem_weights, stem_biases) = match model.stem.as_mut() {
        Some(s) => (s.weights.iter_mut(), s.biases.iter_mut()),
        None => (Default::default(), Default::default()),
    };
    let weights = model.weights.iter_mut().chain(stem_weights).zip(w16.iter_mut().chain(stem_w16.iter_mut()));
    let mut refs: Vec<ParamRefs<'a, B::Tensor>> =
        weights.map(|(p, w)| ParamRefs { value: &mut p.value, grad: &p.grad, state: &mut p.state, w16: Some(w) }).collect();
    refs.extend(model.biases.iter_mut().chain(stem_biases).map(|p| ParamRefs {
        value: &mut p.value,
        grad: &p.grad,
        state: &mut p.state,
        w16: None,
    }));
    refs
}

/// `scaler::adam_factor_table` on the device.
fn adam_table<B: Backend>(b: &mut B, hp: gpulab_core::tensor::AdamW, rows: usize) -> Result<B::Tensor> {
    let mut t = b.zeros([1, 2 * rows], DType::F32, MemCategory::OptimizerState)?;
    b.write_f32(&mut t, &scaler::adam_factor_table(hp, rows))?;
    Ok(t)
}

impl<B: Backend> Amp<B> {
    /// The weights autocast multiplies by: the 16-bit copies.
    fn weights(&self) -> Weights<'_, B> {
        Weights::Half { dense: &self.w16, stem: &self.stem_w16 }
    }
}

impl<B: Backend> Phases<B> for Amp<B> {
    type Buffers = AmpWorkspace<B>;

    fn buffers(&self, b: &mut B, cfg: &MlpConfig, rows: usize, training: bool) -> Result<AmpWorkspace<B>> {
        AmpWorkspace::new(b, cfg, self.dt, rows, training)
    }

    fn recomputing_buffers(&self, b: &mut B, cfg: &MlpConfig, rows: usize) -> Result<AmpWorkspace<B>> {
        AmpWorkspace::recomputing(b, cfg, self.dt, rows)
    }

    /// Casts the f32 master weights into their 16-bit working copies, unless the last update
    /// already wrote them (after the first step it always has).
    fn refresh_weights(&mut self, b: &mut B, model: &Mlp<B>) -> Result<()> {
        if self.w16_fresh {
            return Ok(());
        }
        let stem = model.stem.iter().flat_map(|s| &s.weights);
        for (w, lo) in model.weights.iter().chain(stem).zip(self.w16.iter_mut().chain(self.stem_w16.iter_mut())) {
            b.cast(&w.value, lo, None)?;
        }
        self.w16_fresh = true;
        Ok(())
    }

    /// Forward pass of `ws.x` into `ws.acts` (the last: the f32 logits): the dense layers as
    /// `Half` layers over the 16-bit weight copies.
    fn forward(&self, b: &mut B, model: &Mlp<B>, ws: &mut AmpWorkspace<B>) -> Result<()> {
        pass::forward(b, model, self.weights(), &mut ws.tape())
    }

    /// Loss, correct count and every parameter's f32 gradient (scaled by the device's loss
    /// scale when a scaler runs).
    fn backward(
        &self,
        b: &mut B,
        model: &mut Mlp<B>,
        ws: &mut AmpWorkspace<B>,
        mean_over: usize,
        ready: &mut LayerDone<'_, B>,
    ) -> Result<()> {
        let last = self.w16.len() - 1;
        let grad_scale = self.cfg.loss_weight / mean_over as f32;
        let grad_logits = ws.grad_logits.as_mut().ok_or_else(|| Error::Internal("AMP backward on a forward-only workspace".into()))?;
        let head = if ws.recompute { 0 } else { last };
        ws.acc.record(b, &ws.acts[head], &ws.y, Some(&mut *grad_logits), grad_scale)?;
        if self.rule.scaling {
            b.scale_by_loss_scale(grad_logits, &self.state)?;
        }
        b.cast(grad_logits, &mut ws.grads[head], ws.acc.grad16.as_mut())?;
        pass::backward(b, model, self.weights(), &mut ws.tape(), GradWrite::Replace, None, ready)
    }

    /// The optimizer step, on the device end to end: unscale and inf/NaN check (when scaling),
    /// the update that skips itself on overflow and writes the 16-bit copies, the scaler's
    /// growth/backoff. Nothing is read back (but once per LOG_SLOTS steps of a log window).
    fn apply_update(&mut self, b: &mut B, model: &mut Mlp<B>, step: u64) -> Result<()> {
        if self.unlogged.len() == LOG_SLOTS {
            self.read_state(b)?;
        }
        let opt = model.optimizer;
        self.ensure_table(b, opt)?;
        if self.rule.scaling {
            let stem = model.stem.iter_mut().flat_map(|s| s.params_mut());
            let mut grads: Vec<&mut B::Tensor> =
                model.weights.iter_mut().chain(model.biases.iter_mut()).chain(stem).map(|p| &mut p.grad).collect();
            b.unscale_checks(&mut grads, &mut self.state)?;
        }
        let kernel_opt = kernel_optimizer(opt, self.adam_table.as_ref())?;
        b.amp_updates(&mut update_refs(model, &mut self.w16, &mut self.stem_w16), kernel_opt, &self.state)?;
        b.scaler_update(&mut self.state, self.rule, &mut self.log, self.unlogged.len())?;
        self.unlogged.push(step);
        self.issued += 1;
        Ok(())
    }

    fn window_tensors(&self) -> Vec<&B::Tensor> {
        vec![&self.state, &self.log]
    }

    fn absorb(&mut self, totals: &Totals, window: &[HostData]) -> Result<()> {
        self.report.grad_elements_nonzero += totals.grad16[0];
        self.report.grad_elements_flushed += totals.grad16[1];
        match window {
            [state, log] => self.absorb_window(state, log),
            _ => Err(Error::Internal("the window read-back lacks the scaler state".into())),
        }
    }

    /// Reads the device state (a sync: only for a checkpoint): brings `model.step` to the
    /// on-device optimizer step count and returns the scaler's state.
    fn sync_state(&mut self, b: &mut B, model: &mut Mlp<B>) -> Result<Option<GradScalerState>> {
        let words = self.read_state(b)?;
        model.step = words[word::STEPS];
        Ok(self.scaler.as_ref().map(|s| s.state))
    }

    fn restore_scaler(&mut self, b: &mut B, state: GradScalerState) -> Result<()> {
        let Some(s) = self.scaler.as_mut() else { return Err(no_scaler()) };
        s.state = state;
        b.write_u32(&mut self.state, &scaler::state_words(state.scale, state.growth_tracker, self.steps_base as u32))
    }

    /// Runs every update kernel once with the overflow flag raised on a scratch state, so they
    /// compile before the clock starts and change nothing.
    fn warm_up_update(&mut self, b: &mut B, model: &mut Mlp<B>) -> Result<()> {
        let mut words = scaler::state_words(1.0, 0, 0);
        words[word::FOUND_INF] = 1;
        let mut scratch = b.zeros([1, scaler::STATE_WORDS], DType::U32, MemCategory::Other)?;
        b.write_u32(&mut scratch, &words)?;
        let kernel_opt = kernel_optimizer(model.optimizer, self.adam_table.as_ref())?;
        b.amp_updates(&mut update_refs(model, &mut self.w16, &mut self.stem_w16), kernel_opt, &scratch)?;
        // Unscaling by the scratch state's 1/1 changes no gradient (it flags the scratch only).
        if self.rule.scaling {
            let stem = model.stem.iter_mut().flat_map(|s| s.params_mut());
            let mut grads: Vec<&mut B::Tensor> =
                model.weights.iter_mut().chain(model.biases.iter_mut()).chain(stem).map(|p| &mut p.grad).collect();
            b.unscale_checks(&mut grads, &mut scratch)?;
        }
        Ok(())
    }

    fn into_amp_report(self) -> Option<AmpReport> {
        Some(self.report)
    }
}

#[cfg(test)]
mod oracle;
