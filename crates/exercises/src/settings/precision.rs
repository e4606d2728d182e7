//! Exercise 3's settings, read and checked once (`precision::PrecisionLab::settings` declares
//! them).

use super::Settings;
use super::shared::price;
use super::training::Training;
use crate::cost::PriceSetting;
use gpulab_core::device::Device;
use gpulab_core::error::{Error, Result};
use gpulab_systems::nn::Precision;

#[derive(Clone, Debug)]
pub struct Config {
    pub backend: Device,
    pub training: Training,
    /// The precisions to compare, in order (at least one).
    pub precisions: Vec<Precision>,
    pub init_scale: f64,
    pub growth_interval: i64,
    pub underflow_demo: bool,
    pub demo_loss_exponent: i64,
    pub demo_epochs: i64,
    pub price: PriceSetting,
}

impl Config {
    pub fn parse(s: &Settings) -> Result<Config> {
        let backend = s.one_device("backend")?;
        let precisions: Vec<Precision> = s.text("precisions")?.split(',').map(|p| p.trim().parse()).collect::<Result<_>>()?;
        if precisions.is_empty() {
            return Err(Error::InvalidConfig("precisions: name at least one of fp32, fp16, bf16".into()));
        }
        let price = price(s, "price_per_hour")?;
        price.validate()?;
        let training = Training::parse(s)?;
        training.validate()?;
        Ok(Config {
            backend,
            training,
            precisions,
            init_scale: s.float("init_scale")?,
            growth_interval: s.int("growth_interval")?,
            underflow_demo: s.bool("underflow_demo")?,
            demo_loss_exponent: s.int("demo_loss_exponent")?,
            demo_epochs: s.int("demo_epochs")?,
            price,
        })
    }
}
