//! Exercise 8: a real inference server's engine and dynamic batcher (serve/), measured. Static
//! batches of 1, 8, 16 (closed loop, batches always full), then dynamic batching under
//! open-loop Poisson arrivals at several shares of the measured capacity, the best setting
//! under a p99 SLO, and inference memory against training memory.

mod report;
mod runs;
mod verdict;

use std::path::PathBuf;
use std::time::Duration;

use super::common;
use super::settings::inference::Config;
use super::settings::{self, Settings, Value};
use super::sink::{Event, Sink};
use super::{Exercise, LiveChartSpec};
use gpulab_core::error::{Error, Result};
use gpulab_systems::data::{self, DatasetSpec};
use gpulab_systems::report::{Metadata, Report};
use gpulab_systems::serve::loadgen::{self, Arrivals};
use gpulab_systems::serve::{BatchPolicy, ModelSource, load_model};
use gpulab_systems::train::TrainConfig;

pub struct InferenceBatching;

impl Exercise for InferenceBatching {
    fn id(&self) -> &'static str {
        "inference-batching"
    }
    fn number(&self) -> u32 {
        8
    }
    fn title(&self) -> &'static str {
        "Inference batching and dynamic batching"
    }
    fn lesson(&self) -> &'static str {
        include_str!("../../../../lessons/08-inference-batching.md")
    }
    fn quick_run(&self) -> &'static [(&'static str, &'static str)] {
        &[
            ("backend", "cpu"),
            ("train_epochs", "1"),
            ("static_batches", "1,4"),
            ("max_batch", "4"),
            ("preferred_batch", "4"),
            ("load_levels", "30"),
            ("run_seconds", "0.5"),
        ]
    }
    /// What dynamic batching buys: its best throughput under the SLO over batch-1 serving's.
    fn key_figure<'r>(&self, report: &'r Report) -> Option<&'r gpulab_systems::report::Figure> {
        common::figure_or_first(report, "dynamic / batch-1 throughput")
    }

    fn settings(&self) -> Settings {
        let s = common::one_backend(Settings::default())
            .add(
                "checkpoint",
                "Checkpoint",
                "A checkpoint to serve (exercise 5's folder holds them); empty = train a digits model first",
                Value::Text(String::new()),
            )
            .add(
                "train_epochs",
                "Training epochs",
                "With no checkpoint: epochs to train the digits model before serving it",
                settings::int(3, 1, 100),
            )
            .add(
                "static_batches",
                "Static batch sizes",
                "Fixed batch sizes, each run with its batches always full",
                settings::list(&[1, 8, 16], 1, 4096),
            )
            .add("max_batch", "Max batch", "Dynamic batching: the largest batch formed", settings::int(16, 1, 4096))
            .add(
                "preferred_batch",
                "Preferred batch sizes",
                "Dynamic batching: sizes sent as soon as they form (each ≤ max batch)",
                settings::list(&[8, 16], 1, 4096),
            )
            .add(
                "max_queue_delay_us",
                "Max queue delay (µs)",
                "Dynamic batching: how long the oldest request may wait for its batch to fill",
                settings::int(2000, 0, 1_000_000),
            )
            .add(
                "load_levels",
                "Load levels (% of capacity)",
                "Arrival rates as shares of the capacity measured with static batches at max batch (or the best static run when none ran at max batch)",
                settings::list(&[20, 50, 80, 95], 1, 500),
            )
            .add("run_seconds", "Seconds per run", "How long each static and dynamic run sends requests", settings::float(2.0, 0.2, 60.0))
            .add("slo_p99_ms", "p99 SLO (ms)", "The latency objective the best setting must meet", settings::float(20.0, 0.01, 10_000.0))
            .add("queue", "Queue capacity", "Requests that may wait; more are refused (503)", settings::int(4096, 1, 1 << 20));
        super::cost::price_setting(s)
    }

    fn presets(&self) -> Vec<super::Preset> {
        use super::Preset;
        vec![
            Preset::new(
                "overload the server",
                "Arrivals at 50%, 100% and 150% of the measured capacity: past 100% the queue grows and the tail latency explodes",
                &[("load_levels", "50,100,150")],
            ),
            Preset::new(
                "no batching window",
                "Dynamic batching that never waits (max queue delay 0): batches hold only what already queued",
                &[("max_queue_delay_us", "0")],
            ),
        ]
    }

    fn validate(&self, s: &Settings) -> Result<()> {
        Config::parse(s).map(drop)
    }

    fn live_charts(&self) -> Vec<LiveChartSpec> {
        vec![
            LiveChartSpec::line("latency", "p99 latency over time (per half second)", "time into the run (s)", "p99 latency (ms)"),
            LiveChartSpec::line("queue_depth", "Queue depth", "time into the run (s)", "requests waiting"),
            LiveChartSpec::line("batch_size", "Formed batch size", "time into the run (s)", "mean batch size"),
        ]
    }

    fn run(&self, s: &Settings, sink: &mut dyn Sink) -> Result<Report> {
        let c = Config::parse(s)?;
        let device = c.backend.clone();
        let secs = Duration::from_secs_f64(c.run_seconds);
        let queue = c.queue as usize;
        let mut meta = Metadata::new(8);
        meta.hyperparameters = s.to_map();

        let path = &c.checkpoint;
        let source = if path.trim().is_empty() {
            sink.emit(Event::Phase("training the digits model to serve".into()));
            ModelSource::TrainFirst {
                dataset: "digits".into(),
                cfg: TrainConfig { epochs: c.train_epochs as usize, ..TrainConfig::default() },
                backend: device.clone(),
            }
        } else {
            ModelSource::Checkpoint(PathBuf::from(path.trim()))
        };
        let model = load_model(&source)?;
        sink.emit(Event::Log(format!("serving {}: {}", model.version, model.source)));
        let inputs = inputs_for(&model)?;
        meta.dataset = model.source.clone();

        let sizes = c.static_batches.clone();
        let levels = c.load_levels.clone();
        let total = (sizes.len() + levels.len()) as u64;
        let mut done = 0;
        let mut statics = Vec::new();
        for &b in &sizes {
            if sink.stop_requested() {
                break;
            }
            sink.emit(Event::Phase(format!("static batch {b}")));
            let arrivals = Arrivals::Closed { concurrency: 2 * b as usize };
            let r = runs::run_one(&device, &model, &inputs, static_policy(b as usize, queue), arrivals, secs, format!("static {b}"), sink)?;
            sink.emit(Event::Log(format!("batch {b}: {:.0} requests/s, p99 {:.2} ms", r.summary.throughput_per_s, r.summary.p99_ms)));
            statics.push(r);
            done += 1;
            sink.emit(Event::Progress { done, total });
            sink.emit(Event::Table(report::static_table(&statics)));
        }
        let policy = dynamic_policy(&c)?;
        // Capacity: the static run at max batch if there was one, else the best static run.
        let capacity = statics
            .iter()
            .find(|r| r.policy.max_batch == policy.max_batch)
            .or_else(|| statics.iter().max_by(|a, b| a.summary.throughput_per_s.total_cmp(&b.summary.throughput_per_s)))
            .map(|r| r.summary.throughput_per_s)
            .unwrap_or(0.0);
        let mut dynamics = Vec::new();
        for &pct in &levels {
            if sink.stop_requested() || capacity <= 0.0 {
                break;
            }
            // A fast machine's capacity times a level above 100 % can pass what the load
            // generator will offer; offer its maximum then, and say so in the run's name.
            let wanted = capacity * pct as f64 / 100.0;
            let rate = wanted.min(loadgen::MAX_RATE);
            let capped =
                if rate < wanted { format!(" (capped at the load generator's {} requests/s)", loadgen::MAX_RATE) } else { String::new() };
            sink.emit(Event::Phase(format!("dynamic batching at {pct}% of capacity ({rate:.0} requests/s){capped}")));
            let r = runs::run_one(
                &device,
                &model,
                &inputs,
                policy.clone(),
                Arrivals::Open { rate_per_s: rate },
                secs,
                format!("dynamic {pct}%{}", if capped.is_empty() { "" } else { " (capped)" }),
                sink,
            )?;
            sink.emit(Event::Log(format!(
                "{rate:.0}/s offered: {:.0}/s served, p99 {:.2} ms, mean batch {:.1}",
                r.summary.throughput_per_s,
                r.summary.p99_ms,
                r.mean_batch()
            )));
            dynamics.push(r);
            done += 1;
            sink.emit(Event::Progress { done, total });
            sink.emit(Event::Table(report::dynamic_table(&dynamics, c.slo_p99_ms)));
        }
        sink.emit(Event::Phase("memory: inference against training".into()));
        let (inference_mem, training_mem) = runs::memory_ledgers(&device, &model, policy.max_batch)?;
        meta.backends.extend(statics.iter().chain(&dynamics).map(|r| r.backend.clone()).next());
        let stopped = sink.stop_requested();
        Ok(report::build(
            self,
            s,
            &c,
            meta,
            report::Measured { model, statics, dynamics, capacity, inference_mem, training_mem, memory_batch: policy.max_batch },
            stopped,
        ))
    }
}

