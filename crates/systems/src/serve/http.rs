//! HTTP on loopback with axum + tokio: `POST /v1/predict`, `GET /healthz`, `GET /metrics`.
//! Every predict request gets exactly one response and one count in
//! `gpulab_responses_total{status}`; bad input is a 400 naming the problem, a full queue a 503
//! with `Retry-After`. Shutdown (a signal, or `Server::shutdown`) stops accepting, answers
//! every accepted request, drains the queue and stops the inference thread.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use super::batcher::{self, BatchPolicy, Queue, SubmitError};
use super::engine::{EngineReady, InferenceEngine, InferenceTotals};
use super::metrics::ServerMetrics;
use super::model::HostModel;
use gpulab_core::device::Device;
use gpulab_core::error::{Error, Result};

/// Largest request body the server reads (bytes) and most samples in one request.
pub const DEFAULT_MAX_BODY: usize = 16 << 20;
pub const MAX_INPUTS_PER_REQUEST: usize = 4096;

#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub device: Device,
    pub policy: BatchPolicy,
    /// 0 = any free port (tests).
    pub port: u16,
    pub max_body_bytes: usize,
    /// Stop on Ctrl-C / SIGTERM (the CLI); tests stop through `Server::shutdown`.
    pub on_signals: bool,
    /// tokio worker threads for the HTTP side.
    pub http_threads: usize,
}

impl ServeConfig {
    pub fn new(device: Device, policy: BatchPolicy) -> Self {
        ServeConfig { device, policy, port: 0, max_body_bytes: DEFAULT_MAX_BODY, on_signals: false, http_threads: 2 }
    }
}

struct AppState {
    queue: Queue,
    metrics: ServerMetrics,
    version: String,
    backend: String,
    max_body: usize,
}

/// A running server.
pub struct Server {
    pub addr: SocketAddr,
    pub ready: EngineReady,
    pub model_version: String,
    stop: Option<oneshot::Sender<()>>,
    thread: JoinHandle<Result<InferenceTotals>>,
}

/// The body of `POST /v1/predict`: `{"input": [..]}` or `{"inputs": [[..], ..]}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PredictBody {
    input: Option<Vec<f32>>,
    inputs: Option<Vec<Vec<f32>>>,
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
        if cfg.max_body_bytes == 0 || cfg.http_threads == 0 {
            return Err(Error::InvalidConfig("max body bytes and HTTP threads must be at least 1".into()));
        }
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, cfg.port))
            .map_err(|e| Error::InvalidConfig(format!("cannot listen on 127.0.0.1:{}: {e}", cfg.port)))?;
        listener.set_nonblocking(true).map_err(|e| Error::Internal(format!("listener: {e}")))?;
        let addr = listener.local_addr().map_err(|e| Error::Internal(format!("listener: {e}")))?;
        let backend_name = cfg.device.to_string();
        let metrics = ServerMetrics::new(&model.version, &backend_name, matches!(cfg.device, Device::Gpu(_)))?;
        let (queue, batches) = batcher::queue(cfg.policy.clone(), model.arch.input);
        let version = model.version.clone();
        let engine = InferenceEngine::start(cfg.device.clone(), model, batches, metrics.engine.clone())?;
        let ready = engine.ready.clone();
        let state =
            Arc::new(AppState { queue, metrics, version: version.clone(), backend: ready.backend.label(), max_body: cfg.max_body_bytes });
        let (stop, stopped) = oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cfg.http_threads)
            .thread_name("gpulab-http")
            .enable_all()
            .build()
            .map_err(|e| Error::Internal(format!("could not start the HTTP runtime: {e}")))?;
        let on_signals = cfg.on_signals;
        let thread = std::thread::Builder::new()
            .name("gpulab-serve".into())
            .spawn(move || {
                let served = runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| Error::Internal(format!("listener: {e}")))?;
                    let app = router(state);
                    axum::serve(listener, app)
                        .with_graceful_shutdown(shutdown_signal(stopped, on_signals))
                        .await
                        .map_err(|e| Error::Internal(format!("HTTP server: {e}")))
                });
                drop(runtime);
                // Every handler (and with it every Queue) is gone: the engine drains and stops.
                let totals = engine.join();
                served.and(totals)
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

    /// Waits until the server has stopped (after `shutdown` or a signal); what it served.
    pub fn wait(self) -> Result<InferenceTotals> {
        let _keep = self.stop;
        self.thread.join().map_err(|_| Error::Internal("the server thread panicked".into()))?
    }
}

