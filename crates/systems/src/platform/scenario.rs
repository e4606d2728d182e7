//! The platform design as data: one serde struct (JSON) holding every input of the simulation,
//! four named presets, and validation that names the bad field. The same JSON replays exactly.

use serde::{Deserialize, Serialize};

use gpulab_core::error::{Error, Result};

/// Everything the simulation reads. Written beside every report so a run can be replayed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    /// Seeds every random draw (arrivals, errors, preemptions).
    pub seed: u64,
    /// Simulated time, hours.
    pub duration_h: f64,
    /// How often the monitoring samples the platform, seconds.
    pub sample_every_s: f64,
    pub traffic: Traffic,
    pub gateway: Gateway,
    pub pool: Pool,
    pub autoscaler: Autoscaler,
    /// The latency objective: this share of requests within `slo_latency_s`.
    pub slo_latency_s: f64,
    pub slo_target: f64,
    pub canary: Canary,
    pub training: Training,
}

/// Requests per second over the day: a base, a daily wave, and spikes on top.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Traffic {
    pub base_rps: f64,
    /// 0 = constant; 0.6 = the rate swings ±60% around the base once a day.
    pub diurnal_amplitude: f64,
    /// Hour of the daily peak (0–24).
    pub peak_hour: f64,
    pub spikes: Vec<Spike>,
    /// A replayed rate (from a CSV, `traffic_csv`): when present it replaces the base rate and
    /// the daily wave; spikes still multiply it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replay: Vec<super::traffic_csv::RatePoint>,
}

impl Traffic {
    /// The rate before spikes at `h` hours: the replay, or the base with its daily wave.
    pub fn underlying_rps(&self, h: f64) -> f64 {
        if self.replay.is_empty() {
            self.base_rps * (1.0 + self.diurnal_amplitude * (std::f64::consts::TAU * (h - self.peak_hour) / 24.0).cos())
        } else {
            super::traffic_csv::rate_at(&self.replay, h)
        }
    }

    /// The highest rate before spikes.
    pub fn peak_underlying_rps(&self) -> f64 {
        if self.replay.is_empty() {
            self.base_rps * (1.0 + self.diurnal_amplitude)
        } else {
            self.replay.iter().map(|p| p.rps).fold(0.0, f64::max)
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spike {
    pub start_h: f64,
    pub duration_h: f64,
    /// The rate is multiplied by this during the spike.
    pub multiplier: f64,
}

/// The API gateway in front of the pool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gateway {
    /// Token bucket rate (requests/s, burst of one second's worth); 0 = no limit.
    pub rate_limit_rps: f64,
    /// A request still queued this long after it arrived is answered with a timeout; 0 = never.
    pub timeout_s: f64,
}

/// A GPU type with its prices. The presets are illustrative, not a price list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuType {
    pub name: String,
    pub on_demand_per_h: f64,
    pub spot_per_h: f64,
}

/// One point of the worker's speed curve: a batch of `batch` requests takes `seconds`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchTime {
    pub batch: u32,
    pub seconds: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServiceTime {
    /// Every batch takes exactly the curve's time.
    Deterministic,
    /// Exponentially distributed around the curve's time (the M/M/c textbook case).
    Exponential,
}

/// The inference pool: workers, their speed, dynamic batching, cold start, spot share.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pool {
    pub gpu: GpuType,
    /// Batch time per batch size, increasing batch sizes; interpolated linearly between points.
    pub curve: Vec<BatchTime>,
    /// Where the curve comes from (a preset, or a measurement), shown with every figure from it.
    pub curve_source: String,
    pub service_time: ServiceTime,
    pub max_batch: u32,
    /// The oldest queued request waits at most this long for a fuller batch, seconds.
    pub max_queue_delay_s: f64,
    /// From "add a worker" to serving: node start, image pull, model load, seconds.
    pub cold_start_s: f64,
    /// Share of workers on spot capacity (0–1).
    pub spot_share: f64,
    /// Spot reclaims per spot worker per hour.
    pub spot_preemptions_per_h: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// Requests queued or in a batch, per serving worker.
    QueueDepth,
    /// Busy share of the workers over the last interval (0–1).
    Utilisation,
    /// p95 latency over the last interval, seconds.
    P95Latency,
    /// Requests per second that arrived over the last interval, per worker (starting or
    /// serving): scales on demand itself, before a queue builds.
    RequestRate,
}

