//! Exercise 6: data parallelism with a real ring all-reduce (`gpulab_systems::parallel`). The same model
//! trained on 1, 2, 4… replicas in strong scaling (same global batch) and weak scaling (same
//! per-replica batch): throughput, speed-up, efficiency, where each step's time goes
//! (compute / exposed communication / idle), bytes all-reduced, accuracy; a per-replica
//! timeline; and the ring cost model extrapolated to 8…512 GPUs per link preset (simulated).

mod pipeline_report;
mod report;
pub mod torch_export;

use super::Exercise;
use super::common;
use super::live::LiveChartSpec;
use super::settings::{self, Settings, Value};
use super::sink::{Event, Sink};
use gpulab_core::error::{Error, Result};
use gpulab_systems::parallel::{self, DpConfig, DpReport, Msg, ReplicaKind, cost};
use gpulab_systems::report::{Provenance, Report};

pub struct Distributed;

/// Strong scaling keeps the global batch; weak scaling keeps each replica's batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Strong,
    Weak,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Strong => "strong",
            Mode::Weak => "weak",
        }
    }
}

/// One run of the sweep.
pub struct Run {
    pub mode: Mode,
    pub replicas: usize,
    pub result: std::result::Result<DpReport, String>,
}

fn modes(s: &Settings) -> Result<Vec<Mode>> {
    Ok(match s.choice("scaling")?.as_str() {
        "strong" => vec![Mode::Strong],
        "weak" => vec![Mode::Weak],
        _ => vec![Mode::Strong, Mode::Weak],
    })
}

fn kind(s: &Settings) -> Result<ReplicaKind> {
    Ok(match s.choice("kind")?.as_str() {
        "cpu" => ReplicaKind::Cpu { threads: s.int("threads_per_replica")? as usize },
        "gpu" => ReplicaKind::GpuDevices,
        "adapters" => ReplicaKind::GpuAdapters,
        _ => ReplicaKind::Cuda,
    })
}

/// The data-parallel config and the global batch of one run.
fn plan(s: &Settings, mode: Mode, replicas: usize) -> Result<(DpConfig, usize)> {
    let batch = s.int("batch")? as usize;
    let global = match mode {
        Mode::Strong => batch,
        Mode::Weak => batch * replicas,
    };
    let link = cost::preset(&s.choice("link")?)?.map(|p| p.link);
    let dp = DpConfig {
        replicas,
        kind: kind(s)?,
        bucket_cap_mb: s.float("bucket_cap_mb")?,
        overlap: s.bool("overlap")?,
        shard_optimizer: s.bool("shard_optimizer")?,
        link,
        timeline_steps: 24,
    };
    Ok((dp, global))
}

