//! One data-parallel replica's training loop, on its own thread with its own backend: its shard
//! of every global batch, forward, backward (buckets all-reduced as they finish when overlap is
//! on), the gradient seam `TrainHooks::reduce_gradients`, the optimizer step. Every replica
//! starts from the same seed, so the same weights; the averaged gradient keeps them identical.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::Instant;

use super::bucket::Bucket;
use super::reducer::Reducer;
use super::ring::{CommStats, RingPeer};
use crate::data::{Dataset, batcher};
use crate::nn::{Mlp, MlpConfig, Workspace, take_totals};
use crate::train::{F32Phases, TrainConfig, TrainHooks};
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::{Backend, BackendInfo};

/// What the replicas tell the coordinating thread while they run.
#[derive(Clone, Debug, PartialEq)]
pub enum Msg {
    /// Steps done out of the run's total (replica 0).
    Progress { step: u64, total: u64 },
    /// Mean training loss and accuracy over the global batches since the last one (replica 0,
    /// all-reduced over the replicas).
    Loss { step: u64, loss: f64, accuracy: f64 },
    /// Validation accuracy after an epoch (replica 0; every replica holds the same weights).
    Val { epoch: usize, accuracy: f64 },
    /// One replica's latest step split: compute, and waiting for the gradient sync (ms).
    Split { rank: usize, step: u64, compute_ms: f64, sync_ms: f64 },
    /// One replica's device over the log window that ended at `step`: wall seconds, GPU busy
    /// seconds from timestamps (None on the CPU), and its ledger's current bytes per category.
    Device { rank: usize, step: u64, wall_s: f64, busy_s: Option<f64>, memory: Vec<(gpulab_core::tensor::MemCategory, u64)> },
    /// One replica's clock readings of the run's first `timeline_steps` steps (or of all its
    /// steps, when it ran fewer), sent once, so the lab can draw the timeline live.
    Lanes { rank: usize, steps: Vec<StepClock>, comm_spans: Vec<(f64, f64)> },
}

/// One step's clock readings on one replica, seconds since the run's origin.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepClock {
    pub start: f64,
    /// The shard is gathered and written into the input tensors.
    pub data_end: f64,
    /// Forward and backward are done (the device synchronised).
    pub compute_end: f64,
    /// Every gradient is all-reduced and written back (sharded: reduce-scattered).
    pub reduced: f64,
    /// The optimizer step is done (sharded: this replica's shard of it).
    pub updated: f64,
    /// The step is done (sharded: the updated parameters are all-gathered; else `updated`).
    pub end: f64,
}

/// What a replica needs besides its backend and its end of the ring.
pub struct ReplicaPlan<'a> {
    pub rank: usize,
    pub replicas: usize,
    pub data: &'a Dataset,
    /// `batch` is the GLOBAL batch; this replica takes its `batch / replicas` share.
    pub cfg: &'a TrainConfig,
    pub buckets: Vec<Bucket>,
    pub overlap: bool,
    /// ZeRO-1: the sharded optimizer step (`Reducer::sharded_step`).
    pub shard_optimizer: bool,
    /// Steps the live timeline shows (`Msg::Lanes`).
    pub timeline_steps: usize,
    pub origin: Instant,
    pub stop: &'a AtomicBool,
    pub events: Sender<Msg>,
}

/// A measured link: per-message latency and bandwidth of this run's ring (host memory).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LinkProbe {
    pub latency_s: f64,
    pub bytes_per_s: f64,
}

/// What one replica measured.
#[derive(Clone, Debug)]
pub struct ReplicaOut {
    pub rank: usize,
    pub info: BackendInfo,
    pub steps: Vec<StepClock>,
    pub comm: CommStats,
    /// All-reduces on the communication thread (overlap), seconds since the origin.
    pub comm_spans: Vec<(f64, f64)>,
    /// The final parameters, weights then biases per layer.
    pub params: Vec<Vec<f32>>,
    pub val_accuracy: Vec<f64>,
    pub train_wall_s: f64,
    pub probe: Option<LinkProbe>,
    pub stopped_early: bool,
}

