//! HTTP on loopback with axum + tokio: `POST /v1/predict`, `GET /healthz`, `GET /metrics`.
//! Every predict request gets exactly one response and one count in
//! `gpulab_responses_total{status}`: bad input is a 400 naming the problem, a body over the
//! limits a 413, a slow one a 408, a non-JSON one a 415, a foreign Host or Origin a 403 (guard.rs),
//! a full queue a 503 with `Retry-After`. Every client is bounded in time, size and number
//! (limits.rs, listen.rs, body.rs). Shutdown (a signal, `Server::shutdown`, or the inference
//! thread dying) stops accepting, gives requests in flight the grace period, drops what is
//! left, and stops the inference thread; `/healthz` says 503 as soon as the server cannot serve.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, oneshot};

use super::batcher::{self, BatchPolicy, Queue, SubmitError};
use super::body::{self, Failure};
use super::engine::{EngineHealth, EngineReady, Fault, InferenceEngine, InferenceTotals};
use super::guard;
pub use super::limits::{DEFAULT_MAX_BODY, Limits};
use super::listen::{self, Drained};
use super::metrics::ServerMetrics;
use super::model::HostModel;
pub use super::parse::{MAX_INPUTS_PER_REQUEST, parse_inputs};
use super::signals::Signals;
use gpulab_core::device::Device;
use gpulab_core::error::{Error, Result};

#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub device: Device,
    pub policy: BatchPolicy,
    /// 0 = any free port (tests).
    pub port: u16,
    /// Stop on Ctrl-C / SIGTERM, and exit the process at a second one (the CLI); tests stop
    /// through `Server::shutdown`.
    pub on_signals: bool,
    /// tokio worker threads for the HTTP side; also how many large bodies are parsed at once.
    pub http_threads: usize,
    /// Every client's bounds: sizes, timeouts, connections, the shutdown's grace period.
    pub limits: Limits,
    /// A fault to inject into the inference thread (tests); None in real use.
    pub fault: Option<Fault>,
}

impl ServeConfig {
    pub fn new(device: Device, policy: BatchPolicy) -> Self {
        ServeConfig { device, policy, port: 0, on_signals: false, http_threads: 2, limits: Limits::default(), fault: None }
    }
}

struct AppState {
    queue: Queue,
    metrics: ServerMetrics,
    version: String,
    backend: String,
    /// The port clients must name in `Host`.
    port: u16,
    limits: Limits,
    /// Most samples one request may carry: what the queue can take, at most the protocol's cap.
    max_inputs: usize,
    /// Bytes of bodies held in memory at once (permits = bytes).
    body_budget: Arc<Semaphore>,
    /// Large bodies parsed at once.
    parsers: Arc<Semaphore>,
    health: EngineHealth,
    stopping: AtomicBool,
}

/// A running server.
pub struct Server {
    pub addr: SocketAddr,
    pub ready: EngineReady,
    pub model_version: String,
    stop: Option<oneshot::Sender<()>>,
    thread: JoinHandle<Result<Stopped>>,
}

