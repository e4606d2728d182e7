//! Data parallelism, no GUI: N replicas of the model (the MLP or the CNN, in f32 or under
//! autocast), each on its own thread and backend, run the one training loop with the `Replica`
//! strategy (replica.rs): they train on shards of every global batch and average their gradients
//! with a ring all-reduce written here (ring.rs) — bucketed like PyTorch DDP (bucket.rs),
//! optionally overlapped with backward, or with the optimizer step sharded (ZeRO-1; reducer.rs).
//!
//! Replicas: CPU replicas that split the cores (each its own rayon pool of k threads, which
//! the CPU backend's GEMM and element-wise kernels use), N wgpu devices on one adapter (real
//! synchronisation and transfer cost, no extra compute), one replica per wgpu adapter, and the
//! CUDA slot (refused with the CUDA backend's own error until it lands).
//!
//! `pipeline.rs`: model and pipeline parallelism (GPipe micro-batches) on CPU stages: its own
//! stage loop (micro-batches flow between the stages' threads), on the loop's `Schedule`.
//!
//! `cost.rs` holds the ring cost model and the link presets used to extrapolate, simulated.

pub mod bucket;
pub mod cost;
pub mod pipeline;
pub mod reducer;
pub mod replica;
pub mod ring;
mod run;
mod summary;

pub use replica::{LinkProbe, Replica, ReplicaOut};
pub use ring::SimLink;
pub use run::train;
pub use summary::{DpReport, ReplicaLanes, StepSplit, timeline};

use std::path::PathBuf;

use crate::checkpoint::Policy;
use crate::nn::Precision;
use crate::train::TrainConfig;
use gpulab_core::error::{Error, Result};

/// Where the replicas run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaKind {
    /// CPU replicas, each with its own pool of `threads` threads.
    Cpu { threads: usize },
    /// N wgpu devices opened on the one (default) adapter.
    GpuDevices,
    /// One replica per wgpu adapter (adapter indices 0…N−1, as `gpulab info` lists them).
    GpuAdapters,
    /// N CUDA GPUs with NCCL: the slot, filled by the CUDA issue.
    Cuda,
}

/// The most replicas a run may ask for: each is a thread with its own model copy.
pub const MAX_REPLICAS: usize = 64;
/// The most wgpu devices opened on one adapter.
pub const MAX_DEVICES_PER_ADAPTER: usize = 8;

impl ReplicaKind {
    /// What the replicas are, as every figure that depends on them says.
    pub fn label(&self, n: usize) -> String {
        match self {
            ReplicaKind::Cpu { threads } => format!(
                "{n} CPU replica{} × {threads} thread{}: real parallel compute on split cores",
                if n == 1 { "" } else { "s" },
                if *threads == 1 { "" } else { "s" }
            ),
            ReplicaKind::GpuDevices => format!(
                "{n} device{} on one adapter: real synchronisation and transfer cost, no extra compute",
                if n == 1 { "" } else { "s" }
            ),
            ReplicaKind::GpuAdapters => {
                format!("{n} wgpu adapter{}: one replica each, gradients through host memory", if n == 1 { "" } else { "s" })
            }
            ReplicaKind::Cuda => format!("{n} CUDA GPUs with NCCL"),
        }
    }

    /// The CPU cores this machine offers (what CPU replicas split).
    pub fn cores() -> usize {
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    }
}

/// A data-parallel run's settings (the model and optimizer come from `TrainConfig`, whose
/// `batch` is the global batch).
#[derive(Clone, Debug, PartialEq)]
pub struct DpConfig {
    pub replicas: usize,
    pub kind: ReplicaKind,
    /// PyTorch DDP's `bucket_cap_mb` (MiB).
    pub bucket_cap_mb: f64,
    /// All-reduce a bucket while backward computes the earlier layers.
    pub overlap: bool,
    /// ZeRO-1: reduce-scatter the gradients, update 1/N of the parameters on each replica,
    /// all-gather them (CPU replicas with overlap off; `reducer.rs`).
    pub shard_optimizer: bool,
    /// A simulated interconnect; None = the measured host transfers.
    pub link: Option<SimLink>,
    /// Steps drawn in the timeline (the run's first ones).
    pub timeline_steps: usize,
    /// Save checkpoints (replica 0) and resume from them (every replica).
    pub checkpoints: Option<DpCheckpoints>,
}