impl Signal {
    pub fn name(self) -> &'static str {
        match self {
            Signal::QueueDepth => "requests in the system per worker",
            Signal::Utilisation => "utilisation",
            Signal::P95Latency => "p95 latency (s)",
            Signal::RequestRate => "requests/s arriving per worker",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Autoscaler {
    pub signal: Signal,
    pub target: f64,
    pub min_workers: u32,
    pub max_workers: u32,
    /// How often the controller looks, seconds.
    pub interval_s: f64,
    pub scale_up_cooldown_s: f64,
    pub scale_down_cooldown_s: f64,
}

/// A new model version rolled out to a growing share of traffic, rolled back on a regression.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Canary {
    pub enabled: bool,
    pub start_h: f64,
    /// The v2 traffic shares, step by step; the last must be 1 (fully promoted).
    pub steps: Vec<f64>,
    /// Each step is judged over this window, seconds.
    pub window_s: f64,
    /// Roll back when v2's error rate exceeds v1's by more than this (absolute, 0–1).
    pub max_error_increase: f64,
    /// Roll back when v2's p95 latency exceeds v1's by more than this factor.
    pub max_latency_ratio: f64,
    pub v1_error_rate: f64,
    pub v2_error_rate: f64,
    /// v2's batch time relative to v1's (1 = as fast).
    pub v2_slowdown: f64,
    /// The offline evaluation v2 must pass before any traffic reaches it (absent in older
    /// scenario files: no gate).
    #[serde(default)]
    pub quality_gate: QualityGate,
}

/// An evaluation gate before promotion: v2's quality is measured on a held-out set (simulated:
/// each sample is right with probability `v2_accuracy`) and the rollout is refused when the
/// measured accuracy is below `min_accuracy`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QualityGate {
    pub enabled: bool,
    /// v2's true accuracy (0–1), which the simulated evaluation samples.
    pub v2_accuracy: f64,
    /// Held-out samples the evaluation scores.
    pub eval_samples: u32,
    /// The lowest measured accuracy that may go to production (0–1).
    pub min_accuracy: f64,
}

impl Default for QualityGate {
    /// Off, as in scenario files written before the gate existed.
    fn default() -> Self {
        QualityGate { enabled: false, v2_accuracy: 0.95, eval_samples: 5000, min_accuracy: 0.93 }
    }
}

/// The most held-out samples one evaluation scores (each is one random draw).
pub const MAX_EVAL_SAMPLES: u32 = 1_000_000;

/// A training job on spot or on-demand GPUs with checkpoints.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Training {
    pub gpu: GpuType,
    pub gpus: u32,
    /// Work the job needs on its GPUs at f32 speed, hours of wall time.
    pub work_h: f64,
    /// Mixed precision's speed-up (1 = f32; lesson 3 measures yours).
    pub precision_speedup: f64,
    /// Where `precision_speedup` comes from; empty = the preset (presets and older files).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub precision_speedup_source: String,
    pub spot: bool,
    /// Mean time between preemptions of the job on spot, hours.
    pub mtbf_h: f64,
    pub checkpoint_interval_h: f64,
    /// Time to write one checkpoint, seconds (lesson 5 measures yours).
    pub checkpoint_write_s: f64,
    /// Where `checkpoint_write_s` comes from; empty = the preset (presets and older files).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub checkpoint_write_source: String,
    /// Time to get new nodes and load the last checkpoint after a preemption, seconds.
    pub restart_s: f64,
    /// Where the training data comes from (absent in older scenario files: the default).
    #[serde(default)]
    pub data: DataStage,
}

