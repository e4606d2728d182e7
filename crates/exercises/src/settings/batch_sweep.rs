//! Exercise 2's settings, read and checked once (`batch_sweep::BatchSweep::settings` declares
//! them).

use super::Settings;
use super::training::Training;
use gpulab_core::device::Device;
use gpulab_core::error::Result;

#[derive(Clone, Debug)]
pub struct Config {
    pub backend: Device,
    /// The shared training settings; its `batch` is swept, so it has none.
    pub training: Training,
    pub batch_sizes: Vec<u64>,
    pub vram_budget_mib: f64,
    pub ladder: bool,
    pub ladder_split: i64,
}

impl Config {
    pub fn parse(s: &Settings) -> Result<Config> {
        let backend = s.one_device("backend")?;
        let training = Training::parse(s)?;
        training.dataset_spec()?;
        let batch_sizes = s.list("batch_sizes")?;
        for &b in &batch_sizes {
            training.train_config(b as usize)?;
        }
        Ok(Config {
            backend,
            training,
            batch_sizes,
            vram_budget_mib: s.float("vram_budget_mib")?,
            ladder: s.bool("ladder")?,
            ladder_split: s.int("ladder_split")?,
        })
    }
}