/// Checkpoints of a data-parallel run, in the single-device format (model, optimizer state,
/// loader position, loss scaler): every replica holds the same state, so replica 0 writes it and
/// every replica restores it.
#[derive(Clone, Debug, PartialEq)]
pub struct DpCheckpoints {
    pub dir: PathBuf,
    pub policy: Policy,
    /// Continue from the newest valid checkpoint in `dir` (else `dir` must hold none).
    pub resume: bool,
}

impl DpConfig {
    /// Refuses what cannot run with `cfg` (whose `batch` is the global batch), naming the
    /// setting and the limit.
    pub fn validate(&self, cfg: &TrainConfig, train_len: usize) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidConfig(m));
        let global_batch = cfg.batch;
        let n = self.replicas;
        if n == 0 {
            return bad("replicas must be at least 1".into());
        }
        if n > MAX_REPLICAS {
            return bad(format!("replicas {n} is more than the limit of {MAX_REPLICAS}"));
        }
        if !global_batch.is_multiple_of(n) {
            return bad(format!(
                "batch {global_batch} does not divide by replicas {n}: every replica needs an equal shard of the global batch; use a multiple of {n}, e.g. {}",
                (global_batch / n).max(1) * n
            ));
        }
        if global_batch > train_len {
            return bad(format!(
                "the global batch {global_batch} is larger than the {train_len} training samples; lower batch or replicas"
            ));
        }
        bucket::cap_bytes(self.bucket_cap_mb)?;
        match self.kind {
            ReplicaKind::Cpu { threads } => {
                let cores = ReplicaKind::cores();
                if threads == 0 {
                    return bad("threads_per_replica must be at least 1".into());
                }
                if n * threads > cores {
                    return bad(format!(
                        "replicas {n} × threads_per_replica {threads} = {} threads is more than the {cores} CPU cores of this machine; CPU replicas split the cores",
                        n * threads
                    ));
                }
            }
            ReplicaKind::GpuDevices if n > MAX_DEVICES_PER_ADAPTER => {
                return bad(format!("replicas {n} is more than the {MAX_DEVICES_PER_ADAPTER} devices gpulab opens on one adapter"));
            }
            _ => {}
        }
        if self.shard_optimizer && !matches!(self.kind, ReplicaKind::Cpu { .. }) {
            return bad("shard_optimizer needs kind=cpu: the sharded step updates each replica's part of the parameters in host memory, and wgpu or CUDA replicas keep theirs on the device".into());
        }
        if self.shard_optimizer && self.overlap {
            return bad("shard_optimizer needs overlap=false: the sharded step reduce-scatters every gradient after backward, on the training thread".into());
        }
        if self.shard_optimizer && cfg.amp.precision != Precision::F32 {
            return bad(format!(
                "shard_optimizer needs precision=fp32, not {}: the sharded step updates f32 parameters in host memory, and mixed precision's update runs on the device with its loss scaler and 16-bit weight copies",
                cfg.amp.precision.name()
            ));
        }
        if self.shard_optimizer && self.checkpoints.is_some() {
            return bad("checkpoints need shard_optimizer=false: with ZeRO-1 each replica holds only its 1/N of the optimizer state, and gathering it for a checkpoint is not built".into());
        }
        if let Some(l) = self.link
            && !(l.bytes_per_s > 0.0 && l.bytes_per_s.is_finite() && l.latency_s >= 0.0 && l.latency_s < 1.0)
        {
            return bad(format!(
                "the simulated link needs a positive bandwidth and a latency in [0, 1) s, got {} B/s and {} s",
                l.bytes_per_s, l.latency_s
            ));
        }
        Ok(())
    }
}