/// How a server ended: what it served, and the connections its shutdown's deadline dropped.
#[derive(Clone, Debug)]
pub struct Stopped {
    pub totals: InferenceTotals,
    pub dropped_connections: usize,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct PredictionJson {
    pub class: usize,
    pub probabilities: Vec<f32>,
    pub queue_wait_us: u64,
    pub batch_size: usize,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct PredictResponse {
    pub model_version: String,
    pub predictions: Vec<PredictionJson>,
}

impl Server {
    /// Starts the inference thread and the HTTP listener on 127.0.0.1:`port`; returns once both
    /// serve.
    pub fn start(cfg: ServeConfig, model: HostModel) -> Result<Server> {
        cfg.policy.validate()?;
        cfg.limits.validate()?;
        if cfg.http_threads == 0 || cfg.http_threads > 256 {
            return Err(Error::InvalidConfig(format!("HTTP threads {} must be between 1 and 256", cfg.http_threads)));
        }
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, cfg.port))
            .map_err(|e| Error::InvalidConfig(format!("cannot listen on 127.0.0.1:{}: {e}", cfg.port)))?;
        listener.set_nonblocking(true).map_err(|e| Error::Internal(format!("listener: {e}")))?;
        let addr = listener.local_addr().map_err(|e| Error::Internal(format!("listener: {e}")))?;
        let backend_name = cfg.device.to_string();
        let metrics = ServerMetrics::new(&model.version, &backend_name, matches!(cfg.device, Device::Gpu(_)))?;
        let (queue, batches) = batcher::queue(cfg.policy.clone(), model.arch.input);
        let version = model.version.clone();
        let engine = InferenceEngine::start_with(cfg.device.clone(), model, batches, metrics.engine.clone(), cfg.fault)?;
        let ready = engine.ready.clone();
        let limits = cfg.limits.clone();
        let state = Arc::new(AppState {
            max_inputs: MAX_INPUTS_PER_REQUEST.min(queue.capacity()),
            queue,
            metrics: metrics.clone(),
            version: version.clone(),
            backend: ready.backend.label(),
            port: addr.port(),
            body_budget: Arc::new(Semaphore::new(limits.body_budget_bytes)),
            parsers: Arc::new(Semaphore::new(cfg.http_threads)),
            limits: limits.clone(),
            health: engine.health.clone(),
            stopping: AtomicBool::new(false),
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cfg.http_threads)
            .thread_name("gpulab-http")
            .enable_all()
            .build()
            .map_err(|e| Error::Internal(format!("could not start the HTTP runtime: {e}")))?;
        // Registered before `start` returns (the CLI then says it is serving): a signal from
        // then on begins a shutdown instead of killing the process.
        let (listener, signals) = {
            let _in = runtime.enter();
            let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| Error::Internal(format!("listener: {e}")))?;
            let signals = cfg
                .on_signals
                .then(Signals::register)
                .transpose()
                .map_err(|e| Error::Internal(format!("could not listen for Ctrl-C / SIGTERM: {e}")))?;
            (listener, signals)
        };
        let thread = std::thread::Builder::new()
            .name("gpulab-serve".into())
            .spawn(move || {
                let mut health = engine.health.clone();
                let drained = runtime.block_on(async {
                    let (first_signal, signalled) = oneshot::channel();
                    if let Some(s) = signals {
                        tokio::spawn(s.watch(first_signal, limits.shutdown_grace));
                    }
                    let app = router(state.clone());
                    let stop = async {
                        tokio::select! {
                            _ = stopped => {}
                            _ = signalled, if cfg.on_signals => {}
                            // The inference thread died: nothing can be served any more.
                            _ = health.wait_stopped() => {}
                        }
                        state.stopping.store(true, Ordering::Relaxed);
                    };
                    listen::serve(listener, app, &limits, &metrics, stop).await
                });
                // Every handler is gone; the last `Queue` goes with the state, and the engine
                // drains what is left (skipping requests whose clients are gone) and stops.
                drop(state);
                runtime.shutdown_timeout(Duration::from_secs(1));
                let totals = engine.join()?;
                Ok(Stopped { totals, dropped_connections: if let Drained::Dropped(n) = drained { n } else { 0 } })
            })
            .map_err(|e| Error::Internal(format!("could not start the server thread: {e}")))?;
        Ok(Server { addr, ready, model_version: version, stop: Some(stop), thread })
    }

    /// Begins a graceful shutdown (as Ctrl-C would).
    pub fn shutdown(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }

    /// Waits until the server has stopped (after `shutdown`, a signal, or its inference thread
    /// dying: then the error that stopped it); what it served.
    pub fn wait(self) -> Result<InferenceTotals> {
        self.wait_stopped().map(|s| s.totals)
    }

    /// `wait`, with how many connections the shutdown's deadline dropped.
    pub fn wait_stopped(self) -> Result<Stopped> {
        let _keep = self.stop;
        self.thread.join().map_err(|_| Error::Internal("the server thread panicked".into()))?
    }
}

fn router(state: Arc<AppState>) -> Router {
    Router::new().route("/v1/predict", post(predict)).route("/healthz", get(healthz)).route("/metrics", get(metrics)).with_state(state)
}

fn error(status: StatusCode, msg: String) -> Response {
    let mut r = (status, axum::Json(serde_json::json!({ "error": msg }))).into_response();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    r
}

/// Counts the one response of a predict request; if the client goes away before it is sent
/// (the request's future is dropped), counts it as 499 so requests still equal responses by
/// status.
struct Counted<'a> {
    metrics: &'a ServerMetrics,
    t0: Instant,
    done: bool,
}

