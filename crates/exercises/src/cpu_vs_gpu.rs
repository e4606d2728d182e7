//! Exercise 1: the same model, data and seed on the CPU and on each selected GPU, then a matmul
//! size sweep that finds where (or whether) the GPU starts to win.

use super::common::{self, percent};
use super::cost::{self, Price, RunCost};
use super::settings::{self, Settings, Value};
use super::sink::{Event, Sink, TrainBridge};
use super::{Exercise, Preset};
use crate::common::report_for;
use gpulab_core::device::telemetry::UtilizationSampler;
use gpulab_core::device::{Device, Engine};
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::{BackendInfo, BackendKind, prelude::*};
use gpulab_core::with_backend;
use gpulab_systems::bench::{random_matrix, time_matmul};
use gpulab_systems::report::{Cell, Chart, ChartKind, Claims, Column, Figure, Metadata, Provenance, Report, Series, Table};
use gpulab_systems::train::{self, TrainReport};

pub struct CpuVsGpu;

/// One backend's training result (or why it has none).
struct Trained {
    device: String,
    info: Option<BackendInfo>,
    result: std::result::Result<TrainReport, String>,
    /// Mean GPU utilisation NVML reported during training (NVIDIA only).
    nvml_utilization: Option<f64>,
}

/// Seconds of training arithmetic the default run is sized for (`size=auto`).
const DEFAULT_TARGET_S: f64 = 10.0;

/// The label every GPU's speed ratio starts with (the class view charts it across machines).
const SPEED_RATIO: &str = "GPU / CPU training speed";

