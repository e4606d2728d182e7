//! Exercise 6's settings, read once (`distributed::Distributed::settings` declares them;
//! `distributed::check` checks them as a whole).

use super::Settings;
use super::shared::price;
use super::training::Training;
use crate::cost::PriceSetting;
use gpulab_core::error::Result;

#[derive(Clone, Debug)]
pub struct Config {
    pub training: Training,
    pub replicas: Vec<u64>,
    /// cpu, gpu, adapters or cuda: what each replica runs on.
    pub kind: String,
    pub threads_per_replica: i64,
    /// strong, weak or both.
    pub scaling: String,
    pub bucket_cap_mb: f64,
    pub overlap: bool,
    pub shard_optimizer: bool,
    pub rounds: i64,
    /// measured, or a simulated link preset's name.
    pub link: String,
    /// 0: no pipeline-parallel runs.
    pub pipeline_stages: i64,
    pub micro_batches: Vec<u64>,
    pub price: PriceSetting,
}

impl Config {
    pub fn parse(s: &Settings) -> Result<Config> {
        let c = Config {
            training: Training::parse(s)?,
            replicas: s.list("replicas")?,
            kind: s.choice("kind")?,
            threads_per_replica: s.int("threads_per_replica")?,
            scaling: s.choice("scaling")?,
            bucket_cap_mb: s.float("bucket_cap_mb")?,
            overlap: s.bool("overlap")?,
            shard_optimizer: s.bool("shard_optimizer")?,
            rounds: s.int("rounds")?,
            link: s.choice("link")?,
            pipeline_stages: s.int("pipeline_stages")?,
            micro_batches: s.list("micro_batches")?,
            price: price(s, "price_per_hour")?,
        };
        crate::distributed::check(&c)?;
        Ok(c)
    }
}

/// What `gpulab export torch` reads: the training settings and the bucket size, without the
/// sweep's checks (the export trains no replicas).
pub fn export(s: &Settings) -> Result<(Training, f64)> {
    Ok((Training::parse(s)?, s.float("bucket_cap_mb")?))
}