impl Counted<'_> {
    fn finish(mut self, status: u16) {
        self.done = true;
        self.metrics.response(status, self.t0.elapsed().as_secs_f64());
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.metrics.response(499, self.t0.elapsed().as_secs_f64());
        }
    }
}

/// The Host / Origin check (guard.rs) as an extractor: a handler that takes it answers 403
/// to a request that does not come from this machine's loopback.
struct FromLoopback;

impl FromRequestParts<Arc<AppState>> for FromLoopback {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, s: &Arc<AppState>) -> std::result::Result<Self, Response> {
        guard::check_peer(&parts.headers, s.port).map(|_| FromLoopback).map_err(|m| error(StatusCode::FORBIDDEN, m))
    }
}

/// Every predict request is counted with its one response, whatever refused or answered it.
async fn predict(State(s): State<Arc<AppState>>, req: Request) -> Response {
    s.metrics.request();
    let counted = Counted { metrics: &s.metrics, t0: Instant::now(), done: false };
    let response = match guard::check_peer(req.headers(), s.port) {
        Err(m) => error(StatusCode::FORBIDDEN, m),
        Ok(()) => match answer(&s, req).await {
            Ok(r) => (StatusCode::OK, axum::Json(r)).into_response(),
            Err((status, msg)) => error(status, msg),
        },
    };
    counted.finish(response.status().as_u16());
    response
}

fn unavailable(msg: String) -> Failure {
    (StatusCode::SERVICE_UNAVAILABLE, msg)
}

async fn answer(s: &AppState, req: Request) -> std::result::Result<PredictResponse, Failure> {
    guard::check_json(req.headers()).map_err(|m| (StatusCode::UNSUPPORTED_MEDIA_TYPE, m))?;
    if let Some(why) = s.health.stopped() {
        return Err(unavailable(format!("this server cannot answer: {why}")));
    }
    let deadline = tokio::time::Instant::now() + s.limits.body_timeout;
    let (parts, body) = req.into_parts();
    let buffered = body::read(body, &parts.headers, s.limits.max_body_bytes, &s.body_budget, deadline).await?;
    let inputs = body::parse(buffered, s.queue.features(), s.max_inputs, &s.parsers).await?;
    let receivers = s.queue.submit(inputs).map_err(|e| match e {
        SubmitError::BadInput(m) => (StatusCode::BAD_REQUEST, m),
        SubmitError::Closed => unavailable(s.health.stopped().map_or(e.to_string(), |why| format!("this server cannot answer: {why}"))),
        e @ SubmitError::Full { .. } => unavailable(e.to_string()),
    })?;
    s.metrics.queue_depth(s.queue.depth());
    let mut predictions = Vec::with_capacity(receivers.len());
    for rx in receivers {
        let p = rx
            .await
            .map_err(|_| (StatusCode::INTERNAL_SERVER_ERROR, "the inference thread stopped before answering".to_string()))?
            .map_err(|m| (StatusCode::INTERNAL_SERVER_ERROR, m))?;
        s.metrics.queue_wait(p.queue_wait.as_secs_f64());
        predictions.push(PredictionJson {
            class: p.class,
            probabilities: p.probabilities,
            queue_wait_us: p.queue_wait.as_micros() as u64,
            batch_size: p.batch_size,
        });
    }
    Ok(PredictResponse { model_version: s.version.clone(), predictions })
}

/// 200 "ok" while the server serves; 503 once it is stopping or its inference thread has
/// died (with the reason), so a supervisor or load balancer stops sending.
async fn healthz(_: FromLoopback, State(s): State<Arc<AppState>>) -> Response {
    let (status, state, reason) = match s.health.stopped() {
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, "failed", Some(why)),
        None if s.stopping.load(Ordering::Relaxed) => (StatusCode::SERVICE_UNAVAILABLE, "stopping", None),
        None => (StatusCode::OK, "ok", None),
    };
    let body = serde_json::json!({
        "status": state,
        "reason": reason,
        "model_version": s.version,
        "backend": s.backend,
        "features": s.queue.features(),
        "queue_depth": s.queue.depth(),
        "queue_capacity": s.queue.capacity(),
    });
    (status, axum::Json(body)).into_response()
}

async fn metrics(_: FromLoopback, State(s): State<Arc<AppState>>) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], s.metrics.render()).into_response()
}
