//! Exercise 6: data parallelism with a real ring all-reduce (`gpulab_systems::parallel`). The same model
//! trained on 1, 2, 4… replicas in strong scaling (same global batch) and weak scaling (same
//! per-replica batch): throughput, speed-up, efficiency, where each step's time goes
//! (compute / exposed communication / idle), bytes all-reduced, accuracy; a per-replica
//! timeline; and the ring cost model extrapolated to 8…512 GPUs per link preset (simulated).
//! The replicas run the one training loop, so any model (MLP, CNN) and precision (fp32,
//! fp16/bf16 autocast) trains data-parallel.

mod auto_size;
mod pipeline_report;
mod report;
pub mod torch_export;
mod verdict;

use super::Exercise;
use super::common;
use super::live::LiveChartSpec;
use super::settings::distributed::Config;
use super::settings::{self, Settings, Value};
use super::sink::{Event, Sink, TrainBridge};
use gpulab_core::error::{Error, Result};
use gpulab_systems::parallel::{self, DpConfig, DpReport, ReplicaKind, cost};
use gpulab_systems::report::{Provenance, Report};

pub struct Distributed;

/// The default data set: 28×28 shapes, enough samples for several epochs of 256-sample steps.
const SPLIT_DATASET: &str = "shapes:res=28,n=8000,classes=4";

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

fn modes(c: &Config) -> Result<Vec<Mode>> {
    Ok(match c.scaling.as_str() {
        "strong" => vec![Mode::Strong],
        "weak" => vec![Mode::Weak],
        _ => vec![Mode::Strong, Mode::Weak],
    })
}

fn kind(c: &Config) -> Result<ReplicaKind> {
    Ok(match c.kind.as_str() {
        "cpu" => ReplicaKind::Cpu { threads: c.threads_per_replica as usize },
        "gpu" => ReplicaKind::GpuDevices,
        "adapters" => ReplicaKind::GpuAdapters,
        _ => ReplicaKind::Cuda,
    })
}

