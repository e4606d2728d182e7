//! Exercise 10: a production GPU platform, simulated. A scenario (a preset, or a JSON file that
//! replays a run exactly) with a few knobs on top runs through `platform::simulate` and the
//! training model; the report's every number is labelled simulated.

mod calibrate;
mod diagram;
mod gpu_types;
mod report;
mod verdict;

use super::Exercise;
use super::live::LiveChartSpec;
use super::run_control::pace;
use super::settings::platform::Config;
use super::settings::{self, Settings, Value};
use super::sink::{Event, Sink};
use gpulab_core::error::{Error, Result};
use gpulab_core::fsutil;
use gpulab_core::stop::Stop;
use gpulab_systems::platform::scenario::{self, PRESETS, Scenario, Signal};
use gpulab_systems::platform::{self, Sample, training};
use gpulab_systems::report::{Attachment, Provenance, Report};

pub struct PlatformLab;

/// The label of every figure from the simulation.
pub fn simulated() -> Provenance {
    Provenance::Simulated("gpulab's discrete-event platform model, from the scenario's inputs".into())
}

/// How many points each live series gets at most (the rest of the run fast-forwards between).
const LIVE_POINTS: usize = 400;

impl Exercise for PlatformLab {
    fn id(&self) -> &'static str {
        "platform"
    }
    fn number(&self) -> u32 {
        10
    }
    fn title(&self) -> &'static str {
        "A production GPU platform (simulation)"
    }
    fn lesson(&self) -> &'static str {
        include_str!("../../../../lessons/10-production-platform.md")
    }
    fn quick_run(&self) -> &'static [(&'static str, &'static str)] {
        &[("scenario", "bad-release"), ("duration_h", "10"), ("sweep_points", "4"), ("sweep_runs", "3")]
    }
    /// The share of requests served within the SLO.
    fn key_figure<'r>(&self, report: &'r Report) -> Option<&'r gpulab_systems::report::Figure> {
        super::common::figure_or_first(report, "within the SLO")
    }

    fn settings(&self) -> Settings {
        let keep = "; 0 keeps the scenario's value";
        Settings::default()
            .add("scenario", "Scenario", "A preset platform design: a steady day, a Black-Friday spike, a spot storm, a bad release, a weak candidate that fails its evaluation gate", settings::choice(PRESETS[0], &PRESETS))
            .add("scenario_file", "Scenario file", "A scenario JSON (as written beside every report) to replay instead of the preset; empty = the preset", Value::Text(String::new()))
            .add("calibration", "Calibration", "Where the worker speed curve, the mixed-precision speed-up and the checkpoint write time come from: the scenario's values (labelled presets), or a few seconds of measurement on this machine with the lab's own code (then kept in scenario.json)", settings::choice("presets", &["presets", "this-machine"]))
            .add("calibration_backend", "Calibration backend", &format!("Where calibration=this-machine measures: {}", gpulab_core::device::registry::spellings()), Value::Devices(vec!["cpu".into()]))
            .add("traffic_csv", "Traffic CSV", "A CSV of offered traffic to replay (header hour,rps; see the lesson) instead of the scenario's base rate and daily wave; empty = none", Value::Text(String::new()))
            .add("seed", "Seed", &format!("Seeds every random draw{keep}"), settings::int(0, 0, i64::MAX))
            .add("duration_h", "Simulated hours", &format!("How long to simulate the serving platform{keep}"), settings::float(0.0, 0.0, 744.0))
            .add("signal", "Autoscaling signal", "What the autoscaler targets; scenario keeps the scenario's", settings::choice("scenario", &["scenario", "queue_depth", "utilisation", "p95_latency", "request_rate"]))
            .add("target", "Autoscaling target", &format!("Requests queued or in a batch per worker, utilisation share (0–1), p95 seconds, or requests/s arriving per worker{keep}"), settings::float(0.0, 0.0, 1e6))
            .add("max_workers", "Max workers", &format!("The autoscaler's ceiling{keep}"), settings::int(0, 0, 1000))
            .add("max_batch", "Max batch", &format!("Dynamic batching: requests per batch at most{keep}"), settings::int(0, 0, 4096))
            .add("spot_share", "Spot share", "Share of inference workers on spot capacity (0–1); -1 keeps the scenario's", settings::float(-1.0, -1.0, 1.0))
            .add("checkpoint_interval_min", "Checkpoint interval (min)", &format!("Training: minutes of work between checkpoints{keep}"), settings::float(0.0, 0.0, 100_000.0))
            .add("sweep_points", "Interval sweep points", "Checkpoint intervals in the sweep (a quarter to three times Daly's optimum)", settings::int(25, 3, 200))
            .add("sweep_runs", "Runs per interval", "Simulated training runs averaged at each interval", settings::int(100, 1, 10_000))
            .add("gpu_types", "GPU types to compare", &format!("Serve the same scenario on each of these GPU types, side by side (simulated): t4, l4, a10g, a100, h100, each at its list price as of {} and a speed scaled from the {}'s curve by memory bandwidth — both assumptions; none = no comparison", super::cost::AS_OF, gpu_types::CURVE_GPU), Value::Text(gpu_types::DEFAULT.into()))
    }

    fn presets(&self) -> Vec<super::Preset> {
        use super::Preset;
        vec![
            Preset::new(
                "a spot-reclaim storm",
                "75% of the workers on spot capacity, reclaimed 1.5 times an hour, and training interrupted every 45 min: watch workers vanish and training lose work",
                &[("scenario", "spot-storm")],
            ),
            Preset::new(
                "Black Friday",
                "Four times the traffic for two hours: does the autoscaler keep up with the spike?",
                &[("scenario", "black-friday")],
            ),
            Preset::new(
                "a bad release",
                "A canary of a release that fails 4% of requests and runs 1.6× slower: the rollout must notice and roll back",
                &[("scenario", "bad-release")],
            ),
            Preset::new(
                "a model that fails its evaluation",
                "A candidate whose accuracy (90%) is below the evaluation gate (93%): the gate refuses it before any traffic reaches it",
                &[("scenario", "weak-candidate")],
            ),
            Preset::new(
                "calibrated on this machine",
                "The worker speed, mixed-precision speed-up and checkpoint write time measured here with the lab's own code",
                &[("calibration", "this-machine")],
            ),
        ]
    }

    fn validate(&self, s: &Settings) -> Result<()> {
        let c = Config::parse(s)?;
        c.calibration_backend.one()?;
        gpu_types::options(&c.gpu_types)?;
        scenario(&c).map(|_| ())
    }

    fn live_charts(&self) -> Vec<LiveChartSpec> {
        let line = |id: &str, title: &str, y: &str| LiveChartSpec::line(id, title, "simulated time (h)", y).provenance(simulated());
        vec![
            line("latency", "Latency percentiles", "latency (ms)"),
            line("workers", "Workers", "workers"),
            line("traffic", "Traffic", "requests/s"),
            line("queue", "Queue depth", "requests queued"),
            LiveChartSpec::line(
                "checkpoint_sweep",
                "Training time against checkpoint interval",
                "checkpoint interval (min)",
                "mean wall time (h)",
            )
            .provenance(simulated()),
        ]
    }

    fn controllable(&self) -> bool {
        true
    }

    fn run(&self, s: &Settings, sink: &mut dyn Sink) -> Result<Report> {
        let c = Config::parse(s)?;
        let mut sc = scenario(&c)?;
        if c.calibration == "this-machine" {
            let device = c.calibration_backend.one()?;
            sink.emit(Event::Phase(format!("calibration: measuring this machine on {device}")));
            calibrate::calibrate(&mut sc, &device, &mut |m| sink.emit(Event::Log(m)))?;
        }
        let sc = sc;
        let t = &sc.training;
        let reps = c.sweep_runs as u32;
        // Every loop of the simulation asks for Stop, so it ends the run within milliseconds.
        // The job's outcome first: the training boxes of the live diagram show it.
        let chosen = training::mean_outcome(t, t.checkpoint_interval_h, t.spot.then_some(t.mtbf_h), sc.seed, reps, sink.stop())?;
        let started = std::time::Instant::now();
        sink.emit(Event::Phase(format!("serving: {} simulated hours of “{}”", sc.duration_h, sc.name)));
        let total = (sc.duration_h * 3600.0 / sc.sample_every_s).floor() as u64 + 1;
        let every = (total as usize).div_ceil(LIVE_POINTS).max(1);
        let mut n = 0usize;
        let mut rollout = diagram::Rollout::default();
        let stop = sink.stop().clone();
        let serving = platform::simulate(&sc, &stop, &mut |x: &Sample| {
            rollout.observe(x);
            if n.is_multiple_of(every) {
                emit_sample(sink, x);
                sink.emit(Event::Diagram(Box::new(diagram::build(&sc, x, &chosen, &rollout))));
                sink.emit(Event::Progress { done: n as u64, total });
                pace(&*sink, every as f64 * sc.sample_every_s);
            }
            n += 1;
        })?;
        sink.emit(Event::Log(format!(
            "simulated {} requests in {:.2} s of wall time",
            serving.totals.arrived,
            started.elapsed().as_secs_f64()
        )));
        let last = serving.samples.last().map(|x| diagram::build(&sc, x, &chosen, &rollout));
        if let Some(d) = &last {
            sink.emit(Event::Diagram(Box::new(d.clone())));
        }

        let mut sweep = Vec::new();
        if !sink.stop_requested() {
            sink.emit(Event::Phase("training: checkpoint-interval sweep".into()));
            sweep = training::sweep(t, sc.seed, c.sweep_points as usize, reps, sink.stop())?;
            for p in &sweep {
                sink.emit(Event::Point {
                    chart: "checkpoint_sweep".into(),
                    series: "mean wall time".into(),
                    x: p.tau_h * 60.0,
                    y: p.mean.wall_h,
                    provenance: simulated(),
                });
            }
        }
        let mut gpus = Vec::new();
        let options = gpu_types::options(&c.gpu_types)?;
        if !options.is_empty() && !sink.stop_requested() {
            sink.emit(Event::Phase(format!("serving the same scenario on {} GPU types", options.len())));
            gpus = gpu_types::compare(&sc, &options, sink.stop())?;
        }
        let runs = report::TrainingRuns {
            on_demand: training::mean_outcome(t, t.checkpoint_interval_h, None, sc.seed, 1, Stop::never())?,
            chosen,
            at_daly: training::mean_outcome(t, training::daly_h(t), t.spot.then_some(t.mtbf_h), sc.seed, reps, sink.stop())?,
            sweep,
        };
        let stopped = sink.stop_requested() || serving.stopped_early;
        let mut report = report::build(self, s, &c, &sc, &serving, &runs, &gpus, stopped);
        if let Some(d) = last {
            report.attachments.push(Attachment { file_name: "architecture.svg".into(), text: d.to_svg(), ..Default::default() });
        }
        Ok(report)
    }
}

