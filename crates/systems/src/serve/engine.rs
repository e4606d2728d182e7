//! The inference thread: it owns the backend (opened on this thread), the model's weights and
//! a few forward workspaces (one per batch size in use, made on first use, reused, the least
//! recently used dropped beyond a cap), takes batches from the batcher, runs them, and answers
//! every request of the batch. Whoever holds its `EngineHealth` learns when it stops, and why.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use tokio::sync::watch;

use super::batcher::{Batches, Prediction, Request};
use super::metrics::EngineMetrics;
use super::model::{DeviceModel, HostModel};
use super::workspaces::{self, Workspaces};
use crate::nn::Workspace;
use gpulab_core::device::Device;
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::{Backend, BackendInfo, DeviceCounts, MemoryReport};
use gpulab_core::with_backend;

/// What the inference thread has done so far (a snapshot is a copy).
#[derive(Clone, Debug, Default)]
pub struct InferenceTotals {
    pub batches: u64,
    pub samples: u64,
    /// Wall time spent running batches (upload, forward, read-back), seconds. Measured.
    pub compute_s: f64,
    /// Device busy time from GPU timestamps, seconds; None where the backend cannot measure it.
    pub gpu_busy_s: Option<f64>,
    /// How many batches had each size. Measured.
    pub batch_sizes: HashMap<usize, u64>,
    pub failed_batches: u64,
    /// Forward workspaces the thread keeps now (at most `workspaces::DEFAULT_CAP`).
    pub workspaces: usize,
    /// Device work of the batches (upload, forward, read-back and busy time): divide by
    /// `batches` for per-batch figures. Measured (counted); None on the CPU.
    pub device_counts: Option<DeviceCounts>,
}

/// Shared between the inference thread and whoever watches it.
#[derive(Clone, Default)]
pub struct EngineStats(Arc<Mutex<InferenceTotals>>);

impl EngineStats {
    pub fn snapshot(&self) -> InferenceTotals {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn add(&self, rows: usize, compute_s: f64, busy: Option<f64>, ok: bool, workspaces: usize, counts: Option<DeviceCounts>) {
        let mut t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = counts {
            t.device_counts = Some(t.device_counts.unwrap_or_default().plus(&c));
        }
        t.workspaces = workspaces;
        t.batches += 1;
        t.samples += rows as u64;
        t.compute_s += compute_s;
        if let Some(s) = busy {
            *t.gpu_busy_s.get_or_insert(0.0) += s;
        }
        *t.batch_sizes.entry(rows).or_default() += 1;
        if !ok {
            t.failed_batches += 1;
        }
    }
}

/// What the thread reports once the backend is open and warmed up.
#[derive(Clone, Debug)]
pub struct EngineReady {
    pub backend: BackendInfo,
    /// The memory ledger with the weights and the max-batch workspace allocated.
    pub memory: MemoryReport,
}

/// Whether the inference thread still runs; once it has stopped, why.
#[derive(Clone, Debug)]
pub struct EngineHealth(watch::Receiver<Option<String>>);

impl EngineHealth {
    /// None while the thread runs; the reason once it has stopped (an error, a panic, or the
    /// drained queue of a shutdown).
    pub fn stopped(&self) -> Option<String> {
        self.0.borrow().clone()
    }

    /// Resolves once the thread has stopped.
    pub async fn wait_stopped(&mut self) {
        let _ = self.0.wait_for(Option::is_some).await;
    }
}

/// A fault to inject, for tests of what the server does when its inference thread dies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    /// The thread panics when it takes its batch after this many.
    pub panic_after_batches: u64,
}

/// The running inference thread.
pub struct InferenceEngine {
    pub stats: EngineStats,
    pub ready: EngineReady,
    pub health: EngineHealth,
    thread: JoinHandle<Result<()>>,
}

impl InferenceEngine {
    /// Starts the thread, opens `device` on it, uploads the model and runs one batch of each
    /// of sizes 1 and max batch (kernels compiled before the first request). Returns once it
    /// serves, or the error that stopped it (e.g. `cuda`: CUDA unavailable).
    pub fn start(device: Device, model: HostModel, batches: Batches, metrics: EngineMetrics) -> Result<InferenceEngine> {
        Self::start_with(device, model, batches, metrics, None)
    }

