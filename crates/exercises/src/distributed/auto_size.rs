//! `size=auto` for exercise 6: the backend whose peak sizes the model, and how much of that
//! peak the sweep's runs get (replicas and pipeline stages compute on part of the cores).

use super::{Mode, modes};
use crate::settings::distributed::Config;
use gpulab_core::error::Result;

/// The backend whose peak sizes the model: the CPU for CPU replicas, else the GPU they run on.
pub(super) fn device(c: &Config) -> Result<gpulab_core::device::Device> {
    match c.kind.as_str() {
        "cpu" => Ok(gpulab_core::device::Device::Cpu),
        "cuda" => "cuda".parse(),
        _ => "gpu".parse(),
    }
}

/// How much of the measured (all-core) peak the whole sweep gets, in runs at that peak: each
/// run of N replicas × T threads computes on N·T of the cores, weak scaling trains N times the
/// samples, and each pipeline run computes on one thread per stage.
pub(super) fn budget(c: &Config) -> Result<crate::sizing::Budget> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let threads = if c.kind == "cpu" { c.threads_per_replica as f64 } else { cores };
    let mut runs = 0.0;
    for mode in modes(c)? {
        for &n in &c.replicas {
            let work = if mode == Mode::Weak { n as f64 } else { 1.0 };
            runs += work * (cores / (n as f64 * threads).min(cores)).max(1.0);
        }
    }
    runs *= c.rounds as f64;
    let stages = c.pipeline_stages as f64;
    if stages > 0.0 {
        runs += cores + c.micro_batches.len() as f64 * (cores / stages.min(cores));
    }
    Ok(crate::sizing::Budget { runs, extra_passes: 0.0, grow_only: true })
}