impl Exercise for CpuVsGpu {
    fn id(&self) -> &'static str {
        "cpu-vs-gpu"
    }
    fn number(&self) -> u32 {
        1
    }
    fn title(&self) -> &'static str {
        "CPU vs GPU"
    }
    fn lesson(&self) -> &'static str {
        include_str!("../../../lessons/01-cpu-vs-gpu.md")
    }
    fn quick_run(&self) -> &'static [(&'static str, &'static str)] {
        &[("backends", "cpu"), ("epochs", "1"), ("hidden", "32"), ("sweep_sizes", "16,32"), ("sweep_runs", "1")]
    }

    /// The GPU / CPU training-speed ratio, of a hardware GPU where one ran.
    fn key_figure<'r>(&self, report: &'r Report) -> Option<&'r Figure> {
        let ratios = || report.figures.iter().filter(|f| f.label.starts_with(SPEED_RATIO));
        ratios().find(|f| !f.label.contains("software GPU")).or_else(|| ratios().next()).or(report.figures.first())
    }

    fn live_charts(&self) -> Vec<super::LiveChartSpec> {
        let mut c = common::training_live_charts();
        c.push(super::LiveChartSpec::line("gflops", "Matmul speed", "matrix size n", "GFLOP/s").log_x());
        c
    }
    fn settings(&self) -> Settings {
        let s = Settings::default().add(
            "backends",
            "Backends",
            &format!(
                "Where to train: {}; gpu is the best adapter, gpu:N its index in the hardware panel",
                gpulab_core::device::registry::spellings()
            ),
            Value::Devices(vec!["cpu".into(), "gpu".into()]),
        );
        let s = common::model_setting(common::training_settings(s, "digits", &[128, 64], 64, 5))
            .add("sweep_sizes", "Matmul sizes", "n for the n×n×n matmul sweep", settings::list(&[64, 128, 256, 512, 1024], 1, 8192))
            .add("sweep_runs", "Runs per size", "Timed runs per matmul size (the median is reported)", settings::int(3, 1, 50));
        let s = cost::setting(s, "price_per_hour", "GPU price per hour (USD)", "What an hour of each GPU costs (per GPU-hour)", "auto");
        let s = cost::setting(
            s,
            "cpu_price_per_hour",
            "CPU price per hour (USD)",
            "What an hour of the CPU backend's machine costs (per machine-hour)",
            "auto",
        );
        // The first run sizes the model from the backends' peaks, so a real GPU has enough work per
        // step to show what it adds; "too small for a GPU" is the lesson's digits model as set.
        super::sizing::settings_with(s, "auto", DEFAULT_TARGET_S)
    }

    fn presets(&self) -> Vec<Preset> {
        let mut p = super::sizing::presets(
            "The defaults: the hidden layers sized from every backend's measured peak (cached per adapter) so that training on all of them takes about 10 s of arithmetic: enough work per step for a hardware GPU to show what it adds",
            (
                "A 2048-wide MLP at batch 256 on 64×64 colour shapes, and matmuls up to n = 4096: enough work per step for a GPU to win",
                &[("batch", "256"), ("epochs", "3"), ("sweep_sizes", "256,512,1024,2048,4096")],
            ),
            (
                "The model sized from the backends' measured peaks (cached per adapter) on 64×64 colour shapes, so its training takes about 20 s on a laptop or a workstation",
                &[("batch", "256"), ("target_s", "20"), ("sweep_sizes", "256,512,1024,2048")],
            ),
        );
        p.insert(
            1,
            super::sizing::too_small_preset(
                "The digits model with its hidden layers as set (128, 64): a few seconds anywhere, and too small for any GPU to win at training",
            ),
        );
        p
    }

    fn validate(&self, s: &Settings) -> Result<()> {
        s.devices("backends")?;
        common::validate_training(s)?;
        s.list("sweep_sizes")?;
        s.int("sweep_runs")?;
        cost::validate(s, "price_per_hour")?;
        cost::validate(s, "cpu_price_per_hour")?;
        super::sizing::validate(s)
    }

    fn run(&self, s: &Settings, sink: &mut dyn Sink) -> Result<Report> {
        self.validate(s)?;
        let data = common::load_dataset(s)?;
        let devices = s.devices("backends")?;
        // size=auto sizes the model so that training on every backend, one after another, takes
        // about target_s of arithmetic at their measured peaks.
        let budget = super::sizing::Budget { runs: 1.0, extra_passes: 0.0, grow_only: false };
        let (resolved, sizing) = super::sizing::resolve_for(s, &devices, &data, budget, sink)?;
        let s = &resolved;
        let cfg = common::train_config(s, s.int("batch")? as usize)?;
        let sizes: Vec<usize> = s.list("sweep_sizes")?.into_iter().map(|v| v as usize).collect();
        let runs = s.int("sweep_runs")? as usize;

        let mut meta = Metadata::new(cfg.seed);
        meta.dataset = format!("{} — {}", data.name, data.source);
        meta.hyperparameters = s.to_map();
        meta.hyperparameters.insert("architecture".into(), common::architecture(s, &data)?);

        // Training on every backend, one after another.
        let mut engines: Vec<(String, Engine)> = Vec::new();
        let mut trained = Vec::new();
        for d in &devices {
            if sink.stop_requested() {
                break;
            }
            sink.emit(Event::Phase(format!("training on {d}")));
            let mut engine = match d.open(None) {
                Ok(e) => e,
                Err(e) => {
                    sink.emit(Event::Log(format!("{d}: {e}")));
                    trained.push(Trained { device: d.to_string(), info: None, result: Err(e.to_string()), nvml_utilization: None });
                    continue;
                }
            };
            let info = with_backend!(&mut engine, b => b.info());
            let series = short_label(&info);
            sink.emit(Event::Log(format!("training on {}", info.label())));
            let sampler = if info.kind != gpulab_core::tensor::BackendKind::Cpu { UtilizationSampler::start(&info.name) } else { None };
            let result = with_backend!(&mut engine, b => {
                let mut bridge = TrainBridge::new(&mut *sink, series);
                train::train(b, &data, &cfg, &mut bridge)
            });
            if let Err(e) = &result {
                sink.emit(Event::Log(format!("{}: {e}", info.label())));
            }
            let nvml_utilization = sampler.and_then(UtilizationSampler::finish);
            trained.push(Trained {
                device: d.to_string(),
                info: Some(info.clone()),
                result: result.map_err(|e| e.to_string()),
                nvml_utilization,
            });
            meta.backends.push(info);
            engines.push((d.to_string(), engine));
            sink.emit(Event::Table(training_table(&trained)));
        }

        // The matmul sweep on the CPU (always, as the baseline) and every GPU that opened.
        let mut sweep: Vec<(BackendInfo, Vec<(usize, f64)>)> = Vec::new();
        if !engines.iter().any(|(_, e)| e.kind() == gpulab_core::tensor::BackendKind::Cpu) {
            engines.insert(0, ("cpu".into(), Device::Cpu.open(None)?));
        }
        'sweep: for (_, engine) in engines.iter_mut() {
            let info = with_backend!(&mut *engine, b => b.info());
            sink.emit(Event::Phase(format!("matmul sweep on {}", short_label(&info))));
            let mut points = Vec::new();
            for (i, &n) in sizes.iter().enumerate() {
                if sink.stop_requested() {
                    sweep.push((info, points));
                    break 'sweep;
                }
                let (a, bm) = (random_matrix(n * n, 1), random_matrix(n * n, 2));
                let secs = with_backend!(&mut *engine, b => time_matmul(b, &a, &bm, n, runs));
                match secs {
                    Ok((secs, _)) => {
                        let gflops = 2.0 * (n as f64).powi(3) / secs / 1e9;
                        points.push((n, gflops));
                        sink.emit(Event::Point {
                            chart: "gflops".into(),
                            series: short_label(&info),
                            x: n as f64,
                            y: gflops,
                            provenance: Provenance::Measured,
                        });
                    }
                    Err(e) => sink.emit(Event::Log(format!("{} n={n}: {e}", short_label(&info)))),
                }
                sink.emit(Event::Progress { done: i as u64 + 1, total: sizes.len() as u64 });
            }
            sweep.push((info, points));
        }

        let stopped_early = sink.stop_requested();
        let mut report = build_report(self, s, meta, &trained, &sweep, stopped_early);
        super::sizing::annotate(sizing.as_ref(), &mut report);
        if trained.iter().all(|t| t.result.is_err()) && !stopped_early {
            let why: Vec<String> = trained.iter().filter_map(|t| t.result.as_ref().err().map(|e| format!("{}: {e}", t.device))).collect();
            return Err(Error::InvalidConfig(format!("no backend could train: {}", why.join("; "))));
        }
        Ok(report)
    }
}

