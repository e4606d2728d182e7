//! Exercise 3: the same model, data and seed trained in FP32, FP16 with a GradScaler, and BF16
//! (autocast: 16-bit matmuls, f32 master weights and loss), then an underflow demonstration:
//! FP16 with tiny gradients, without and with loss scaling.

use super::common::{self, MEMORY_CATEGORIES, mib, peak, percent};
use super::cost::{self, Price, RunCost};
use super::settings::{self, Settings, Value};
use super::sink::{Event, Sink, TrainBridge};
use super::{Exercise, Preset};
use crate::common::report_for;
use gpulab_core::device::Engine;
use gpulab_core::device::gpu::tuning::Matmul16Variant;
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::{BackendKind, MemCategory, prelude::*};
use gpulab_core::with_backend;
use gpulab_systems::data::Dataset;
use gpulab_systems::nn::{AmpConfig, OptimizerKind, Precision};
use gpulab_systems::report::{Cell, Chart, ChartKind, Claims, Column, Figure, Metadata, Provenance, Report, Series, Table};
use gpulab_systems::train::{self, TrainConfig, TrainEvent, TrainReport, TrainSink};

pub struct PrecisionLab;

// The categories mixed precision changes.
/// One training run and what it gave.
struct Run {
    label: String,
    amp: AmpConfig,
    result: std::result::Result<TrainReport, String>,
    /// The matmul kernel that ran it (`matmul_path`).
    path: MatmulPath,
    /// (step, mean training loss over the read-back window): measured.
    loss: Vec<[f64; 2]>,
}

impl Run {
    fn ok(&self) -> Option<&TrainReport> {
        self.result.as_ref().ok()
    }
}

/// Forwards to the exercise sink and keeps the loss curve for the report.
struct Curve<'a> {
    bridge: TrainBridge<'a>,
    loss: Vec<[f64; 2]>,
}

impl TrainSink for Curve<'_> {
    fn event(&mut self, ev: TrainEvent) {
        if let TrainEvent::Progress { step, loss, .. } = &ev {
            self.loss.push([*step as f64, *loss]);
        }
        self.bridge.event(ev);
    }
    fn stop_requested(&self) -> bool {
        self.bridge.stop_requested()
    }
}

/// How each 16-bit run's speed-up over FP32 is labelled, after the run's name.
const SPEEDUP: &str = "speed-up over FP32";

