//! Exercise 9's settings, read once (`quantization::QuantizationLab::settings` declares them;
//! `quantization::check` checks them as a whole).

use super::Settings;
use super::training::Training;
use gpulab_core::device::Device;
use gpulab_core::error::Result;

#[derive(Clone, Debug)]
pub struct Config {
    /// Where inference is compared; training runs on the first.
    pub backends: Vec<Device>,
    pub training: Training,
    /// An exercise-5 checkpoint to quantize; blank to train first.
    pub checkpoint: String,
    /// minmax or percentile.
    pub observer: String,
    pub percentile: f64,
    pub calibration_samples: i64,
    pub latency_runs: i64,
    /// Where to also write the INT8 model; blank for nowhere.
    pub export: String,
}

impl Config {
    pub fn parse(s: &Settings) -> Result<Config> {
        let c = Config {
            backends: s.devices("backends")?,
            training: Training::parse(s)?,
            checkpoint: s.text("checkpoint")?,
            observer: s.choice("observer")?,
            percentile: s.float("percentile")?,
            calibration_samples: s.int("calibration_samples")?,
            latency_runs: s.int("latency_runs")?,
            export: s.text("export")?,
        };
        crate::quantization::check(&c)?;
        Ok(c)
    }
}
