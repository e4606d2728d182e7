//! Exercise 3's report: the comparison, savings and underflow-demo tables, the charts and the
//! figures, each number with its provenance.

use super::run::Run;
use super::verdict::{figures_of, verdict};
use super::{PrecisionLab, SPEEDUP};
use crate::common::report_for;
use crate::common::{MEMORY_CATEGORIES, mib, peak};
use crate::cost::{self, Price, RunCost};
use crate::settings::Settings;
use crate::settings::precision::Config;
use gpulab_core::tensor::{BackendKind, MemCategory};
use gpulab_systems::nn::Precision;
use gpulab_systems::report::{Cell, Chart, ChartKind, Column, Figure, Metadata, Provenance, Report, Series, Table};
use gpulab_systems::train::TrainReport;

fn ledger() -> Provenance {
    Provenance::derived("gpulab's allocation ledger (peak bytes)")
}

pub(super) fn flushed(r: &TrainReport) -> Option<f64> {
    r.amp.as_ref().map(|a| a.flushed_fraction() * 100.0)
}

pub(super) fn comparison_table(runs: &[Run]) -> Table {
    let mut columns = vec![Column::text("precision"), Column::text("status")];
    columns
        .extend([Column::num("train time", "s", 3, Provenance::Measured), Column::num("throughput", "samples/s", 0, Provenance::Measured)]);
    columns.extend(crate::noise::spread_columns("epochs' throughput", "samples/s", 0));
    columns.push(Column::num("median step", "ms", 3, Provenance::Measured));
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
                    row.extend([r.train_wall_s.into(), r.samples_per_s.into()]);
                    row.extend(crate::noise::spread_cells(crate::noise::throughput_spread(r).as_ref()));
                    row.push(r.median_step_ms.into());
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

/// What 16-bit activations save: each run's activations and inputs together (the ledger's
/// peaks, the sum the verdict reads) and their share of FP32's.
fn activation_table(runs: &[Run]) -> Option<Table> {
    let act = |r: &TrainReport| (peak(&r.memory, MemCategory::Activations) + peak(&r.memory, MemCategory::Inputs)) as f64;
    let fp32 = act(runs.iter().find(|r| r.amp.precision == Precision::F32)?.ok()?);
    let columns = vec![
        Column::text("precision"),
        Column::num("activations + inputs", "KiB", 1, Provenance::derived("the ledger's activation and input peaks, summed")),
        Column::num("of FP32's", "%", 0, Provenance::derived("this run's activations + inputs ÷ FP32's")),
    ];
    let rows = runs
        .iter()
        .filter_map(|run| {
            let a = act(run.ok()?);
            Some(vec![run.label.clone().into(), Cell::Num(a / 1024.0), Cell::Num(100.0 * a / fp32.max(1.0))])
        })
        .collect();
    Some(Table { title: "Activation memory".into(), columns, rows })
}

pub(super) fn demo_table(demo: &[Run]) -> Table {
    let columns = vec![
        Column::text("run"),
        Column::text("status"),
        // No decimals: 1 prints as "1" and 5.96e-8 with its significant digits (`format::fixed`).
        Column::num("loss weight", "", 0, Provenance::derived("the demo's setting")),
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
    Chart { kind, ..Chart::line(id, title, x, y) }
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

pub(super) fn build_report(
    ex: &PrecisionLab,
    s: &Settings,
    c: &Config,
    meta: Metadata,
    runs: &[Run],
    demo: &[Run],
    stopped_early: bool,
) -> Report {
    let mut report = Report { stopped_early, ..report_for(ex, s, meta) };
    report.tables.push(comparison_table(runs));
    report.tables.extend(savings_table(runs));
    report.tables.extend(activation_table(runs));
    let weight = 2f32.powi(c.demo_loss_exponent as i32);
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
    let price = c.price.read(kind).unwrap_or_else(|e| Price { usd_per_hour: f64::NAN, label: e.to_string() });
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
            c.demo_loss_exponent
        ));
    }
    report
}
