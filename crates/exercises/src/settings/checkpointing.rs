//! Exercise 5's settings, read and checked once (`checkpointing::CheckpointLab::settings`
//! declares them).

use super::Settings;
use super::training::Training;
use gpulab_core::device::Device;
use gpulab_core::error::{Error, Result};

#[derive(Clone, Debug)]
pub struct Config {
    pub backend: Device,
    pub training: Training,
    pub checkpoint_every: i64,
    pub checkpoint_every_epochs: i64,
    pub keep_last: i64,
    /// The step after which the child is killed; 0 for a random one.
    pub crash_at: i64,
    pub corrupt: String,
    pub intervals: Vec<u64>,
    /// Where the checkpoints go; blank for a temporary folder.
    pub folder: String,
}

impl Config {
    pub fn parse(s: &Settings) -> Result<Config> {
        let backend = s.one_device("backend")?;
        let training = Training::parse(s)?;
        training.validate()?;
        let (checkpoint_every, checkpoint_every_epochs) = (s.int("checkpoint_every")?, s.int("checkpoint_every_epochs")?);
        if checkpoint_every == 0 && checkpoint_every_epochs == 0 {
            return Err(Error::InvalidConfig(
                "checkpoint_every: with no step or epoch interval nothing is saved before the crash; set one of them".into(),
            ));
        }
        Ok(Config {
            backend,
            training,
            checkpoint_every,
            checkpoint_every_epochs,
            keep_last: s.int("keep_last")?,
            crash_at: s.int("crash_at")?,
            corrupt: s.choice("corrupt")?,
            intervals: s.list("intervals")?,
            folder: s.text("folder")?,
        })
    }
}