impl Exercise for Distributed {
    fn id(&self) -> &'static str {
        "distributed"
    }
    fn number(&self) -> u32 {
        6
    }
    fn title(&self) -> &'static str {
        "1 vs N devices: data parallelism"
    }
    fn lesson(&self) -> &'static str {
        include_str!("../../../../lessons/06-data-parallel.md")
    }
    fn quick_run(&self) -> &'static [(&'static str, &'static str)] {
        &[("replicas", "1,2"), ("kind", "cpu"), ("hidden", "32"), ("epochs", "1"), ("batch", "64"), ("bucket_cap_mb", "0.01")]
    }
    /// The speed-up of the largest run over one replica.
    fn key_figure<'r>(&self, report: &'r Report) -> Option<&'r gpulab_systems::report::Figure> {
        common::figure_or_first(report, "speed-up (")
    }

    fn settings(&self) -> Settings {
        let s = Settings::default()
            .add("replicas", "Replicas", "Replica counts to compare, e.g. 1,2,4 (include 1 for speed-ups)", settings::list(&[1, 2], 1, parallel::MAX_REPLICAS as u64))
            .add(
                "kind",
                "Replicas run on",
                "cpu: CPU replicas that split the cores · gpu: N wgpu devices on one adapter (real synchronisation and transfer cost, no extra compute) · adapters: one replica per wgpu adapter · cuda: N CUDA GPUs (not built yet)",
                settings::choice("cpu", &["cpu", "gpu", "adapters", "cuda"]),
            )
            .add("threads_per_replica", "Threads per replica", "CPU replicas: threads each replica's GEMM and element-wise kernels use (replicas × threads must fit the cores)", settings::int(1, 1, 1024))
            .add("scaling", "Scaling", "strong: the same global batch split N ways · weak: the same batch per replica, so the global batch grows with N · both", settings::choice("strong", &["strong", "weak", "both"]))
            .add("bucket_cap_mb", "Bucket cap (MiB)", "PyTorch DDP's bucket_cap_mb: gradients are all-reduced in buckets of at most this size (25 = one bucket for these models; try 0.05 to see overlap)", settings::float(25.0, 0.001, parallel::bucket::MAX_CAP_MB))
            .add("overlap", "Overlap", "All-reduce each bucket on a communication thread while backward computes the earlier layers (off by default: on CPU replicas that use every core that thread takes a core from compute; try the small-buckets preset)", Value::Bool(false))
            .add("shard_optimizer", "Sharded optimizer (ZeRO-1)", "Reduce-scatter the gradients, let each replica update its 1/N of the parameters, all-gather them: the same bytes as an all-reduce, 1/N of the update each (CPU replicas, overlap off)", Value::Bool(false))
            .add("rounds", "Rounds", "Runs of every replica count, taken in turn (1, 2, 1, 2, …); the report uses each count's run with the median throughput, since a shared machine's speed drifts from run to run", settings::int(3, 1, 20))
            .add("link", "Interconnect", "measured: this machine's host transfers · or a simulated link (each message waits latency + bytes / bandwidth): pcie4, nvlink4, 100gbe, 10gbe", settings::choice("measured", &["measured", "pcie4", "nvlink4", "100gbe", "10gbe"]));
        let s = s
            .add("pipeline_stages", "Pipeline stages", "Pipeline parallel: the model's layers split over this many CPU stages of one thread each (0 = off; at most the layers and the cores)", settings::int(2, 0, parallel::MAX_REPLICAS as i64))
            .add("micro_batches", "Micro-batches", "Pipeline parallel: micro-batch counts M to compare (each must divide the batch); M = 1 is plain model parallelism", settings::list(&[1, 2, 4, 8], 1, parallel::pipeline::MAX_MICRO_BATCHES as u64));
        let mut s = common::training_settings(s, "digits", &[256, 128], 128, 3);
        if let Some(b) = s.0.iter_mut().find(|x| x.key == "batch") {
            b.help = "Strong scaling: the global batch, split evenly over the replicas · weak scaling: each replica's batch".into();
        }
        s
    }

    fn presets(&self) -> Vec<super::Preset> {
        use super::Preset;
        vec![
            Preset::new(
                "a model worth splitting",
                "MLP 784-512-256-10 at global batch 256 on 28×28 shapes: each replica gets milliseconds of compute per step, so the all-reduce and the fixed per-step costs weigh less than on the small default",
                &[("dataset", "shapes:res=28,n=8000,classes=4"), ("hidden", "512,256"), ("batch", "256")],
            ),
            Preset::new(
                "weak scaling",
                "The same batch per replica, so the global batch grows with the replicas (strong scaling splits one batch)",
                &[("scaling", "weak")],
            ),
            Preset::new(
                "a slow network (10 GbE)",
                "Gradients all-reduced over a simulated 10 GbE link: communication dominates the step",
                &[("link", "10gbe")],
            ),
            Preset::new(
                "ZeRO-1: sharded optimizer step",
                "Each replica updates only its 1/N of the parameters between a reduce-scatter and an all-gather, as DeepSpeed's ZeRO stage 1 does",
                &[("kind", "cpu"), ("overlap", "false"), ("shard_optimizer", "true")],
            ),
            Preset::new(
                "small buckets, overlapped",
                "50 KiB gradient buckets all-reduced while backward still runs, as DDP overlaps them",
                &[("bucket_cap_mb", "0.05"), ("overlap", "true")],
            ),
        ]
    }

    fn validate(&self, s: &Settings) -> Result<()> {
        common::validate_training(s)?;
        let replicas = s.list("replicas")?;
        if replicas.is_empty() {
            return Err(Error::InvalidConfig("replicas: give at least one replica count, e.g. 1,2".into()));
        }
        pipeline_report::validate(s)?;
        // The data set is loaded at run time; here, what needs no data.
        for mode in modes(s)? {
            for &n in &replicas {
                let (dp, global) = plan(s, mode, n as usize)?;
                common::train_config(s, global)?;
                dp.validate(global, usize::MAX)?;
            }
        }
        Ok(())
    }

    fn live_charts(&self) -> Vec<LiveChartSpec> {
        let mut c = common::training_live_charts();
        c.push(
            LiveChartSpec::line("replica_split", "Per-replica step: compute and gradient sync", "step", "ms")
                .provenance(Provenance::derived("each replica's clock readings")),
        );
        c
    }

    fn run(&self, s: &Settings, sink: &mut dyn Sink) -> Result<Report> {
        self.validate(s)?;
        let data = common::load_dataset(s)?;
        let rounds = s.int("rounds")? as usize;
        let replicas = s.list("replicas")?;
        let sweep: Vec<(Mode, usize)> = modes(s)?.into_iter().flat_map(|m| replicas.iter().map(move |&n| (m, n as usize))).collect();
        let mut tries: Vec<Vec<std::result::Result<DpReport, String>>> = vec![Vec::new(); sweep.len()];
        'rounds: for round in 0..rounds {
            for (i, &(mode, n)) in sweep.iter().enumerate() {
                if sink.stop_requested() {
                    break 'rounds;
                }
                if tries[i].first().is_some_and(|r| r.is_err()) {
                    continue; // it failed once; the same settings fail again
                }
                let (dp, global) = plan(s, mode, n)?;
                let cfg = common::train_config(s, global)?;
                let series = format!("{} N={n}", mode.name());
                let of = if rounds > 1 { format!(" (round {}/{rounds})", round + 1) } else { String::new() };
                sink.emit(Event::Phase(format!("{series}{of}: {}, global batch {global}", dp.kind.label(n))));
                let mut lanes: Vec<Option<(Vec<parallel::StepClock>, Vec<(f64, f64)>)>> = vec![None; n];
                // The live charts follow the first round; later rounds only move the progress bar.
                let mut watch = |m: Option<Msg>| {
                    match m {
                        Some(Msg::Lanes { rank, steps, comm_spans }) if round == 0 => {
                            live_timeline(&mut *sink, &dp, global, &mut lanes, rank, steps, comm_spans)
                        }
                        Some(m @ Msg::Progress { .. }) => forward(&mut *sink, &series, m),
                        Some(m) if round == 0 => forward(&mut *sink, &series, m),
                        _ => {}
                    }
                    sink.stop_requested()
                };
                let result = match parallel::train(&data, &cfg, &dp, &mut watch) {
                    Ok(r) => Ok(r),
                    // Settings no replica count can satisfy are the learner's to fix: say so.
                    Err(e @ (Error::InvalidConfig(_) | Error::CudaNotBuilt | Error::CudaUnavailable(_))) => return Err(e),
                    Err(e) => Err(e.to_string()),
                };
                if let Err(m) = &result {
                    sink.emit(Event::Log(format!("{series}: {m}")));
                }
                tries[i].push(result);
                let runs = median_runs(&sweep, &tries);
                sink.emit(Event::Table(report::scaling_table(&runs, s)?));
            }
        }
        let pipes = pipeline_report::sweep(s, &data, sink)?;
        let stopped = sink.stop_requested();
        let note = rounds_note(&sweep, &tries);
        let mut report = report::build(self, s, &data, median_runs(&sweep, &tries), stopped)?;
        report.notes.extend(note);
        pipeline_report::add(&mut report, &pipes);
        Ok(report)
    }
}