impl Exercise for PrecisionLab {
    fn id(&self) -> &'static str {
        "precision"
    }
    fn number(&self) -> u32 {
        3
    }
    fn title(&self) -> &'static str {
        "FP32 vs FP16/BF16 mixed precision"
    }
    fn lesson(&self) -> &'static str {
        include_str!("../../../lessons/03-mixed-precision.md")
    }
    fn quick_run(&self) -> &'static [(&'static str, &'static str)] {
        &[("backend", "cpu"), ("epochs", "1"), ("hidden", "32"), ("demo_epochs", "1")]
    }

    fn live_charts(&self) -> Vec<super::LiveChartSpec> {
        common::training_live_charts()
    }
    /// FP16's speed-up over FP32 (else the first 16-bit run's).
    fn key_figure<'r>(&self, report: &'r Report) -> Option<&'r Figure> {
        let speedups = || report.figures.iter().filter(|f| f.label.ends_with(SPEEDUP));
        speedups().find(|f| f.label.starts_with("fp16")).or_else(|| speedups().next()).or(report.figures.first())
    }
    fn settings(&self) -> Settings {
        let s = common::one_backend(Settings::default())
            .add("precisions", "Precisions", "Which to compare, in order: fp32, fp16 (with a GradScaler), bf16 (unscaled)", Value::Text("fp32,fp16,bf16".into()))
            .add("init_scale", "Initial loss scale", "GradScaler's starting scale (PyTorch: 65536). Try 1e10 to watch overflow steps being skipped", settings::float(65536.0, 1.0, 1e30))
            .add("growth_interval", "Growth interval", "Finite steps before the scale doubles (PyTorch: 2000)", settings::int(2000, 1, 1_000_000))
            .add("underflow_demo", "Underflow demo", "Also train on tiny gradients: FP16 without and with loss scaling, and BF16 without a scaler", Value::Bool(true))
            .add("demo_loss_exponent", "Demo loss weight (power of 2)", "The demo multiplies the loss by 2^this (and the SGD learning rate by its inverse, so FP32 trains exactly as before), making every gradient tiny", settings::int(-24, -40, 0))
            .add("demo_epochs", "Demo epochs", "Epochs of each underflow-demo run", settings::int(2, 1, 100));
        let s = cost::price_setting(s);
        // Batch 256: activations outweigh the parameters' extra 16-bit copy, so FP16's peak
        // memory is ≈ 0.64× FP32's by the ledger (at batch 32 the copy ate most of the saving).
        // The first run sizes the model from the backend's peak, so the matmuls are large enough
        // for 16-bit arithmetic to pay where the hardware has it.
        super::sizing::settings_with(common::model_setting(common::training_settings(s, "digits", &[128, 64], 256, 10)), "auto", 10.0)
    }

    fn presets(&self) -> Vec<Preset> {
        let mut p = super::sizing::presets(
            "The defaults: the hidden layers sized from the backend's measured FP32 peak (cached per adapter) so that the comparison takes about 10 s of arithmetic, with matmuls large enough for 16-bit arithmetic to pay where the hardware has it",
            (
                "A 2048-wide MLP at batch 256 on 64×64 colour shapes: matmuls large enough for 16-bit arithmetic and memory to matter",
                &[("batch", "256"), ("epochs", "2"), ("demo_epochs", "1")],
            ),
            (
                "The model sized from the backend's measured FP32 peak (cached per adapter) on 64×64 colour shapes, so the comparison takes about 30 s of arithmetic anywhere",
                &[("batch", "256"), ("demo_epochs", "1"), ("target_s", "30")],
            ),
        );
        p.insert(1, super::sizing::too_small_preset("The digits model with its hidden layers as set (128, 64): matmuls too small for 16-bit arithmetic to pay off on any backend"));
        p
    }

    fn validate(&self, s: &Settings) -> Result<()> {
        s.one_device("backend")?;
        precisions(s)?;
        cost::validate(s, "price_per_hour")?;
        super::sizing::validate(s)?;
        common::validate_training(s)
    }

    fn run(&self, s: &Settings, sink: &mut dyn Sink) -> Result<Report> {
        self.validate(s)?;
        let device = s.one_device("backend")?;
        let data = common::load_dataset(s)?;
        let demo_passes = if s.bool("underflow_demo")? { DEMO_RUNS.len() as f64 * s.int("demo_epochs")? as f64 } else { 0.0 };
        let (resolved, sizing) = super::sizing::resolve(s, &device, &data, precisions(s)?.len() as f64, demo_passes, sink)?;
        let s = &resolved;
        let base = common::train_config(s, s.int("batch")? as usize)?;
        let scaler = |mut amp: AmpConfig| -> Result<AmpConfig> {
            amp.scaler.init_scale = s.float("init_scale")? as f32;
            amp.scaler.growth_interval = s.int("growth_interval")? as u32;
            Ok(amp)
        };

        sink.emit(Event::Phase(format!("opening {device}")));
        let mut engine = device.open(None)?;
        let info = with_backend!(&mut engine, b => b.info());
        let mut meta = Metadata::new(base.seed);
        meta.dataset = format!("{} — {}", data.name, data.source);
        meta.hyperparameters = s.to_map();
        meta.hyperparameters.insert("architecture".into(), common::architecture(s, &data)?);
        meta.precision = precisions(s)?.iter().map(|p| p.name()).collect::<Vec<_>>().join(", ");
        meta.backends.push(info.clone());

        let mut runs = Vec::new();
        for p in precisions(s)? {
            if sink.stop_requested() {
                break;
            }
            let amp = scaler(AmpConfig::new(p))?;
            let cfg = TrainConfig { amp, ..base.clone() };
            runs.push(train_one(&mut engine, &data, cfg, amp.label(), sink));
            sink.emit(Event::Table(comparison_table(&runs)));
        }

        let mut demo = Vec::new();
        if s.bool("underflow_demo")? && !sink.stop_requested() {
            let weight = 2f32.powi(s.int("demo_loss_exponent")? as i32);
            let demo_cfg =
                TrainConfig { epochs: s.int("demo_epochs")? as usize, optimizer: OptimizerKind::Sgd, lr: base.lr / weight, ..base.clone() };
            for (p, scaling) in DEMO_RUNS {
                if sink.stop_requested() {
                    break;
                }
                // The FP32 reference trains with weight 1 and the plain learning rate: the same
                // updates exactly, since λ·(lr/λ) = lr.
                let (amp, cfg, label) = if p == Precision::F32 {
                    (
                        AmpConfig::default(),
                        TrainConfig { lr: base.lr, ..demo_cfg.clone() },
                        "demo: fp32 (weight 1, same updates)".to_string(),
                    )
                } else {
                    let amp = AmpConfig { grad_scaling: scaling, loss_weight: weight, ..scaler(AmpConfig::new(p))? };
                    (amp, demo_cfg.clone(), format!("demo: {}", amp.label()))
                };
                demo.push(train_one(&mut engine, &data, TrainConfig { amp, ..cfg }, label, sink));
                sink.emit(Event::Table(demo_table(&demo)));
            }
        }

        let stopped_early = sink.stop_requested();
        if runs.iter().all(|r| r.result.is_err()) && !stopped_early {
            let why: Vec<String> = runs.iter().filter_map(|r| r.result.as_ref().err().map(|e| format!("{}: {e}", r.label))).collect();
            return Err(Error::InvalidConfig(format!("no precision could train: {}", why.join("; "))));
        }
        let mut report = build_report(self, s, meta, &runs, &demo, stopped_early);
        super::sizing::annotate(sizing.as_ref(), &mut report);
        Ok(report)
    }
}

/// The underflow demo's runs: the FP32 reference, FP16 without and with the GradScaler, and BF16
/// without one (its range is FP32's: the demo shows it needs no scaler).
const DEMO_RUNS: [(Precision, bool); 4] =
    [(Precision::F32, false), (Precision::F16, false), (Precision::F16, true), (Precision::BF16, false)];

fn precisions(s: &Settings) -> Result<Vec<Precision>> {
    let list: Vec<Precision> = s.text("precisions")?.split(',').map(|p| p.trim().parse()).collect::<Result<_>>()?;
    if list.is_empty() {
        return Err(Error::InvalidConfig("precisions: name at least one of fp32, fp16, bf16".into()));
    }
    Ok(list)
}

