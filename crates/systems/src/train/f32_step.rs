//! The f32 phases: the model's own forward, backward and optimizer step on f32 workspaces.

use super::AmpReport;
use super::step::{LayerDone, Phases, StepBuffers};
use crate::nn::{Accumulators, Mlp, MlpConfig, Workspace};
use gpulab_core::error::Result;
use gpulab_core::tensor::Backend;

/// Plain f32 training: every tensor f32, no loss scaling.
pub struct F32Phases;

impl<B: Backend> Phases<B> for F32Phases {
    type Buffers = Workspace<B>;

    fn buffers(&self, b: &mut B, cfg: &MlpConfig, rows: usize, training: bool) -> Result<Workspace<B>> {
        Workspace::new(b, cfg, rows, training)
    }

    fn recomputing_buffers(&self, b: &mut B, cfg: &MlpConfig, rows: usize) -> Result<Workspace<B>> {
        Workspace::recomputing(b, cfg, rows)
    }

    fn refresh_weights(&mut self, _b: &mut B, _model: &Mlp<B>) -> Result<()> {
        Ok(())
    }

    fn forward(&self, b: &mut B, model: &Mlp<B>, ws: &mut Workspace<B>) -> Result<()> {
        model.forward(b, ws)
    }

    fn backward(&self, b: &mut B, model: &mut Mlp<B>, ws: &mut Workspace<B>, mean_over: usize, ready: &mut LayerDone<'_, B>) -> Result<()> {
        model.backward_mean(b, ws, mean_over, ready)
    }

    fn apply_update(&mut self, b: &mut B, model: &mut Mlp<B>, _step: u64) -> Result<()> {
        model.update(b)
    }

    fn warm_up_update(&mut self, b: &mut B, model: &mut Mlp<B>) -> Result<()> {
        b.prepare_optimizer_steps(model.param_count(), model.opt_step())
    }

    fn into_amp_report(self) -> Option<AmpReport> {
        None
    }
}

impl<B: Backend> StepBuffers<B> for Workspace<B> {
    fn rows(&self) -> usize {
        self.batch
    }

    fn inputs(&mut self) -> (&mut B::Tensor, &mut B::Tensor) {
        (&mut self.x, &mut self.y)
    }

    fn logits(&self) -> &B::Tensor {
        Workspace::logits(self)
    }

    fn accumulators(&mut self) -> &mut Accumulators<B> {
        &mut self.acc
    }

    fn score(&mut self, b: &mut B) -> Result<()> {
        let logits = self.acts.last().expect("a model has at least one layer");
        self.acc.record(b, logits, &self.y, None, 1.0)
    }
}
