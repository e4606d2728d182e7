//! Gradient synchronisation between backward and the update (a replica's strategy calls it):
//! each bucket's gradients are staged to the host, all-reduced round the ring, averaged and
//! written back. With overlap on, a bucket is handed to a communication thread as soon as
//! backward has finished its layers (`layer_done`), and backward goes on meanwhile; without it,
//! every bucket is all-reduced after backward. Either way the same sums are taken in the same
//! order, so overlap and bucketing change no result, bit for bit.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;
use std::time::Instant;

use super::bucket::{Bucket, all_params_mut};
use super::ring::{CommStats, RingPeer};
use crate::nn::{Mlp, Optimizer};
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::{Backend, DType, MemCategory};

/// A finished all-reduce and when it ran (seconds since the run's origin).
type Done = Result<(Vec<f32>, f64, f64)>;

enum Comm {
    /// All-reduce on the training thread, when asked.
    Inline { peer: RingPeer, done: VecDeque<Done> },
    /// A communication thread that all-reduces jobs in the order they come.
    Background { jobs: Option<Sender<(Vec<f32>, f32)>>, done: Receiver<Done>, thread: Option<JoinHandle<RingPeer>> },
}

/// One replica's gradient synchroniser.
pub struct Reducer {
    comm: Comm,
    buckets: Vec<Bucket>,
    launched: usize,
    replicas: usize,
    origin: Instant,
    /// This replica's vote to stop after the current step (the user pressed stop); summed over
    /// the replicas in the last bucket so that every replica stops at the same step.
    pub stop_vote: bool,
    /// Some replica voted to stop in the latest reduction.
    pub stop_agreed: bool,
    /// When each all-reduce ran on the communication thread (overlap), for the timeline.
    pub comm_spans: Vec<(f64, f64)>,
    /// Bucket buffers written back, reused by the next step's staging.
    spare: Vec<Vec<f32>>,
}

impl Reducer {
    pub fn new(peer: RingPeer, buckets: Vec<Bucket>, overlap: bool, origin: Instant) -> Result<Self> {
        let replicas = peer.n;
        let comm = if overlap {
            let (jobs, jobs_rx) = channel::<(Vec<f32>, f32)>();
            let (done_tx, done) = channel::<Done>();
            let thread = std::thread::Builder::new()
                .name(format!("all-reduce {}", peer.rank))
                .spawn(move || comm_thread(peer, jobs_rx, done_tx, origin))
                .map_err(|e| Error::TrainingProcess(format!("could not start the all-reduce thread: {e}; run with overlap=false")))?;
            Comm::Background { jobs: Some(jobs), done, thread: Some(thread) }
        } else {
            Comm::Inline { peer, done: VecDeque::new() }
        };
        Ok(Reducer {
            comm,
            buckets,
            launched: 0,
            replicas,
            origin,
            stop_vote: false,
            stop_agreed: false,
            comm_spans: Vec::new(),
            spare: Vec::new(),
        })
    }

    /// Backward has finished dense layer `layer`: with overlap, launch every bucket now complete.
    pub fn layer_done<B: Backend>(&mut self, b: &mut B, model: &Mlp<B>, layer: usize) -> Result<()> {
        if self.replicas == 1 || matches!(self.comm, Comm::Inline { .. }) {
            return Ok(());
        }
        while self.launched < self.buckets.len() && self.buckets[self.launched].ready_after_layer.is_some_and(|l| l >= layer) {
            self.launch_next(b, model)?;
        }
        Ok(())
    }

    /// All-reduces a few host values (loss and correct counts) in the ring's order of calls.
    pub fn all_reduce_host(&mut self, v: Vec<f32>) -> Result<Vec<f32>> {
        self.submit(v, 1.0)?;
        self.next_done()
    }

    fn launch_next<B: Backend>(&mut self, b: &mut B, model: &Mlp<B>) -> Result<()> {
        let bucket = &self.buckets[self.launched];
        let tensors: Vec<&B::Tensor> = bucket.params.iter().map(|p| p.of(model).map(|p| &p.grad)).collect::<Result<_>>()?;
        // A buffer the last write-back gave up, so a step allocates (and page-faults) nothing.
        let mut flat = self.spare.pop().unwrap_or_default();
        flat.clear();
        flat.reserve(bucket.elements() + 1);
        b.read_f32_into(&tensors, &mut flat)?;
        self.launched += 1;
        if self.launched == self.buckets.len() {
            flat.push(if self.stop_vote { 1.0 } else { 0.0 });
        }
        // The ring stores each sum times 1/N: the mean, formed where the sum is.
        let inv = 1.0 / self.replicas as f32;
        self.submit(flat, inv)
    }