/// A short name for charts: "CPU" or the adapter name with "(software)" where it applies.
pub(super) fn short_label(info: &BackendInfo) -> String {
    // "llvmpipe (LLVM 15.0.6, 256 bits)" → "llvmpipe": the details are in the full label.
    let name = info.name.split(" (").next().unwrap_or(&info.name);
    match info.kind {
        gpulab_core::tensor::BackendKind::Cpu => "CPU".into(),
        _ if info.software => format!("{name} {} (software GPU)", info.api),
        _ => format!("{name} {}", info.api),
    }
}

fn training_table(trained: &[Trained]) -> Table {
    let mut t = Table {
        title: "Training".into(),
        columns: vec![
            Column::text("backend"),
            Column::num("training time", "s", 2, Provenance::Measured),
            Column::num("throughput", "samples/s", 0, Provenance::Measured),
            Column::num("median step", "ms", 3, Provenance::Measured),
            Column::num("GPU busy", "%", 0, Provenance::derived("GPU timestamp queries ÷ training time")),
            Column::num("NVML utilisation", "%", 0, Provenance::derived("mean of the NVIDIA driver's utilisation samples every 100 ms")),
            Column::num("validation accuracy", "%", 2, Provenance::Measured),
            Column::num("peak memory", "MiB", 2, Provenance::derived("gpulab's allocation ledger")),
            Column::text("status"),
        ],
        rows: Vec::new(),
    };
    for tr in trained {
        let name = tr.info.as_ref().map(|i| i.label()).unwrap_or_else(|| tr.device.clone());
        t.rows.push(match &tr.result {
            Ok(r) => vec![
                name.into(),
                r.train_wall_s.into(),
                r.samples_per_s.into(),
                r.median_step_ms.into(),
                r.gpu_busy_fraction.map(|f| f * 100.0).into(),
                tr.nvml_utilization.into(),
                (r.final_val_accuracy * 100.0).into(),
                common::mib(r.memory.total_peak).into(),
                if r.stopped_early { "stopped" } else { "ok" }.into(),
            ],
            Err(e) => {
                let mut row = vec![Cell::from(name)];
                row.extend(std::iter::repeat_n(Cell::Empty, 7));
                row.push(format!("failed: {e}").into());
                row
            }
        });
    }
    t
}

/// The sizes both backends measured, ascending (whatever order `sweep_sizes` gave), each with
/// whether the GPU was faster there.
fn wins(cpu: &[(usize, f64)], gpu: &[(usize, f64)]) -> Vec<(usize, bool)> {
    let mut w: Vec<(usize, bool)> = gpu.iter().filter_map(|(n, g)| cpu.iter().find(|(m, _)| m == n).map(|(_, c)| (*n, g > c))).collect();
    w.sort_unstable();
    w.dedup_by_key(|x| x.0);
    w
}

/// The smallest size from which the GPU beats the CPU at every larger size, if any.
fn crossover(cpu: &[(usize, f64)], gpu: &[(usize, f64)]) -> Option<usize> {
    let w = wins(cpu, gpu);
    match w.iter().rposition(|(_, won)| !won) {
        None => w.first().map(|(n, _)| *n),
        Some(i) => w.get(i + 1).map(|(n, _)| *n),
    }
}

