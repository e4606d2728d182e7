//! Where exercise 9's f32 model comes from: trained here first (`serve::model::train_model`,
//! its weights captured after the last step), or an exercise-5 checkpoint read by
//! `serve::load_model` that must fit the chosen data set.

use std::path::Path;

use super::super::sink::{Sink, TrainBridge};
use gpulab_core::device::Engine;
use gpulab_core::error::{Error, Result};
use gpulab_core::with_backend;
use gpulab_systems::data::Dataset;
use gpulab_systems::serve::{HostModel, ModelSource, load_model, model::train_model};
use gpulab_systems::train::{TrainConfig, TrainReport};

/// Trains on `engine`; None when the run was stopped before its last step.
pub fn train_first(
    engine: &mut Engine,
    data: &Dataset,
    cfg: &TrainConfig,
    sink: &mut dyn Sink,
) -> Result<(TrainReport, Option<HostModel>)> {
    with_backend!(engine, b => {
        let mut bridge = TrainBridge::new(&mut *sink, "fp32 training");
        train_model(b, data, cfg, &mut bridge)
    })
}

/// An exercise-5 checkpoint's model. One for other inputs or classes than `data` is refused,
/// naming both.
pub fn from_checkpoint(path: &Path, data: &Dataset) -> Result<HostModel> {
    let m = load_model(&ModelSource::Checkpoint(path.into()))?;
    if m.arch.input != data.features || m.arch.classes != data.classes {
        return Err(Error::InvalidConfig(format!(
            "checkpoint: {} has {} inputs and {} classes, but the data set {} has {} inputs and {} classes; choose its data set or another checkpoint",
            m.source, m.arch.input, m.arch.classes, data.name, data.features, data.classes
        )));
    }
    Ok(m)
}