    fn submit(&mut self, mut v: Vec<f32>, scale: f32) -> Result<()> {
        match &mut self.comm {
            Comm::Inline { peer, done } => {
                let t0 = self.origin.elapsed().as_secs_f64();
                peer.all_reduce_scaled(&mut v, scale)?;
                done.push_back(Ok((v, t0, self.origin.elapsed().as_secs_f64())));
                Ok(())
            }
            Comm::Background { jobs, .. } => jobs.as_ref().and_then(|j| j.send((v, scale)).ok()).ok_or_else(comm_gone),
        }
    }

    fn next_done(&mut self) -> Result<Vec<f32>> {
        let done = match &mut self.comm {
            Comm::Inline { done, .. } => {
                done.pop_front().ok_or_else(|| Error::Internal("all-reduce result asked before it was started".into()))?
            }
            Comm::Background { done, .. } => done.recv().map_err(|_| comm_gone())?,
        };
        let (v, t0, t1) = done?;
        if matches!(self.comm, Comm::Background { .. }) {
            self.comm_spans.push((t0, t1));
        }
        Ok(v)
    }

    /// Every bucket: launched (the rest now), reduced, averaged and written back into the
    /// gradients, with the stop vote (`stop_agreed` says the result).
    pub fn reduce_gradients<B: Backend>(&mut self, b: &mut B, model: &mut Mlp<B>) -> Result<()> {
        if self.replicas == 1 {
            // One replica has nothing to average: no staging, the plain single-device step.
            self.stop_agreed = self.stop_vote;
            return Ok(());
        }
        if self.launched == 0 && self.reduce_in_place(b, model)? {
            return Ok(());
        }
        while self.launched < self.buckets.len() {
            self.launch_next(b, model)?;
        }
        for i in 0..self.buckets.len() {
            // Already the mean (`all_reduce_scaled`); the stop vote's sum over 1/N is still > 0.
            let mut flat = self.next_done()?;
            if i + 1 == self.buckets.len() {
                self.stop_agreed = flat.pop().is_some_and(|v| v > 0.0);
            }
            let mut at = 0;
            for p in &self.buckets[i].params {
                b.write_f32(&mut p.of_mut(model)?.grad, &flat[at..at + p.elements])?;
                at += p.elements;
            }
            self.spare.push(flat);
        }
        self.launched = 0;
        Ok(())
    }

    /// Inline, on a backend that keeps its tensors in host memory (the CPU): each bucket is
    /// all-reduced in the gradient tensors themselves, the stop vote as one more value at the
    /// end, so nothing is staged out or written back. The concatenation is the staged vector's,
    /// so the sums are too, bit for bit. False, with nothing done, where the communication runs
    /// on its own thread or the backend cannot lend its tensors.
    fn reduce_in_place<B: Backend>(&mut self, b: &mut B, model: &mut Mlp<B>) -> Result<bool> {
        let Comm::Inline { peer, .. } = &mut self.comm else { return Ok(false) };
        let (dense, convs) = counts(model);
        let mut grads: Vec<Option<&mut [f32]>> = all_params_mut(model).map(|p| b.host_f32_mut(&mut p.grad)).collect();
        if grads.iter().any(Option::is_none) {
            return Ok(false);
        }
        let inv = 1.0 / self.replicas as f32;
        let mut vote = [if self.stop_vote { 1.0 } else { 0.0 }];
        let last = self.buckets.len().saturating_sub(1);
        for (i, bucket) in self.buckets.iter().enumerate() {
            let mut segs: Vec<&mut [f32]> = Vec::with_capacity(bucket.params.len() + 1);
            for p in &bucket.params {
                let seg = grads.get_mut(p.slot(dense, convs)).and_then(Option::take).filter(|s| s.len() == p.elements);
                segs.push(seg.ok_or_else(|| {
                    Error::Internal(format!(
                        "bucket {i}: layer {}'s gradient is missing, taken twice or not {} values",
                        p.layer, p.elements
                    ))
                })?);
            }
            if i == last {
                segs.push(&mut vote);
            }
            peer.all_reduce_segments(&mut segs, inv)?;
        }
        self.stop_agreed = vote[0] > 0.0;
        Ok(true)
    }