fn emit_sample(sink: &mut dyn Sink, x: &Sample) {
    let mut point = |chart: &str, series: &str, y: f64| {
        sink.emit(Event::Point { chart: chart.into(), series: series.into(), x: x.t_h, y, provenance: simulated() })
    };
    for (name, v) in [("p50", x.p50_s), ("p95", x.p95_s), ("p99", x.p99_s)] {
        if let Some(v) = v {
            point("latency", name, v * 1e3);
        }
    }
    point("workers", "serving", x.ready as f64);
    point("workers", "starting", x.starting as f64);
    point("traffic", "offered", x.offered_rps);
    point("traffic", "served", x.served_rps);
    point("queue", "queued", x.queue as f64);
}

/// The scenario the settings describe: the file or the preset, then the knobs that are set.
pub fn scenario(c: &Config) -> Result<Scenario> {
    let file = &c.scenario_file;
    let mut sc = if file.trim().is_empty() {
        Scenario::preset(&c.scenario)?
    } else {
        let bytes = fsutil::read_limited(file.trim().as_ref(), scenario::MAX_FILE_BYTES)
            .map_err(|e| Error::InvalidConfig(format!("scenario_file: cannot read {file:?}: {e}")))?;
        Scenario::parse(&bytes).map_err(|e| {
            Error::InvalidConfig(format!("scenario_file {file:?}: {}", e.to_string().trim_start_matches("invalid setting: ")))
        })?
    };
    let csv = &c.traffic_csv;
    if !csv.trim().is_empty() {
        let path = csv.trim();
        let bytes = fsutil::read_limited(path.as_ref(), platform::traffic_csv::MAX_FILE_BYTES)
            .map_err(|e| Error::InvalidConfig(format!("traffic_csv: cannot read {path:?}: {e}")))?;
        sc.traffic.replay = platform::traffic_csv::parse(&bytes).map_err(|e| {
            Error::InvalidConfig(format!("traffic_csv {path:?}: {}", e.to_string().trim_start_matches("invalid setting: ")))
        })?;
    }
    let seed = c.seed;
    if seed > 0 {
        sc.seed = seed as u64;
    }
    let set = |v: f64| (v > 0.0).then_some(v);
    if let Some(v) = set(c.duration_h) {
        sc.duration_h = v;
    }
    match c.signal.as_str() {
        "queue_depth" => sc.autoscaler.signal = Signal::QueueDepth,
        "utilisation" => sc.autoscaler.signal = Signal::Utilisation,
        "p95_latency" => sc.autoscaler.signal = Signal::P95Latency,
        "request_rate" => sc.autoscaler.signal = Signal::RequestRate,
        _ => {}
    }
    if let Some(v) = set(c.target) {
        sc.autoscaler.target = v;
    }
    if let Some(v) = set(c.max_workers as f64) {
        sc.autoscaler.max_workers = v as u32;
    }
    if let Some(v) = set(c.max_batch as f64) {
        sc.pool.max_batch = v as u32;
    }
    let spot = c.spot_share;
    if spot >= 0.0 {
        sc.pool.spot_share = spot;
    }
    if let Some(v) = set(c.checkpoint_interval_min) {
        sc.training.checkpoint_interval_h = v / 60.0;
    }
    sc.validate()?;
    Ok(sc)
}
