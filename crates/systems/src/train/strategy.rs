//! How a step runs, apart from the loop around it (burn-train's `SingleDevice`/`MultiDevice`,
//! Lightning's strategies). The loop (`run.rs`) owns epochs, batches, log windows, events,
//! validation, stop and checkpoint hooks; a strategy runs one step's phases (`Step`: forward,
//! backward, apply_update, in the run's precision, for any model) and decides what happens
//! between backward and the update. `SingleDevice` runs them in a row; a data-parallel replica
//! (`parallel::replica::Replica`) trains its shard of each global batch and averages the
//! gradients with the other replicas there.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::TrainSink;
use super::step::{Phases, Step};
use crate::nn::{Mlp, Totals};
use gpulab_core::error::Result;
use gpulab_core::tensor::Backend;

/// One step's clock readings on one data-parallel replica, seconds since the run's origin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepClock {
    pub start: f64,
    /// The shard is gathered and written into the input tensors.
    pub data_end: f64,
    /// Forward and backward are done (the device synchronised).
    pub compute_end: f64,
    /// Every gradient is all-reduced and written back (sharded: reduce-scattered).
    pub reduced: f64,
    /// The optimizer step is done (sharded: this replica's shard of it).
    pub updated: f64,
    /// The step is done (sharded: the updated parameters are all-gathered; else `updated`).
    pub end: f64,
}

/// A data-parallel replica's place: replica `rank` of `replicas`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rank {
    pub rank: usize,
    pub replicas: usize,
}

impl Rank {
    /// This replica's equal share of a global batch's sample indices.
    pub fn shard<'i>(&self, global: &'i [u32]) -> &'i [u32] {
        let rows = global.len() / self.replicas.max(1);
        &global[self.rank * rows..(self.rank + 1) * rows]
    }
}

/// What the loop tells the strategy about the step it hands over.
#[derive(Clone, Copy, Debug)]
pub struct StepAt {
    /// The step's number, counting from 1 (the optimizer's and the loss scaler's log's).
    pub number: u64,
    /// When the step began (before its batch was gathered), and when its batch was on the device.
    pub started: Instant,
    pub data_ready: Instant,
    /// Whoever watches asked to stop. One device stops before the step; replicas vote with it
    /// inside the step, so that every one stops after the same step.
    pub stop_requested: bool,
}

pub trait Strategy<B: Backend> {
    /// This runner's place among data-parallel replicas; None on one device. Replicas train
    /// their shard of each global batch, drop an epoch's short last batch and sum their log
    /// windows' totals (`reduce_totals`).
    fn rank(&self) -> Option<Rank> {
        None
    }

    /// False when the strategy keeps the optimizer state itself (ZeRO-1: only the state of the
    /// ranges its replica updates): the model is then built without any.
    fn model_holds_optimizer_state(&self) -> bool {
        true
    }

    /// Called once the step's kernels are warm, before the clock starts (a replica times its
    /// link to the others here).
    fn prepare(&mut self, _b: &mut B, _model: &Mlp<B>) -> Result<()> {
        Ok(())
    }

    /// One training step on the batch the loop uploaded into `step`'s inputs. Returns true when
    /// every replica agreed to stop after it.
    fn step<P: Phases<B>>(
        &mut self,
        b: &mut B,
        model: &mut Mlp<B>,
        step: &mut Step<B, P>,
        at: StepAt,
        sink: &mut dyn TrainSink,
    ) -> Result<bool>;

    /// A log window's loss and correct count over every replica (one device: its own).
    fn reduce_totals(&mut self, totals: Totals) -> Result<Totals> {
        Ok(totals)
    }

    /// At a log window, after its `Progress` event: what the strategy adds (a replica's split).
    fn window(&mut self, _step: u64, _sink: &mut dyn TrainSink) {}

    /// Once the loop is done, stopped early or not, with the final model.
    fn finish(&mut self, _b: &mut B, _model: &Mlp<B>, _sink: &mut dyn TrainSink) -> Result<()> {
        Ok(())
    }
}

/// One device: the three phases in a row.
pub struct SingleDevice;

impl<B: Backend> Strategy<B> for SingleDevice {
    fn step<P: Phases<B>>(
        &mut self,
        b: &mut B,
        model: &mut Mlp<B>,
        step: &mut Step<B, P>,
        at: StepAt,
        _sink: &mut dyn TrainSink,
    ) -> Result<bool> {
        step.train(b, model, at.number)?;
        Ok(false)
    }
}