fn build_report(
    ex: &CpuVsGpu,
    s: &Settings,
    meta: Metadata,
    trained: &[Trained],
    sweep: &[(BackendInfo, Vec<(usize, f64)>)],
    stopped_early: bool,
) -> Report {
    let mut report = Report { stopped_early, ..report_for(ex, s, meta) };
    report.tables.push(training_table(trained));

    // Sweep table: one row per size, one column per backend, plus GPU/CPU ratios.
    let cpu_points =
        sweep.iter().find(|(i, _)| i.kind == gpulab_core::tensor::BackendKind::Cpu).map(|(_, p)| p.clone()).unwrap_or_default();
    let gpus: Vec<&(BackendInfo, Vec<(usize, f64)>)> =
        sweep.iter().filter(|(i, _)| i.kind != gpulab_core::tensor::BackendKind::Cpu).collect();
    let mut columns = vec![
        Column::num("n", "", 0, Provenance::Measured),
        Column::num("CPU", "GFLOP/s", 2, Provenance::derived("2n³ ÷ median measured time")),
    ];
    for (info, _) in &gpus {
        columns.push(Column::num(&short_label(info), "GFLOP/s", 2, Provenance::derived("2n³ ÷ median measured time")));
        columns.push(Column::num(&format!("{} ÷ CPU", short_label(info)), "×", 3, Provenance::derived("the two GFLOP/s columns")));
    }
    let mut sizes: Vec<usize> = sweep.iter().flat_map(|(_, p)| p.iter().map(|(n, _)| *n)).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let at = |points: &[(usize, f64)], n: usize| points.iter().find(|(m, _)| *m == n).map(|(_, g)| *g);
    let rows = sizes
        .iter()
        .map(|&n| {
            let cpu = at(&cpu_points, n);
            let mut row = vec![Cell::Num(n as f64), cpu.into()];
            for (_, p) in &gpus {
                let g = at(p, n);
                row.push(g.into());
                row.push(g.zip(cpu).map(|(g, c)| g / c).into());
            }
            row
        })
        .collect();
    report.tables.push(Table { title: "Matmul sweep".into(), columns, rows });

    // Charts.
    let mut loss = Chart {
        id: "loss".into(),
        title: "Training loss".into(),
        x_label: "step".into(),
        y_label: "loss".into(),
        kind: ChartKind::Line,
        log_x: false,
        series: vec![],
        markers: vec![],
    };
    let mut acc = Chart {
        id: "val_accuracy".into(),
        title: "Validation accuracy".into(),
        x_label: "epoch".into(),
        y_label: "accuracy (%)".into(),
        ..loss.clone()
    };
    for t in trained {
        if let (Ok(r), Some(info)) = (&t.result, &t.info) {
            let name = short_label(info);
            // The loss per epoch is what the report keeps; live charts show every read-back.
            loss.series.push(Series {
                name: name.clone(),
                points: r.epochs.iter().map(|e| [(e.epoch + 1) as f64, e.train_loss]).collect(),
                provenance: Provenance::Measured,
            });
            acc.series.push(Series {
                name,
                points: r.epochs.iter().map(|e| [(e.epoch + 1) as f64, e.val_accuracy * 100.0]).collect(),
                provenance: Provenance::Measured,
            });
        }
    }
    loss.x_label = "epoch".into();
    let mut gflops = Chart {
        id: "gflops".into(),
        title: "Matmul throughput".into(),
        x_label: "matrix size n".into(),
        y_label: "GFLOP/s".into(),
        kind: ChartKind::Line,
        log_x: true,
        series: vec![],
        markers: vec![],
    };
    for (info, p) in sweep {
        gflops.series.push(Series {
            name: short_label(info),
            points: p.iter().map(|(n, g)| [*n as f64, *g]).collect(),
            provenance: Provenance::derived("2n³ ÷ median measured time"),
        });
    }

    // Costs: each run's measured training time × the assumed price of its backend.
    let price_of = |i: &BackendInfo| {
        let key = if i.kind == BackendKind::Cpu { "cpu_price_per_hour" } else { "price_per_hour" };
        cost::read(s, key, i.kind).unwrap_or_else(|_| Price { usd_per_hour: f64::NAN, label: format!("{key} unreadable") })
    };
    let priced: Vec<(String, Price, &TrainReport)> =
        trained.iter().filter_map(|t| Some((short_label(t.info.as_ref()?), price_of(t.info.as_ref()?), t.result.as_ref().ok()?))).collect();
    if !priced.is_empty() {
        let rows: Vec<RunCost> = priced
            .iter()
            .map(|(name, price, r)| RunCost { name: name.clone(), price, train_s: r.train_wall_s, epochs: r.epochs.len() })
            .collect();
        report.tables.push(cost::training_table(&rows));
        report.notes.push(cost::note(&priced.iter().map(|p| &p.1).collect::<Vec<_>>()));
    }

    // Figures and verdict, from the numbers.
    let figures = |t: &Trained| match (&t.result, &t.info) {
        (Ok(r), Some(i)) => Some(RunFigures::of(i, r, t.nvml_utilization, price_of(i).usd_per_hour)),
        _ => None,
    };
    let cpu_run = trained.iter().filter(|t| t.info.as_ref().is_some_and(|i| i.kind == BackendKind::Cpu)).find_map(figures);
    let gpu_runs: Vec<RunFigures> =
        trained.iter().filter(|t| t.info.as_ref().is_some_and(|i| i.kind != BackendKind::Cpu)).filter_map(figures).collect();
    if let Some(c) = &cpu_run {
        for g in &gpu_runs {
            let speedup = c.train_s / g.train_s.max(1e-12);
            let (word, factor) = if speedup >= 1.0 { ("faster", speedup) } else { ("slower", 1.0 / speedup) };
            report.figures.push(Figure {
                label: format!("{} trains {word} than the CPU by", g.name),
                value: factor,
                unit: "×".into(),
                provenance: Provenance::derived("the two measured training times"),
            });
            // The same comparison as one signed-direction ratio (above 1: the GPU is faster),
            // which compares across machines.
            report.figures.push(Figure {
                label: format!("{SPEED_RATIO} ({})", g.name),
                value: speedup,
                unit: "×".into(),
                provenance: Provenance::derived("CPU training time ÷ GPU training time"),
            });
        }
    }
    let gpu_sweeps: Vec<SweepFigures> = gpus.iter().map(|(info, p)| SweepFigures { name: short_label(info), points: p.clone() }).collect();
    for g in &gpu_sweeps {
        if let Some(n) = crossover(&cpu_points, &g.points) {
            gflops.markers.push((n as f64, format!("{} wins from n = {n}", g.name)));
        }
    }
    let v = verdict(cpu_run.as_ref(), &gpu_runs, &cpu_points, &gpu_sweeps).verdict();
    report.note_software_backends();
    report.verdict = v;
    report.charts = vec![loss, acc, gflops];
    report
}

