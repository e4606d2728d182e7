//! Exercise 3: the same model, data and seed trained in FP32, FP16 with a GradScaler, and BF16
//! (autocast: 16-bit matmuls, f32 master weights and loss), then an underflow demonstration:
//! FP16 with tiny gradients, without and with loss scaling.

use super::common::{self, MEMORY_CATEGORIES, mib, peak, percent};
use super::settings::{self, Settings, Value};
use super::sink::{Event, Sink, TrainBridge};
use super::{Exercise, Preset};
use crate::common::report_for;
use gpulab_core::device::Engine;
use gpulab_core::error::{Error, Result};
use gpulab_core::tensor::{MemCategory, prelude::*};
use gpulab_core::with_backend;
use gpulab_systems::data::Dataset;
use gpulab_systems::nn::{AmpConfig, OptimizerKind, Precision};
use gpulab_systems::report::{Cell, Chart, ChartKind, Column, Figure, Metadata, Provenance, Report, Series, Table, Verdict};
use gpulab_systems::train::{self, TrainConfig, TrainEvent, TrainReport, TrainSink};

pub struct PrecisionLab;

// The categories mixed precision changes.
/// One training run and what it gave.
struct Run {
    label: String,
    amp: AmpConfig,
    result: std::result::Result<TrainReport, String>,
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
            .add("underflow_demo", "Underflow demo", "Also train FP16 on tiny gradients, without and with loss scaling", Value::Bool(true))
            .add("demo_loss_exponent", "Demo loss weight (power of 2)", "The demo multiplies the loss by 2^this (and the SGD learning rate by its inverse, so FP32 trains exactly as before), making every gradient tiny", settings::int(-24, -40, 0))
            .add("demo_epochs", "Demo epochs", "Epochs of each underflow-demo run", settings::int(2, 1, 100));
        // Batch 256: activations outweigh the parameters' extra 16-bit copy, so FP16's peak
        // memory is ≈ 0.64× FP32's by the ledger (at batch 32 the copy ate most of the saving).
        super::sizing::settings(common::model_setting(common::training_settings(s, "digits", &[128, 64], 256, 10)))
    }

    fn presets(&self) -> Vec<Preset> {
        super::sizing::presets(
            "The lesson's small model on digits",
            (
                "A 2048-wide MLP at batch 256 on 64×64 colour shapes: matmuls large enough for 16-bit arithmetic and memory to matter",
                &[("batch", "256"), ("epochs", "2"), ("demo_epochs", "1")],
            ),
            (
                "The model sized from the backend's measured FP32 peak (cached per adapter) so the comparison takes about 30 s of arithmetic anywhere",
                &[("batch", "256"), ("demo_epochs", "1"), ("target_s", "30")],
            ),
        )
    }

    fn validate(&self, s: &Settings) -> Result<()> {
        s.one_device("backend")?;
        precisions(s)?;
        super::sizing::validate(s)?;
        common::validate_training(s)
    }

    fn run(&self, s: &Settings, sink: &mut dyn Sink) -> Result<Report> {
        self.validate(s)?;
        let device = s.one_device("backend")?;
        let data = common::load_dataset(s)?;
        let demo_passes = if s.bool("underflow_demo")? { 3.0 * s.int("demo_epochs")? as f64 } else { 0.0 };
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
            for (p, scaling) in [(Precision::F32, false), (Precision::F16, false), (Precision::F16, true)] {
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
        let mut curve = Curve { bridge: TrainBridge { sink: &mut *sink, series: label.clone(), total_steps: 0 }, loss: Vec::new() };
        let r = train::train(b, data, &cfg, &mut curve);
        (r, curve.loss)
    });
    if let Err(e) = &result {
        sink.emit(Event::Log(format!("{label}: {e}")));
    }
    Run { label, amp, result: result.map_err(|e| e.to_string()), loss }
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

    report.verdict = verdict(runs, demo, weight);
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
    report.notes.push(format!(
        "Autocast policy: matmuls forward and backward take 16-bit operands and sum in f32; the weights are kept in f32 and the optimizer's pass rounds each updated weight into its 16-bit copy; softmax, loss, bias-gradient sums and the optimizer run in f32. On a GPU the 16-bit matmul is the plain or the register-blocked kernel, whichever measured faster on that adapter. On this CPU, bf16 matmuls: {}; f16 matmuls: {}.",
        gpulab_core::device::Bf16Path::detect().name(),
        gpulab_core::device::cpu::f16_path_name()
    ));
    if !demo.is_empty() {
        report.notes.push(format!(
            "Underflow demo setup: the loss is multiplied by {weight:e} (2^{}), which makes every gradient that small — as a small loss weight or a loss averaged over many elements would; the SGD learning rate is divided by the same factor, so FP32 trains exactly as with weight 1. Gradients below about 6e-8 cannot be stored in FP16 and become zero.",
            s.int("demo_loss_exponent").unwrap_or(-24)
        ));
    }
    report
}

