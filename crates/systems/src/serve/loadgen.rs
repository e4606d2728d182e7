//! The load generator, perf_analyzer's two modes: open loop (Poisson arrivals at a target
//! rate; each request's latency counts from its SCHEDULED arrival, so a slow server cannot
//! hide queueing by slowing the generator down — no coordinated omission) and closed loop (N
//! clients, each sending its next request when the last one is answered). Targets: straight
//! into a batcher's queue (in-process) or a server over HTTP (hyper client, loopback).
//! Bounded in requests AND time: it stops scheduling at the duration or the request cap, and
//! waits at most `drain` for the answers still out. A server that refuses connections (it has
//! gone) is retried with a growing back-off, and after `GONE_AFTER` of nothing but refusals the
//! run stops, saying so.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp};
use serde::{Deserialize, Serialize};

use super::batcher::{Queue, SubmitError};
use super::http::PredictResponse;
use gpulab_core::error::{Error, Result};
use gpulab_core::stats::quantile;

/// Most requests one run may send, and its longest duration.
pub const MAX_REQUESTS: u64 = 10_000_000;
pub const MAX_DURATION: Duration = Duration::from_secs(3600);
pub const MAX_CONCURRENCY: usize = 4096;
pub const MAX_RATE: f64 = 1e6;
/// The largest answer the load generator reads (a prediction, /healthz); a server that sends
/// more is a failure, not a reason to run out of memory.
pub const MAX_RESPONSE_BYTES: usize = 1 << 20;
/// The widest model input the load generator believes a server's /healthz about.
pub const MAX_FEATURES: usize = 1 << 20;
/// How long connections may be refused, every one, before the run stops: the server has gone.
pub const GONE_AFTER: Duration = Duration::from_secs(2);
/// A closed-loop client's wait after a refused connection: doubling from the first to the last.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(10), Duration::from_millis(500));

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Arrivals {
    /// Poisson arrivals at this many requests per second.
    Open { rate_per_s: f64 },
    /// This many clients, each one request at a time.
    Closed { concurrency: usize },
}

#[derive(Clone, Debug)]
pub struct LoadSpec {
    pub arrivals: Arrivals,
    pub duration: Duration,
    pub max_requests: u64,
    /// How long to wait for answers still out after the last request is sent.
    pub drain: Duration,
    pub seed: u64,
}

impl LoadSpec {
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidConfig(m));
        match self.arrivals {
            Arrivals::Open { rate_per_s } if !(rate_per_s.is_finite() && rate_per_s > 0.0 && rate_per_s <= MAX_RATE) => {
                return bad(format!("rate {rate_per_s} requests/s must be above 0 and at most {MAX_RATE}"));
            }
            Arrivals::Closed { concurrency } if concurrency == 0 || concurrency > MAX_CONCURRENCY => {
                return bad(format!("concurrency {concurrency} must be between 1 and {MAX_CONCURRENCY}"));
            }
            _ => {}
        }
        if self.duration.is_zero() || self.duration > MAX_DURATION {
            return bad(format!("duration {:?} must be above 0 and at most 1 h", self.duration));
        }
        if self.max_requests == 0 || self.max_requests > MAX_REQUESTS {
            return bad(format!("request cap {} must be between 1 and {MAX_REQUESTS}", self.max_requests));
        }
        if self.drain > MAX_DURATION {
            return bad("drain time must be at most 1 h".into());
        }
        Ok(())
    }
}

/// How one request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Ok,
    /// 503 / queue full.
    Rejected,
    /// Any other error status or a transport error.
    Failed,
    /// No answer within the drain time.
    Unanswered,
}

/// One request: when it was due (seconds from the start), its latency, and what the server said.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Sample {
    pub due_s: f64,
    pub latency_s: f64,
    pub outcome: Outcome,
    pub queue_wait_s: Option<f64>,
    pub batch_size: Option<usize>,
}

/// Where the requests go.
#[derive(Clone)]
pub enum Target {
    InProcess(Queue),
    Http { client: Client<HttpConnector, Full<Bytes>>, uri: hyper::Uri },
}

