//! Exercise 4's settings, read and checked once (`input_pipeline::InputPipeline::settings`
//! declares them).

use super::training::Training;
use super::{Backends, Settings, shared};
use gpulab_core::error::Result;
use gpulab_systems::data::SourceCost;

#[derive(Clone, Debug)]
pub struct Config {
    /// Exactly one, checked when the run opens it (`Backends::one`).
    pub backend: Backends,
    pub training: Training,
    pub cost: SourceCost,
    pub pin_memory: bool,
    /// The loader threads and ready batches the "workers" and "prefetch" steps add.
    pub workers: i64,
    pub prefetch: i64,
}

impl Config {
    pub fn parse(s: &Settings) -> Result<Config> {
        let training = Training::parse(s)?;
        training.validate()?;
        Ok(Config {
            backend: s.backends("backend")?,
            training,
            cost: shared::source_cost(s)?,
            pin_memory: s.bool("pin_memory")?,
            workers: s.int("workers")?,
            prefetch: s.int("prefetch")?,
        })
    }
}