    /// `start`, with a fault to inject (tests).
    pub fn start_with(
        device: Device,
        model: HostModel,
        batches: Batches,
        metrics: EngineMetrics,
        fault: Option<Fault>,
    ) -> Result<InferenceEngine> {
        let stats = EngineStats::default();
        let (ready_tx, ready_rx) = mpsc::channel();
        let (health_tx, health) = watch::channel(None);
        let st = stats.clone();
        let thread = std::thread::Builder::new()
            .name("gpulab-inference".into())
            .spawn(move || {
                let run = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    gpulab_core::device::cpu::drive(|| {
                        let mut engine = match device.open(None) {
                            Ok(e) => e,
                            Err(e) => {
                                let msg = e.to_string();
                                let _ = ready_tx.send(Err(e));
                                return Err(Error::InvalidConfig(msg));
                            }
                        };
                        with_backend!(&mut engine, b => serve_loop(b, &model, &batches, &st, &metrics, ready_tx, fault))
                    })
                }));
                let result = run.unwrap_or_else(|panic| {
                    let what = panic.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| panic.downcast_ref::<String>().cloned());
                    Err(Error::Internal(format!("the inference thread panicked: {}", what.unwrap_or_default())))
                });
                let why = match &result {
                    Ok(()) => "the inference thread stopped after draining its queue".to_string(),
                    Err(e) => e.to_string(),
                };
                let _ = health_tx.send(Some(why));
                result
            })
            .map_err(|e| Error::Internal(format!("could not start the inference thread: {e}")))?;
        match ready_rx.recv() {
            Ok(Ok(ready)) => Ok(InferenceEngine { stats, ready, health: EngineHealth(health), thread }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => Err(match thread.join() {
                Ok(Err(e)) => e,
                _ => Error::Internal("the inference thread stopped while starting".into()),
            }),
        }
    }

    /// Waits for the thread to drain the queue and stop (it stops once every `Queue` is gone).
    pub fn join(self) -> Result<InferenceTotals> {
        let stats = self.stats;
        match self.thread.join() {
            Ok(r) => r.map(|_| stats.snapshot()),
            Err(_) => Err(Error::Internal("the inference thread panicked".into())),
        }
    }

    /// Whether the thread has finished (stopped serving or never will again).
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }
}

/// Softmax of one row of logits, and its arg-max.
pub fn softmax(logits: &[f32]) -> (usize, Vec<f32>) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = logits.iter().map(|v| (v - max).exp()).collect();
    let sum: f32 = e.iter().sum();
    let p: Vec<f32> = e.iter().map(|v| v / sum).collect();
    let class = p.iter().enumerate().fold(0, |best, (i, v)| if *v > p[best] { i } else { best });
    (class, p)
}

struct Runner<B: Backend> {
    model: DeviceModel<B>,
    workspaces: Workspaces<Workspace<B>>,
    xb: Vec<f32>,
}

impl<B: Backend> Runner<B> {
    fn new(model: DeviceModel<B>) -> Self {
        Runner { model, workspaces: Workspaces::new(workspaces::DEFAULT_CAP), xb: Vec::new() }
    }

    /// Logits of `inputs` (rows of `features`), through the workspace for that many rows.
    fn run(&mut self, b: &mut B, inputs: &[&[f32]]) -> Result<Vec<f32>> {
        let rows = inputs.len();
        let model = &self.model;
        let ws = self.workspaces.get(rows, |rows| model.workspace(b, rows))?;
        self.xb.clear();
        inputs.iter().for_each(|x| self.xb.extend_from_slice(x));
        b.write_f32(&mut ws.x, &self.xb)?;
        self.model.forward(b, ws)?;
        // The read submits the forward pass with its copy: one submission, one wait per batch.
        b.read_f32(ws.logits())
    }
}