/// Gradient-sized all-reduces the probe times (after an untimed one); their median is used.
pub const PROBE_CALLS: usize = 5;

/// Times a few tiny and a few gradient-sized all-reduces before training: the ring's
/// per-message latency and its bandwidth, measured on this machine (None for one replica).
fn probe(peer: &mut RingPeer, elements: usize) -> Result<Option<LinkProbe>> {
    if peer.n < 2 {
        return Ok(None);
    }
    let messages = 2.0 * (peer.n - 1) as f64;
    // The first all-reduce only lines the replicas up (they finish warming up at different
    // times); it is not timed.
    peer.all_reduce(&mut [0.0])?;
    let t = Instant::now();
    for _ in 0..20 {
        peer.all_reduce(&mut [0.0])?;
    }
    let latency_s = t.elapsed().as_secs_f64() / 20.0 / messages;
    let mut v = vec![0.0f32; elements.max(1)];
    // One untimed: its writes fault the fresh vector's pages in, milliseconds on a VM that
    // are not the link's (they made the measured bandwidth 20x too low).
    peer.all_reduce(&mut v)?;
    let mut calls: Vec<f64> = (0..PROBE_CALLS)
        .map(|_| {
            let t = Instant::now();
            peer.all_reduce(&mut v).map(|_| t.elapsed().as_secs_f64())
        })
        .collect::<Result<_>>()?;
    // Take the per-message latency out, but never more than half the time: on a busy machine
    // the tiny messages' time is noisy, and the bandwidth must stay a plausible lower bound.
    let call = gpulab_core::stats::median(&mut calls);
    let secs = (call - messages * latency_s).max(call / 2.0).max(1e-9);
    let bytes = messages / peer.n as f64 * (v.len() * 4) as f64;
    peer.stats = CommStats::default();
    Ok(Some(LinkProbe { latency_s, bytes_per_s: bytes / secs }))
}