/// Object storage feeding the training data set: the job cannot run faster than it can read its
/// epochs (an input-bound job, lesson 4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataStage {
    /// Read bandwidth the job gets from object storage, GB/s.
    pub read_gb_per_s: f64,
    pub dataset_gb: f64,
    /// Passes over the data set the job makes.
    pub epochs: f64,
}

impl Default for DataStage {
    /// Illustrative: a 2 TB data set read 10 times at 2 GB/s (2.8 h of reads).
    fn default() -> Self {
        DataStage { read_gb_per_s: 2.0, dataset_gb: 2000.0, epochs: 10.0 }
    }
}

impl DataStage {
    /// Hours the job spends reading its epochs from object storage.
    pub fn read_h(&self) -> f64 {
        self.dataset_gb * self.epochs / self.read_gb_per_s / 3600.0
    }
}

/// The largest scenario file read (a replay of `traffic_csv::MAX_ROWS` points fits easily).
pub const MAX_FILE_BYTES: u64 = 32 << 20;

/// The most requests one run may simulate (about a minute of a 2-core machine).
pub const MAX_REQUESTS: f64 = 100e6;

/// The cheapest checkpoint write the simulation takes, seconds (a measured write on a fast
/// disk is a millisecond or more).
pub const MIN_CHECKPOINT_WRITE_S: f64 = 1e-6;

pub const PRESETS: [&str; 5] = ["steady-day", "black-friday", "spot-storm", "bad-release", "weak-candidate"];

/// The worker speed preset: a fixed cost per batch plus a cost per request, the shape lesson 8
/// measures. Illustrative numbers for a mid-sized model on one GPU.
fn preset_curve() -> Vec<BatchTime> {
    [1u32, 2, 4, 8, 16, 32].iter().map(|&b| BatchTime { batch: b, seconds: 0.080 + 0.025 * b as f64 }).collect()
}

fn preset_gpu() -> GpuType {
    GpuType { name: "preset GPU (illustrative prices)".into(), on_demand_per_h: 2.50, spot_per_h: 0.90 }
}

impl Scenario {
    /// A named preset; the error lists the names.
    pub fn preset(name: &str) -> Result<Scenario> {
        let mut s = Scenario::steady_day();
        match name {
            "steady-day" => {}
            "black-friday" => {
                s.name = "Black-Friday spike".into();
                s.traffic.spikes = vec![Spike { start_h: 10.0, duration_h: 2.0, multiplier: 4.0 }];
                s.canary.enabled = false;
            }
            "spot-storm" => {
                s.name = "spot storm".into();
                s.pool.spot_share = 0.75;
                s.pool.spot_preemptions_per_h = 1.5;
                s.training.mtbf_h = 0.75;
                s.canary.enabled = false;
            }
            "bad-release" => {
                s.name = "bad release".into();
                s.canary.v2_error_rate = 0.04;
                s.canary.v2_slowdown = 1.6;
            }
            "weak-candidate" => {
                s.name = "weak candidate".into();
                s.canary.quality_gate.v2_accuracy = 0.90;
            }
            other => return Err(Error::InvalidConfig(format!("scenario: {other:?} is not a preset; presets: {}", PRESETS.join(", ")))),
        }
        Ok(s)
    }

