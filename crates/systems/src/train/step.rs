//! One training step cut into phases — forward, backward (fills every parameter's `.grad`),
//! apply_update (the optimizer) — for either precision. The loop in `run.rs`, validation and
//! the benchmark are written once against `Step<B, P>`; `P` (`F32Phases` or `Amp`) says how
//! each phase runs. A strategy (`strategy.rs`) drives the phases: data parallelism all-reduces
//! the gradients between backward and apply_update; an inference server runs the forward phase
//! alone (`predict`).

use std::marker::PhantomData;

use super::AmpReport;
use crate::data::Dataset;
use crate::nn::{Accumulators, GradScalerState, Mlp, MlpConfig, Totals, take_totals, take_totals_with};
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::{Backend, DType, HostData, MemCategory, TensorMeta};

/// The buffers a pass over one batch size runs on.
pub trait StepBuffers<B: Backend> {
    fn rows(&self) -> usize;
    /// The input and label tensors the next batch is written into.
    fn inputs(&mut self) -> (&mut B::Tensor, &mut B::Tensor);
    /// The logits of the latest forward pass (f32, `[rows, classes]`).
    fn logits(&self) -> &B::Tensor;
    fn accumulators(&mut self) -> &mut Accumulators<B>;
    /// Adds the latest forward pass's loss and correct count, without gradients (validation).
    fn score(&mut self, b: &mut B) -> Result<()>;
}

/// Called by backward as soon as dense layer `i`'s weight and bias gradients are final (layers
/// last first), before the gradient flows on to layer `i − 1`: data parallelism starts
/// all-reducing a finished bucket there while the rest of backward runs (overlap).
pub type LayerDone<'r, B> = dyn FnMut(&mut B, &Mlp<B>, usize) -> Result<()> + 'r;

fn no_layer_hook<B: Backend>(_b: &mut B, _model: &Mlp<B>, _layer: usize) -> Result<()> {
    Ok(())
}

/// How one precision runs each phase of a step.
pub trait Phases<B: Backend> {
    type Buffers: StepBuffers<B>;
    /// Buffers for `rows` samples; with gradient buffers when `training`.
    fn buffers(&self, b: &mut B, cfg: &MlpConfig, rows: usize, training: bool) -> Result<Self::Buffers>;
    /// Training buffers for `rows` samples that keep only the dense layers' input and the
    /// logits: forward and backward recompute the hidden outputs (activation recomputation).
    fn recomputing_buffers(&self, b: &mut B, cfg: &MlpConfig, rows: usize) -> Result<Self::Buffers>;
    /// Brings the weights the forward pass reads up to date with the model's (AMP casts its
    /// 16-bit copies; f32 reads the model's own).
    fn refresh_weights(&mut self, b: &mut B, model: &Mlp<B>) -> Result<()>;
    /// Logits of `ws`'s inputs, with the weights of the last `refresh_weights`.
    fn forward(&self, b: &mut B, model: &Mlp<B>, ws: &mut Self::Buffers) -> Result<()>;
    /// Loss, correct count and every parameter's `.grad`, from the forward pass in `ws`,
    /// calling `ready` as each dense layer's gradients become final. The loss gradient is
    /// scaled by 1/`mean_over`: `ws`'s rows, or a whole batch's when `ws` holds one of its
    /// micro-batches (gradient accumulation).
    fn backward(&self, b: &mut B, model: &mut Mlp<B>, ws: &mut Self::Buffers, mean_over: usize, ready: &mut LayerDone<'_, B>)
    -> Result<()>;
    /// The optimizer step from the parameters' `.grad` (step numbers count from 1).
    fn apply_update(&mut self, b: &mut B, model: &mut Mlp<B>, step: u64) -> Result<()>;
    /// Tensors read back with the totals at each log window (AMP: the loss scaler's state and
    /// per-step log), in the same read-back.
    fn window_tensors(&self) -> Vec<&B::Tensor> {
        Vec::new()
    }
    /// Takes note of the totals and the `window_tensors` read back (AMP keeps the gradient
    /// statistics and the scale history).
    fn absorb(&mut self, _totals: &Totals, _window: &[HostData]) -> Result<()> {
        Ok(())
    }
    /// Reads what a checkpoint needs from the device (a sync; AMP keeps its optimizer step count
    /// and loss scaler there): updates `model.step` and returns the scaler's state, when this
    /// precision scales.
    fn sync_state(&mut self, _b: &mut B, _model: &mut Mlp<B>) -> Result<Option<GradScalerState>> {
        Ok(None)
    }
    /// Continues scaling from a checkpoint's state. A state without a scaler to take it means
    /// the checkpoint and this run disagree about precision: refused, not ignored.
    fn restore_scaler(&mut self, _b: &mut B, _state: GradScalerState) -> Result<()> {
        Err(no_scaler())
    }
    /// Compiles the update's kernels before the clock starts, changing nothing (AMP's are
    /// compiled per 16-bit type on first use).
    fn warm_up_update(&mut self, _b: &mut B, _model: &mut Mlp<B>) -> Result<()> {
        Ok(())
    }
    fn into_amp_report(self) -> Option<AmpReport>;
}

/// A checkpoint's scaler state offered to a run that does not scale its loss.
pub(super) fn no_scaler() -> Error {
    Error::InvalidConfig(
        "the checkpoint holds a loss scaler's state but this run does not scale its loss; resume with the checkpoint's precision".into(),
    )
}

/// The full-batch workspace and, once an epoch ends on a short batch, one for that size: the
/// "which workspace for this many rows" choice, made in one place.
pub struct ByRows<W> {
    full: W,
    tail: Option<W>,
    on_tail: bool,
}

impl<W> ByRows<W> {
    pub fn new(full: W) -> Self {
        ByRows { full, tail: None, on_tail: false }
    }