fn serve_loop<B: Backend>(
    b: &mut B,
    host: &HostModel,
    batches: &Batches,
    stats: &EngineStats,
    metrics: &EngineMetrics,
    ready_tx: mpsc::Sender<Result<EngineReady>>,
    fault: Option<Fault>,
) -> Result<()> {
    let setup = |b: &mut B| -> Result<Runner<B>> {
        b.prepare()?;
        Ok(Runner::new(DeviceModel::upload(b, host)?))
    };
    let mut runner = match setup(b) {
        Ok(r) => r,
        Err(e) => {
            let msg = e.to_string();
            let _ = ready_tx.send(Err(e));
            return Err(Error::InvalidConfig(msg));
        }
    };
    let features = host.arch.input;
    let zero = vec![0.0f32; features];
    let max = batches.policy().max_batch;
    for rows in [1, max] {
        let inputs = vec![zero.as_slice(); rows];
        if let Err(e) = runner.run(b, &inputs) {
            let msg = e.to_string();
            let _ = ready_tx.send(Err(e));
            return Err(Error::InvalidConfig(msg));
        }
    }
    b.reset_busy_clock()?; // start the busy clock from zero
    let _ = ready_tx.send(Ok(EngineReady { backend: b.info(), memory: b.memory() }));

    let mut batch: Vec<Request> = Vec::with_capacity(max);
    let classes = host.arch.classes;
    let mut taken = 0u64;
    while batches.next_batch(&mut batch).is_some() {
        if fault.is_some_and(|f| taken >= f.panic_after_batches) {
            panic!("fault injected: the inference thread dies after {taken} batches");
        }
        taken += 1;
        // A request whose client has gone (closed connection, a shutdown's deadline) is not run.
        batch.retain(|r| !r.reply.is_closed());
        if batch.is_empty() {
            continue;
        }
        let start = Instant::now();
        let counts_before = b.counts();
        metrics.batch_formed(batch.len(), batches.depth());
        let inputs: Vec<&[f32]> = batch.iter().map(|r| r.input.as_slice()).collect();
        let result = runner.run(b, &inputs);
        let compute_s = start.elapsed().as_secs_f64();
        let busy = b.take_busy_seconds().unwrap_or(None);
        let rows = batch.len();
        let counts = b.counts().zip(counts_before).map(|(now, then)| now.since(&then));
        stats.add(rows, compute_s, busy, result.is_ok(), runner.workspaces.len(), counts);
        metrics.batch_done(rows, compute_s, busy);
        match result {
            Ok(logits) => {
                for (r, l) in batch.drain(..).zip(logits.chunks_exact(classes)) {
                    let (class, probabilities) = softmax(l);
                    let _ = r.reply.send(Ok(Prediction { class, probabilities, queue_wait: start - r.enqueued, batch_size: rows }));
                }
            }
            Err(e) => {
                let msg = format!("inference failed: {e}");
                for r in batch.drain(..) {
                    let _ = r.reply.send(Err(msg.clone()));
                }
                if matches!(e, Error::DeviceLost(_) | Error::GpuStalled { .. }) {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::MlpConfig;
    use gpulab_core::device::CpuBackend;
    use gpulab_core::tensor::MemCategory;
    use gpulab_core::tensor::prelude::*;

    /// Every batch size from 1 to 64 once: the thread keeps at most the cap of workspaces, and
    /// the ledger's activations stay within that many max-size ones.
    #[test]
    fn many_batch_sizes_keep_a_bounded_set_of_workspaces() {
        let arch = MlpConfig { input: 13, hidden: vec![17], classes: 5, conv: None };
        let layers = arch
            .widths()
            .windows(2)
            .map(|w| crate::nn::HostLayer { weight: vec![0.01; w[0] * w[1]], shape: [w[0], w[1]], bias: vec![0.0; w[1]] })
            .collect();
        let host = HostModel { arch, layers, version: "t".into(), source: "t".into(), int8: None };
        let mut b = CpuBackend::new();
        let mut runner = Runner::new(DeviceModel::upload(&mut b, &host).unwrap());
        let x = vec![0.5f32; 13];
        for rows in 1..=64 {
            let out = runner.run(&mut b, &vec![x.as_slice(); rows]).unwrap();
            assert_eq!(out.len(), rows * 5);
        }
        const CAP: usize = 8; // workspaces::DEFAULT_CAP
        assert!(runner.workspaces.len() <= CAP, "{} workspaces kept", runner.workspaces.len());
        let activations = b.memory().categories.iter().find(|c| c.0 == MemCategory::Activations).map_or(0, |c| c.1);
        let largest = 64 * (17 + 5) * 4;
        assert!(activations <= (CAP * largest) as u64, "{activations} bytes of activations kept");
    }
}
