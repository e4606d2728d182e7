//! Exercise 10's settings, read once (`platform::PlatformLab::settings` declares them). The
//! run checks what it uses as it goes (`platform::check` is `validate`'s whole check).

use super::{Backends, Settings};
use gpulab_core::error::Result;

/// The knobs over the scenario: 0 (or -1 for `spot_share`, `scenario` for `signal`) keeps the
/// scenario's own value.
#[derive(Clone, Debug)]
pub struct Config {
    pub scenario: String,
    /// A scenario JSON to replay instead of the preset; blank for none.
    pub scenario_file: String,
    /// preset or this-machine.
    pub calibration: String,
    pub calibration_backend: Backends,
    /// A traffic CSV to replay; blank for none.
    pub traffic_csv: String,
    pub seed: i64,
    pub duration_h: f64,
    pub signal: String,
    pub target: f64,
    pub max_workers: i64,
    pub max_batch: i64,
    pub spot_share: f64,
    pub checkpoint_interval_min: f64,
    pub sweep_points: i64,
    pub sweep_runs: i64,
    pub gpu_types: String,
}

impl Config {
    pub fn parse(s: &Settings) -> Result<Config> {
        Ok(Config {
            scenario: s.choice("scenario")?,
            scenario_file: s.text("scenario_file")?,
            calibration: s.choice("calibration")?,
            calibration_backend: s.backends("calibration_backend")?,
            traffic_csv: s.text("traffic_csv")?,
            seed: s.int("seed")?,
            duration_h: s.float("duration_h")?,
            signal: s.choice("signal")?,
            target: s.float("target")?,
            max_workers: s.int("max_workers")?,
            max_batch: s.int("max_batch")?,
            spot_share: s.float("spot_share")?,
            checkpoint_interval_min: s.float("checkpoint_interval_min")?,
            sweep_points: s.int("sweep_points")?,
            sweep_runs: s.int("sweep_runs")?,
            gpu_types: s.text("gpu_types")?,
        })
    }
}
