//! `gpulab serve` (the inference server, until Ctrl-C / SIGTERM) and `gpulab loadgen` (load
//! against a running server over HTTP, printing the percentiles).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use gpulab::device::Device;
use gpulab::serve::loadgen::{self, Arrivals, LoadSpec, LoadSummary, Target};
use gpulab::serve::{BatchPolicy, Limits, ModelSource, ServeConfig, Server, load_model};
use gpulab::text::terminal_line;
use gpulab::train::TrainConfig;

#[derive(Args)]
pub struct ServeArgs {
    /// A checkpoint to serve (from exercise 5 or `gpulab train --checkpoint-dir`).
    #[arg(long, value_name = "CKPT", required_unless_present_any = ["train_first", "int8_model"], conflicts_with_all = ["train_first", "int8_model"])]
    model: Option<PathBuf>,
    /// Serve exercise 9's int8 model (its model.int8.safetensors) with the quantized forward.
    #[arg(long, value_name = "FILE", conflicts_with = "train_first")]
    int8_model: Option<PathBuf>,
    /// Train the default model briefly first (on --dataset, --epochs) and serve it.
    #[arg(long)]
    train_first: bool,
    #[arg(long, default_value = "gpu", help = format!("Where inference runs: {}", gpulab::device::registry::spellings()))]
    backend: String,
    /// Port on 127.0.0.1 (0 = any free port).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Largest batch the dynamic batcher forms.
    #[arg(long, default_value_t = 16)]
    max_batch: usize,
    /// How long the oldest waiting request may wait for its batch to fill (µs).
    #[arg(long, default_value_t = 2000)]
    max_queue_delay_us: u64,
    /// Batch sizes sent as soon as they form, e.g. 8,16 ("none" for none).
    #[arg(long, default_value = "8,16")]
    preferred_batch: String,
    /// Requests that may wait; one more is refused with 503 at once.
    #[arg(long, default_value_t = 1024)]
    queue: usize,
    /// With --train-first: the data set.
    #[arg(long, default_value = "digits")]
    dataset: String,
    /// With --train-first: epochs to train.
    #[arg(long, default_value_t = 3)]
    epochs: usize,
    /// HTTP worker threads (also how many large bodies are parsed at once).
    #[arg(long, default_value_t = 2)]
    http_threads: usize,
    /// Largest request body in bytes; a larger one is refused with 413.
    #[arg(long, default_value_t = Limits::default().max_body_bytes)]
    max_body: usize,
    /// Bytes of request bodies held in memory at once, all clients together (at least --max-body).
    #[arg(long, default_value_t = Limits::default().body_budget_bytes)]
    body_budget: usize,
    /// Connections open at once; one more gets 503 and is closed.
    #[arg(long, default_value_t = Limits::default().max_connections)]
    max_connections: usize,
    /// Time to send a request's headers, from when the connection is ready for it (so also the
    /// keep-alive idle timeout), e.g. 5s.
    #[arg(long, default_value = "5s")]
    header_timeout: String,
    /// Time to send a request's body once its headers are in (408 after).
    #[arg(long, default_value = "10s")]
    body_timeout: String,
    /// Time a response write may make no progress (a client that stops reading) before the
    /// connection is closed.
    #[arg(long, default_value = "10s")]
    write_timeout: String,
    /// After Ctrl-C / SIGTERM, how long requests in flight may take before the remaining
    /// connections are dropped (a second Ctrl-C exits at once).
    #[arg(long, default_value = "3s")]
    shutdown_grace: String,
}

fn duration(flag: &str, s: &str) -> anyhow::Result<Duration> {
    humantime::parse_duration(s).map_err(|e| anyhow::anyhow!("--{flag} {s:?}: {e}; e.g. 5s or 500ms"))
}

impl ServeArgs {
    fn limits(&self) -> anyhow::Result<Limits> {
        let limits = Limits {
            max_body_bytes: self.max_body,
            body_budget_bytes: self.body_budget,
            max_connections: self.max_connections,
            header_timeout: duration("header-timeout", &self.header_timeout)?,
            body_timeout: duration("body-timeout", &self.body_timeout)?,
            write_timeout: duration("write-timeout", &self.write_timeout)?,
            shutdown_grace: duration("shutdown-grace", &self.shutdown_grace)?,
        };
        limits.validate()?;
        Ok(limits)
    }
}

fn preferred(s: &str) -> anyhow::Result<Vec<usize>> {
    let s = s.trim();
    if s.is_empty() || s.eq_ignore_ascii_case("none") {
        return Ok(Vec::new());
    }
    s.split(',')
        .map(|p| {
            p.trim()
                .parse::<usize>()
                .map_err(|_| anyhow::anyhow!("--preferred-batch {s:?}: {p:?} is not a batch size; give sizes like 8,16 or none"))
        })
        .collect()
}