    /// Makes the workspace for `rows` the current one, building a tail workspace with `make`
    /// when neither fits.
    pub fn select(&mut self, rows: usize, rows_of: impl Fn(&W) -> usize, make: impl FnOnce() -> Result<W>) -> Result<&mut W> {
        self.on_tail = rows != rows_of(&self.full);
        if self.on_tail && self.tail.as_ref().is_none_or(|t| rows_of(t) != rows) {
            self.tail = Some(make()?);
        }
        Ok(self.current())
    }

    pub fn current(&mut self) -> &mut W {
        match (self.on_tail, self.tail.as_mut()) {
            (true, Some(t)) => t,
            _ => &mut self.full,
        }
    }

    pub fn current_ref(&self) -> &W {
        match (self.on_tail, self.tail.as_ref()) {
            (true, Some(t)) => t,
            _ => &self.full,
        }
    }

    pub fn full(&mut self) -> &mut W {
        &mut self.full
    }

    pub fn all(&mut self) -> impl Iterator<Item = &mut W> {
        std::iter::once(&mut self.full).chain(self.tail.as_mut())
    }
}

fn training_buffers<B: Backend, P: Phases<B>>(phases: &P, b: &mut B, cfg: &MlpConfig, rows: usize, recompute: bool) -> Result<P::Buffers> {
    if recompute { phases.recomputing_buffers(b, cfg, rows) } else { phases.buffers(b, cfg, rows, true) }
}

/// Which micro-batch of an optimizer step runs now (gradient accumulation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Micro {
    /// Counting from 0, of `count`.
    pub index: usize,
    pub count: usize,
    /// The whole step's rows: each micro-batch's loss gradient is scaled by 1/rows, so the
    /// micro-batches' gradients sum to the whole batch's mean.
    pub rows: usize,
}

/// Gradient accumulation's running sum: one tensor per parameter (`Mlp::params_mut`'s order),
/// in the gradients' category. Backward writes each micro-batch's gradients into `.grad` as
/// it does without accumulation; `fold` then moves them into the sum, and the last
/// micro-batch's fold adds the sum into `.grad`, where the optimizer (and a replica's
/// all-reduce) reads the whole batch's gradient.
struct Accumulation<B: Backend> {
    sums: Vec<B::Tensor>,
    at: Micro,
}

/// A training step of precision `P` with its workspaces. Static dispatch: the loop is
/// monomorphised per precision, and a step allocates nothing.
pub struct Step<B: Backend, P: Phases<B>> {
    pub phases: P,
    ws: ByRows<P::Buffers>,
    /// Some when the run accumulates gradients over micro-batches.
    accumulation: Option<Accumulation<B>>,
    /// The training workspaces recompute hidden activations in backward.
    recompute: bool,
    _backend: PhantomData<fn(&mut B)>,
}

impl<B: Backend, P: Phases<B>> Step<B, P> {
    /// A step for batches of `batch` rows (a short last batch gets its own workspace).
    pub fn new(b: &mut B, model: &Mlp<B>, phases: P, batch: usize) -> Result<Self> {
        Self::with_recompute(b, model, phases, batch, false)
    }