    fn steady_day() -> Scenario {
        Scenario {
            name: "steady day".into(),
            seed: 1,
            duration_h: 24.0,
            sample_every_s: 60.0,
            traffic: Traffic { base_rps: 12.0, diurnal_amplitude: 0.6, peak_hour: 14.0, spikes: vec![], replay: vec![] },
            gateway: Gateway { rate_limit_rps: 150.0, timeout_s: 5.0 },
            pool: Pool {
                gpu: preset_gpu(),
                curve: preset_curve(),
                curve_source: "preset: 80 ms + 25 ms per request (illustrative)".into(),
                service_time: ServiceTime::Deterministic,
                max_batch: 16,
                max_queue_delay_s: 0.05,
                cold_start_s: 120.0,
                spot_share: 0.5,
                spot_preemptions_per_h: 0.05,
            },
            autoscaler: Autoscaler {
                signal: Signal::QueueDepth,
                target: 4.0,
                min_workers: 1,
                max_workers: 12,
                interval_s: 15.0,
                scale_up_cooldown_s: 60.0,
                scale_down_cooldown_s: 300.0,
            },
            slo_latency_s: 1.0,
            slo_target: 0.99,
            canary: Canary {
                enabled: true,
                start_h: 9.0,
                steps: vec![0.05, 0.25, 0.5, 1.0],
                window_s: 900.0,
                max_error_increase: 0.01,
                max_latency_ratio: 1.5,
                v1_error_rate: 0.002,
                v2_error_rate: 0.002,
                v2_slowdown: 1.0,
                quality_gate: QualityGate { enabled: true, ..QualityGate::default() },
            },
            training: Training {
                gpu: preset_gpu(),
                gpus: 8,
                work_h: 48.0,
                precision_speedup: 1.0,
                precision_speedup_source: String::new(),
                spot: true,
                mtbf_h: 4.0,
                checkpoint_interval_h: 1.0,
                checkpoint_write_s: 60.0,
                checkpoint_write_source: String::new(),
                restart_s: 300.0,
                data: DataStage::default(),
            },
        }
    }

    pub fn from_json(text: &str) -> Result<Scenario> {
        Self::parse(text.as_bytes())
    }

    /// A scenario file's bytes, parsed and validated (the one entry point for a file's
    /// contents, and what a fuzzer drives).
    pub fn parse(bytes: &[u8]) -> Result<Scenario> {
        let s: Scenario = serde_json::from_slice(bytes).map_err(|e| Error::InvalidConfig(format!("scenario file: {e}")))?;
        s.validate()?;
        Ok(s)
    }