fn train_one(engine: &mut Engine, data: &Dataset, cfg: TrainConfig, label: String, sink: &mut dyn Sink) -> Run {
    sink.emit(Event::Phase(format!("training in {label}")));
    let amp = cfg.amp;
    let (result, loss) = with_backend!(engine, b => {
        b.reset_memory_peaks();
        let mut curve = Curve { bridge: TrainBridge::new(&mut *sink, label.clone()), loss: Vec::new() };
        let r = train::train(b, data, &cfg, &mut curve);
        (r, curve.loss)
    });
    if let Err(e) = &result {
        sink.emit(Event::Log(format!("{label}: {e}")));
    }
    let path = matmul_path(engine, amp.precision);
    Run { label, amp, result: result.map_err(|e| e.to_string()), loss, path }
}

/// How a run's matmuls ran on this backend: the kernel, and whether it has fast 16-bit
/// arithmetic (tensor cores through cuBLAS or a cooperative-matrix kernel, or the CPU's native
/// bf16 instructions) rather than 16-bit storage multiplied in f32.
#[derive(Clone, Debug, PartialEq)]
struct MatmulPath {
    kind: BackendKind,
    software: bool,
    /// The 16-bit (or, for FP32, the f32) GEMM, in words.
    kernel: String,
    /// The f32 GEMM FP32 runs on this backend, in words.
    f32_kernel: String,
    fast16: bool,
}

fn matmul_path(engine: &mut Engine, p: Precision) -> MatmulPath {
    let info = with_backend!(&mut *engine, b => b.info());
    let (kernel, f32_kernel, fast16) = match engine {
        Engine::Cpu(cpu) => {
            let f32k = "the CPU's f32 GEMM (the gemm crate)".to_string();
            match p {
                Precision::F32 => (f32k.clone(), f32k, false),
                Precision::BF16 => (
                    format!("the CPU's bf16 GEMM: {}", cpu.bf16_path().name()),
                    f32k,
                    cpu.bf16_path() != gpulab_core::device::Bf16Path::Widen,
                ),
                Precision::F16 => (format!("the CPU's f16 GEMM: {}", gpulab_core::device::cpu::f16_path_name()), f32k, false),
            }
        }
        Engine::Gpu(g) => {
            let f32k = format!("the {} f32 matmul (chosen for this adapter)", g.matmul_variant().name());
            match p.dtype16() {
                None => (f32k.clone(), f32k, false),
                Some(dt) => match g.matmul16_variant(dt) {
                    Ok(v) => {
                        let of: Vec<&str> = g.matmul16_variants(dt).iter().map(|x| x.name()).collect();
                        (
                            format!("the {} 16-bit matmul (the fastest of {} on this adapter)", v.label(), of.join(", ")),
                            f32k,
                            v == Matmul16Variant::Coop && !info.software,
                        )
                    }
                    Err(e) => (format!("no 16-bit matmul ({e})"), f32k, false),
                },
            }
        }
        Engine::Cuda(_) => {
            let f32k = "cuBLAS's f32 GEMM".to_string();
            if p == Precision::F32 {
                (f32k.clone(), f32k, false)
            } else {
                ("cuBLAS's 16-bit GEMM (tensor cores where the GPU has them)".into(), f32k, true)
            }
        }
    };
    MatmulPath { kind: info.kind, software: info.software, kernel, f32_kernel, fast16 }
}

fn ledger() -> Provenance {
    Provenance::derived("gpulab's allocation ledger (peak bytes)")
}

fn flushed(r: &TrainReport) -> Option<f64> {
    r.amp.as_ref().map(|a| a.flushed_fraction() * 100.0)
}

fn comparison_table(runs: &[Run]) -> Table {
    let mut columns = vec![Column::text("precision"), Column::text("status")];
    columns.extend([
        Column::num("train time", "s", 3, Provenance::Measured),
        Column::num("throughput", "samples/s", 0, Provenance::Measured),
        Column::num("median step", "ms", 3, Provenance::Measured),
    ]);
    columns.extend(MEMORY_CATEGORIES.iter().map(|c| Column::num(c.name(), "KiB", 1, ledger())));
    columns.extend([
        Column::num("total peak", "MiB", 3, ledger()),
        Column::num("validation accuracy", "%", 2, Provenance::Measured),
        Column::num("gradients flushed to zero", "%", 3, Provenance::Measured),
        Column::num("skipped steps", "", 0, Provenance::Measured),
        Column::num("final loss scale", "", 0, Provenance::Measured),
    ]);
    let rows = runs
        .iter()
        .map(|run| {
            let mut row: Vec<Cell> = vec![run.label.clone().into()];
            match &run.result {
                Ok(r) => {
                    row.push(if r.stopped_early { "stopped" } else { "ok" }.into());
                    row.extend([r.train_wall_s.into(), r.samples_per_s.into(), r.median_step_ms.into()]);
                    row.extend(MEMORY_CATEGORIES.iter().map(|c| Cell::Num(peak(&r.memory, *c) as f64 / 1024.0)));
                    row.extend([mib(r.memory.total_peak).into(), (r.final_val_accuracy * 100.0).into(), flushed(r).into()]);
                    let a = r.amp.as_ref();
                    row.push(a.filter(|_| run.amp.scaling()).map(|a| a.skipped_steps.len() as f64).into());
                    row.push(a.and_then(|a| a.scale_history.last()).map(|s| s[1]).into());
                }
                Err(e) => {
                    row.push(format!("unavailable: {e}").into());
                    row.extend(std::iter::repeat_n(Cell::Empty, columns.len() - 2));
                }
            }
            row
        })
        .collect();
    Table { title: "Precisions".into(), columns, rows }
}