    /// ZeRO-1 (DeepSpeed's stage 1, PyTorch's `ZeroRedundancyOptimizer`), inline, on a backend
    /// that lends its tensors' memory (the CPU), bucket by bucket: the gradients are
    /// reduce-scattered in place; as each block of this replica's own chunk is finished (still
    /// in cache) its optimizer step runs and the new values go into the buffer the all-gather
    /// sends; then the parameters are all-gathered, the stop vote with them. The same bytes
    /// travel as in an all-reduce, and each replica does 1/N of the update. The update is
    /// element-wise and runs through the full step's own function, so every parameter ends
    /// with the bits the unsharded step gives. None, with nothing done, where it cannot run (a
    /// communication thread, a backend that keeps its tensors to itself).
    pub fn sharded_step<B: Backend>(&mut self, b: &mut B, model: &mut Mlp<B>, owned: &mut OwnedState<B>) -> Result<Option<ShardTimes>> {
        let Comm::Inline { peer, .. } = &mut self.comm else { return Ok(None) };
        let (dense, convs) = counts(model);
        let (opt, step) = (model.optimizer, model.step + 1);
        let Some(mut lent) = lend(b, all_params_mut(model), &mut owned.params) else { return Ok(None) };
        let inv = 1.0 / self.replicas as f32;
        let mut vote = [if self.stop_vote { 1.0 } else { 0.0 }];
        let mut times = ShardTimes::default();
        let last = self.buckets.len().saturating_sub(1);
        for (i, bucket) in self.buckets.iter().enumerate() {
            let mut params = Vec::with_capacity(bucket.params.len());
            for p in &bucket.params {
                let slot = lent.get_mut(p.slot(dense, convs));
                params.push(slot.and_then(Option::take).filter(|h| h.value.len() == p.elements).ok_or_else(|| {
                    Error::Internal(format!(
                        "bucket {i}: layer {}'s parameter is missing, taken twice or not {} values",
                        p.layer, p.elements
                    ))
                })?);
            }
            let HostBucket { mut grads, mut rest, starts } = HostBucket::split(params);
            if i == last {
                grads.push(&mut vote);
            }
            let t = Instant::now();
            let update_s = peer.reduce_scatter(&mut grads, inv, |at, mean| {
                // A block lies inside one parameter, or is the stop vote (finished where it
                // lies, in `vote`, which the all-gather carries too).
                let k = starts.partition_point(|&s| s <= at).saturating_sub(1);
                if let Some((value, own, state)) = rest.get_mut(k).filter(|(v, ..)| at < starts[k] + v.len()) {
                    step_range(opt, step, value, mean, state, at - starts[k]..at - starts[k] + mean.len(), own.start);
                }
            })?;
            times.reduce_scatter_s += t.elapsed().as_secs_f64() - update_s;
            times.update_s += update_s;
            drop(grads);
            let mut values: Vec<&mut [f32]> = rest.iter_mut().map(|(v, ..)| &mut **v).collect();
            if i == last {
                values.push(&mut vote);
            }
            peer.all_gather(&mut values)?;
        }
        // Every replica holds the owner's sum of the votes now (the vote rides with the values).
        self.stop_agreed = vote[0] > 0.0;
        drop(lent);
        model.step = step;
        Ok(Some(times))
    }

    /// Ends the communication thread and returns what this replica sent.
    pub fn close(mut self) -> CommStats {
        match &mut self.comm {
            Comm::Inline { peer, .. } => peer.stats,
            Comm::Background { jobs, thread, .. } => {
                jobs.take();
                thread.take().and_then(|t| t.join().ok()).map(|p| p.stats).unwrap_or_default()
            }
        }
    }
}

