//! Exercise 8's settings, read once (`inference::InferenceBatching::settings` declares them;
//! `inference::check` checks them as a whole).

use super::Settings;
use super::shared::price;
use crate::cost::PriceSetting;
use gpulab_core::device::Device;
use gpulab_core::error::Result;

#[derive(Clone, Debug)]
pub struct Config {
    pub backend: Device,
    /// A checkpoint to serve; blank to train the digits model first.
    pub checkpoint: String,
    pub train_epochs: i64,
    pub static_batches: Vec<u64>,
    pub max_batch: i64,
    pub preferred_batch: Vec<u64>,
    pub max_queue_delay_us: i64,
    pub load_levels: Vec<u64>,
    pub run_seconds: f64,
    pub slo_p99_ms: f64,
    pub queue: i64,
    pub price: PriceSetting,
}

impl Config {
    pub fn parse(s: &Settings) -> Result<Config> {
        let backend = s.one_device("backend")?;
        let price = price(s, "price_per_hour")?;
        price.validate()?;
        let c = Config {
            backend,
            checkpoint: s.text("checkpoint")?,
            train_epochs: s.int("train_epochs")?,
            static_batches: s.list("static_batches")?,
            max_batch: s.int("max_batch")?,
            preferred_batch: s.list("preferred_batch")?,
            max_queue_delay_us: s.int("max_queue_delay_us")?,
            load_levels: s.list("load_levels")?,
            run_seconds: s.float("run_seconds")?,
            slo_p99_ms: s.float("slo_p99_ms")?,
            queue: s.int("queue")?,
            price,
        };
        crate::inference::check(&c)?;
        Ok(c)
    }
}
