//! One data-parallel replica, on its own thread with its own backend: the training loop
//! (`train::train_strategy`) with the `Replica` strategy — its shard of every global batch,
//! forward, backward (buckets all-reduced as they finish when overlap is on), the gradients
//! averaged with the other replicas' (or ZeRO-1's sharded step), the optimizer step, in any
//! precision and for any model the loop trains. Every replica starts from the same seed, so the
//! same weights; the averaged gradient keeps them identical.

use gpulab_core::stop::Stop;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::Sender;
use std::time::Instant;

use super::DpCheckpoints;
use super::bucket::Bucket;
use super::reducer::{OwnedState, Reducer};
use super::ring::{CommStats, RingPeer};
use crate::checkpoint::{Checkpointer, Policy};
use crate::data::Dataset;
use crate::nn::{Mlp, Totals};
use crate::train::{self, Inline, NoHooks, Phases, Rank, Step, StepAt, StepClock, Strategy, TrainConfig, TrainEvent, TrainSink};
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::{Backend, BackendInfo, MemCategory};

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
    /// Steps the live timeline shows (`TrainEvent::Lanes`).
    pub timeline_steps: usize,
    pub origin: Instant,
    pub stop: Stop,
    /// Every event of this replica's loop, tagged with its rank.
    pub events: Sender<(usize, TrainEvent)>,
    /// Save (replica 0) and resume (every replica) checkpoints.
    pub checkpoints: Option<&'a DpCheckpoints>,
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
    /// Peak bytes of optimizer state on this replica: the ledger's.
    pub optimizer_state_peak: u64,
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

/// The data-parallel strategy: one replica's step, with the gradients averaged over the ring
/// between backward and the update, and its clock readings.
pub struct Replica<B: Backend> {
    rank: Rank,
    /// The ring end, until `prepare` times it and hands it to the reducer.
    peer: Option<RingPeer>,
    buckets: Vec<Bucket>,
    overlap: bool,
    shard_optimizer: bool,
    reducer: Option<Reducer>,
    /// ZeRO-1: the optimizer state of what this replica updates (the model holds none).
    owned: Option<OwnedState<B>>,
    timeline_steps: usize,
    origin: Instant,
    probe: Option<LinkProbe>,
    clocks: Vec<StepClock>,
    params: Vec<Vec<f32>>,
    comm: CommStats,
    comm_spans: Vec<(f64, f64)>,
}

impl<B: Backend> Replica<B> {
    fn secs(&self, t: Instant) -> f64 {
        t.duration_since(self.origin).as_secs_f64()
    }

    fn lanes(&self) -> TrainEvent {
        let comm_spans = self.reducer.as_ref().map_or_else(|| self.comm_spans.clone(), |r| r.comm_spans.clone());
        TrainEvent::Lanes { replica: self.rank.rank, steps: self.clocks.clone(), comm_spans }
    }
}

fn not_prepared() -> Error {
    Error::Internal("a replica stepped before its ring was set up".into())
}

impl<B: Backend> Strategy<B> for Replica<B> {
    fn rank(&self) -> Option<Rank> {
        Some(self.rank)
    }

    fn model_holds_optimizer_state(&self) -> bool {
        !self.shard_optimizer
    }

    fn prepare(&mut self, b: &mut B, model: &Mlp<B>) -> Result<()> {
        let mut peer = self.peer.take().ok_or_else(not_prepared)?;
        self.probe = probe(&mut peer, model.cfg.parameter_count())?;
        let reducer = Reducer::new(peer, std::mem::take(&mut self.buckets), self.overlap, self.origin)?;
        if self.shard_optimizer {
            self.owned = Some(reducer.own_optimizer_state(b, model)?);
        }
        self.reducer = Some(reducer);
        Ok(())
    }

    fn step<P: Phases<B>>(
        &mut self,
        b: &mut B,
        model: &mut Mlp<B>,
        step: &mut Step<B, P>,
        at: StepAt,
        sink: &mut dyn TrainSink,
    ) -> Result<bool> {
        let origin = self.origin;
        let now = || origin.elapsed().as_secs_f64();
        let reducer = self.reducer.as_mut().ok_or_else(not_prepared)?;
        step.forward(b, model)?;
        reducer.stop_vote = at.stop_requested;
        step.backward_with(b, model, &mut |b, m, layer| reducer.layer_done(b, m, layer))?;
        b.sync()?;
        let compute_end = now();
        let (reduced, updated) = if self.shard_optimizer {
            let owned = self.owned.as_mut().ok_or_else(not_prepared)?;
            let t = reducer.sharded_step(b, model, owned)?.ok_or_else(|| Error::InvalidConfig("shard_optimizer needs CPU replicas with overlap=false: the sharded step updates the parameters in host memory, after backward".into()))?;
            // Reduce-scatter, update, all-gather: in that order with one bucket; with
            // several, each bucket's three run in turn and the spans are their sums.
            let reduced = compute_end + t.reduce_scatter_s;
            (reduced, reduced + t.update_s)
        } else {
            reducer.reduce_gradients(b, model)?;
            let reduced = now();
            step.apply_update(b, model, at.number)?;
            b.flush()?;
            b.sync()?;
            (reduced, now())
        };
        let stop_agreed = reducer.stop_agreed;
        let (start, data_end) = (self.secs(at.started), self.secs(at.data_ready));
        self.clocks.push(StepClock { start, data_end, compute_end, reduced, updated, end: now() });
        if self.clocks.len() == self.timeline_steps {
            sink.event(self.lanes());
        }
        Ok(stop_agreed)
    }