/// One finished training run's numbers, as the verdict reads them.
#[derive(Clone, Debug, PartialEq)]
struct RunFigures {
    name: String,
    software: bool,
    train_s: f64,
    samples_per_s: f64,
    median_step_ms: f64,
    /// GPU busy share of the training time (derived from timestamps); None where unmeasured.
    busy: Option<f64>,
    /// Mean NVML utilisation, NVIDIA only.
    nvml: Option<f64>,
    val_accuracy: f64,
    /// Epochs finished, and the assumed price of an hour of this backend (USD).
    epochs: usize,
    usd_per_hour: f64,
}

impl RunFigures {
    /// US dollars per finished epoch at the assumed price; None before an epoch finished.
    fn usd_per_epoch(&self) -> Option<f64> {
        (self.epochs > 0).then(|| self.train_s / 3600.0 * self.usd_per_hour / self.epochs as f64)
    }

    fn of(info: &BackendInfo, r: &TrainReport, nvml: Option<f64>, usd_per_hour: f64) -> Self {
        RunFigures {
            name: short_label(info),
            software: info.software,
            train_s: r.train_wall_s,
            samples_per_s: r.samples_per_s,
            median_step_ms: r.median_step_ms,
            busy: r.gpu_busy_fraction,
            nvml,
            val_accuracy: r.final_val_accuracy,
            epochs: r.epochs.len(),
            usd_per_hour,
        }
    }
}

/// One GPU's matmul sweep: (n, GFLOP/s), in the order measured.
#[derive(Clone, Debug, PartialEq)]
struct SweepFigures {
    name: String,
    points: Vec<(usize, f64)>,
}

/// The conditions the verdict's sentences assert (the property test re-checks each one).
mod cond {
    pub const NO_HARDWARE_GPU: &str = "GPUs trained, and every one is a software GPU";
    pub const FASTER: &str = "the GPU trained faster than the CPU";
    pub const NOT_FASTER: &str = "the GPU did not train faster than the CPU";
    pub const SOFTWARE_SLOWER: &str = "a software GPU that trained slower than the CPU";
    pub const SOFTWARE_FASTER: &str = "a software GPU that trained faster than the CPU";
    pub const IDLE_SLOWER: &str = "busy under half the time, and slower than the CPU";
    pub const IDLE_FASTER: &str = "busy under half the time, and faster than the CPU";
    pub const BUSY_FASTER: &str = "busy at least half the time, and faster than the CPU";
    pub const BUSY_SLOWER: &str = "busy at least half the time, and slower than the CPU";
    pub const UNMEASURED_FASTER: &str = "busy time unmeasured, and faster than the CPU";
    pub const UNMEASURED_SLOWER: &str = "busy time unmeasured, and slower than the CPU";
    pub const CROSSOVER: &str = "the GPU beat the CPU at every swept size from n up, and at none just below";
    pub const NEVER_WINS: &str = "the GPU beat the CPU at no swept size";
    pub const WINS_NOT_AT_TOP: &str = "the GPU beat the CPU at some swept sizes but not at the largest";
    pub const ONLY_CPU: &str = "only the CPU finished training";
    pub const NO_CPU: &str = "GPUs finished training, the CPU did not";
    pub const NONE: &str = "no backend finished training";
    pub const CHEAPER: &str = "the GPU's cost per epoch below the CPU's, at the assumed prices";
    pub const NOT_CHEAPER: &str = "the GPU's cost per epoch not below the CPU's, at the assumed prices";
}

