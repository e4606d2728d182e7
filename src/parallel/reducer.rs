//! Gradient synchronisation through the training loop's seam (`TrainHooks::reduce_gradients`):
//! each bucket's gradients are staged to the host, all-reduced round the ring, averaged and
//! written back. With overlap on, a bucket is handed to a communication thread as soon as
//! backward has finished its layers (`layer_done`), and backward goes on meanwhile; without it,
//! every bucket is all-reduced after backward. Either way the same sums are taken in the same
//! order, so overlap and bucketing change no result, bit for bit.

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;
use std::time::Instant;

use super::bucket::{Bucket, ParamRef};
use super::ring::{CommStats, RingPeer};
use crate::error::{Error, Result};
use crate::nn::Mlp;
use crate::tensor::Backend;
use crate::train::TrainHooks;

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
        Ok(Reducer { comm, buckets, launched: 0, replicas, origin, stop_vote: false, stop_agreed: false, comm_spans: Vec::new(), spare: Vec::new() })
    }

    /// Backward has finished layer `layer`: with overlap, launch every bucket now complete.
    pub fn layer_done<B: Backend>(&mut self, b: &mut B, model: &Mlp<B>, layer: usize) -> Result<()> {
        if self.replicas == 1 || matches!(self.comm, Comm::Inline { .. }) {
            return Ok(());
        }
        while self.launched < self.buckets.len() && self.buckets[self.launched].ready_after_layer >= layer {
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
        let tensors: Vec<&B::Tensor> = bucket.params.iter().map(|p| grad_of(model, p)).collect();
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
            Comm::Inline { done, .. } => done.pop_front().ok_or_else(|| Error::Internal("all-reduce result asked before it was started".into()))?,
            Comm::Background { done, .. } => done.recv().map_err(|_| comm_gone())?,
        };
        let (v, t0, t1) = done?;
        if matches!(self.comm, Comm::Background { .. }) {
            self.comm_spans.push((t0, t1));
        }
        Ok(v)
    }

    /// Every bucket: launched (the rest now), reduced, averaged and written back.
    fn finish<B: Backend>(&mut self, b: &mut B, model: &mut Mlp<B>) -> Result<()> {
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
                b.write_f32(grad_of_mut(model, p), &flat[at..at + p.elements])?;
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
        let mut weights: Vec<Option<&mut [f32]>> = model.weights.iter_mut().map(|p| b.host_f32_mut(&mut p.grad)).collect();
        let mut biases: Vec<Option<&mut [f32]>> = model.biases.iter_mut().map(|p| b.host_f32_mut(&mut p.grad)).collect();
        if weights.iter().chain(&biases).any(Option::is_none) {
            return Ok(false);
        }
        let inv = 1.0 / self.replicas as f32;
        let mut vote = [if self.stop_vote { 1.0 } else { 0.0 }];
        let last = self.buckets.len().saturating_sub(1);
        for (i, bucket) in self.buckets.iter().enumerate() {
            let mut segs: Vec<&mut [f32]> = Vec::with_capacity(bucket.params.len() + 1);
            for p in &bucket.params {
                let slot = if p.bias { biases.get_mut(p.layer) } else { weights.get_mut(p.layer) };
                let seg = slot.and_then(Option::take).filter(|s| s.len() == p.elements);
                segs.push(seg.ok_or_else(|| Error::Internal(format!("bucket {i}: layer {}'s gradient is missing, taken twice or not {} values", p.layer, p.elements)))?);
            }
            if i == last {
                segs.push(&mut vote);
            }
            peer.all_reduce_segments(&mut segs, inv)?;
        }
        self.stop_agreed = vote[0] > 0.0;
        Ok(true)
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

impl<B: Backend> TrainHooks<B> for Reducer {
    fn reduce_gradients(&mut self, b: &mut B, model: &mut Mlp<B>) -> Result<()> {
        self.finish(b, model)
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

fn grad_of<'m, B: Backend>(model: &'m Mlp<B>, p: &ParamRef) -> &'m B::Tensor {
    if p.bias { &model.biases[p.layer].grad } else { &model.weights[p.layer].grad }
}

fn grad_of_mut<'m, B: Backend>(model: &'m mut Mlp<B>, p: &ParamRef) -> &'m mut B::Tensor {
    if p.bias { &mut model.biases[p.layer].grad } else { &mut model.weights[p.layer].grad }
}

fn comm_gone() -> Error {
    Error::TrainingProcess("the all-reduce thread stopped (a neighbour replica failed)".into())
}
