//! The server's Prometheus metrics through the `metrics` facade: one recorder per server (not
//! the process-global one, so tests can run servers side by side), its handles registered once
//! at start, and `/metrics` rendered from the axum route.

use std::sync::Arc;
use std::sync::Mutex;
use std::time::Instant;

use metrics::{Counter, Gauge, Histogram, Key, Label, Level, Metadata, Recorder, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

use gpulab_core::error::{Error, Result};

pub const REQUESTS: &str = "gpulab_requests_total";
pub const RESPONSES: &str = "gpulab_responses_total";
pub const LATENCY: &str = "gpulab_request_duration_seconds";
pub const QUEUE_WAIT: &str = "gpulab_queue_wait_seconds";
pub const QUEUE_DEPTH: &str = "gpulab_queue_depth";
pub const BATCH_SIZE: &str = "gpulab_batch_size";
pub const BATCHES: &str = "gpulab_batches_total";
pub const PREDICTIONS: &str = "gpulab_predictions_total";
pub const BATCHES_PER_S: &str = "gpulab_batches_per_second";
pub const COMPUTE_S: &str = "gpulab_compute_microseconds_total";
pub const GPU_BUSY_S: &str = "gpulab_gpu_busy_microseconds_total";
pub const MODEL_INFO: &str = "gpulab_model_info";
pub const CONNECTIONS: &str = "gpulab_connections_open";
pub const CONNECTIONS_REFUSED: &str = "gpulab_connections_refused_total";

/// Every status a predict response can have; each has its own counter so they add up (499:
/// the client closed the connection before its answer, or a shutdown's deadline closed it).
/// Any other status counts under `status="other"`.
pub const STATUSES: [u16; 9] = [200, 400, 403, 408, 413, 415, 499, 500, 503];

const META: Metadata<'static> = Metadata::new("gpulab::serve", Level::INFO, Some("gpulab::serve"));

/// The handles the inference thread updates.
#[derive(Clone)]
pub struct EngineMetrics {
    queue_depth: Gauge,
    batch_size: Histogram,
    batches: Counter,
    predictions: Counter,
    batches_per_s: Gauge,
    compute_s: Counter,
    gpu_busy_s: Option<Counter>,
    window: Arc<Mutex<(Instant, u64)>>,
}

impl EngineMetrics {
    /// A batch was formed; `left` samples still wait.
    pub fn batch_formed(&self, rows: usize, left: usize) {
        self.batch_size.record(rows as f64);
        self.queue_depth.set(left as f64);
    }

    /// A batch ran: counts, compute time, GPU busy time, and batches/s over the last second.
    pub fn batch_done(&self, rows: usize, compute_s: f64, busy: Option<f64>) {
        self.batches.increment(1);
        self.predictions.increment(rows as u64);
        self.compute_s.increment((compute_s * 1e6) as u64);
        if let (Some(s), Some(c)) = (busy, &self.gpu_busy_s) {
            c.increment((s * 1e6) as u64);
        }
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        w.1 += 1;
        let secs = w.0.elapsed().as_secs_f64();
        if secs >= 1.0 {
            self.batches_per_s.set(w.1 as f64 / secs);
            *w = (Instant::now(), 0);
        }
    }
}

/// The HTTP side's handles and the renderer.
#[derive(Clone)]
pub struct ServerMetrics {
    handle: PrometheusHandle,
    requests: Counter,
    responses: Vec<(u16, Counter)>,
    latency: Histogram,
    queue_wait: Histogram,
    queue_depth: Gauge,
    other_status: Counter,
    connections: Gauge,
    connections_refused: Counter,
    pub engine: EngineMetrics,
    _recorder: Arc<PrometheusRecorder>,
}

fn key(name: &'static str, labels: Vec<Label>) -> Key {
    Key::from_parts(name, labels)
}

impl ServerMetrics {
    /// `gpu_timestamps`: the backend measures GPU busy time (a wgpu adapter); without it the
    /// busy counter is not exported at all rather than shown as 0.
    pub fn new(model_version: &str, backend: &str, gpu_timestamps: bool) -> Result<Self> {
        let latency_buckets = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0];
        let batch_buckets = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0];
        let err = |e: metrics_exporter_prometheus::BuildError| Error::Internal(format!("metrics: {e}"));
        let rec = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Full(LATENCY.into()), &latency_buckets)
            .map_err(err)?
            .set_buckets_for_metric(Matcher::Full(QUEUE_WAIT.into()), &latency_buckets)
            .map_err(err)?
            .set_buckets_for_metric(Matcher::Full(BATCH_SIZE.into()), &batch_buckets)
            .map_err(err)?
            .build_recorder();
        let describe = |name: &'static str, unit: Option<Unit>, help: &'static str| {
            rec.describe_counter(name.into(), unit, help.into());
        };
        describe(REQUESTS, None, "Predict requests received");
        describe(RESPONSES, None, "Predict responses sent, by HTTP status");
        describe(LATENCY, Some(Unit::Seconds), "Predict request latency, arrival to response");
        describe(QUEUE_WAIT, Some(Unit::Seconds), "Time a sample waited in the batcher's queue");
        describe(QUEUE_DEPTH, None, "Samples waiting in the queue");
        describe(BATCH_SIZE, None, "Sizes of the batches the dynamic batcher formed");
        describe(BATCHES, None, "Batches run");
        describe(PREDICTIONS, None, "Samples predicted");
        describe(BATCHES_PER_S, None, "Batches per second over the last second with traffic");
        describe(COMPUTE_S, None, "Microseconds the inference thread spent running batches (wall clock)");
        describe(GPU_BUSY_S, None, "Microseconds the GPU was busy, from timestamp queries (not exported on the CPU backend)");
        describe(MODEL_INFO, None, "The served model (labels); always 1");
        describe(CONNECTIONS, None, "HTTP connections open now");
        describe(CONNECTIONS_REFUSED, None, "Connections refused because the connection cap was reached");
        let counter = |name: &'static str| rec.register_counter(&key(name, vec![]), &META);
        let gauge = |name: &'static str| rec.register_gauge(&key(name, vec![]), &META);
        let hist = |name: &'static str| rec.register_histogram(&key(name, vec![]), &META);
        let responses = STATUSES
            .iter()
            .map(|&s| (s, rec.register_counter(&key(RESPONSES, vec![Label::new("status", s.to_string())]), &META)))
            .collect();
        let info = rec.register_gauge(
            &key(MODEL_INFO, vec![Label::new("version", model_version.to_string()), Label::new("backend", backend.to_string())]),
            &META,
        );
        info.set(1.0);
        let queue_depth = gauge(QUEUE_DEPTH);
        queue_depth.set(0.0);
        let engine = EngineMetrics {
            queue_depth: queue_depth.clone(),
            batch_size: hist(BATCH_SIZE),
            batches: counter(BATCHES),
            predictions: counter(PREDICTIONS),
            batches_per_s: gauge(BATCHES_PER_S),
            compute_s: counter(COMPUTE_S),
            gpu_busy_s: gpu_timestamps.then(|| counter(GPU_BUSY_S)),
            window: Arc::new(Mutex::new((Instant::now(), 0))),
        };
        Ok(ServerMetrics {
            handle: rec.handle(),
            requests: counter(REQUESTS),
            responses,
            latency: hist(LATENCY),
            queue_wait: hist(QUEUE_WAIT),
            queue_depth,
            other_status: rec.register_counter(&key(RESPONSES, vec![Label::new("status", "other")]), &META),
            connections: gauge(CONNECTIONS),
            connections_refused: counter(CONNECTIONS_REFUSED),
            engine,
            _recorder: Arc::new(rec),
        })
    }

    pub fn request(&self) {
        self.requests.increment(1);
    }

    /// One response: its status (each request gets exactly one) and latency.
    pub fn response(&self, status: u16, latency_s: f64) {
        match self.responses.iter().find(|(s, _)| *s == status) {
            Some((_, c)) => c.increment(1),
            None => self.other_status.increment(1),
        }
        self.latency.record(latency_s);
    }

    pub fn connection_opened(&self) {
        self.connections.increment(1.0);
    }

    pub fn connection_closed(&self) {
        self.connections.decrement(1.0);
    }

    pub fn connection_refused(&self) {
        self.connections_refused.increment(1);
    }

    pub fn queue_wait(&self, s: f64) {
        self.queue_wait.record(s);
    }

    pub fn queue_depth(&self, depth: usize) {
        self.queue_depth.set(depth as f64);
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        self.handle.run_upkeep();
        self.handle.render()
    }
}
