//! The training hooks that save checkpoints by policy and restore the newest valid one.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::format::{CheckpointMeta, RngState};
use super::{model_state, store};
use crate::nn::{GradScalerState, Mlp};
use crate::train::{LoaderPosition, StepDone, TrainConfig, TrainEvent, TrainHooks};
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::Backend;

/// When to save: every N steps and/or every E epochs (0 = never), at the end, and on request;
/// keep the newest K.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub every_steps: u64,
    pub every_epochs: usize,
    pub keep_last: usize,
    pub at_end: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy { every_steps: 20, every_epochs: 0, keep_last: 3, at_end: true }
    }
}

impl Policy {
    fn due(&self, d: StepDone) -> bool {
        (self.every_steps > 0 && d.next.step.is_multiple_of(self.every_steps))
            || (self.every_epochs > 0 && d.epoch_end && d.next.epoch.is_multiple_of(self.every_epochs))
            || (self.at_end && d.run_end)
    }
}

pub struct Checkpointer<'a> {
    pub dir: PathBuf,
    pub policy: Policy,
    /// Continue from the newest valid checkpoint in `dir` (else `dir` must hold none).
    pub resume: bool,
    pub cfg: TrainConfig,
    pub dataset: String,
    /// Set from outside to save after the current step.
    pub request: Arc<AtomicBool>,
    pub emit: &'a mut dyn FnMut(TrainEvent),
    /// The loss scaler's state read by `restore`, handed to the loop once.
    pub scaler: Option<GradScalerState>,
    /// `wants_state` decided to save after the current step.
    pub saving: bool,
}

impl<'a> Checkpointer<'a> {
    /// Hooks that save `cfg`'s run on `data_set` into `dir` by `policy` (and when `request` is
    /// set), resuming from it when `resume`, with their events to `emit`.
    pub fn new(
        dir: PathBuf,
        policy: Policy,
        resume: bool,
        cfg: TrainConfig,
        dataset: String,
        request: Arc<AtomicBool>,
        emit: &'a mut dyn FnMut(TrainEvent),
    ) -> Self {
        Checkpointer { dir, policy, resume, cfg, dataset, request, emit, scaler: None, saving: false }
    }
}

impl<B: Backend> TrainHooks<B> for Checkpointer<'_> {
    fn restore(&mut self, b: &mut B, model: &mut Mlp<B>) -> Result<Option<LoaderPosition>> {
        if !self.resume {
            if let Some(p) = store::list(&self.dir)?.first() {
                return Err(Error::InvalidConfig(format!(
                    "{} already holds checkpoints (e.g. {}); resume from them or choose an empty folder",
                    self.dir.display(),
                    p.display()
                )));
            }
            (self.emit)(TrainEvent::Fresh);
            return Ok(None);
        }
        let (found, skipped) = store::newest_valid(&self.dir, &model.cfg, model_state::optimizer_kind(model))?;
        for s in skipped {
            (self.emit)(TrainEvent::Skipped { path: s.path.display().to_string(), kind: s.kind.into(), reason: s.reason });
        }
        let Some((path, ck)) = found else {
            (self.emit)(TrainEvent::Fresh);
            return Ok(None);
        };
        let h = &ck.meta.hyperparameters;
        if (h.seed, h.batch, h.epochs) != (self.cfg.seed, self.cfg.batch, self.cfg.epochs) {
            return Err(Error::InvalidConfig(format!(
                "{} was written with seed {}, batch {}, {} epochs; this run has seed {}, batch {}, {} epochs, so its data-loader position would mean other batches",
                path.display(),
                h.seed,
                h.batch,
                h.epochs,
                self.cfg.seed,
                self.cfg.batch,
                self.cfg.epochs
            )));
        }
        if ck.meta.precision != self.cfg.amp.precision.name() {
            return Err(Error::InvalidConfig(format!(
                "{} was written by a {} run; this run is {}, so its optimizer and loss-scale state would not fit",
                path.display(),
                ck.meta.precision,
                self.cfg.amp.precision.name()
            )));
        }
        self.scaler =
            match &ck.meta.grad_scaler {
                Some(v) => Some(serde_json::from_value(v.clone()).map_err(|e| {
                    Error::InvalidConfig(format!("{}: grad_scaler metadata is not a loss-scaler state ({e})", path.display()))
                })?),
                None => None,
            };
        model_state::restore(b, model, &ck.tensors)?;
        model.step = ck.meta.optimizer_step;
        let p = ck.meta.position;
        (self.emit)(TrainEvent::Resumed { path: path.display().to_string(), step: p.step, epoch: p.epoch, batch: p.batch });
        Ok(Some(p))
    }

    fn restored_scaler(&mut self) -> Option<GradScalerState> {
        self.scaler.take()
    }

    fn wants_state(&mut self, done: &StepDone) -> bool {
        let requested = self.request.swap(false, Ordering::Relaxed);
        self.saving = requested || self.policy.due(*done);
        self.saving
    }

    fn after_step(&mut self, b: &mut B, model: &Mlp<B>, done: StepDone) -> Result<()> {
        if !std::mem::take(&mut self.saving) {
            return Ok(());
        }
        let step = done.next.step;
        (self.emit)(TrainEvent::Saving { step });
        let tensors = model_state::snapshot(b, model)?;
        let meta = CheckpointMeta {
            position: done.next,
            optimizer_step: model.step,
            rng: RngState {
                generator: "ChaCha8 stream per epoch (data::batcher::epoch_order)".into(),
                seed: self.cfg.seed,
                stream: done.next.epoch as u64,
            },
            grad_scaler: done.scaler.map(|s| serde_json::to_value(s).expect("plain numbers serialize")),
            precision: self.cfg.amp.precision.name().into(),
            hyperparameters: self.cfg.clone(),
            architecture: model.cfg.clone(),
            dataset: self.dataset.clone(),
            gpulab_version: env!("CARGO_PKG_VERSION").into(),
        };
        let saved = store::save(&self.dir, &meta, &tensors)?;
        store::prune(&self.dir, self.policy.keep_last)?;
        (self.emit)(TrainEvent::Saved { step, path: saved.path.display().to_string(), bytes: saved.bytes, write_s: saved.write_s });
        Ok(())
    }
}