    /// `new`, with workspaces that recompute the hidden activations in backward when
    /// `recompute` (`Phases::recomputing_buffers`).
    pub fn with_recompute(b: &mut B, model: &Mlp<B>, phases: P, batch: usize, recompute: bool) -> Result<Self> {
        let full = training_buffers(&phases, b, &model.cfg, batch, recompute)?;
        Ok(Step { phases, ws: ByRows::new(full), accumulation: None, recompute, _backend: PhantomData })
    }

    /// Makes this step accumulate gradients over micro-batches (`micro` says which runs next):
    /// allocates the running sum, one tensor per parameter.
    pub fn accumulate(&mut self, b: &mut B, model: &mut Mlp<B>) -> Result<()> {
        let sums = model.params_mut().map(|p| b.zeros(p.grad.shape(), DType::F32, MemCategory::Gradients)).collect::<Result<_>>()?;
        self.accumulation = Some(Accumulation { sums, at: Micro { index: 0, count: 1, rows: self.ws.full().rows() } });
        Ok(())
    }

    /// The micro-batch the next forward and backward run on (after `accumulate`).
    pub fn micro(&mut self, at: Micro) -> Result<()> {
        let acc = self.accumulation.as_mut().ok_or_else(|| Error::Internal("a micro-batch on a step that does not accumulate".into()))?;
        acc.at = at;
        Ok(())
    }

    /// The rows the loss gradient is averaged over: the step's, or the current workspace's.
    fn mean_over(&self) -> usize {
        self.accumulation.as_ref().map_or_else(|| self.ws.current_ref().rows(), |a| a.at.rows)
    }

    /// After a micro-batch's backward: its gradients (in `.grad`) join the running sum; after
    /// the last, `.grad` holds the whole batch's. Nothing without accumulation, or with one
    /// micro-batch.
    fn fold(&mut self, b: &mut B, model: &mut Mlp<B>) -> Result<()> {
        let Some(acc) = self.accumulation.as_mut() else { return Ok(()) };
        let Micro { index, count, .. } = acc.at;
        if count <= 1 {
            return Ok(());
        }
        for (p, sum) in model.params_mut().zip(acc.sums.iter_mut()) {
            match index {
                0 => b.copy(&p.grad, sum)?,
                i if i + 1 < count => b.add_to(&p.grad, sum)?,
                _ => b.add_to(sum, &mut p.grad)?,
            }
        }
        Ok(())
    }

    /// Compiles every kernel a step uses before the clock starts: one forward and backward
    /// pass on the (zero) workspace touches them all and leaves the parameters unchanged. Its
    /// totals are not the run's: read and dropped. With `tail_rows` (an epoch ending on a short
    /// batch), the tail's workspace is built and passed through too: its shapes can select other
    /// kernel variants (a GPU's vector loads depend on the row count), which would otherwise be
    /// compiled in the middle of the timed run.
    pub fn warm_up(&mut self, b: &mut B, model: &mut Mlp<B>, tail_rows: Option<usize>) -> Result<()> {
        b.prepare()?;
        self.phases.refresh_weights(b, model)?;
        let full = self.ws.full();
        let rows = full.rows();
        self.phases.forward(b, model, full)?;
        self.phases.backward(b, model, full, rows, &mut no_layer_hook)?;
        take_totals(b, &mut [full.accumulators()])?;
        self.phases.warm_up_update(b, model)?;
        if let Some(rows) = tail_rows.filter(|&r| r > 0) {
            self.inputs(b, model, rows)?;
            let tail = self.ws.current();
            self.phases.forward(b, model, tail)?;
            self.phases.backward(b, model, tail, rows, &mut no_layer_hook)?;
            take_totals(b, &mut [tail.accumulators()])?;
        }
        Ok(())
    }

    /// Selects the workspace for a batch of `rows` samples and returns its input tensors; the
    /// phases that follow run on it.
    pub fn inputs(&mut self, b: &mut B, model: &Mlp<B>, rows: usize) -> Result<(&mut B::Tensor, &mut B::Tensor)> {
        let (phases, recompute) = (&self.phases, self.recompute);
        Ok(self.ws.select(rows, |w| w.rows(), || training_buffers(phases, b, &model.cfg, rows, recompute))?.inputs())
    }

    /// Forward phase: logits of the selected batch.
    pub fn forward(&mut self, b: &mut B, model: &Mlp<B>) -> Result<()> {
        self.phases.refresh_weights(b, model)?;
        self.phases.forward(b, model, self.ws.current())
    }