fn comm_thread(mut peer: RingPeer, jobs: Receiver<(Vec<f32>, f32)>, done: Sender<Done>, origin: Instant) -> RingPeer {
    for (mut v, scale) in jobs {
        let t0 = origin.elapsed().as_secs_f64();
        let r = peer.all_reduce_scaled(&mut v, scale).map(|_| (v, t0, origin.elapsed().as_secs_f64()));
        let failed = r.is_err();
        if done.send(r).is_err() || failed {
            break;
        }
    }
    peer
}

/// Where a sharded step's time went before its all-gathers, summed over the buckets (seconds).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ShardTimes {
    /// In the reduce-scatters, waiting for the neighbours included.
    pub reduce_scatter_s: f64,
    /// In this replica's part of the optimizer step (the finishing pass's hook).
    pub update_s: f64,
}

/// One parameter's value and gradient, and the optimizer state of the range of it this replica
/// owns (`own`, in the parameter's elements), in host memory the backend lends.
struct HostParam<'t> {
    value: &'t mut [f32],
    grad: &'t mut [f32],
    own: Range<usize>,
    state: Vec<&'t mut [f32]>,
}

/// A bucket's parameters taken apart: the gradients (what the reduce-scatter sums), the values
/// and states (what the update writes), and each parameter's offset in the concatenation.
struct HostBucket<'t> {
    grads: Vec<&'t mut [f32]>,
    rest: Vec<(&'t mut [f32], Range<usize>, Vec<&'t mut [f32]>)>,
    starts: Vec<usize>,
}

impl<'t> HostBucket<'t> {
    fn split(params: Vec<HostParam<'t>>) -> Self {
        let mut starts = Vec::with_capacity(params.len());
        let mut at = 0;
        let (mut grads, mut rest) = (Vec::with_capacity(params.len() + 1), Vec::with_capacity(params.len()));
        for p in params {
            starts.push(at);
            at += p.value.len();
            grads.push(p.grad);
            rest.push((p.value, p.own, p.state));
        }
        HostBucket { grads, rest, starts }
    }
}

/// The optimizer step on elements `r` of one parameter (`g` holds just those gradients),
/// through the CPU backend's own arithmetic; `state` holds the state of the parameter's
/// elements from `state_from` on.
fn step_range(opt: Optimizer, step: u32, value: &mut [f32], g: &[f32], state: &mut [&mut [f32]], r: Range<usize>, state_from: usize) {
    let s = r.start - state_from..r.end - state_from;
    let p = &mut value[r];
    match (opt, state) {
        (Optimizer::Sgd(hp), [v]) => gpulab_core::device::cpu::sgd_host(p, g, &mut v[s], hp),
        (Optimizer::AdamW(hp), [m, v]) => gpulab_core::device::cpu::adamw_host(p, g, &mut m[s.clone()], &mut v[s], hp, step),
        _ => unreachable!("state_slots matches the optimizer"),
    }
}

/// Every parameter's host memory with its owned range's state, in `params`' order; None where
/// the backend does not lend it.
fn lend<'t, B: Backend + 't>(
    b: &mut B,
    params: impl Iterator<Item = &'t mut crate::nn::Param<B>>,
    owned: &'t mut [(Range<usize>, Vec<B::Tensor>)],
) -> Option<Vec<Option<HostParam<'t>>>> {
    params
        .zip(owned.iter_mut())
        .map(|(p, (own, state))| {
            let state = state.iter_mut().map(|t| b.host_f32_mut(t)).collect::<Option<Vec<_>>>()?;
            Some(Some(HostParam { value: b.host_f32_mut(&mut p.value)?, grad: b.host_f32_mut(&mut p.grad)?, own: own.clone(), state }))
        })
        .collect()
}

/// ZeRO-1's optimizer state on one replica: for each parameter (`ParamRef::slot`'s order) the
/// range of its elements this replica updates in the sharded step, and that range's state, one
/// tensor per state slot, allocated through the backend (the ledger counts it as optimizer
/// state): about 1/N of what every replica holds without sharding.
pub struct OwnedState<B: Backend> {
    params: Vec<(Range<usize>, Vec<B::Tensor>)>,
}

impl<B: Backend> OwnedState<B> {
    /// Elements of the parameters whose state this replica holds.
    pub fn elements(&self) -> usize {
        self.params.iter().map(|(r, _)| r.len()).sum()
    }
}