/// Each replica count's run with the median throughput of its rounds (the lower of the two
/// middle ones for an even count), or its error; counts that never ran are left out.
fn median_runs(sweep: &[(Mode, usize)], tries: &[Vec<std::result::Result<DpReport, String>>]) -> Vec<Run> {
    sweep
        .iter()
        .zip(tries)
        .filter_map(|(&(mode, replicas), t)| {
            let mut ok: Vec<&DpReport> = t.iter().filter_map(|r| r.as_ref().ok()).collect();
            ok.sort_by(|a, b| a.samples_per_s.total_cmp(&b.samples_per_s));
            let result = match ok.get(ok.len().saturating_sub(1) / 2) {
                Some(r) => Ok((*r).clone()),
                None => Err(t.first()?.as_ref().err()?.clone()),
            };
            Some(Run { mode, replicas, result })
        })
        .collect()
}

/// Says which run the tables show, with every round's throughput, when there were several.
fn rounds_note(sweep: &[(Mode, usize)], tries: &[Vec<std::result::Result<DpReport, String>>]) -> Option<String> {
    if tries.iter().all(|t| t.len() < 2) {
        return None;
    }
    let each: Vec<String> = sweep
        .iter()
        .zip(tries)
        .filter(|(_, t)| !t.is_empty())
        .map(|(&(mode, n), t)| {
            format!(
                "{} N={n}: {}",
                mode.name(),
                t.iter()
                    .map(|r| r.as_ref().map_or("failed".to_string(), |r| format!("{:.0}", r.samples_per_s)))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
        .collect();
    Some(format!(
        "Every replica count ran once per round, in turn; the tables, charts and verdict use each count's run with the median throughput, since a shared machine's speed drifts from run to run. Samples/s per round (measured): {}.",
        each.join("; ")
    ))
}

/// Keeps replica `rank`'s first steps and, once every replica's have come, draws the run's
/// timeline live (the report's timeline, with the same title, replaces it at the end).
fn live_timeline(
    sink: &mut dyn Sink,
    dp: &DpConfig,
    global: usize,
    lanes: &mut [Option<(Vec<parallel::StepClock>, Vec<(f64, f64)>)>],
    rank: usize,
    steps: Vec<parallel::StepClock>,
    comm_spans: Vec<(f64, f64)>,
) {
    if let Some(slot) = lanes.get_mut(rank) {
        *slot = Some((steps, comm_spans));
    }
    let all: Option<Vec<parallel::ReplicaLanes<'_>>> =
        lanes.iter().map(|l| l.as_ref().map(|(s, c)| parallel::ReplicaLanes { steps: s, comm_spans: c })).collect();
    if let Some(all) = all {
        sink.emit(Event::Timeline(Box::new(parallel::timeline(dp, global, &all))));
    }
}

/// Forwards a replica message to the exercise's sink as a live point, progress or log.
fn forward(sink: &mut dyn Sink, series: &str, m: Msg) {
    let point =
        |chart: &str, series: String, x: f64, y: f64, p: Provenance| Event::Point { chart: chart.into(), series, x, y, provenance: p };
    match m {
        Msg::Progress { step, total } => sink.emit(Event::Progress { done: step, total }),
        Msg::Loss { step, loss, .. } => sink.emit(point("loss", series.into(), step as f64, loss, Provenance::Measured)),
        Msg::Val { epoch, accuracy } => {
            sink.emit(point("val_accuracy", series.into(), (epoch + 1) as f64, accuracy * 100.0, Provenance::Measured))
        }
        Msg::Split { rank, step, compute_ms, sync_ms } => {
            let p = Provenance::derived("each replica's clock readings");
            sink.emit(point("replica_split", format!("{series} replica {rank} compute"), step as f64, compute_ms, p.clone()));
            sink.emit(point("replica_split", format!("{series} replica {rank} sync"), step as f64, sync_ms, p));
        }
        Msg::Device { rank, step, wall_s, busy_s, memory } => {
            let w = crate::watch::Window { step, wall_s, busy_s, memory };
            crate::watch::emit(sink, &format!("{series} replica {rank}"), &w);
        }
        Msg::Lanes { .. } => {} // drawn by `live_timeline`
    }
}