impl Target {
    /// An HTTP target: `url` is the server's base (e.g. http://127.0.0.1:8080); loopback only.
    pub fn http(url: &str) -> Result<Target> {
        let base: hyper::Uri = url.parse().map_err(|e| Error::InvalidConfig(format!("--url {url:?} is not a URL: {e}")))?;
        if base.scheme_str() != Some("http") {
            return Err(Error::InvalidConfig(format!("--url {url:?} must start with http:// (the server speaks plain HTTP on loopback)")));
        }
        let host = base.host().unwrap_or("");
        if !super::guard::is_loopback_host(host) {
            return Err(Error::InvalidConfig(format!(
                "--url host {host:?} is not loopback; the load generator only targets 127.0.0.1 / localhost / ::1"
            )));
        }
        let authority = base.authority().map(|a| a.as_str().to_string()).unwrap_or_default();
        let uri = format!("http://{authority}/v1/predict").parse().map_err(|e| Error::InvalidConfig(format!("--url {url:?}: {e}")))?;
        let mut conn = HttpConnector::new();
        conn.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(MAX_CONCURRENCY).build(conn);
        Ok(Target::Http { client, uri })
    }

    /// Sends one request: its outcome, and whether the connection itself was refused.
    async fn call(&self, input: &Payload) -> ((Outcome, Option<f64>, Option<usize>), bool) {
        let refused = |e: &hyper_util::client::legacy::Error| e.is_connect();
        let answer = match self {
            Target::InProcess(q) => match q.submit(vec![input.values.clone()]) {
                Err(SubmitError::Full { .. }) => (Outcome::Rejected, None, None),
                Err(_) => (Outcome::Failed, None, None),
                Ok(mut rx) => match rx.pop() {
                    Some(rx) => match rx.await {
                        Ok(Ok(p)) => (Outcome::Ok, Some(p.queue_wait.as_secs_f64()), Some(p.batch_size)),
                        _ => (Outcome::Failed, None, None),
                    },
                    None => (Outcome::Failed, None, None),
                },
            },
            Target::Http { client, uri } => {
                let req = hyper::Request::post(uri.clone()).header("content-type", "application/json").body(Full::new(input.json.clone()));
                let Ok(req) = req else { return ((Outcome::Failed, None, None), false) };
                let resp = match client.request(req).await {
                    Ok(r) => r,
                    Err(e) => return ((Outcome::Failed, None, None), refused(&e)),
                };
                let status = resp.status();
                let Ok(body) = Limited::new(resp.into_body(), MAX_RESPONSE_BYTES).collect().await else {
                    return ((Outcome::Failed, None, None), false);
                };
                if status == hyper::StatusCode::SERVICE_UNAVAILABLE {
                    return ((Outcome::Rejected, None, None), false);
                }
                if !status.is_success() {
                    return ((Outcome::Failed, None, None), false);
                }
                match serde_json::from_slice::<PredictResponse>(&body.to_bytes()) {
                    Ok(r) => match r.predictions.first() {
                        Some(p) => (Outcome::Ok, Some(p.queue_wait_us as f64 * 1e-6), Some(p.batch_size)),
                        None => (Outcome::Failed, None, None),
                    },
                    Err(_) => (Outcome::Failed, None, None),
                }
            }
        };
        (answer, false)
    }
}

/// Refused connections, across every client: since when every connection has been refused,
/// and how many in a row; once that has lasted `GONE_AFTER`, the run stops.
#[derive(Default)]
struct Refusals {
    /// (first refusal of the current run of them, refusals in a row)
    streak: Mutex<Option<(Instant, u64)>>,
    gone: std::sync::atomic::AtomicBool,
}

impl Refusals {
    /// Records one request's end; true when the server has now refused for `GONE_AFTER`.
    fn record(&self, refused: bool) -> bool {
        let mut streak = self.streak.lock().unwrap_or_else(|p| p.into_inner());
        if !refused {
            *streak = None;
            return false;
        }
        let (since, n) = streak.get_or_insert((Instant::now(), 0));
        *n += 1;
        if since.elapsed() >= GONE_AFTER {
            self.gone.store(true, std::sync::atomic::Ordering::Release);
        }
        self.is_gone()
    }

    fn is_gone(&self) -> bool {
        self.gone.load(std::sync::atomic::Ordering::Acquire)
    }