    pub fn to_json(&self) -> String {
        // A struct of numbers, strings and vectors always serialises.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Every field in its range; the error names the field by its JSON path.
    pub fn validate(&self) -> Result<()> {
        let s = self;
        let mut c = Checks::default();
        c.range("duration_h", s.duration_h, 0.01, 24.0 * 31.0);
        c.range("sample_every_s", s.sample_every_s, 0.1, 86_400.0);
        c.check(
            "sample_every_s",
            s.duration_h * 3600.0 / s.sample_every_s <= 200_000.0,
            "gives more than 200000 samples; sample less often",
        );
        c.range("traffic.base_rps", s.traffic.base_rps, 0.0, 10_000.0);
        c.range("traffic.diurnal_amplitude", s.traffic.diurnal_amplitude, 0.0, 1.0);
        c.range("traffic.peak_hour", s.traffic.peak_hour, 0.0, 24.0);
        let peak: f64 = s.traffic.spikes.iter().map(|x| x.multiplier.max(1.0)).product::<f64>();
        let most = s.traffic.peak_underlying_rps() * peak * s.duration_h * 3600.0;
        c.check("traffic.base_rps", most.is_nan() || most <= MAX_REQUESTS, &format!("with the spikes over {} h this could simulate up to {most:.0} requests (limit {MAX_REQUESTS:.0}); lower the rate or the duration", s.duration_h));
        for (i, p) in s.traffic.replay.iter().enumerate() {
            c.check(
                &format!("traffic.replay[{i}].hour"),
                p.hour.is_finite() && if i == 0 { p.hour == 0.0 } else { p.hour > s.traffic.replay[i - 1].hour },
                "hours must start at 0 and increase",
            );
            c.range(&format!("traffic.replay[{i}].rps"), p.rps, 0.0, 10_000.0);
        }
        for (i, sp) in s.traffic.spikes.iter().enumerate() {
            c.range(&format!("traffic.spikes[{i}].start_h"), sp.start_h, 0.0, 24.0 * 31.0);
            c.range(&format!("traffic.spikes[{i}].duration_h"), sp.duration_h, 0.0, 24.0 * 31.0);
            c.range(&format!("traffic.spikes[{i}].multiplier"), sp.multiplier, 0.0, 100.0);
        }
        c.range("gateway.rate_limit_rps", s.gateway.rate_limit_rps, 0.0, 1e6);
        c.range("gateway.timeout_s", s.gateway.timeout_s, 0.0, 86_400.0);
        gpu(&mut c, "pool.gpu", &s.pool.gpu);
        c.check("pool.curve", !s.pool.curve.is_empty(), "needs at least one point");
        for (i, p) in s.pool.curve.iter().enumerate() {
            c.check(
                &format!("pool.curve[{i}].batch"),
                p.batch >= 1 && (i == 0 || p.batch > s.pool.curve[i - 1].batch),
                "batch sizes must start at 1 or more and increase",
            );
            c.range(&format!("pool.curve[{i}].seconds"), p.seconds, 1e-6, 3600.0);
        }
        c.check("pool.max_batch", (1..=4096).contains(&s.pool.max_batch), "must be in 1..=4096");
        c.range("pool.max_queue_delay_s", s.pool.max_queue_delay_s, 0.0, 60.0);
        c.range("pool.cold_start_s", s.pool.cold_start_s, 0.0, 3600.0);
        c.range("pool.spot_share", s.pool.spot_share, 0.0, 1.0);
        c.range("pool.spot_preemptions_per_h", s.pool.spot_preemptions_per_h, 0.0, 100.0);
        let a = &s.autoscaler;
        c.range("autoscaler.target", a.target, 1e-6, 1e6);
        c.check("autoscaler.target", a.signal != Signal::Utilisation || a.target <= 1.0, "a utilisation target is a share, at most 1");
        c.check("autoscaler.max_workers", (1..=1000).contains(&a.max_workers), "must be in 1..=1000");
        c.check(
            "autoscaler.min_workers",
            a.min_workers <= a.max_workers,
            &format!("{} is more than max_workers {}", a.min_workers, a.max_workers),
        );
        c.range("autoscaler.interval_s", a.interval_s, 0.1, 3600.0);
        c.range("autoscaler.scale_up_cooldown_s", a.scale_up_cooldown_s, 0.0, 86_400.0);
        c.range("autoscaler.scale_down_cooldown_s", a.scale_down_cooldown_s, 0.0, 86_400.0);
        c.range("slo_latency_s", s.slo_latency_s, 1e-6, 3600.0);
        c.range("slo_target", s.slo_target, 0.0, 1.0);
        let k = &s.canary;
        c.range("canary.start_h", k.start_h, 0.0, 24.0 * 31.0);
        c.check("canary.steps", !k.steps.is_empty() && k.steps.last() == Some(&1.0), "must end at 1 (fully promoted)");
        for (i, x) in k.steps.iter().enumerate() {
            c.check(
                &format!("canary.steps[{i}]"),
                *x > 0.0 && *x <= 1.0 && (i == 0 || *x > k.steps[i - 1]),
                "shares must be in (0, 1] and increase",
            );
        }
        c.range("canary.window_s", k.window_s, 1.0, 86_400.0);
        c.range("canary.max_error_increase", k.max_error_increase, 0.0, 1.0);
        c.range("canary.max_latency_ratio", k.max_latency_ratio, 1.0, 100.0);
        c.range("canary.v1_error_rate", k.v1_error_rate, 0.0, 1.0);
        c.range("canary.v2_error_rate", k.v2_error_rate, 0.0, 1.0);
        c.range("canary.v2_slowdown", k.v2_slowdown, 0.01, 100.0);
        c.range("canary.quality_gate.v2_accuracy", k.quality_gate.v2_accuracy, 0.0, 1.0);
        c.range("canary.quality_gate.min_accuracy", k.quality_gate.min_accuracy, 0.0, 1.0);
        c.check(
            "canary.quality_gate.eval_samples",
            (1..=MAX_EVAL_SAMPLES).contains(&k.quality_gate.eval_samples),
            &format!("must be in 1..={MAX_EVAL_SAMPLES}"),
        );
        let t = &s.training;
        gpu(&mut c, "training.gpu", &t.gpu);
        c.check("training.gpus", (1..=100_000).contains(&t.gpus), "must be in 1..=100000");
        c.range("training.work_h", t.work_h, 0.01, 100_000.0);
        c.range("training.precision_speedup", t.precision_speedup, 0.1, 100.0);
        c.range("training.mtbf_h", t.mtbf_h, 0.01, 1e6);
        c.range("training.checkpoint_interval_h", t.checkpoint_interval_h, 0.001, 10_000.0);
        // A free checkpoint makes Young's and Daly's intervals 0: the sweep would never end.
        c.range("training.checkpoint_write_s", t.checkpoint_write_s, MIN_CHECKPOINT_WRITE_S, 86_400.0);
        c.range("training.restart_s", t.restart_s, 0.0, 86_400.0);
        c.range("training.data.read_gb_per_s", t.data.read_gb_per_s, 1e-3, 1e4);
        c.range("training.data.dataset_gb", t.data.dataset_gb, 0.0, 1e8);
        c.range("training.data.epochs", t.data.epochs, 0.0, 1e5);
        c.check(
            "training.data",
            t.data.read_h() <= 1e6,
            "reading the epochs would take over a million hours; raise read_gb_per_s or lower dataset_gb/epochs",
        );
        // Every interval the simulation runs must cut the job into a bounded number of pieces:
        // the chosen one, and the sweep's shortest (a quarter of Daly's, set by C and the MTBF).
        if c.0.is_none() {
            let work = super::training::work_h(t);
            let least = work / super::training::MAX_SEGMENTS;
            c.check(
                "training.checkpoint_interval_h",
                super::training::check_interval(t, t.checkpoint_interval_h).is_ok(),
                &format!(
                    "{} h cuts the job's {work:.3} h of work into more than {:.0} intervals; allowed: {least:.3e}..=10000",
                    t.checkpoint_interval_h,
                    super::training::MAX_SEGMENTS
                ),
            );
            let shortest = super::training::SWEEP_FROM * super::training::daly_h(t);
            c.check(
                "training.checkpoint_write_s",
                super::training::check_interval(t, shortest).is_ok(),
                &format!(
                    "{} s with mtbf_h {} makes Daly's interval {:.3e} h, and the interval sweep would cut the job's {work:.3} h of work into more than {:.0} intervals; raise checkpoint_write_s (or mtbf_h)",
                    t.checkpoint_write_s,
                    t.mtbf_h,
                    super::training::daly_h(t),
                    super::training::MAX_SEGMENTS
                ),
            );
        }
        c.finish()
    }
}

fn gpu(c: &mut Checks, at: &str, g: &GpuType) {
    c.range(&format!("{at}.on_demand_per_h"), g.on_demand_per_h, 0.0, 1e4);
    c.range(&format!("{at}.spot_per_h"), g.spot_per_h, 0.0, 1e4);
}

/// Collects the first failure: the field's path and what is wrong with it.
#[derive(Default)]
struct Checks(Option<String>);

impl Checks {
    fn check(&mut self, field: &str, ok: bool, msg: &str) {
        if !ok && self.0.is_none() {
            self.0 = Some(format!("scenario field {field}: {msg}"));
        }
    }
    fn range(&mut self, field: &str, v: f64, lo: f64, hi: f64) {
        self.check(field, v.is_finite() && v >= lo && v <= hi, &format!("{v} is outside {lo}..={hi}"));
    }
    fn finish(self) -> Result<()> {
        self.0.map_or(Ok(()), |m| Err(Error::InvalidConfig(m)))
    }
}