/// The data-parallel config and the global batch of one run.
fn plan(c: &Config, mode: Mode, replicas: usize) -> Result<(DpConfig, usize)> {
    let batch = c.training.batch()?;
    let global = match mode {
        Mode::Strong => batch,
        Mode::Weak => batch * replicas,
    };
    let link = cost::preset(&c.link)?.map(|p| p.link);
    let dp = DpConfig {
        replicas,
        kind: kind(c)?,
        bucket_cap_mb: c.bucket_cap_mb,
        overlap: c.overlap,
        shard_optimizer: c.shard_optimizer,
        link,
        timeline_steps: 24,
        checkpoints: None,
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
                "cpu: CPU replicas that split the cores · gpu: N wgpu devices on one adapter (real synchronisation and transfer cost, no extra compute) · adapters: one replica per distinct GPU (one GPU seen through Vulkan and GL counts once) · cuda: N CUDA GPUs (not built yet)",
                settings::choice("cpu", &["cpu", "gpu", "adapters", "cuda"]),
            )
            .add("threads_per_replica", "Threads per replica", "CPU replicas: threads each replica's GEMM and element-wise kernels use (replicas × threads must fit the cores)", settings::int(1, 1, 1024))
            .add("scaling", "Scaling", "strong: the same global batch split N ways · weak: the same batch per replica, so the global batch grows with N · both", settings::choice("strong", &["strong", "weak", "both"]))
            .add("bucket_cap_mb", "Bucket cap (MiB)", "PyTorch DDP's bucket_cap_mb: gradients are all-reduced in buckets of at most this size (25: one bucket unless the gradients pass 25 MiB; try 0.05 to see overlap)", settings::float(25.0, 0.001, parallel::bucket::MAX_CAP_MB))
            .add("overlap", "Overlap", "All-reduce each bucket on a communication thread while backward computes the earlier layers (off by default: on CPU replicas that use every core that thread takes a core from compute; try the small-buckets preset)", Value::Bool(false))
            .add("shard_optimizer", "Sharded optimizer (ZeRO-1)", "Reduce-scatter the gradients, let each replica update its 1/N of the parameters, all-gather them: the same bytes as an all-reduce, 1/N of the update each (CPU replicas, overlap off)", Value::Bool(false))
            .add("rounds", "Rounds", "Runs of every replica count, taken in turn (1, 2, 1, 2, …); the report uses each count's run with the median throughput, since a shared machine's speed drifts from run to run", settings::int(3, 1, 20))
            .add("link", "Interconnect", "measured: this machine's host transfers · or a simulated link (each message waits latency + bytes / bandwidth): pcie4, nvlink4, 100gbe, 10gbe", settings::choice("measured", &["measured", "pcie4", "nvlink4", "100gbe", "10gbe"]));
        let s = s
            .add("pipeline_stages", "Pipeline stages", "Pipeline parallel: the model's layers split over this many CPU stages of one thread each (0 = off; at most the layers and the cores)", settings::int(2, 0, parallel::MAX_REPLICAS as i64))
            .add("micro_batches", "Micro-batches", "Pipeline parallel: micro-batch counts M to compare (each must divide the batch); M = 1 is plain model parallelism", settings::list(&[1, 2, 4, 8], 1, parallel::pipeline::MAX_MICRO_BATCHES as u64));
        // The default model gives each replica milliseconds of compute per step, so a second
        // replica can pay for its all-reduce where the cores allow; size=auto only grows it.
        let mut s = common::precision_setting(common::model_setting(common::training_settings(s, SPLIT_DATASET, &[512, 256], 256, 3)));
        if let Some(b) = s.0.iter_mut().find(|x| x.key == "batch") {
            b.help = "Strong scaling: the global batch, split evenly over the replicas · weak scaling: each replica's batch".into();
        }
        let s = crate::cost::setting(
            s,
            "price_per_hour",
            "Price per replica-hour (USD)",
            "What an hour of one replica costs (per GPU-hour; auto on CPU replicas: the vCPU list price × threads per replica); the cost counts every replica",
            "auto",
        );
        let mut s = crate::sizing::settings_with(s, "auto", 10.0);
        if let Some(z) = s.0.iter_mut().find(|x| x.key == crate::sizing::SIZE) {
            z.help = "as-set: the hidden widths above · auto: wider layers where this machine's measured peak (cached) leaves time for them in about the target time, never narrower than set".into();
        }
        s
    }

    fn presets(&self) -> Vec<super::Preset> {
        use super::Preset;
        vec![
            Preset::new(
                "a model worth splitting",
                "The default MLP 784-512-256-10 at global batch 256 on 28×28 shapes with its widths as set (not grown from the measured peak): each replica gets milliseconds of compute per step, so the all-reduce and the fixed per-step costs weigh little",
                &[("dataset", SPLIT_DATASET), ("hidden", "512,256"), ("batch", "256"), (crate::sizing::SIZE, "as-set")],
            ),
            Preset::new(
                "too small to split",
                "An MLP 64-256-128-10 on the 8×8 digits at global batch 128, as set: microseconds of compute per replica and step, so the all-reduce and the fixed per-step costs can outweigh what a second replica adds",
                &[("dataset", "digits"), ("hidden", "256,128"), ("batch", "128"), (crate::sizing::SIZE, "as-set")],
            ),
            Preset::new(
                "weak scaling",
                "The same batch per replica, so the global batch grows with the replicas (strong scaling splits one batch)",
                &[("scaling", "weak")],
            ),
            Preset::new(
                "a slow network (10 GbE)",
                "Gradients all-reduced over a simulated 10 GbE link (every message waits latency + bytes / bandwidth): compare the exposed communication with the measured link's",
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
        Config::parse(s).map(drop)
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
        let mut c = Config::parse(s)?;
        let data = c.training.load_dataset()?;
        let (device, budget) = (auto_size::device(&c)?, auto_size::budget(&c)?);
        let (resolved, sizing) = crate::sizing::resolve_for(s, &mut c.training, &[device], &data, budget, sink)?;
        let s = &resolved;
        let rounds = c.rounds as usize;
        let replicas = c.replicas.clone();
        let sweep: Vec<(Mode, usize)> = modes(&c)?.into_iter().flat_map(|m| replicas.iter().map(move |&n| (m, n as usize))).collect();
        let mut tries: Vec<Vec<std::result::Result<DpReport, String>>> = vec![Vec::new(); sweep.len()];
        'rounds: for round in 0..rounds {
            for (i, &(mode, n)) in sweep.iter().enumerate() {
                if sink.stop_requested() {
                    break 'rounds;
                }
                if tries[i].first().is_some_and(|r| r.is_err()) {
                    continue; // it failed once; the same settings fail again
                }
                let (dp, global) = plan(&c, mode, n)?;
                let cfg = c.training.train_config(global)?;
                let series = format!("{} N={n}", mode.name());
                let of = if rounds > 1 { format!(" (round {}/{rounds})", round + 1) } else { String::new() };
                sink.emit(Event::Phase(format!("{series}{of}: {}, global batch {global}", dp.kind.label(n))));
                // The live charts follow the first round; later rounds only move the progress bar.
                let mut bridge = TrainBridge { charts: round == 0, ..TrainBridge::new(&mut *sink, series.clone()) };
                let result = match parallel::train(&data, &cfg, &dp, &mut bridge) {
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
                sink.emit(Event::Table(report::scaling_table(&runs, &c)?));
            }
        }
        let pipes = pipeline_report::sweep(&c, &data, sink)?;
        let stopped = sink.stop_requested();
        let note = rounds_note(&sweep, &tries);
        let mut report = report::build(self, s, &c, &data, median_runs(&sweep, &tries), stopped)?;
        report.notes.extend(note);
        report.notes.extend(pipeline_report::skipped(&c)?);
        crate::sizing::annotate(sizing.as_ref(), &mut report);
        pipeline_report::add(&mut report, &pipes);
        Ok(report)
    }
}

/// The settings checked as a whole (`Config::parse` calls it): what needs no data set.
pub(crate) fn check(c: &Config) -> Result<()> {
    c.training.validate()?;
    if c.replicas.is_empty() {
        return Err(Error::InvalidConfig("replicas: give at least one replica count, e.g. 1,2".into()));
    }
    pipeline_report::validate(c)?;
    report::replica_price(c)?;
    // The data set is loaded at run time; here, what needs no data.
    for mode in modes(c)? {
        for &n in &c.replicas {
            let (dp, global) = plan(c, mode, n as usize)?;
            dp.validate(&c.training.train_config(global)?, usize::MAX)?;
        }
    }
    Ok(())
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