    /// What stopped the run, when the server had gone.
    fn note(&self, target: &Target) -> Option<String> {
        if !self.is_gone() {
            return None;
        }
        let (since, n) = (*self.streak.lock().unwrap_or_else(|p| p.into_inner()))?;
        let at = match target {
            Target::Http { uri, .. } => uri.authority().map(|a| a.to_string()).unwrap_or_default(),
            Target::InProcess(_) => "the in-process queue".into(),
        };
        Some(format!(
            "stopped: the server at {at} refused {n} connections in a row over {:.1} s; it is not running \
             (start it with `gpulab serve`, or check --url)",
            since.elapsed().as_secs_f64()
        ))
    }
}

/// One input, with its JSON body prepared once.
struct Payload {
    values: Vec<f32>,
    json: Bytes,
}

/// Runs the load on its own small tokio runtime and returns every request's sample.
pub fn run(target: &Target, inputs: &[Vec<f32>], spec: &LoadSpec) -> Result<LoadResult> {
    spec.validate()?;
    if inputs.is_empty() {
        return Err(Error::InvalidConfig("the load generator needs at least one input".into()));
    }
    let payloads: Arc<Vec<Payload>> = Arc::new(
        inputs.iter().map(|x| Payload { values: x.clone(), json: Bytes::from(serde_json::json!({ "input": x }).to_string()) }).collect(),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("gpulab-loadgen")
        .enable_all()
        .build()
        .map_err(|e| Error::Internal(format!("could not start the load generator's runtime: {e}")))?;
    let samples = Arc::new(Mutex::new(Vec::new()));
    let refusals = Arc::new(Refusals::default());
    let start = Instant::now();
    rt.block_on(drive(target.clone(), payloads, spec.clone(), samples.clone(), refusals.clone(), start));
    let wall_s = start.elapsed().as_secs_f64();
    rt.shutdown_timeout(Duration::from_millis(100));
    let samples = std::mem::take(&mut *samples.lock().unwrap_or_else(|p| p.into_inner()));
    let stopped = refusals.note(target);
    if let Some(why) = &stopped
        && !samples.iter().any(|s| s.outcome != Outcome::Failed)
    {
        // Nothing was ever answered: there is no run to summarise.
        return Err(Error::InvalidConfig(format!("{why}; no request was answered")));
    }
    Ok(LoadResult { arrivals: spec.arrivals, wall_s, samples, stopped })
}

async fn drive(
    target: Target,
    payloads: Arc<Vec<Payload>>,
    spec: LoadSpec,
    samples: Arc<Mutex<Vec<Sample>>>,
    refusals: Arc<Refusals>,
    start: Instant,
) {
    let end = start + spec.duration;
    let mut tasks = tokio::task::JoinSet::new();
    let mut sent: u64 = 0;
    match spec.arrivals {
        Arrivals::Open { rate_per_s } => {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(spec.seed);
            let gap = Exp::new(rate_per_s).expect("validated rate");
            let answered = Arc::new(Mutex::new(Vec::<(usize, Sample)>::new()));
            let mut due = start;
            let mut dues = Vec::new();
            loop {
                due += Duration::from_secs_f64(gap.sample(&mut rng));
                if due >= end || sent >= spec.max_requests || refusals.is_gone() {
                    break;
                }
                // Late wake-ups do not move `due`: the latency still counts from it.
                tokio::time::sleep_until(due.into()).await;
                let (t, p, a, i, r) = (target.clone(), payloads.clone(), answered.clone(), dues.len(), refusals.clone());
                dues.push(due);
                tasks.spawn(async move {
                    let ((outcome, queue_wait_s, batch_size), refused) = t.call(&p[i % p.len()]).await;
                    r.record(refused);
                    let done = Instant::now();
                    let s = Sample {
                        due_s: (due - start).as_secs_f64(),
                        latency_s: (done - due).as_secs_f64(),
                        outcome,
                        queue_wait_s,
                        batch_size,
                    };
                    a.lock().unwrap_or_else(|p| p.into_inner()).push((i, s));
                });
                sent += 1;
            }
            if tokio::time::timeout(spec.drain, async { while tasks.join_next().await.is_some() {} }).await.is_err() {
                tasks.abort_all();
            }
            let now = Instant::now();
            let got = std::mem::take(&mut *answered.lock().unwrap_or_else(|p| p.into_inner()));
            let mut seen = vec![false; dues.len()];
            got.iter().for_each(|(i, _)| seen[*i] = true);
            let mut out: Vec<Sample> = got.into_iter().map(|(_, s)| s).collect();
            // A request not answered within the drain time counts with the time it waited.
            for (d, _) in dues.iter().zip(&seen).filter(|(_, seen)| !**seen) {
                out.push(Sample {
                    due_s: (*d - start).as_secs_f64(),
                    latency_s: (now - *d).as_secs_f64(),
                    outcome: Outcome::Unanswered,
                    queue_wait_s: None,
                    batch_size: None,
                });
            }
            samples.lock().unwrap_or_else(|p| p.into_inner()).extend(out);
        }
        Arrivals::Closed { concurrency } => {
            let budget = Arc::new(std::sync::atomic::AtomicU64::new(spec.max_requests));
            for c in 0..concurrency {
                let (t, p, s, budget, r) = (target.clone(), payloads.clone(), samples.clone(), budget.clone(), refusals.clone());
                tasks.spawn(async move {
                    let mut i = c;
                    let mut backoff = BACKOFF.0;
                    while Instant::now() < end
                        && !r.is_gone()
                        && budget
                            .fetch_update(std::sync::atomic::Ordering::AcqRel, std::sync::atomic::Ordering::Acquire, |b| b.checked_sub(1))
                            .is_ok()
                    {
                        let due = Instant::now();
                        let ((outcome, queue_wait_s, batch_size), refused) = t.call(&p[i % p.len()]).await;
                        let done = Instant::now();
                        if r.record(refused) {
                            break;
                        }
                        s.lock().unwrap_or_else(|p| p.into_inner()).push(Sample {
                            due_s: (due - start).as_secs_f64(),
                            latency_s: (done - due).as_secs_f64(),
                            outcome,
                            queue_wait_s,
                            batch_size,
                        });
                        i += concurrency;
                        // A refused connection is not retried at once: the server may be
                        // restarting, or gone (then `record` ends the run).
                        if refused {
                            tokio::time::sleep(backoff.min(end.saturating_duration_since(Instant::now()))).await;
                            backoff = (backoff * 2).min(BACKOFF.1);
                        } else {
                            backoff = BACKOFF.0;
                        }
                    }
                });
            }
            if tokio::time::timeout(spec.duration + spec.drain, async { while tasks.join_next().await.is_some() {} }).await.is_err() {
                tasks.abort_all();
            }
        }
    }
}

/// Everything a run measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LoadResult {
    pub arrivals: Arrivals,
    pub wall_s: f64,
    pub samples: Vec<Sample>,
    /// Why the run stopped before its duration or request cap, when it did (the server went).
    #[serde(default)]
    pub stopped: Option<String>,
}