pub fn run_replica<B: Backend>(b: &mut B, plan: ReplicaPlan<'_>, mut peer: RingPeer) -> Result<ReplicaOut> {
    let ReplicaPlan { rank, replicas, data, cfg, buckets, overlap, shard_optimizer, timeline_steps, origin, stop, events } = plan;
    let model_cfg = MlpConfig { input: data.features, hidden: cfg.hidden.clone(), classes: data.classes, conv: None };
    let mut model = Mlp::new(b, model_cfg.clone(), cfg.optimizer(), cfg.seed)?;
    let shard = cfg.batch / replicas;
    let mut ws = Workspace::new(b, &model_cfg, shard, true)?;
    // Compile and touch every kernel before the clock starts (gradients are overwritten by
    // the first real step; the totals are dropped).
    b.prepare()?;
    model.forward(b, &mut ws)?;
    model.backward(b, &mut ws)?;
    take_totals(b, &mut [&mut ws.acc])?;
    let probe = probe(&mut peer, model_cfg.parameter_count())?;
    let mut reducer = Reducer::new(peer, buckets, overlap, origin)?;

    let n = data.train_len();
    let steps_per_epoch = batcher::batches_per_epoch(n, cfg.batch, true) as u64;
    let total = steps_per_epoch * cfg.epochs as u64;
    let (mut xb, mut yb) = (Vec::new(), Vec::new());
    let mut times = Vec::with_capacity(total as usize);
    let mut val_accuracy = Vec::new();
    let (mut step, mut win_rows, mut stopped_early) = (0u64, 0usize, false);
    let mut eval_s = 0.0;
    let now = || origin.elapsed().as_secs_f64();
    let loop_start = now();
    b.take_busy_seconds()?; // the live busy % starts from the first step
    let mut win_start = now();
    'epochs: for epoch in 0..cfg.epochs {
        let order = batcher::epoch_order(n, cfg.seed, epoch as u64);
        for (i, global) in order.chunks_exact(cfg.batch).enumerate() {
            let start = now();
            batcher::gather(&data.train_x, &data.train_y, data.features, &global[rank * shard..(rank + 1) * shard], &mut xb, &mut yb);
            b.write_f32(&mut ws.x, &xb)?;
            b.write_u32(&mut ws.y, &yb)?;
            let data_end = now();
            model.forward(b, &mut ws)?;
            reducer.stop_vote = stop.load(Ordering::Relaxed);
            model.backward_with(b, &mut ws, |b, m, layer| reducer.layer_done(b, m, layer))?;
            b.sync()?;
            let compute_end = now();
            let (reduced, updated) = if shard_optimizer {
                let t = reducer.sharded_step(b, &mut model)?.ok_or_else(|| Error::InvalidConfig("shard_optimizer needs CPU replicas with overlap=false: the sharded step updates the parameters in host memory, after backward".into()))?;
                // Reduce-scatter, update, all-gather: in that order with one bucket; with
                // several, each bucket's three run in turn and the spans are their sums.
                let reduced = compute_end + t.reduce_scatter_s;
                (reduced, reduced + t.update_s)
            } else {
                reducer.reduce_gradients(b, &mut model)?; // the data-parallel seam
                let reduced = now();
                model.update(b)?;
                b.flush()?;
                b.sync()?;
                (reduced, now())
            };
            let end = now();
            times.push(StepClock { start, data_end, compute_end, reduced, updated, end });
            step += 1;
            if times.len() == timeline_steps {
                let _ = events.send(Msg::Lanes { rank, steps: times.clone(), comm_spans: reducer.comm_spans.clone() });
            }
            win_rows += cfg.batch;
            let last = i as u64 + 1 == steps_per_epoch;
            // Every replica takes the same branch (the step count and the stop vote are
            // shared), so the extra all-reduce below is called the same number of times.
            if step % cfg.log_every as u64 == 0 || last || reducer.stop_agreed {
                let t = take_totals(b, &mut [&mut ws.acc])?;
                let g = reducer.all_reduce_host(vec![t.loss as f32, t.correct as f32])?;
                if rank == 0 {
                    let rows = win_rows.max(1) as f64;
                    let _ = events.send(Msg::Loss { step, loss: g[0] as f64 / rows, accuracy: g[1] as f64 / rows });
                    let _ = events.send(Msg::Progress { step, total });
                }
                let _ = events.send(Msg::Split {
                    rank,
                    step,
                    compute_ms: ((compute_end - data_end) + (updated - reduced)) * 1e3,
                    sync_ms: ((reduced - compute_end) + (end - updated)) * 1e3,
                });
                let t = now();
                let _ = events.send(Msg::Device {
                    rank,
                    step,
                    wall_s: t - win_start,
                    busy_s: b.take_busy_seconds()?,
                    memory: b.memory().categories.iter().filter(|c| c.1 > 0).map(|c| (c.0, c.1)).collect(),
                });
                win_start = t;
                win_rows = 0;
            }
            if reducer.stop_agreed {
                stopped_early = true;
                break 'epochs;
            }
        }
        let t = now();
        let (_, acc) = crate::train::evaluate(&mut F32Phases, b, &model, data, shard)?;
        eval_s += now() - t;
        val_accuracy.push(acc);
        if rank == 0 {
            let _ = events.send(Msg::Val { epoch, accuracy: acc });
        }
    }
    if times.len() < timeline_steps {
        let _ = events.send(Msg::Lanes { rank, steps: times.clone(), comm_spans: reducer.comm_spans.clone() });
    }
    let train_wall_s = now() - loop_start - eval_s;
    let comm_spans = std::mem::take(&mut reducer.comm_spans);
    let comm = reducer.close();
    Ok(ReplicaOut {
        rank,
        info: b.info(),
        steps: times,
        comm,
        comm_spans,
        params: model.read_parameters(b)?,
        val_accuracy,
        train_wall_s,
        probe,
        stopped_early,
    })
}