    /// Backward phase: loss, correct count and every parameter's `.grad` (accumulating: after
    /// the last micro-batch, the whole batch's).
    pub fn backward(&mut self, b: &mut B, model: &mut Mlp<B>) -> Result<()> {
        self.backward_with(b, model, &mut no_layer_hook)
    }

    /// `backward`, calling `ready` as each dense layer's gradients become final. Accumulating,
    /// they are final only once the last micro-batch's are folded in: `ready` then runs for
    /// every layer after backward (no overlap), and not at all for the other micro-batches.
    pub fn backward_with(&mut self, b: &mut B, model: &mut Mlp<B>, ready: &mut LayerDone<'_, B>) -> Result<()> {
        let mean_over = self.mean_over();
        let Some(at) = self.accumulation.as_ref().map(|a| a.at) else {
            return self.phases.backward(b, model, self.ws.current(), mean_over, ready);
        };
        self.phases.backward(b, model, self.ws.current(), mean_over, &mut no_layer_hook)?;
        self.fold(b, model)?;
        if at.index + 1 == at.count {
            for layer in (0..model.weights.len()).rev() {
                ready(b, model, layer)?;
            }
        }
        Ok(())
    }

    /// Update phase: the optimizer step (AMP: unscale, inf check, skip or step).
    pub fn apply_update(&mut self, b: &mut B, model: &mut Mlp<B>, step: u64) -> Result<()> {
        self.phases.apply_update(b, model, step)
    }

    /// The three phases in a row: one training step on the batch `inputs` selected.
    pub fn train(&mut self, b: &mut B, model: &mut Mlp<B>, step: u64) -> Result<()> {
        self.forward(b, model)?;
        self.backward(b, model)?;
        self.apply_update(b, model, step)
    }

    /// The logits of the selected workspace's latest forward pass.
    pub fn logits(&self) -> &B::Tensor {
        self.ws.current_ref().logits()
    }

    /// Totals since the last call, from every workspace in ONE batched read-back; resets them.
    pub fn take_totals(&mut self, b: &mut B) -> Result<Totals> {
        let mut accs: Vec<&mut Accumulators<B>> = self.ws.all().map(|w| w.accumulators()).collect();
        let (t, window) = take_totals_with(b, &mut accs, &self.phases.window_tensors())?;
        self.phases.absorb(&t, &window)?;
        Ok(t)
    }

    /// Validation in this step's precision: mean loss and accuracy over the validation split.
    pub fn evaluate(&mut self, b: &mut B, model: &Mlp<B>, data: &Dataset, batch: usize) -> Result<(f64, f64)> {
        if self.recompute {
            // Validation keeps no hidden outputs either: its workspaces hold the logits alone.
            return super::evaluate::evaluate_with(&mut self.phases, b, model, data, batch, |p, b, cfg, rows| {
                p.recomputing_buffers(b, cfg, rows)
            });
        }
        super::evaluate::evaluate(&mut self.phases, b, model, data, batch)
    }

    /// Forward-only buffers for `rows` samples (no gradient buffers), for `predict`.
    pub fn predict_buffers(&self, b: &mut B, model: &Mlp<B>, rows: usize) -> Result<P::Buffers> {
        self.phases.buffers(b, &model.cfg, rows, false)
    }

    /// Forward only — the inference server's path: the logits of the samples written into
    /// `ws.inputs().0`, in this step's precision, with the model's current weights. Needs no
    /// labels, computes no loss or gradient, and touches neither the model nor the totals.
    pub fn predict<'w>(&mut self, b: &mut B, model: &Mlp<B>, ws: &'w mut P::Buffers) -> Result<&'w B::Tensor> {
        self.phases.refresh_weights(b, model)?;
        self.phases.forward(b, model, ws)?;
        Ok(ws.logits())
    }

    /// What a checkpoint needs from the device (see `Phases::sync_state`).
    pub fn sync_state(&mut self, b: &mut B, model: &mut Mlp<B>) -> Result<Option<GradScalerState>> {
        self.phases.sync_state(b, model)
    }

    pub fn restore_scaler(&mut self, b: &mut B, state: GradScalerState) -> Result<()> {
        self.phases.restore_scaler(b, state)
    }

    pub fn into_amp_report(self) -> Option<AmpReport> {
        self.phases.into_amp_report()
    }
}