/// The figures of a run: counts, throughput, latency percentiles (ms, answered requests),
/// queue wait, and how many requests rode in batches of each size.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LoadSummary {
    pub sent: usize,
    pub ok: usize,
    pub rejected: usize,
    pub failed: usize,
    pub unanswered: usize,
    pub wall_s: f64,
    /// Answered (200) requests per second of wall time. Measured.
    pub throughput_per_s: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub mean_queue_wait_ms: f64,
    /// (batch size, requests answered in a batch of that size), ascending.
    pub batch_sizes: Vec<(usize, usize)>,
}

impl LoadResult {
    pub fn summary(&self) -> LoadSummary {
        summarize(&self.samples, self.wall_s)
    }
}

/// The summary of `samples` over `wall_s` seconds. Latency percentiles cover answered and
/// unanswered requests (an unanswered one counts with the time it had waited).
pub fn summarize(samples: &[Sample], wall_s: f64) -> LoadSummary {
    let count = |o: Outcome| samples.iter().filter(|s| s.outcome == o).count();
    let mut lat: Vec<f64> =
        samples.iter().filter(|s| matches!(s.outcome, Outcome::Ok | Outcome::Unanswered)).map(|s| s.latency_s * 1e3).collect();
    let q = |v: &mut Vec<f64>, p: f64| quantile(v, p).unwrap_or(0.0);
    let waits: Vec<f64> = samples.iter().filter_map(|s| s.queue_wait_s).collect();
    let mut sizes = std::collections::BTreeMap::new();
    for b in samples.iter().filter_map(|s| s.batch_size) {
        *sizes.entry(b).or_insert(0usize) += 1;
    }
    let ok = count(Outcome::Ok);
    LoadSummary {
        sent: samples.len(),
        ok,
        rejected: count(Outcome::Rejected),
        failed: count(Outcome::Failed),
        unanswered: count(Outcome::Unanswered),
        wall_s,
        throughput_per_s: ok as f64 / wall_s.max(1e-9),
        p50_ms: q(&mut lat, 0.50),
        p90_ms: q(&mut lat, 0.90),
        p95_ms: q(&mut lat, 0.95),
        p99_ms: q(&mut lat, 0.99),
        max_ms: lat.iter().copied().fold(0.0, f64::max),
        mean_queue_wait_ms: if waits.is_empty() { 0.0 } else { waits.iter().sum::<f64>() / waits.len() as f64 * 1e3 },
        batch_sizes: sizes.into_iter().collect(),
    }
}