fn static_policy(batch: usize, queue: usize) -> BatchPolicy {
    // Always full batches: each waits for `batch` requests (the closed loop keeps 2×batch out).
    BatchPolicy { max_batch: batch, preferred: vec![batch], max_queue_delay_us: 50_000, queue_capacity: queue.max(2 * batch) }
}

/// The settings checked as a whole (`Config::parse` calls it).
pub(crate) fn check(c: &Config) -> Result<()> {
    dynamic_policy(c)?.validate()?;
    for &b in &c.static_batches {
        static_policy(b as usize, c.queue as usize).validate()?;
    }
    if c.static_batches.is_empty() || c.load_levels.is_empty() {
        return Err(Error::InvalidConfig("static batch sizes and load levels need at least one value each".into()));
    }
    Ok(())
}

fn dynamic_policy(c: &Config) -> Result<BatchPolicy> {
    let max_batch = c.max_batch as usize;
    let p = BatchPolicy {
        max_batch,
        preferred: c.preferred_batch.iter().map(|&v| v as usize).collect(),
        max_queue_delay_us: c.max_queue_delay_us as u64,
        queue_capacity: c.queue as usize,
    };
    p.validate()?;
    Ok(p)
}

/// Real validation samples when the model takes the digits' shape; otherwise seeded uniform
/// values of the model's width (labelled in the report).
fn inputs_for(model: &gpulab_systems::serve::HostModel) -> Result<Vec<Vec<f32>>> {
    let d = data::load(&DatasetSpec::Digits, 0)?;
    if d.features == model.arch.input {
        Ok(d.val_x.chunks_exact(d.features).take(512).map(|c| c.to_vec()).collect())
    } else {
        Ok(gpulab_systems::serve::loadgen::random_inputs(model.arch.input, 512, 8))
    }
}