fn savings_table(runs: &[Run]) -> Option<Table> {
    let fp32 = runs.iter().find(|r| r.amp.precision == Precision::F32)?.ok()?;
    let mut columns = vec![Column::text("precision")];
    columns.extend(
        MEMORY_CATEGORIES
            .iter()
            .map(|c| Column::num(c.name(), "KiB", 1, Provenance::derived("FP32 peak − this run's peak, from the ledger"))),
    );
    columns.push(Column::num("total", "KiB", 1, Provenance::derived("FP32 peak − this run's peak, from the ledger")));
    let rows = runs
        .iter()
        .filter(|r| r.amp.precision != Precision::F32)
        .filter_map(|run| {
            let r = run.ok()?;
            let mut row: Vec<Cell> = vec![run.label.clone().into()];
            row.extend(MEMORY_CATEGORIES.iter().map(|c| Cell::Num((peak(&fp32.memory, *c) as f64 - peak(&r.memory, *c) as f64) / 1024.0)));
            row.push(Cell::Num((fp32.memory.total_peak as f64 - r.memory.total_peak as f64) / 1024.0));
            Some(row)
        })
        .collect();
    Some(Table { title: "Bytes saved vs FP32 (negative = more)".into(), columns, rows })
}

fn demo_table(demo: &[Run]) -> Table {
    let columns = vec![
        Column::text("run"),
        Column::text("status"),
        Column::num("loss weight", "", 10, Provenance::derived("the demo's setting")),
        Column::num("first logged loss", "", 4, Provenance::Measured),
        Column::num("last logged loss", "", 4, Provenance::Measured),
        Column::num("gradients flushed to zero", "%", 3, Provenance::Measured),
        Column::num("validation accuracy", "%", 2, Provenance::Measured),
    ];
    let rows = demo
        .iter()
        .map(|run| {
            let mut row: Vec<Cell> = vec![run.label.clone().into()];
            match &run.result {
                Ok(r) => {
                    row.extend(["ok".into(), (run.amp.loss_weight as f64).into()]);
                    row.push(run.loss.first().map(|p| p[1]).into());
                    row.push(run.loss.last().map(|p| p[1]).into());
                    row.extend([flushed(r).into(), (r.final_val_accuracy * 100.0).into()]);
                }
                Err(e) => {
                    row.push(format!("unavailable: {e}").into());
                    row.extend(std::iter::repeat_n(Cell::Empty, columns.len() - 2));
                }
            }
            row
        })
        .collect();
    Table { title: "Underflow demonstration".into(), columns, rows }
}

fn chart(id: &str, title: &str, x: &str, y: &str, kind: ChartKind) -> Chart {
    Chart { id: id.into(), title: title.into(), x_label: x.into(), y_label: y.into(), kind, log_x: false, series: vec![], markers: vec![] }
}

fn loss_chart(id: &str, title: &str, runs: &[Run]) -> Chart {
    let mut c = chart(id, title, "step", "training loss (window mean)", ChartKind::Line);
    c.series = runs
        .iter()
        .filter(|r| r.ok().is_some())
        .map(|r| Series { name: r.label.clone(), points: r.loss.clone(), provenance: Provenance::Measured })
        .collect();
    c
}

