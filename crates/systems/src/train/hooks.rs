//! Points where a training run can be saved and resumed (checkpointing), kept out of the loop
//! itself: the loop asks its hooks where to start and tells them after every step.

use serde::{Deserialize, Serialize};

use crate::nn::{GradScalerState, Mlp};
use gpulab_core::error::Result;
use gpulab_core::tensor::Backend;

/// Where training stands: steps done, and the epoch and batch index the next step takes
/// (each epoch's order is a pure function of the seed and the epoch, so this is the whole
/// data-loader state).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoaderPosition {
    pub step: u64,
    pub epoch: usize,
    pub batch: usize,
}

/// What the loop tells its hooks after a step.
#[derive(Clone, Copy, Debug)]
pub struct StepDone {
    /// The position after this step (the next batch to take).
    pub next: LoaderPosition,
    /// This step finished an epoch.
    pub epoch_end: bool,
    /// This step was the run's last.
    pub run_end: bool,
    /// The mixed-precision loss scaler's state after this step, when the run has one and the
    /// hooks asked for it (`wants_state`).
    pub scaler: Option<GradScalerState>,
}

pub trait TrainHooks<B: Backend> {
    /// Called once the model is built: may overwrite its state and return where to continue.
    fn restore(&mut self, _b: &mut B, _model: &mut Mlp<B>) -> Result<Option<LoaderPosition>> {
        Ok(None)
    }
    /// Called after `restore`: the loss scaler's state to continue from, when it restored one.
    fn restored_scaler(&mut self) -> Option<GradScalerState> {
        None
    }
    /// Called before `after_step`: whether it will save this step. The loop then reads what a
    /// save needs from the device first (the loss scaler's state and a mixed-precision run's
    /// optimizer step count live there) — a sync, so only when asked.
    fn wants_state(&mut self, _done: &StepDone) -> bool {
        false
    }
    /// Called after every step, once its loss has been reported.
    fn after_step(&mut self, _b: &mut B, _model: &Mlp<B>, _done: StepDone) -> Result<()> {
        Ok(())
    }
}

/// Plain training: start at step 0, save nothing.
pub struct NoHooks;

impl<B: Backend> TrainHooks<B> for NoHooks {}