pub fn serve(a: ServeArgs) -> anyhow::Result<()> {
    let device: Device = a.backend.parse()?;
    let policy = BatchPolicy {
        max_batch: a.max_batch,
        preferred: preferred(&a.preferred_batch)?,
        max_queue_delay_us: a.max_queue_delay_us,
        queue_capacity: a.queue,
    };
    policy.validate()?;
    let limits = a.limits()?;
    let source = match (a.model, a.int8_model) {
        (Some(p), _) => ModelSource::Checkpoint(p),
        (None, Some(p)) => ModelSource::Int8(p),
        (None, None) => ModelSource::TrainFirst {
            dataset: a.dataset,
            cfg: TrainConfig { epochs: a.epochs, ..TrainConfig::default() },
            backend: device.clone(),
        },
    };
    if matches!(source, ModelSource::TrainFirst { .. }) {
        eprintln!("training the model first…");
    }
    let model = load_model(&source)?;
    // The version and source carry a checkpoint's file name and metadata: text from a file.
    eprintln!("model {} — {}", terminal_line(&model.version), terminal_line(&model.source));
    let cfg_limits = limits.clone();
    let cfg =
        ServeConfig { port: a.port, on_signals: true, http_threads: a.http_threads, limits, ..ServeConfig::new(device, policy.clone()) };
    gpulab::serve::limits::return_large_buffers_to_the_system();
    let server = Server::start(cfg, model)?;
    eprintln!(
        "serving on http://{} with {} (max batch {}, preferred {:?}, max queue delay {} µs, queue {}): POST /v1/predict, GET /healthz, GET /metrics; Ctrl-C to stop",
        server.addr,
        server.ready.backend.label(),
        policy.max_batch,
        policy.preferred,
        policy.max_queue_delay_us,
        policy.queue_capacity
    );
    let l = &cfg_limits;
    eprintln!(
        "limits: request head ≤ {} KiB, body ≤ {} bytes ({} in memory at once), {} connections, headers / keep-alive idle {:?}, body {:?}, stalled write {:?}, shutdown grace {:?}",
        gpulab::serve::limits::MAX_HEAD_BYTES >> 10,
        l.max_body_bytes,
        l.body_budget_bytes,
        l.max_connections,
        l.header_timeout,
        l.body_timeout,
        l.write_timeout,
        l.shutdown_grace
    );
    // An inference thread that died ends the server too; its error is the exit status.
    let stopped = server.wait_stopped()?;
    let dropped = match stopped.dropped_connections {
        0 => String::new(),
        n => format!("; dropped {n} connection(s) still open at the shutdown deadline"),
    };
    eprintln!("stopped after {} batches, {} predictions{dropped}", stopped.totals.batches, stopped.totals.samples);
    Ok(())
}

#[derive(Args)]
pub struct LoadgenArgs {
    /// The server's base URL (loopback only).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Open loop: Poisson arrivals at this many requests per second.
    #[arg(long, conflicts_with = "concurrency")]
    rate: Option<f64>,
    /// Closed loop: this many clients, one request each at a time.
    #[arg(long)]
    concurrency: Option<usize>,
    /// How long to send, e.g. 10s, 500ms.
    #[arg(long, default_value = "10s")]
    duration: String,
    /// Stop after this many requests even if time is left.
    #[arg(long, default_value_t = 1_000_000)]
    max_requests: u64,
    /// Seed of the arrival times and inputs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

pub fn loadgen(a: LoadgenArgs) -> anyhow::Result<()> {
    let duration = duration("duration", &a.duration)?;
    let arrivals = match (a.rate, a.concurrency) {
        (Some(r), _) => Arrivals::Open { rate_per_s: r },
        (None, Some(c)) => Arrivals::Closed { concurrency: c },
        (None, None) => Arrivals::Open { rate_per_s: 500.0 },
    };
    let spec = LoadSpec { arrivals, duration, max_requests: a.max_requests, drain: Duration::from_secs(10), seed: a.seed };
    spec.validate()?;
    let target = Target::http(&a.url)?;
    let features = loadgen::server_features(&a.url)?;
    let inputs = loadgen::random_inputs(features, loadgen::input_count(features), a.seed);
    eprintln!("{arrivals:?} for {duration:?} against {} ({features} features, random inputs)", terminal_line(&a.url));
    let result = loadgen::run(&target, &inputs, &spec)?;
    let summary = result.summary();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_summary(&summary);
    }
    // The server went away mid-run: the summary covers what ran, and the exit status says so.
    match result.stopped {
        Some(why) => anyhow::bail!("{why}"),
        None => Ok(()),
    }
}

pub fn print_summary(s: &LoadSummary) {
    println!("requests     {} sent, {} ok, {} rejected (503), {} failed, {} unanswered", s.sent, s.ok, s.rejected, s.failed, s.unanswered);
    println!("throughput   {:.0} answered/s over {:.2} s", s.throughput_per_s, s.wall_s);
    println!("latency ms   p50 {:.2}  p90 {:.2}  p95 {:.2}  p99 {:.2}  max {:.2}", s.p50_ms, s.p90_ms, s.p95_ms, s.p99_ms, s.max_ms);
    println!("queue wait   {:.2} ms mean", s.mean_queue_wait_ms);
    let sizes: Vec<String> = s.batch_sizes.iter().map(|(b, n)| format!("{b}:{n}")).collect();
    println!("batch sizes  {} (size:requests)", sizes.join(" "));
}
