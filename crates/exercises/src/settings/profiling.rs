//! Exercise 7's settings, read and checked once (`profiling::Profiling::settings` declares them).

use super::training::Training;
use super::{Backends, Settings, shared};
use gpulab_core::error::Result;
use gpulab_systems::profile::session::PipelineConfig;

#[derive(Clone, Debug)]
pub struct Config {
    /// Exactly one, checked when the run opens it (`Backends::one`).
    pub backend: Backends,
    pub training: Training,
    pub pipeline: PipelineConfig,
    pub measure_again: bool,
}

impl Config {
    pub fn parse(s: &Settings) -> Result<Config> {
        let training = Training::parse(s)?;
        training.validate()?;
        let c = Config {
            backend: s.backends("backend")?,
            pipeline: shared::pipeline_config(s)?,
            measure_again: s.bool("measure_again")?,
            training,
        };
        // The precision is a setting of its own here: check it against the model too.
        let mut cfg = c.training.train_config(c.training.batch()?)?;
        cfg.amp = c.training.amp_config()?;
        cfg.validate()?;
        Ok(c)
    }
}