    /// Sums the window's loss and correct count over the replicas (as f32, in the ring).
    fn reduce_totals(&mut self, t: Totals) -> Result<Totals> {
        let reducer = self.reducer.as_mut().ok_or_else(not_prepared)?;
        let g = reducer.all_reduce_host(vec![t.loss as f32, t.correct as f32])?;
        Ok(Totals { loss: g[0] as f64, correct: g[1] as u64, ..t })
    }

    fn window(&mut self, step: u64, sink: &mut dyn TrainSink) {
        if let Some(t) = self.clocks.last() {
            sink.event(TrainEvent::Split {
                replica: self.rank.rank,
                step,
                compute_ms: ((t.compute_end - t.data_end) + (t.updated - t.reduced)) * 1e3,
                sync_ms: ((t.reduced - t.compute_end) + (t.end - t.updated)) * 1e3,
            });
        }
    }

    fn finish(&mut self, b: &mut B, model: &Mlp<B>, sink: &mut dyn TrainSink) -> Result<()> {
        if self.clocks.len() < self.timeline_steps {
            sink.event(self.lanes());
        }
        self.params = model.read_parameters(b)?;
        if let Some(mut r) = self.reducer.take() {
            self.comm_spans = std::mem::take(&mut r.comm_spans);
            self.comm = r.close();
        }
        Ok(())
    }
}

/// A replica's loop reports into the coordinator's channel, tagged with its rank, and stops
/// when the run's watcher says so (every replica votes with that flag).
struct ToCoordinator {
    rank: usize,
    events: Sender<(usize, TrainEvent)>,
    stop: Stop,
}

impl TrainSink for ToCoordinator {
    fn event(&mut self, ev: TrainEvent) {
        let _ = self.events.send((self.rank, ev));
    }
    fn stop(&self) -> &Stop {
        &self.stop
    }
}

pub fn run_replica<B: Backend>(b: &mut B, plan: ReplicaPlan<'_>, peer: RingPeer) -> Result<ReplicaOut> {
    let ReplicaPlan { rank, replicas, data, cfg, buckets, overlap, shard_optimizer, timeline_steps, origin, stop, events, checkpoints } =
        plan;
    let mut replica = Replica {
        rank: Rank { rank, replicas },
        peer: Some(peer),
        buckets,
        overlap,
        shard_optimizer,
        reducer: None,
        owned: None,
        timeline_steps,
        origin,
        probe: None,
        clocks: Vec::new(),
        params: Vec::new(),
        comm: CommStats::default(),
        comm_spans: Vec::new(),
    };
    let mut sink = ToCoordinator { rank, events: events.clone(), stop };
    let report = match checkpoints {
        None => train::train_strategy(b, data, cfg, &mut sink, &mut NoHooks, &mut Inline, &mut replica)?,
        Some(ck) => {
            let mut emit = |ev: TrainEvent| {
                let _ = events.send((rank, ev));
            };
            // Every replica holds the same weights, optimizer and scaler state: replica 0 saves
            // them, every replica restores them.
            let policy = if rank == 0 { ck.policy } else { Policy { every_steps: 0, every_epochs: 0, at_end: false, ..ck.policy } };
            let request = Arc::new(AtomicBool::new(false));
            let mut hooks = Checkpointer::new(ck.dir.clone(), policy, ck.resume, cfg.clone(), data.name.clone(), request, &mut emit);
            train::train_strategy(b, data, cfg, &mut sink, &mut hooks, &mut Inline, &mut replica)?
        }
    };
    Ok(ReplicaOut {
        rank,
        info: report.backend,
        steps: replica.clocks,
        comm: replica.comm,
        comm_spans: replica.comm_spans,
        params: replica.params,
        val_accuracy: report.epochs.iter().map(|e| e.val_accuracy).collect(),
        train_wall_s: report.train_wall_s,
        probe: replica.probe,
        stopped_early: report.stopped_early,
        optimizer_state_peak: report.memory.categories.iter().find(|c| c.0 == MemCategory::OptimizerState).map_or(0, |c| c.2),
    })
}