fn build_report(ex: &PrecisionLab, s: &Settings, meta: Metadata, runs: &[Run], demo: &[Run], stopped_early: bool) -> Report {
    let mut report = Report { stopped_early, ..report_for(ex, s, meta) };
    report.tables.push(comparison_table(runs));
    report.tables.extend(savings_table(runs));
    let weight = 2f32.powi(s.int("demo_loss_exponent").unwrap_or(-24) as i32);
    if !demo.is_empty() {
        report.tables.push(demo_table(demo));
    }

    report.charts.push(loss_chart("loss", "Training loss, same model, data and seed", runs));
    let mut scale = chart("loss_scale", "GradScaler loss scale (markers: skipped overflow steps)", "step", "loss scale", ChartKind::Line);
    for r in runs.iter().chain(demo) {
        if let Some(a) = r.ok().and_then(|t| t.amp.as_ref()).filter(|a| !a.scale_history.is_empty()) {
            scale.series.push(Series { name: r.label.clone(), points: a.scale_history.clone(), provenance: Provenance::Measured });
            scale.markers.extend(a.skipped_steps.iter().map(|&st| (st as f64, format!("{}: skipped", r.label))));
        }
    }
    report.charts.push(scale);
    let mut memory = chart("memory", "Peak memory by category (x: run in table order)", "run", "KiB", ChartKind::Bars);
    let trained: Vec<(usize, &TrainReport)> = runs.iter().filter_map(|r| r.ok()).enumerate().collect();
    for c in MEMORY_CATEGORIES {
        memory.series.push(Series {
            name: c.name().into(),
            points: trained.iter().map(|(i, r)| [*i as f64, peak(&r.memory, c) as f64 / 1024.0]).collect(),
            provenance: ledger(),
        });
    }
    report.charts.push(memory);
    if !demo.is_empty() {
        report.charts.push(loss_chart("underflow_loss", "Underflow demo: FP16 on tiny gradients", demo));
    }

    // Costs: each run's measured training time × the assumed price of the backend's hour.
    let kind = report.metadata.backends.first().map_or(BackendKind::Cpu, |b| b.kind);
    let price = cost::read(s, "price_per_hour", kind).unwrap_or_else(|e| Price { usd_per_hour: f64::NAN, label: e.to_string() });
    let priced: Vec<RunCost> = runs
        .iter()
        .filter_map(|r| r.ok().map(|t| RunCost { name: r.label.clone(), price: &price, train_s: t.train_wall_s, epochs: t.epochs.len() }))
        .collect();
    if !priced.is_empty() {
        report.tables.push(cost::training_table(&priced));
        report.notes.push(cost::note(&[&price]));
    }
    report.verdict = verdict(&figures_of(runs, &price), &figures_of(demo, &price), weight).verdict();
    if let Some(fp32) = runs.iter().find(|r| r.amp.precision == Precision::F32).and_then(|r| r.ok()) {
        report.figures.push(Figure {
            label: "FP32 throughput".into(),
            value: fp32.samples_per_s,
            unit: "samples/s".into(),
            provenance: Provenance::Measured,
        });
    }
    for r in runs.iter().filter(|r| r.amp.precision != Precision::F32) {
        if let Some(t) = r.ok() {
            report.figures.push(Figure {
                label: format!("{} throughput", r.label),
                value: t.samples_per_s,
                unit: "samples/s".into(),
                provenance: Provenance::Measured,
            });
        }
    }
    // Each 16-bit run's speed-up over FP32, the figure that compares across machines.
    if let Some(fp32) = runs.iter().find(|r| r.amp.precision == Precision::F32).and_then(|r| r.ok()) {
        for r in runs.iter().filter(|r| r.amp.precision != Precision::F32) {
            if let Some(t) = r.ok() {
                let d = Provenance::derived("the two measured throughputs");
                report.figures.push(Figure {
                    label: format!("{} {SPEEDUP}", r.label),
                    value: t.samples_per_s / fp32.samples_per_s.max(1e-12),
                    unit: "×".into(),
                    provenance: d,
                });
            }
        }
    }
    report.note_software_backends();
    let kernels: Vec<String> = runs.iter().filter(|r| r.ok().is_some()).map(|r| format!("{}: {}", r.label, r.path.kernel)).collect();
    report.notes.push(format!(
        "Autocast policy: matmuls forward and backward take 16-bit operands and sum in f32; the weights are kept in f32 and the optimizer's pass rounds each updated weight into its 16-bit copy; softmax, loss, bias-gradient sums and the optimizer run in f32. The matmuls of each run here ran on: {}.",
        kernels.join("; ")
    ));
    if !demo.is_empty() {
        report.notes.push(format!(
            "Underflow demo setup: the loss is multiplied by {weight:e} (2^{}), which makes every gradient that small — as a small loss weight or a loss averaged over many elements would; the SGD learning rate is divided by the same factor, so FP32 trains exactly as with weight 1. Gradients below about 6e-8 cannot be stored in FP16 and become zero.",
            s.int("demo_loss_exponent").unwrap_or(-24)
        ));
    }
    report
}

/// One run's numbers, as the verdict reads them.
#[derive(Clone, Debug, PartialEq)]
struct RunFigures {
    label: String,
    precision: Precision,
    scaling: bool,
    /// The run's result: its numbers, or why it could not run.
    result: std::result::Result<Trained, String>,
    path: MatmulPath,
}

#[derive(Clone, Debug, PartialEq)]
struct Trained {
    samples_per_s: f64,
    total_peak: u64,
    /// Peak bytes of activations and inputs, and of parameters (the ledger).
    act_bytes: u64,
    param_bytes: u64,
    val_accuracy: f64,
    /// Share of gradient elements flushed to zero (%), of a 16-bit run.
    flushed: Option<f64>,
    /// The first and last logged training loss.
    loss: Option<(f64, f64)>,
    /// US dollars per finished epoch at the assumed price; None before an epoch finished.
    usd_per_epoch: Option<f64>,
}

fn figures_of(runs: &[Run], price: &Price) -> Vec<RunFigures> {
    runs.iter()
        .map(|r| RunFigures {
            label: r.label.clone(),
            precision: r.amp.precision,
            scaling: r.amp.scaling(),
            result: r
                .result
                .as_ref()
                .map(|t| Trained {
                    samples_per_s: t.samples_per_s,
                    total_peak: t.memory.total_peak,
                    act_bytes: peak(&t.memory, MemCategory::Activations) + peak(&t.memory, MemCategory::Inputs),
                    param_bytes: peak(&t.memory, MemCategory::Parameters),
                    val_accuracy: t.final_val_accuracy,
                    flushed: flushed(t),
                    loss: r.loss.first().zip(r.loss.last()).map(|(a, b)| (a[1], b[1])),
                    usd_per_epoch: (!t.epochs.is_empty()).then(|| price.usd(t.train_wall_s) / t.epochs.len() as f64),
                })
                .map_err(Clone::clone),
            path: r.path.clone(),
        })
        .collect()
}

