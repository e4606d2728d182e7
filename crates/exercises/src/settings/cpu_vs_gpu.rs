//! Exercise 1's settings, read and checked once (`cpu_vs_gpu::CpuVsGpu::settings` declares them).

use super::Settings;
use super::shared::price;
use super::training::Training;
use crate::cost::PriceSetting;
use gpulab_core::device::Device;
use gpulab_core::error::Result;

#[derive(Clone, Debug)]
pub struct Config {
    pub backends: Vec<Device>,
    pub training: Training,
    pub sweep_sizes: Vec<u64>,
    pub sweep_runs: i64,
    /// A GPU's hour, and the CPU backend's machine-hour.
    pub price: PriceSetting,
    pub cpu_price: PriceSetting,
}

impl Config {
    pub fn parse(s: &Settings) -> Result<Config> {
        let backends = s.devices("backends")?;
        let training = Training::parse(s)?;
        training.validate()?;
        let c = Config {
            backends,
            training,
            sweep_sizes: s.list("sweep_sizes")?,
            sweep_runs: s.int("sweep_runs")?,
            price: price(s, "price_per_hour")?,
            cpu_price: price(s, "cpu_price_per_hour")?,
        };
        c.price.validate()?;
        c.cpu_price.validate()?;
        Ok(c)
    }
}
