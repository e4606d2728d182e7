//! Setting groups more than one exercise declares: prices, the data source's cost and the
//! loader's knobs.

use super::Settings;
use crate::cost::PriceSetting;
use gpulab_core::error::Result;
use gpulab_systems::data::SourceCost;
use gpulab_systems::profile::session::PipelineConfig;

/// The price setting `key` (`cost::setting`).
pub fn price(s: &Settings, key: &'static str) -> Result<PriceSetting> {
    Ok(PriceSetting { key, text: s.text(key)? })
}

/// The source-cost settings (`profiled_runs::cost_settings`).
pub fn source_cost(s: &Settings) -> Result<SourceCost> {
    let augment = s.bool("augment")?;
    Ok(SourceCost {
        storage_latency_ms: s.float("storage_latency_ms")?,
        decode_passes: s.int("decode_passes")? as u32,
        rotate_deg: if augment { 10.0 } else { 0.0 },
        noise: if augment { 0.05 } else { 0.0 },
    })
}

/// The loader settings (`profiled_runs::pipeline_settings`) with the source cost.
pub fn pipeline_config(s: &Settings) -> Result<PipelineConfig> {
    Ok(PipelineConfig {
        num_workers: s.int("num_workers")? as usize,
        prefetch_factor: s.int("prefetch_factor")? as usize,
        cache: s.bool("cache")?,
        pin_memory: s.bool("pin_memory")?,
        cost: source_cost(s)?,
    })
}