/// The conditions the verdict's sentences assert (the property test re-checks each one).
mod cond {
    pub const CANNOT_SHOW: &str = "16-bit runs finished, none on a path with fast 16-bit arithmetic";
    pub const FAILED: &str = "this run could not train";
    pub const FASTER: &str = "over 1.05× FP32's throughput";
    pub const SLOWER: &str = "under 0.95× FP32's throughput";
    pub const SAME: &str = "within 5% of FP32's throughput";
    pub const LESS_MEMORY: &str = "a lower total peak than FP32's";
    pub const NOT_LESS_MEMORY: &str = "a total peak not below FP32's";
    pub const LESS_ACTIVATION: &str = "activations and inputs peaked below FP32's";
    pub const NOT_LESS_ACTIVATION: &str = "activations and inputs did not peak below FP32's";
    pub const MORE_PARAMETERS: &str = "parameters peaked above FP32's";
    pub const FASTER_DESPITE: &str = "faster than FP32 by over 5%";
    pub const NOT_FASTER: &str = "not faster than FP32 by over 5%";
    pub const ONLY_FP32: &str = "only FP32 finished";
    pub const NO_FP32: &str = "16-bit runs finished, FP32 did not";
    pub const NONE: &str = "no run finished";
    pub const BF16_KEPT: &str = "the BF16 demo run flushed under 1% of its gradient elements";
    pub const BF16_FLUSHED: &str = "the BF16 demo run flushed 1% or more of its gradient elements";
    pub const CHEAPER: &str = "a lower cost per epoch than FP32's";
    pub const NOT_CHEAPER: &str = "a cost per epoch not below FP32's";
}

/// Below this share of gradient elements flushed, the BF16 demo run "needs no scaler".
const BF16_KEPT_PERCENT: f64 = 1.0;

/// Why 16-bit arithmetic cannot pay off on a run's path, where it cannot.
fn no_fast_path(p: &MatmulPath) -> String {
    match p.kind {
        BackendKind::Cpu => format!("the CPU backend multiplies these 16-bit operands as f32 ({})", p.kernel),
        _ if p.software => "a software GPU has no fast 16-bit arithmetic (it runs on your CPU)".into(),
        _ => format!("{} stores 16-bit values but multiplies them in f32", p.kernel),
    }
}