/// How many distinct random inputs to send to a model of `features`: 256, fewer for a very wide
/// model so they hold at most 16 Mi values.
pub fn input_count(features: usize) -> usize {
    (16usize << 20).checked_div(features).unwrap_or(256).clamp(1, 256)
}

/// `n` inputs of `features` uniform values in [0, 1), seeded.
pub fn random_inputs(features: usize, n: usize, seed: u64) -> Vec<Vec<f32>> {
    use rand::Rng;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| (0..features).map(|_| rng.random_range(0.0..1.0)).collect()).collect()
}

/// The feature count a running server's model takes, from its `/healthz` (which must say 200
/// within 5 s, in at most `MAX_RESPONSE_BYTES`, with a width of at most `MAX_FEATURES`).
pub fn server_features(url: &str) -> Result<usize> {
    let Target::Http { client, uri } = Target::http(url)? else { unreachable!("Target::http makes an HTTP target") };
    let health: hyper::Uri = format!("http://{}/healthz", uri.authority().map(|a| a.as_str()).unwrap_or(""))
        .parse()
        .map_err(|e| Error::InvalidConfig(format!("--url {url:?}: {e}")))?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| Error::Internal(format!("runtime: {e}")))?;
    let unreachable = |e: String| Error::InvalidConfig(format!("no gpulab server answers at {url}: {e}; start one with `gpulab serve`"));
    let (status, body) = rt.block_on(async {
        let req = hyper::Request::get(health).body(Full::new(Bytes::new())).map_err(|e| unreachable(e.to_string()))?;
        let ask = async {
            let resp = client.request(req).await.map_err(|e| unreachable(e.to_string()))?;
            let status = resp.status();
            let body = Limited::new(resp.into_body(), MAX_RESPONSE_BYTES)
                .collect()
                .await
                .map_err(|e| unreachable(format!("/healthz: {e} (at most {MAX_RESPONSE_BYTES} bytes)")))?;
            Ok::<_, Error>((status, body.to_bytes()))
        };
        tokio::time::timeout(Duration::from_secs(5), ask).await.map_err(|_| unreachable("no answer in 5 s".into()))?
    })?;
    health_features(status.as_u16(), &body).map_err(|e| Error::InvalidConfig(format!("the server at {url}: {e}")))
}

/// The model width from a /healthz answer, checked: the server must say it is ready, and the
/// width must be one the load generator can build inputs for.
pub fn health_features(status: u16, body: &[u8]) -> std::result::Result<usize, String> {
    let v: serde_json::Value = serde_json::from_slice(body).map_err(|e| format!("/healthz is not JSON: {e}"))?;
    if status != 200 {
        let why = v.get("reason").and_then(|r| r.as_str()).or_else(|| v.get("status").and_then(|s| s.as_str())).unwrap_or("?");
        return Err(format!("/healthz says {status}: it is not ready ({why})"));
    }
    match v.get("features").and_then(|f| f.as_u64()) {
        Some(f) if f >= 1 && f <= MAX_FEATURES as u64 => Ok(f as usize),
        Some(f) => Err(format!("/healthz says the model takes {f} features; the load generator handles 1 to {MAX_FEATURES}")),
        None => Err("/healthz does not say how many features the model takes".into()),
    }
}
