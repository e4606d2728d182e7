//! The measured runs of exercise 8: one engine (the server's inference thread and batcher)
//! per configuration, driven in-process by the load generator while queue depth and formed
//! batch sizes are sampled live; and the two memory ledgers (inference, training).

use std::time::{Duration, Instant};

use crate::sink::{Event, Sink};
use gpulab_core::device::Device;
use gpulab_core::error::Result;
use gpulab_core::tensor::MemoryReport;
use gpulab_core::tensor::prelude::*;
use gpulab_core::with_backend;
use gpulab_systems::nn::{Mlp, Optimizer, OptimizerKind};
use gpulab_systems::report::Provenance;
use gpulab_systems::serve::loadgen::{self, Arrivals, LoadResult, LoadSpec, LoadSummary, Target};
use gpulab_systems::serve::metrics::ServerMetrics;
use gpulab_systems::serve::{BatchPolicy, DeviceModel, HostModel, InferenceEngine, InferenceTotals, batcher};
use gpulab_systems::train::{F32Phases, Step};

/// One configuration under one load, and what it measured.
pub struct RunResult {
    pub label: String,
    pub policy: BatchPolicy,
    pub arrivals: Arrivals,
    pub summary: LoadSummary,
    pub totals: InferenceTotals,
    /// The backend the engine ran on.
    pub backend: gpulab_core::tensor::BackendInfo,
    /// Highest queue depth sampled during the run, and the last one.
    pub max_depth: usize,
}

impl RunResult {
    /// Mean formed batch size. Derived.
    pub fn mean_batch(&self) -> f64 {
        self.totals.samples as f64 / self.totals.batches.max(1) as f64
    }
    /// Mean time to run one batch (upload, forward, read-back), ms. Measured.
    pub fn batch_ms(&self) -> f64 {
        self.totals.compute_s * 1e3 / self.totals.batches.max(1) as f64
    }
    /// GPU busy share of the run's wall time. Derived from timestamps; None on the CPU.
    pub fn gpu_busy(&self) -> Option<f64> {
        self.totals.gpu_busy_s.map(|b| b / self.summary.wall_s.max(1e-9))
    }
    /// More arrived than was served: refusals, requests left unanswered, or (open loop) under
    /// 90% of the offered rate served.
    pub fn overloaded(&self) -> bool {
        let short = match self.arrivals {
            Arrivals::Open { rate_per_s } => self.summary.throughput_per_s < 0.9 * rate_per_s,
            Arrivals::Closed { .. } => false,
        };
        self.summary.rejected > 0 || self.summary.unanswered > 0 || short
    }
}

/// Runs `policy` under `arrivals` for `duration` on a fresh engine; emits live points (queue
/// depth, mean formed batch size every 200 ms; latency percentiles per half second after the
/// run) under the series `label`.
#[allow(clippy::too_many_arguments)]
pub fn run_one(
    device: &Device,
    model: &HostModel,
    inputs: &[Vec<f32>],
    policy: BatchPolicy,
    arrivals: Arrivals,
    duration: Duration,
    label: String,
    sink: &mut dyn Sink,
) -> Result<RunResult> {
    let (queue, batches) = batcher::queue(policy.clone(), model.arch.input);
    let metrics = ServerMetrics::new(&model.version, &device.to_string(), false)?;
    let engine = InferenceEngine::start(device.clone(), model.clone(), batches, metrics.engine.clone())?;
    let spec = LoadSpec { arrivals, duration, max_requests: 2_000_000, drain: Duration::from_secs(10), seed: 8 };
    let target = Target::InProcess(queue.clone());
    let start = Instant::now();
    let mut max_depth = 0;
    let result = std::thread::scope(|s| {
        let load = s.spawn(|| loadgen::run(&target, inputs, &spec));
        let mut last = engine.stats.snapshot();
        while !load.is_finished() {
            std::thread::sleep(Duration::from_millis(200));
            let t = start.elapsed().as_secs_f64();
            let depth = queue.depth();
            max_depth = max_depth.max(depth);
            let now = engine.stats.snapshot();
            sink.emit(Event::Point {
                chart: "queue_depth".into(),
                series: label.clone(),
                x: t,
                y: depth as f64,
                provenance: Provenance::Measured,
            });
            if now.batches > last.batches {
                let mean = (now.samples - last.samples) as f64 / (now.batches - last.batches) as f64;
                sink.emit(Event::Point {
                    chart: "batch_size".into(),
                    series: label.clone(),
                    x: t,
                    y: mean,
                    provenance: Provenance::Measured,
                });
            }
            last = now;
        }
        load.join().unwrap_or_else(|_| Err(gpulab_core::Error::Internal("the load generator panicked".into())))
    })?;
    drop(target);
    drop(queue);
    let backend = engine.ready.backend.clone();
    let totals = engine.join()?;
    emit_latency_windows(&result, &label, sink);
    let summary = result.summary();
    Ok(RunResult { label, policy, arrivals, summary, totals, backend, max_depth })
}

/// p99 latency per half second of scheduled arrival time.
fn emit_latency_windows(r: &LoadResult, label: &str, sink: &mut dyn Sink) {
    let end = r.samples.iter().map(|s| s.due_s).fold(0.0, f64::max);
    let mut t = 0.0;
    while t <= end {
        let window: Vec<_> = r.samples.iter().filter(|s| s.due_s >= t && s.due_s < t + 0.5).copied().collect();
        if !window.is_empty() {
            let w = loadgen::summarize(&window, 0.5);
            sink.emit(Event::Point {
                chart: "latency".into(),
                series: format!("{label} p99"),
                x: t + 0.25,
                y: w.p99_ms,
                provenance: Provenance::Measured,
            });
        }
        t += 0.5;
    }
}

/// The memory ledger of serving (weights + one forward workspace of `batch`) and of training
/// the same model at the same batch (weights, gradients, optimizer state, training workspace),
/// each on a freshly opened backend. Both measured by gpulab's ledger.
pub fn memory_ledgers(device: &Device, model: &HostModel, batch: usize) -> Result<(MemoryReport, MemoryReport)> {
    let mut engine = device.open(None)?;
    let inference = with_backend!(&mut engine, b => {
        let m = DeviceModel::upload(b, model)?;
        let _ws = m.workspace(b, batch)?;
        b.memory()
    });
    drop(engine);
    let mut engine = device.open(None)?;
    let training = with_backend!(&mut engine, b => {
        let mlp = Mlp::new(b, model.arch.clone(), Optimizer::new(OptimizerKind::Sgd, 0.05, 0.9, 0.0), 1)?;
        let _step = Step::new(b, &mlp, F32Phases, batch)?;
        b.memory()
    });
    Ok((inference, training))
}