impl Reducer {
    /// Allocates the optimizer state of what this replica updates in `sharded_step`: in each
    /// bucket, its own chunk of the concatenated gradients (`RingPeer::own_chunk`; the last
    /// bucket's carries the stop vote at its end).
    pub fn own_optimizer_state<B: Backend>(&self, b: &mut B, model: &Mlp<B>) -> Result<OwnedState<B>> {
        let Comm::Inline { peer, .. } = &self.comm else {
            return Err(Error::InvalidConfig("shard_optimizer needs overlap=false: the sharded step runs on the training thread".into()));
        };
        let (dense, convs) = counts(model);
        let slots = model.optimizer.state_slots();
        let mut params: Vec<(Range<usize>, Vec<B::Tensor>)> = (0..2 * (dense + convs)).map(|_| (0..0, Vec::new())).collect();
        let last = self.buckets.len().saturating_sub(1);
        for (i, bucket) in self.buckets.iter().enumerate() {
            let own = peer.own_chunk(bucket.elements() + usize::from(i == last));
            let mut start = 0;
            for p in &bucket.params {
                let (lo, hi) = (own.start.max(start), own.end.min(start + p.elements));
                if lo < hi {
                    let state =
                        (0..slots).map(|_| b.zeros([1, hi - lo], DType::F32, MemCategory::OptimizerState)).collect::<Result<_>>()?;
                    let slot = params
                        .get_mut(p.slot(dense, convs))
                        .ok_or_else(|| Error::Internal(format!("bucket {i}: layer {} has no slot", p.layer)))?;
                    *slot = (lo - start..hi - start, state);
                }
                start += p.elements;
            }
        }
        Ok(OwnedState { params })
    }
}

/// Dense layers and convolutions: what `ParamRef::slot` counts in.
fn counts<B: Backend>(model: &Mlp<B>) -> (usize, usize) {
    (model.weights.len(), model.stem.as_ref().map_or(0, |s| s.weights.len()))
}

