//! Where exercise 9's f32 model comes from: trained here first (its weights captured after the
//! last step), or read from an exercise-5 checkpoint that must fit the chosen data set.

use std::path::Path;

use super::super::sink::{Sink, TrainBridge};
use gpulab_core::device::Engine;
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::Backend;
use gpulab_core::with_backend;
use gpulab_systems::checkpoint::{format, store};
use gpulab_systems::data::Dataset;
use gpulab_systems::nn::{Mlp, MlpConfig};
use gpulab_systems::quant::HostLayer;
use gpulab_systems::train::{self, Inline, StepDone, TrainConfig, TrainHooks, TrainReport};

/// Reads the model's parameters to the host after the run's last step.
struct Capture {
    params: Option<Vec<Vec<f32>>>,
}

impl<B: Backend> TrainHooks<B> for Capture {
    fn after_step(&mut self, b: &mut B, model: &Mlp<B>, done: StepDone) -> Result<()> {
        if done.run_end {
            self.params = Some(model.read_parameters(b)?);
        }
        Ok(())
    }
}

/// Trains on `engine`; None when the run was stopped before its last step.
pub fn train_first(
    engine: &mut Engine,
    data: &Dataset,
    cfg: &TrainConfig,
    sink: &mut dyn Sink,
) -> Result<(TrainReport, Option<Vec<HostLayer>>)> {
    let mut capture = Capture { params: None };
    let report = with_backend!(engine, b => {
        let mut bridge = TrainBridge::new(&mut *sink, "fp32 training");
        train::train_with(b, data, cfg, &mut bridge, &mut capture, &mut Inline)
    })?;
    let widths = MlpConfig { input: data.features, hidden: cfg.hidden.clone(), classes: data.classes, conv: None }.widths();
    let layers = capture.params.map(|p| HostLayer::from_parameters(&p, &widths)).transpose()?;
    Ok((report, layers))
}

/// The f32 layers of an exercise-5 checkpoint, and its architecture. A checkpoint of a model
/// for other inputs or classes than `data` is refused, naming both.
pub fn from_checkpoint(path: &Path, data: &Dataset) -> Result<(Vec<HostLayer>, MlpConfig)> {
    let ck = store::read(path)?;
    format::require_mlp(&ck, path, "exercise 9's quantization")?;
    let arch = ck.meta.architecture.clone();
    if arch.input != data.features || arch.classes != data.classes {
        return Err(Error::InvalidConfig(format!(
            "checkpoint: {} holds an MLP {} ({} inputs, {} classes, trained on {}), but the data set {} has {} inputs and {} classes; choose its data set or another checkpoint",
            path.display(),
            arch.describe(),
            arch.input,
            arch.classes,
            ck.meta.dataset,
            data.name,
            data.features,
            data.classes
        )));
    }
    format::check_fits(&ck, &arch, ck.meta.hyperparameters.optimizer, path)?;
    let mut params = Vec::new();
    for i in 0..arch.widths().len() - 1 {
        for name in [format::weight_name(i), format::bias_name(i)] {
            let t = ck.tensors.get(&name).ok_or_else(|| Error::InvalidConfig(format!("checkpoint: {} lacks {name}", path.display())))?;
            params.push(t.data.clone());
        }
    }
    Ok((HostLayer::from_parameters(&params, &arch.widths())?, arch))
}