async fn shutdown_signal(stopped: oneshot::Receiver<()>, on_signals: bool) {
    let stop = async {
        let _ = stopped.await;
    };
    if !on_signals {
        return stop.await;
    }
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = stop => {},
        _ = ctrl_c => {},
        _ = term => {},
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

/// Counts the one response of a request; if the client goes away before it is sent (the
/// handler is dropped), counts it as 499 so requests still equal responses by status.
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

async fn predict(State(s): State<Arc<AppState>>, body: Body) -> Response {
    s.metrics.request();
    let counted = Counted { metrics: &s.metrics, t0: Instant::now(), done: false };
    let response = match answer(&s, body).await {
        Ok(r) => (StatusCode::OK, axum::Json(r)).into_response(),
        Err((status, msg)) => error(status, msg),
    };
    counted.finish(response.status().as_u16());
    response
}

type Failure = (StatusCode, String);

fn bad(msg: String) -> Failure {
    (StatusCode::BAD_REQUEST, msg)
}

/// Parses and checks a request body into its inputs; every problem is named.
pub fn parse_inputs(bytes: &[u8], features: usize) -> std::result::Result<Vec<Vec<f32>>, String> {
    let body: PredictBody = serde_json::from_slice(bytes)
        .map_err(|e| format!("malformed JSON body: {e}; send {{\"input\": [..]}} or {{\"inputs\": [[..], ..]}}"))?;
    let inputs = match (body.input, body.inputs) {
        (Some(x), None) => vec![x],
        (None, Some(xs)) => xs,
        (Some(_), Some(_)) => return Err("give either \"input\" or \"inputs\", not both".into()),
        (None, None) => return Err("the body needs \"input\": [..] (one sample) or \"inputs\": [[..], ..] (several)".into()),
    };
    if inputs.is_empty() {
        return Err("\"inputs\" is empty; send at least one sample".into());
    }
    if inputs.len() > MAX_INPUTS_PER_REQUEST {
        return Err(format!("{} inputs in one request; at most {MAX_INPUTS_PER_REQUEST}", inputs.len()));
    }
    for (i, x) in inputs.iter().enumerate() {
        batcher::check_input(x, features, i)?;
    }
    Ok(inputs)
}

async fn answer(s: &AppState, body: Body) -> std::result::Result<PredictResponse, Failure> {
    let bytes = axum::body::to_bytes(body, s.max_body)
        .await
        .map_err(|e| bad(format!("could not read the request body (at most {} bytes): {e}", s.max_body)))?;
    let inputs = parse_inputs(&bytes, s.queue.features()).map_err(bad)?;
    if inputs.len() > s.queue.capacity() {
        return Err(bad(format!("{} inputs in one request but the queue holds at most {}", inputs.len(), s.queue.capacity())));
    }
    let receivers = s.queue.submit(inputs).map_err(|e| match e {
        SubmitError::BadInput(m) => bad(m),
        e @ (SubmitError::Full { .. } | SubmitError::Closed) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
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

async fn healthz(State(s): State<Arc<AppState>>) -> Response {
    axum::Json(serde_json::json!({
        "status": "ok",
        "model_version": s.version,
        "backend": s.backend,
        "features": s.queue.features(),
        "queue_depth": s.queue.depth(),
        "queue_capacity": s.queue.capacity(),
    }))
    .into_response()
}

async fn metrics(State(s): State<Arc<AppState>>) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], s.metrics.render()).into_response()
}