fn comm_gone() -> Error {
    Error::PeerLost("the all-reduce thread stopped (a neighbour replica failed)".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::{MlpConfig, OptimizerKind};
    use crate::parallel::{bucket, ring::ring};
    use gpulab_core::device::cpu::CpuBackend;
    use gpulab_core::tensor::CoreOps;
    use gpulab_core::tensor::prelude::*;

    /// Every rank's parameters after three steps on rank-specific gradients, and whether the
    /// ranks agreed to stop after each step (the last rank votes to stop at step 1).
    fn run(n: usize, cap_bytes: usize, opt: Optimizer, sharded: bool) -> Vec<(Vec<Vec<f32>>, Vec<bool>)> {
        let cfg = MlpConfig { input: 257, hidden: vec![13, 5], classes: 3, conv: None };
        let buckets = bucket::plan(&cfg, cap_bytes);
        let origin = Instant::now();
        std::thread::scope(|s| {
            let hs: Vec<_> = ring(n, None)
                .into_iter()
                .enumerate()
                .map(|(rank, peer)| {
                    let (buckets, cfg) = (buckets.clone(), cfg.clone());
                    s.spawn(move || {
                        let mut b = CpuBackend::new();
                        let mut m = if sharded { Mlp::without_optimizer_state(&mut b, cfg, opt, 7) } else { Mlp::new(&mut b, cfg, opt, 7) }
                            .expect("model");
                        let mut red = Reducer::new(peer, buckets, false, origin).expect("reducer");
                        let mut owned = red.own_optimizer_state(&mut b, &m).expect("the owned state");
                        let mut agreed = Vec::new();
                        for step in 0..3 {
                            for (i, p) in m.weights.iter_mut().chain(m.biases.iter_mut()).enumerate() {
                                let g = b.host_f32_mut(&mut p.grad).expect("the CPU lends its memory");
                                g.iter_mut()
                                    .enumerate()
                                    .for_each(|(j, x)| *x = ((j * 31 + i * 17 + rank * 13 + step * 7) % 97) as f32 * 0.01 - 0.48);
                            }
                            red.stop_vote = step == 1 && rank + 1 == n;
                            if sharded {
                                red.sharded_step(&mut b, &mut m, &mut owned).expect("sharded step").expect("inline on the CPU");
                            } else {
                                red.reduce_gradients(&mut b, &mut m).expect("all-reduce");
                                m.update(&mut b).expect("update");
                            }
                            agreed.push(red.stop_agreed);
                        }
                        (m.read_parameters(&mut b).expect("read"), agreed)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("rank thread")).collect()
        })
    }

    /// Each replica allocates the optimizer state of its own chunk of each bucket only: the
    /// ranks' ranges tile every parameter once, each within one element per bucket of 1/N, and
    /// the ledger counts exactly that as optimizer state.
    #[test]
    fn each_replica_allocates_the_state_of_its_own_chunks_only() {
        let cfg = MlpConfig { input: 257, hidden: vec![13, 5], classes: 3, conv: None };
        let opt = Optimizer::new(OptimizerKind::AdamW, 0.01, 0.0, 1e-2);
        let total = cfg.parameter_count();
        for n in 1..=5 {
            for cap in [1 << 20, 40] {
                let buckets = bucket::plan(&cfg, cap);
                let owned: Vec<(usize, u64)> = std::thread::scope(|s| {
                    let hs: Vec<_> = ring(n, None)
                        .into_iter()
                        .map(|peer| {
                            let (buckets, cfg) = (buckets.clone(), cfg.clone());
                            s.spawn(move || {
                                let mut b = CpuBackend::new();
                                let m = Mlp::without_optimizer_state(&mut b, cfg, opt, 7).expect("model");
                                let red = Reducer::new(peer, buckets, false, Instant::now()).expect("reducer");
                                let owned = red.own_optimizer_state(&mut b, &m).expect("the owned state");
                                let ledger = b.memory().categories.iter().find(|c| c.0 == MemCategory::OptimizerState).map_or(0, |c| c.2);
                                (owned.elements(), ledger)
                            })
                        })
                        .collect();
                    hs.into_iter().map(|h| h.join().expect("rank thread")).collect()
                });
                assert_eq!(owned.iter().map(|o| o.0).sum::<usize>(), total, "n={n} cap={cap}: the owned ranges tile the parameters");
                for (r, &(elements, ledger)) in owned.iter().enumerate() {
                    assert!(elements <= total / n + buckets.len(), "n={n} cap={cap}: rank {r} owns {elements} of {total}");
                    assert_eq!(ledger, elements as u64 * 2 * 4, "n={n}: rank {r}'s ledger holds AdamW's two f32 states of its elements");
                }
            }
        }
    }

    fn bits(p: &[Vec<f32>]) -> Vec<u32> {
        p.iter().flatten().map(|v| v.to_bits()).collect()
    }

    /// ZeRO-1 leaves every rank with the bits the all-reduce and the full update give, for any
    /// N, one bucket or many (chunks and the finishing pass's blocks cut through the first
    /// layer's 3341 weights), SGD with momentum and weight
    /// decay and AdamW (whose state each rank keeps only for its own chunk), and carries the
    /// stop vote to every rank.
    #[test]
    fn the_sharded_step_gives_the_full_steps_bits_on_every_rank() {
        let opts = [Optimizer::new(OptimizerKind::Sgd, 0.05, 0.9, 1e-3), Optimizer::new(OptimizerKind::AdamW, 0.01, 0.0, 1e-2)];
        for n in 1..=5 {
            for cap in [1 << 20, 40] {
                for opt in opts {
                    let full = run(n, cap, opt, false);
                    let sharded = run(n, cap, opt, true);
                    let want = bits(&full[0].0);
                    for (r, (params, agreed)) in sharded.iter().enumerate() {
                        assert_eq!(bits(params), want, "n={n} cap={cap} {opt:?}: rank {r}");
                        assert_eq!(agreed, &full[r].1, "n={n}: rank {r}'s stop agreement");
                    }
                    assert_eq!(full[0].1, [false, true, false], "the stop vote of step 1 reaches every rank");
                }
            }
        }
        // The parameters moved: the test compares trained weights, not the initial ones.
        let cfg = MlpConfig { input: 257, hidden: vec![13, 5], classes: 3, conv: None };
        let mut b = CpuBackend::new();
        let init = Mlp::new(&mut b, cfg, opts[0], 7).expect("model").read_parameters(&mut b).expect("read");
        assert_ne!(bits(&init), bits(&run(2, 40, opts[0], true)[0].0));
    }
}