fn verdict(runs: &[RunFigures], demo: &[RunFigures], weight: f32) -> Claims {
    use gpulab_systems::report::Part::{Evidence, Summary};
    let mut c = Claims::new();
    let ok16: Vec<&RunFigures> = runs.iter().filter(|r| r.precision != Precision::F32 && r.result.is_ok()).collect();
    let mut why: Vec<String> = ok16.iter().map(|r| no_fast_path(&r.path)).collect();
    why.dedup();
    c.summary(
        cond::CANNOT_SHOW,
        !ok16.is_empty() && ok16.iter().all(|r| !r.path.fast16),
        format!(
            "This backend cannot show 16-bit arithmetic paying off: {}. What 16 bits do to memory still shows below; on a GPU with fast 16-bit arithmetic (tensor cores through a CUDA build, or an adapter with cooperative matrices), the \"big enough for a GPU\" preset shows 16-bit training outrun FP32.",
            why.join("; ")
        ),
    );
    let fp32 = runs.iter().find(|r| r.precision == Precision::F32).and_then(|r| r.result.as_ref().ok());
    for run in runs.iter().filter(|r| r.precision != Precision::F32) {
        c.about(&run.label);
        let r = match &run.result {
            Ok(r) => r,
            Err(e) => {
                c.summary(cond::FAILED, true, format!("{} could not run here: {e}.", run.label));
                continue;
            }
        };
        let Some(base) = fp32 else { continue };
        let speed = r.samples_per_s / base.samples_per_s.max(1e-12);
        let saved = base.total_peak as f64 - r.total_peak as f64;
        let d_acc = (r.val_accuracy - base.val_accuracy) * 100.0;
        let pace = |word: &str| format!("{}: {speed:.2}× FP32's throughput — {word}.", run.label);
        c.one_of(
            Summary,
            vec![
                (cond::FASTER, speed > 1.05, pace("faster")),
                (cond::SLOWER, speed < 0.95, pace("slower")),
                (cond::SAME, (0.95..=1.05).contains(&speed), pace("no faster")),
            ],
        );
        let memory = |word: &str| {
            format!(
                "It held {:.1} KiB {word} peak memory, with accuracy {} ({d_acc:+.2} points).",
                saved.abs() / 1024.0,
                percent(r.val_accuracy)
            )
        };
        c.one_of(Summary, vec![(cond::LESS_MEMORY, saved > 0.0, memory("less")), (cond::NOT_LESS_MEMORY, saved <= 0.0, memory("more"))]);
        if let (Some(a), Some(b)) = (r.usd_per_epoch, base.usd_per_epoch) {
            let at = format!("At the assumed hourly price an epoch cost {} against FP32's {}", cost::usd_text(a), cost::usd_text(b));
            c.one_of(
                Summary,
                vec![
                    (cond::CHEAPER, a < b, format!("{at}: cheaper per epoch, since the same hour buys more epochs.")),
                    (cond::NOT_CHEAPER, a >= b, format!("{at}: no cheaper per epoch.")),
                ],
            );
        }
        let act = format!(
            "{}: activations and inputs peaked at {:.1} KiB against FP32's {:.1} KiB ({:.0}% of FP32's",
            run.label,
            r.act_bytes as f64 / 1024.0,
            base.act_bytes as f64 / 1024.0,
            100.0 * r.act_bytes as f64 / (base.act_bytes as f64).max(1.0)
        );
        c.one_of(
            Evidence,
            vec![
                (
                    cond::LESS_ACTIVATION,
                    r.act_bytes < base.act_bytes,
                    format!("{act}: 16-bit hidden activations, while logits and the loss stay f32)."),
                ),
                (cond::NOT_LESS_ACTIVATION, r.act_bytes >= base.act_bytes, format!("{act}).")),
            ],
        );
        let params = format!(
            "{}: parameters peaked at {:.1} KiB against FP32's {:.1} KiB",
            run.label,
            r.param_bytes as f64 / 1024.0,
            base.param_bytes as f64 / 1024.0
        );
        c.one_of(
            Evidence,
            vec![
                (
                    cond::MORE_PARAMETERS,
                    r.param_bytes > base.param_bytes,
                    format!("{params} (FP32 master weights plus a 16-bit working copy)."),
                ),
                (gpulab_systems::report::FACT, true, format!("{params}.")),
            ],
        );
        // How the 16-bit path runs on this backend, from the run's own kernel choice.
        let p = &run.path;
        let mut how: Vec<String> = Vec::new();
        match p.kind {
            BackendKind::Cpu if p.fast16 => how.push(format!("{}, but every matmul first packs both operands into bf16 pairs and every activation is rounded to 16 bits, passes FP32 does not make", p.kernel)),
            BackendKind::Cpu => how.push(format!("{}: 16 bits save memory but not arithmetic", p.kernel)),
            BackendKind::Cuda => how.push(format!("{}, against {} for FP32; gpulab's own kernels round each activation to 16 bits", p.kernel, p.f32_kernel)),
            BackendKind::Gpu if p.fast16 => how.push(format!("{}, against {} for FP32", p.kernel, p.f32_kernel)),
            BackendKind::Gpu => how.push(format!("{}, which unpacks two 16-bit values from each u32 and multiplies in f32, against {} for FP32", p.kernel, p.f32_kernel)),
        }
        if p.software {
            how.push("a software GPU has no fast 16-bit arithmetic (it runs on your CPU)".into());
        }
        if run.scaling {
            how.push("the GradScaler adds an unscale-and-check pass per gradient and one scaler-update kernel per step (no read-back: the skip is decided on the device)".into());
        }
        let measured = format!("{}: measured {:.0} samples/s against FP32's {:.0}", run.label, r.samples_per_s, base.samples_per_s);
        c.one_of(
            Evidence,
            vec![
                (cond::FASTER_DESPITE, speed > 1.05, format!("{measured} — faster; how the 16-bit path runs here: {}.", how.join("; "))),
                (cond::NOT_FASTER, speed <= 1.05, format!("{measured} — not faster; how the 16-bit path runs here: {}.", how.join("; "))),
            ],
        );
    }
    c.about("");
    let by =
        |p: Precision, scaling: bool| demo.iter().find(|r| r.precision == p && r.scaling == scaling).and_then(|r| r.result.as_ref().ok());
    let path = |t: &Trained| match t.loss {
        Some((a, b)) => format!("went from {a:.3} to {b:.3}"),
        None => "was not logged".into(),
    };
    if let (Some(tp), Some(ts)) = (by(Precision::F16, false), by(Precision::F16, true)) {
        c.fact(
            Summary,
            format!(
                "Underflow: with gradients scaled by {weight:e}, FP16 without scaling flushed {:.1}% of its nonzero gradient elements to zero and its loss {}; with the GradScaler {:.1}% flushed and the loss {}.",
                tp.flushed.unwrap_or(0.0),
                path(tp),
                ts.flushed.unwrap_or(0.0),
                path(ts)
            ),
        );
        c.fact(
            Evidence,
            format!("Demo accuracy: FP16 unscaled {}, FP16 + GradScaler {}.", percent(tp.val_accuracy), percent(ts.val_accuracy)),
        );
        if let Some(t32) = by(Precision::F32, false) {
            c.fact(
                Evidence,
                format!(
                    "Demo FP32 reference (weight 1 and the plain learning rate: the same updates): accuracy {}.",
                    percent(t32.val_accuracy)
                ),
            );
        }
    }
    if let Some(tb) = by(Precision::BF16, false)
        && let Some(flushed) = tb.flushed
    {
        c.fact(Evidence, format!("Demo accuracy: BF16 without a scaler {}.", percent(tb.val_accuracy)));
        c.one_of(
            Summary,
            vec![
                (
                    cond::BF16_KEPT,
                    flushed < BF16_KEPT_PERCENT,
                    format!(
                        "BF16 without any scaler flushed {flushed:.1}% and its loss {}: its 8 exponent bits are FP32's, so gradients this small stay representable and it needs no loss scaling (it pays in precision instead: 7 mantissa bits to FP16's 10).",
                        path(tb)
                    ),
                ),
                (
                    cond::BF16_FLUSHED,
                    flushed >= BF16_KEPT_PERCENT,
                    format!(
                        "BF16 without a scaler still flushed {flushed:.1}% of its gradient elements and its loss {}: at this loss weight some gradients fall below even its FP32-sized range.",
                        path(tb)
                    ),
                ),
            ],
        );
    }
    let any16 = runs.iter().any(|r| r.precision != Precision::F32 && r.result.is_ok());
    c.one_of(
        Summary,
        vec![
            (
                cond::ONLY_FP32,
                fp32.is_some() && !any16,
                fp32.map(|f| {
                    format!("Only FP32 trained ({:.0} samples/s); add fp16 or bf16 to the precisions to compare.", f.samples_per_s)
                })
                .unwrap_or_default(),
            ),
            (
                cond::NO_FP32,
                fp32.is_none() && any16,
                "FP32 did not train, so there is no baseline to compare the 16-bit runs with; add fp32 to the precisions.".into(),
            ),
            (cond::NONE, fp32.is_none() && !any16, "No run finished; see the status column.".into()),
        ],
    );
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpulab_systems::report::Claim;
    use proptest::prelude::*;

    fn path() -> impl Strategy<Value = MatmulPath> {
        (0..3usize, any::<bool>(), any::<bool>()).prop_map(|(k, software, fast16)| {
            let kind = [BackendKind::Cpu, BackendKind::Gpu, BackendKind::Cuda][k];
            MatmulPath { kind, software: software && kind == BackendKind::Gpu, kernel: "k16".into(), f32_kernel: "k32".into(), fast16 }
        })
    }

    fn trained() -> impl Strategy<Value = Trained> {
        (1.0f64..1e5, 1u64..1 << 30, 0u64..1 << 28, 0u64..1 << 28, 0.0f64..1.0, proptest::option::of(0.0f64..1.0)).prop_map(
            |(samples_per_s, total_peak, act_bytes, param_bytes, val_accuracy, usd_per_epoch)| Trained {
                samples_per_s,
                total_peak,
                act_bytes,
                param_bytes,
                val_accuracy,
                flushed: Some(1.0),
                loss: Some((2.3, 0.5)),
                usd_per_epoch,
            },
        )
    }

    fn run(precision: Precision) -> impl Strategy<Value = RunFigures> {
        (any::<bool>(), any::<bool>(), trained(), path()).prop_map(move |(ok, scaling, t, path)| RunFigures {
            label: format!("{}{}", precision.name(), if scaling { " + GradScaler" } else { "" }),
            precision,
            scaling: scaling && precision != Precision::F32,
            result: if ok { Ok(t) } else { Err("unsupported here".into()) },
            path,
        })
    }

    fn oracle(runs: &[RunFigures], demo: &[RunFigures], c: &Claim) -> Option<bool> {
        let bf16_flushed = || demo.iter().find(|r| r.precision == Precision::BF16)?.result.as_ref().ok()?.flushed;
        let ok = |r: &RunFigures| r.result.as_ref().ok().cloned();
        let base = runs.iter().find(|r| r.precision == Precision::F32).and_then(ok);
        let this = runs.iter().find(|r| r.label == c.subject);
        let t = || this.and_then(ok);
        let speed = || Some(t()?.samples_per_s / base.as_ref()?.samples_per_s);
        let done16: Vec<&RunFigures> = runs.iter().filter(|r| r.precision != Precision::F32 && r.result.is_ok()).collect();
        Some(match c.condition {
            cond::CANNOT_SHOW => !done16.is_empty() && done16.iter().all(|r| !r.path.fast16),
            cond::FAILED => this?.result.is_err(),
            cond::FASTER | cond::FASTER_DESPITE => speed()? > 1.05,
            cond::SLOWER => speed()? < 0.95,
            cond::SAME => (0.95..=1.05).contains(&speed()?),
            cond::NOT_FASTER => speed()? <= 1.05,
            cond::LESS_MEMORY => t()?.total_peak < base?.total_peak,
            cond::NOT_LESS_MEMORY => t()?.total_peak >= base?.total_peak,
            cond::LESS_ACTIVATION => t()?.act_bytes < base?.act_bytes,
            cond::NOT_LESS_ACTIVATION => t()?.act_bytes >= base?.act_bytes,
            cond::MORE_PARAMETERS => t()?.param_bytes > base?.param_bytes,
            cond::ONLY_FP32 => base.is_some() && done16.is_empty(),
            cond::NO_FP32 => base.is_none() && !done16.is_empty(),
            cond::NONE => base.is_none() && done16.is_empty(),
            cond::BF16_KEPT => bf16_flushed()? < 1.0,
            cond::BF16_FLUSHED => bf16_flushed()? >= 1.0,
            cond::CHEAPER => t()?.usd_per_epoch? < base?.usd_per_epoch?,
            cond::NOT_CHEAPER => t()?.usd_per_epoch? >= base?.usd_per_epoch?,
            _ => return None,
        })
    }

    proptest! {
        /// Faster or slower, more or less memory, fast 16-bit paths or none, runs that could not
        /// train: every sentence printed is true of the numbers.
        #[test]
        fn every_printed_claim_holds(
            fp32 in proptest::option::of(run(Precision::F32)),
            f16 in run(Precision::F16),
            bf16 in proptest::option::of(run(Precision::BF16)),
            demo_f16 in proptest::option::of((run(Precision::F16), run(Precision::F16), 0.0f64..100.0, 0.0f64..100.0)),
            demo_bf16 in proptest::option::of((run(Precision::BF16), 0.0f64..3.0)),
        ) {
            let runs: Vec<RunFigures> = fp32.into_iter().chain([f16]).chain(bf16).collect();
            // The demo's runs: FP16 unscaled and scaled, and BF16 flushing a little or more
            // than the "needs no scaler" line.
            let mut demo = Vec::new();
            let flush = |mut r: RunFigures, scaling: bool, share: f64| {
                r.scaling = scaling;
                if let Ok(t) = &mut r.result {
                    t.flushed = Some(share);
                }
                r
            };
            if let Some((plain, scaled, a, b)) = demo_f16 {
                demo.push(flush(plain, false, a));
                demo.push(flush(scaled, true, b));
            }
            if let Some((r, share)) = demo_bf16 {
                demo.push(flush(r, false, share));
            }
            let claims = verdict(&runs, &demo, 2f32.powi(-24));
            claims.audit(|c| oracle(&runs, &demo, c)).map_err(TestCaseError::fail)?;
            prop_assert!(claims.has_summary());
        }
    }
}