fn verdict(runs: &[Run], demo: &[Run], weight: f32) -> Verdict {
    let mut v = Verdict::default();
    let mut summary = Vec::new();
    let fp32 = runs.iter().find(|r| r.amp.precision == Precision::F32).and_then(|r| r.ok());
    for run in runs.iter().filter(|r| r.amp.precision != Precision::F32) {
        let Some(r) = run.ok() else {
            if let Err(e) = &run.result {
                summary.push(format!("{} could not run here: {e}.", run.label));
            }
            continue;
        };
        let Some(base) = fp32 else { continue };
        let speed = r.samples_per_s / base.samples_per_s.max(1e-12);
        let saved = base.memory.total_peak as f64 - r.memory.total_peak as f64;
        let act = |t: &TrainReport| peak(&t.memory, MemCategory::Activations) + peak(&t.memory, MemCategory::Inputs);
        let d_acc = (r.final_val_accuracy - base.final_val_accuracy) * 100.0;
        let pace = if speed > 1.05 {
            format!("{speed:.2}× FP32's throughput — faster")
        } else if speed < 0.95 {
            format!("{speed:.2}× FP32's throughput — slower")
        } else {
            format!("{speed:.2}× FP32's throughput — no faster")
        };
        summary.push(format!(
            "{}: {pace}, {:.1} KiB {} peak memory, accuracy {} ({d_acc:+.2} points).",
            run.label,
            saved.abs() / 1024.0,
            if saved >= 0.0 { "less" } else { "more" },
            percent(r.final_val_accuracy),
        ));
        v.evidence.push(format!(
            "{}: activations and inputs peaked at {:.1} KiB against FP32's {:.1} KiB ({:.0}% of FP32's: 16-bit hidden activations, while logits and the loss stay f32); parameters at {:.1} KiB against {:.1} KiB (FP32 master weights plus a 16-bit working copy).",
            run.label,
            act(r) as f64 / 1024.0,
            act(base) as f64 / 1024.0,
            100.0 * act(r) as f64 / (act(base) as f64).max(1.0),
            peak(&r.memory, MemCategory::Parameters) as f64 / 1024.0,
            peak(&base.memory, MemCategory::Parameters) as f64 / 1024.0
        ));
        // What is known to slow the 16-bit path on this backend, from the run's own facts.
        let mut costs: Vec<&str> = Vec::new();
        if r.backend.kind == gpulab_core::tensor::BackendKind::Cpu {
            if run.amp.precision == Precision::BF16 && gpulab_core::device::Bf16Path::detect() != gpulab_core::device::Bf16Path::Widen {
                costs.push("this CPU multiplies bf16 natively, but every matmul first packs both operands into bf16 pairs and every activation is rounded to 16 bits, passes FP32 does not make");
            } else {
                costs.push("the CPU backend widens these 16-bit operands to f32 for its GEMM (no native kernel for them on this CPU), so 16 bits save memory but not arithmetic");
            }
        } else {
            costs.push("the 16-bit matmul (plain or register-blocked, whichever measured faster on this adapter) unpacks two 16-bit values from each u32, while FP32 runs the f32 kernel chosen for this adapter");
            if r.backend.software {
                costs.push("a software GPU has no fast 16-bit arithmetic (it runs on your CPU)");
            }
        }
        if run.amp.scaling() {
            costs.push("the GradScaler adds an unscale-and-check pass per gradient and one scaler-update kernel per step (no read-back: the skip is decided on the device)");
        }
        let verb = if speed > 1.05 { "faster despite" } else { "not faster; known costs" };
        v.evidence.push(format!(
            "{}: measured {:.0} samples/s against FP32's {:.0} — {verb}: {}.",
            run.label,
            r.samples_per_s,
            base.samples_per_s,
            costs.join("; ")
        ));
    }
    let by = |p: Precision, scaling: bool| {
        demo.iter().find(|r| r.amp.precision == p && r.amp.scaling() == scaling).and_then(|r| r.ok().map(|t| (r, t)))
    };
    if let (Some((plain, tp)), Some((scaled, ts))) = (by(Precision::F16, false), by(Precision::F16, true)) {
        let path = |r: &Run| match (r.loss.first(), r.loss.last()) {
            (Some(a), Some(b)) => format!("went from {:.3} to {:.3}", a[1], b[1]),
            _ => "was not logged".into(),
        };
        let (fp, fs) = (flushed(tp).unwrap_or(0.0), flushed(ts).unwrap_or(0.0));
        summary.push(format!(
            "Underflow: with gradients scaled by {weight:e}, FP16 without scaling flushed {fp:.1}% of its nonzero gradient elements to zero and its loss {}; with the GradScaler {fs:.1}% flushed and the loss {}.",
            path(plain),
            path(scaled)
        ));
        v.evidence.push(format!(
            "Demo accuracy: FP16 unscaled {}, FP16 + GradScaler {}.",
            percent(tp.final_val_accuracy),
            percent(ts.final_val_accuracy)
        ));
        if let Some((_, t32)) = by(Precision::F32, false) {
            v.evidence.push(format!(
                "Demo FP32 reference (weight 1 and the plain learning rate: the same updates): accuracy {}.",
                percent(t32.final_val_accuracy)
            ));
        }
    }
    if summary.is_empty() {
        summary.push("No run finished; see the status column.".into());
    }
    v.summary = summary.join(" ");
    v
}