/// The verdict: how each GPU's training compared with the CPU's and why (from its busy time),
/// and where its matmuls overtake the CPU's.
fn verdict(cpu: Option<&RunFigures>, gpus: &[RunFigures], cpu_sweep: &[(usize, f64)], sweeps: &[SweepFigures]) -> Claims {
    use gpulab_systems::report::Part::{Evidence, Summary};
    let mut c = Claims::new();
    let software: Vec<&str> = gpus.iter().filter(|g| g.software).map(|g| g.name.as_str()).collect();
    c.summary(
        cond::NO_HARDWARE_GPU,
        !gpus.is_empty() && gpus.iter().all(|g| g.software),
        format!(
            "This machine cannot show what GPU hardware adds: {} {} on the same CPU cores as the CPU backend. On a machine with a hardware GPU, the default settings (the model sized from its measured peak) or the \"big enough for a GPU\" preset show the GPU pull ahead.",
            software.join(" and "),
            if software.len() == 1 { "runs" } else { "run" }
        ),
    );
    for g in gpus {
        c.about(&g.name);
        if let Some(cpu) = cpu {
            let faster = g.train_s < cpu.train_s;
            let speedup = cpu.train_s / g.train_s.max(1e-12);
            let took =
                format!("Training on {} took {} against {} on the CPU", g.name, common::duration(g.train_s), common::duration(cpu.train_s));
            c.one_of(
                Summary,
                vec![
                    (cond::FASTER, faster, format!("{took}: {speedup:.1}× faster.")),
                    (cond::NOT_FASTER, !faster, format!("{took}: {:.1}× slower.", 1.0 / speedup.max(1e-12))),
                ],
            );
            let busy = g.busy.map(percent).unwrap_or_default();
            let idle = g.busy.is_some_and(|b| b < 0.5);
            let fed = g.busy.is_some_and(|b| b >= 0.5);
            let hw = !g.software;
            c.one_of(
                Summary,
                vec![
                    (cond::SOFTWARE_SLOWER, g.software && !faster, format!("{} is a software GPU: it runs on the same CPU cores as the CPU backend and also pays for emulating GPU threads.", g.name)),
                    (cond::SOFTWARE_FASTER, g.software && faster, format!("{} is a software GPU on the same CPU cores, so its lead means the CPU backend's kernels were the slower ones at these shapes, not that GPU hardware helped.", g.name)),
                    (cond::IDLE_SLOWER, hw && idle && !faster, format!("The GPU was busy only {busy} of the training time: this model is too small to keep it fed, and per-step costs (submitting work, reading back results) dominate. Bigger batches or a bigger model move the balance.")),
                    (cond::IDLE_FASTER, hw && idle && faster, format!("It won while busy only {busy} of the training time: per-step costs (submitting work, reading back results) took the rest, so more work per step would use it better.")),
                    (cond::BUSY_FASTER, hw && fed && faster, format!("The GPU was busy {busy} of the time, so the win comes from its parallel arithmetic.")),
                    (cond::BUSY_SLOWER, hw && fed && !faster, format!("The GPU was busy {busy} of the training time and still slower: its kernels themselves took longer than the CPU's at these shapes, not the per-step overheads; the matmul sweep shows from which size its kernels win.")),
                    (cond::UNMEASURED_FASTER, hw && g.busy.is_none() && faster, "Its busy time was not measurable (no timestamp queries), so this run cannot say how much of the win is arithmetic.".to_string()),
                    (cond::UNMEASURED_SLOWER, hw && g.busy.is_none() && !faster, "Its busy time was not measurable (no timestamp queries), so this run cannot tell slow kernels from per-step costs; the matmul sweep compares the kernels alone.".to_string()),
                ],
            );
            if let (Some(gc), Some(cc)) = (g.usd_per_epoch(), cpu.usd_per_epoch()) {
                let at = format!(
                    "At the assumed prices (${}/h for {}, ${}/h for the CPU) an epoch cost {} against {} on the CPU",
                    g.usd_per_hour,
                    g.name,
                    cpu.usd_per_hour,
                    cost::usd_text(gc),
                    cost::usd_text(cc)
                );
                // Break-even: the speed-up at which the GPU's hour pays for itself.
                let even = g.usd_per_hour / cpu.usd_per_hour.max(1e-12);
                c.one_of(
                    Summary,
                    vec![
                        (cond::CHEAPER, gc < cc, format!("{at}: cheaper per epoch on the GPU.")),
                        (cond::NOT_CHEAPER, gc >= cc, format!("{at}: the CPU is cheaper per epoch; at these prices the GPU pays off only above {even:.1}× the CPU's speed.")),
                    ],
                );
            }
        }
        c.fact(
            Evidence,
            format!(
                "{}: {:.0} samples/s, median step {:.3} ms, GPU busy {}{}, validation accuracy {:.2}%.",
                g.name,
                g.samples_per_s,
                g.median_step_ms,
                g.busy.map(percent).unwrap_or_else(|| "not measurable (no timestamp queries)".into()),
                g.nvml.map(|u| format!(" (the NVIDIA driver reported {u:.0}% utilisation)")).unwrap_or_default(),
                g.val_accuracy * 100.0
            ),
        );
    }
    c.about("");
    if let Some(cpu) = cpu {
        c.fact(
            Evidence,
            format!(
                "CPU: {:.0} samples/s, median step {:.3} ms, validation accuracy {:.2}%.",
                cpu.samples_per_s,
                cpu.median_step_ms,
                cpu.val_accuracy * 100.0
            ),
        );
    }
    let peak = |p: &[(usize, f64)]| p.iter().map(|(_, g)| *g).fold(0.0, f64::max);
    for g in sweeps {
        c.about(&g.name);
        let w = wins(cpu_sweep, &g.points);
        let Some(&(top, won_top)) = w.last() else { continue };
        let peaks = format!("peaks {:.1} vs {:.1} GFLOP/s", peak(&g.points), peak(cpu_sweep));
        let won: Vec<String> = w.iter().filter(|x| x.1).map(|x| x.0.to_string()).collect();
        let from = crossover(cpu_sweep, &g.points).unwrap_or(0);
        c.one_of(
            Evidence,
            vec![
                (cond::CROSSOVER, won_top, format!("Matmul: {} beats the CPU from n = {from} upward ({peaks}).", g.name)),
                (
                    cond::NEVER_WINS,
                    won.is_empty(),
                    format!("Matmul: {} does not beat the CPU at any size up to n = {top} on this machine ({peaks}).", g.name),
                ),
                (
                    cond::WINS_NOT_AT_TOP,
                    !won.is_empty() && !won_top,
                    format!("Matmul: {} beat the CPU at n = {} but not at the largest size, n = {top} ({peaks}).", g.name, won.join(", ")),
                ),
            ],
        );
    }
    c.about("");
    let names: Vec<&str> = gpus.iter().map(|g| g.name.as_str()).collect();
    c.one_of(
        Summary,
        vec![
            (
                cond::ONLY_CPU,
                gpus.is_empty() && cpu.is_some(),
                cpu.map(|c| {
                    format!("Only the CPU trained ({:.2} s, {:.0} samples/s); select a GPU backend to compare.", c.train_s, c.samples_per_s)
                })
                .unwrap_or_default(),
            ),
            (
                cond::NO_CPU,
                !gpus.is_empty() && cpu.is_none(),
                format!("The CPU did not train, so there is nothing to compare {} with; add cpu to the backends.", names.join(" and ")),
            ),
            (cond::NONE, gpus.is_empty() && cpu.is_none(), "No backend finished training; see the status column.".into()),
        ],
    );
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpulab_systems::report::Claim;
    use proptest::prelude::*;

    #[test]
    fn crossover_is_where_the_gpu_keeps_winning() {
        let cpu = [(64, 10.0), (128, 10.0), (256, 10.0), (512, 10.0)];
        assert_eq!(crossover(&cpu, &[(64, 1.0), (128, 12.0), (256, 9.0), (512, 20.0)]), Some(512));
        assert_eq!(crossover(&cpu, &[(64, 11.0), (128, 12.0), (256, 13.0), (512, 20.0)]), Some(64));
        assert_eq!(crossover(&cpu, &[(64, 1.0), (128, 2.0), (256, 3.0), (512, 4.0)]), None);
        // sweep_sizes in any order: the same answer.
        assert_eq!(
            crossover(&[(512, 10.0), (64, 10.0), (256, 10.0), (128, 10.0)], &[(256, 9.0), (512, 20.0), (64, 1.0), (128, 12.0)]),
            Some(512)
        );
    }

    fn sweep_and_cpu() -> impl Strategy<Value = (Vec<(usize, f64)>, Vec<(usize, f64)>)> {
        // Distinct sizes, shuffled; GFLOP/s anywhere from far below to far above the CPU's.
        (proptest::collection::btree_set(1usize..5000, 0..6), any::<u64>()).prop_flat_map(|(sizes, seed)| {
            let sizes: Vec<usize> = sizes.into_iter().collect();
            let n = sizes.len();
            (Just(sizes), proptest::collection::vec(0.1f64..100.0, n), proptest::collection::vec(0.1f64..100.0, n), Just(seed)).prop_map(
                move |(sizes, c, g, seed)| {
                    let mut cpu: Vec<(usize, f64)> = sizes.iter().copied().zip(c).collect();
                    let mut gpu: Vec<(usize, f64)> = sizes.iter().copied().zip(g).collect();
                    let k = seed as usize % (n.max(1));
                    cpu.rotate_left(k);
                    gpu.reverse();
                    (cpu, gpu)
                },
            )
        })
    }

    fn run() -> impl Strategy<Value = RunFigures> {
        (any::<bool>(), 0.01f64..100.0, proptest::option::of(0.0f64..1.0), proptest::option::of(0.0f64..100.0), 0usize..4, 0.0f64..20.0)
            .prop_map(|(software, train_s, busy, nvml, epochs, usd_per_hour)| RunFigures {
                name: String::new(),
                software,
                train_s,
                samples_per_s: 1000.0 / train_s,
                median_step_ms: train_s,
                busy,
                nvml,
                val_accuracy: 0.9,
                epochs,
                usd_per_hour,
            })
    }

    /// Each condition, re-evaluated from the inputs without the verdict's own code.
    fn oracle(
        cpu: Option<&RunFigures>,
        gpus: &[RunFigures],
        cpu_sweep: &[(usize, f64)],
        sweeps: &[SweepFigures],
        c: &Claim,
    ) -> Option<bool> {
        let gpu = gpus.iter().find(|g| g.name == c.subject);
        let faster = || Some(gpu?.train_s < cpu?.train_s);
        let hw = || gpu.map(|g| !g.software);
        let busy = || gpu.and_then(|g| g.busy);
        let beats = |n: usize| -> Option<bool> {
            let g = sweeps.iter().find(|s| s.name == c.subject)?.points.iter().find(|p| p.0 == n)?.1;
            Some(g > cpu_sweep.iter().find(|p| p.0 == n)?.1)
        };
        let common: Vec<usize> = {
            let s = sweeps.iter().find(|s| s.name == c.subject);
            let mut v: Vec<usize> =
                s.map(|s| s.points.iter().map(|p| p.0).filter(|n| cpu_sweep.iter().any(|p| p.0 == *n)).collect()).unwrap_or_default();
            v.sort_unstable();
            v
        };
        let number_after = |pat: &str| {
            c.text.split(pat).nth(1).and_then(|t| t.split(|ch: char| !ch.is_ascii_digit()).next()).and_then(|t| t.parse::<usize>().ok())
        };
        Some(match c.condition {
            cond::NO_HARDWARE_GPU => !gpus.is_empty() && gpus.iter().all(|g| g.software),
            cond::FASTER => faster()?,
            cond::NOT_FASTER => !faster()?,
            cond::SOFTWARE_SLOWER => !hw()? && !faster()?,
            cond::SOFTWARE_FASTER => !hw()? && faster()?,
            cond::IDLE_SLOWER => hw()? && busy()? < 0.5 && !faster()?,
            cond::IDLE_FASTER => hw()? && busy()? < 0.5 && faster()?,
            cond::BUSY_FASTER => hw()? && busy()? >= 0.5 && faster()?,
            cond::BUSY_SLOWER => hw()? && busy()? >= 0.5 && !faster()?,
            cond::UNMEASURED_FASTER => hw()? && busy().is_none() && faster()?,
            cond::UNMEASURED_SLOWER => hw()? && busy().is_none() && !faster()?,
            cond::CROSSOVER => {
                let n = number_after("from n = ")?;
                let below = common.iter().filter(|&&m| m < n).max();
                common.contains(&n)
                    && common.iter().filter(|&&m| m >= n).all(|&m| beats(m) == Some(true))
                    && below.is_none_or(|&m| beats(m) == Some(false))
            }
            cond::NEVER_WINS => {
                !common.is_empty()
                    && common.iter().all(|&m| beats(m) == Some(false))
                    && number_after("up to n = ") == common.last().copied()
            }
            cond::WINS_NOT_AT_TOP => {
                common.iter().any(|&m| beats(m) == Some(true))
                    && beats(*common.last()?) == Some(false)
                    && number_after("largest size, n = ") == common.last().copied()
            }
            cond::ONLY_CPU => gpus.is_empty() && cpu.is_some(),
            cond::NO_CPU => !gpus.is_empty() && cpu.is_none(),
            cond::NONE => gpus.is_empty() && cpu.is_none(),
            cond::CHEAPER | cond::NOT_CHEAPER => {
                let per_epoch = |r: &RunFigures| (r.epochs > 0).then(|| r.train_s * r.usd_per_hour / r.epochs as f64);
                let cheaper = per_epoch(gpu?)? < per_epoch(cpu?)?;
                if c.condition == cond::CHEAPER { cheaper } else { !cheaper }
            }
            _ => return None,
        })
    }

    proptest! {
        /// Faster or slower, software or hardware, busy high, low or unmeasured, sweeps in any
        /// order: every sentence printed is true of the numbers.
        #[test]
        fn every_printed_claim_holds(
            cpu in proptest::option::of(run()),
            gpus in proptest::collection::vec(run(), 0..3),
            (cpu_sweep, gpu_sweep) in sweep_and_cpu(),
        ) {
            let gpus: Vec<RunFigures> = gpus.into_iter().enumerate().map(|(i, g)| RunFigures { name: format!("gpu{i}"), ..g }).collect();
            let sweeps: Vec<SweepFigures> = gpus.iter().map(|g| SweepFigures { name: g.name.clone(), points: gpu_sweep.clone() }).collect();
            let claims = verdict(cpu.as_ref(), &gpus, &cpu_sweep, &sweeps);
            claims.audit(|c| oracle(cpu.as_ref(), &gpus, &cpu_sweep, &sweeps, c)).map_err(TestCaseError::fail)?;
            prop_assert!(claims.has_summary(), "an empty summary for {cpu:?} {gpus:?}");
            // With a CPU run, each GPU gets its comparison and its reason, and its cost where
            // both finished an epoch.
            if let Some(cpu) = &cpu {
                for g in &gpus {
                    let costed = usize::from(g.epochs > 0 && cpu.epochs > 0);
                    prop_assert_eq!(claims.printed().filter(|c| c.subject == g.name && c.part == gpulab_systems::report::Part::Summary).count(), 2 + costed);
                }
            }
        }
    }
}
