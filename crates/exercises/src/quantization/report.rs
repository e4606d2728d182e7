//! Exercise 9's report: the side-by-side table, the calibration and per-layer tables, the
//! per-layer charts and a verdict computed from the measured numbers.

use super::measure::{BackendRun, GemmProbe, Kind};
use super::verdict::verdict;
use crate::common::{mib, peak};
use crate::cpu_vs_gpu::short_label;
use gpulab_core::stats::Spread;
use gpulab_core::tensor::MemCategory;
use gpulab_systems::report::{Cell, Chart, Column, Figure, Provenance, Report, Series, Table};

/// The ledger categories inference touches.
const CATEGORIES: [MemCategory; 4] = [MemCategory::Parameters, MemCategory::Activations, MemCategory::Inputs, MemCategory::Other];

fn ledger() -> Provenance {
    Provenance::derived("gpulab's allocation ledger (peak bytes while building the model and running the latency batch)")
}

/// A spread of seconds in a table's unit (`f` per second).
fn scaled(s: &Spread, f: f64) -> Spread {
    Spread { low: s.low * f, median: s.median * f, high: s.high * f, ..*s }
}

/// The unit, factor and decimals every time in `secs` is shown with (`format::time_unit`).
fn time_columns(secs: &[f64]) -> (&'static str, f64, usize) {
    // As `format::durations_as` prints them in the verdict.
    let (unit, f) = gpulab_core::format::time_unit(secs);
    (unit, f, gpulab_core::format::decimals_of(&secs.iter().map(|s| s * f).collect::<Vec<_>>()))
}

/// Every latency the comparison table shows (its unit and decimals follow from them).
pub(super) fn latency_secs(runs: &[BackendRun]) -> Vec<f64> {
    let measured = runs.iter().flat_map(|r| r.variants.iter().filter_map(|v| v.result.as_ref().ok()));
    measured.flat_map(|m| [m.latency1.median, m.latency_batch.median]).collect()
}

/// Every time the GEMM table shows.
pub(super) fn gemm_secs(runs: &[BackendRun]) -> Vec<f64> {
    runs.iter().filter_map(|r| r.gemm.as_ref()).flat_map(|g| [g.f32.median, g.int8.median]).collect()
}

pub fn comparison_table(runs: &[BackendRun], batch: usize) -> Table {
    let (unit, f, d) = time_columns(&latency_secs(runs));
    let mut columns = vec![Column::text("backend"), Column::text("model"), Column::text("kernel"), Column::text("status")];
    columns.push(Column::num("latency, batch 1 (median)", unit, d, Provenance::Measured));
    columns.extend(crate::noise::spread_columns("latency, batch 1", unit, d));
    columns.push(Column::num(&format!("latency, batch {batch} (median)"), unit, d, Provenance::Measured));
    columns.extend(crate::noise::spread_columns(&format!("latency, batch {batch}"), unit, d));
    columns.extend([
        Column::num(&format!("throughput, batch {batch}"), "samples/s", 0, Provenance::derived("batch / latency")),
        Column::num("weight bytes", "KiB", 1, Provenance::derived("the weight shapes × bytes per element (+ int8 scales)")),
    ]);
    columns.extend(CATEGORIES.iter().map(|c| Column::num(&format!("peak {}", c.name()), "KiB", 1, ledger())));
    columns.extend([
        Column::num("total peak", "MiB", 3, ledger()),
        Column::num("validation accuracy", "%", 2, Provenance::Measured),
        Column::num("same argmax as FP32", "%", 2, Provenance::Measured),
    ]);
    let mut rows = Vec::new();
    for r in runs {
        for v in &r.variants {
            let mut row: Vec<Cell> = vec![short_label(&r.info).into(), v.kind.label().into(), v.kernel.clone().into()];
            match &v.result {
                Ok(m) => {
                    row.push("ok".into());
                    row.push((m.latency1.median * f).into());
                    row.extend(crate::noise::spread_cells(Some(&scaled(&m.latency1, f))));
                    row.push((m.latency_batch.median * f).into());
                    row.extend(crate::noise::spread_cells(Some(&scaled(&m.latency_batch, f))));
                    row.extend([(batch as f64 / m.latency_batch.median).into(), (m.weight_bytes as f64 / 1024.0).into()]);
                    row.extend(CATEGORIES.iter().map(|c| Cell::Num(peak(&m.memory, *c) as f64 / 1024.0)));
                    row.extend([mib(m.memory.total_peak).into(), (m.accuracy * 100.0).into(), (m.agreement * 100.0).into()]);
                }
                Err(e) => {
                    row.push(format!("unavailable: {e}").into());
                    row.extend(std::iter::repeat_n(Cell::Empty, columns.len() - 4));
                }
            }
            rows.push(row);
        }
    }
    Table { title: "FP32 vs FP16 vs INT8".into(), columns, rows }
}

fn observer_table(runs: &[BackendRun], samples: usize) -> Table {
    let columns = vec![
        Column::text("backend"),
        Column::text("observer"),
        Column::text("activation ranges per layer input"),
        Column::num("validation accuracy", "%", 2, Provenance::Measured),
        Column::num("same argmax as FP32", "%", 2, Provenance::Measured),
    ];
    let rows = runs
        .iter()
        .flat_map(|r| {
            r.observers.iter().map(|o| {
                let ranges = o.ranges.iter().map(|v| format!("{v:.3}")).collect::<Vec<_>>().join(", ");
                vec![
                    short_label(&r.info).into(),
                    o.kind.name().into(),
                    ranges.into(),
                    (o.accuracy * 100.0).into(),
                    (o.agreement * 100.0).into(),
                ]
            })
        })
        .collect();
    Table { title: format!("Calibration observers ({samples} samples, static scales, per-channel weights)"), columns, rows }
}

fn layer_table(runs: &[BackendRun]) -> Table {
    let columns = vec![
        Column::text("backend"),
        Column::num("layer", "", 0, Provenance::derived("the model")),
        Column::text("weight shape"),
        Column::num("weight SQNR", "dB", 1, Provenance::derived("the f32 and dequantized int8 weights")),
        Column::num(
            "output SQNR",
            "dB",
            1,
            Provenance::derived("this layer's output with every layer int8 vs all f32, on up to 256 validation samples"),
        ),
        Column::num("max weight error", "", 6, Provenance::derived("max |w − q·s|")),
        Column::num(
            "max error / half step",
            "",
            3,
            Provenance::derived("max |w − q·s| / (s/2), each weight against its channel's scale: ≤ 1 is within half a step"),
        ),
        Column::num("accuracy, only this layer int8", "%", 2, Provenance::Measured),
    ];
    let rows = runs
        .iter()
        .flat_map(|r| {
            r.layers.iter().enumerate().map(|(i, l)| {
                vec![
                    short_label(&r.info).into(),
                    (i as f64).into(),
                    format!("{}×{}", l.shape[0], l.shape[1]).into(),
                    l.weight_sqnr.into(),
                    l.output_sqnr.into(),
                    l.max_weight_error.into(),
                    l.half_step_ratio.into(),
                    (l.only_this_accuracy * 100.0).into(),
                ]
            })
        })
        .collect();
    Table { title: "Per layer (INT8 static, per-channel)".into(), columns, rows }
}

fn chart(id: &str, title: &str, y: &str) -> Chart {
    Chart::line(id, title, "layer", y)
}

fn layer_charts(runs: &[BackendRun]) -> [Chart; 2] {
    let mut sqnr = chart("layer_sqnr", "SQNR per layer (higher = closer to FP32)", "SQNR (dB)");
    let mut sens = chart("layer_sensitivity", "Validation accuracy with only one layer in INT8", "accuracy (%)");
    for r in runs {
        let name = short_label(&r.info);
        let pts = |f: &dyn Fn(&super::measure::LayerRow) -> Option<f64>| {
            r.layers.iter().enumerate().filter_map(|(i, l)| f(l).map(|v| [i as f64, v])).collect::<Vec<_>>()
        };
        sqnr.series.push(Series {
            name: format!("{name}: layer output"),
            points: pts(&|l| l.output_sqnr),
            provenance: Provenance::derived("layer outputs, int8 vs f32"),
        });
        sqnr.series.push(Series {
            name: format!("{name}: weights"),
            points: pts(&|l| l.weight_sqnr),
            provenance: Provenance::derived("f32 vs dequantized weights"),
        });
        sens.series.push(Series {
            name: format!("{name}: only this layer int8"),
            points: pts(&|l| Some(l.only_this_accuracy * 100.0)),
            provenance: Provenance::Measured,
        });
        if let Some(f) = r.variant(Kind::F32) {
            sens.series.push(Series {
                name: format!("{name}: all FP32"),
                points: (0..r.layers.len()).map(|i| [i as f64, f.accuracy * 100.0]).collect(),
                provenance: Provenance::Measured,
            });
        }
    }
    [sqnr, sens]
}

/// The largest layer's GEMM alone in f32 and int8 per backend: median and middle half of the
/// timed runs, in one unit.
fn gemm_table(runs: &[BackendRun]) -> Option<Table> {
    let probes: Vec<(String, &GemmProbe)> = runs.iter().filter_map(|r| Some((short_label(&r.info), r.gemm.as_ref()?))).collect();
    let (unit, f, d) = time_columns(&gemm_secs(runs));
    let mut columns = vec![Column::text("backend"), Column::text("GEMM (m×k·k×n)"), Column::text("operands")];
    columns.push(Column::num("time (median)", unit, d, Provenance::Measured));
    columns.extend(crate::noise::spread_columns("time", unit, d));
    let mut rows = Vec::new();
    for (name, g) in &probes {
        let [m, k, n] = g.mkn;
        for (what, s) in [("f32", &g.f32), ("int8", &g.int8)] {
            let mut row: Vec<Cell> = vec![name.clone().into(), format!("{m}×{k}·{k}×{n}").into(), what.into(), (s.median * f).into()];
            row.extend(crate::noise::spread_cells(Some(&scaled(s, f))));
            rows.push(row);
        }
    }
    (!rows.is_empty()).then(|| Table { title: "Largest layer's GEMM alone".into(), columns, rows })
}

pub fn fill(report: &mut Report, runs: &[BackendRun], batch: usize, calib_samples: usize) {
    report.tables.push(comparison_table(runs, batch));
    report.tables.extend(gemm_table(runs));
    report.tables.push(observer_table(runs, calib_samples));
    report.tables.push(layer_table(runs));
    report.charts.extend(layer_charts(runs));
    for r in runs {
        if let (Some(f), Some(q)) = (r.variant(Kind::F32), r.variant(Kind::headline())) {
            let name = short_label(&r.info);
            let d = Provenance::derived("the measured latencies");
            report.figures.push(Figure {
                label: format!("{name}: INT8 / FP32 latency, batch {batch}"),
                value: q.latency_batch.median / f.latency_batch.median,
                unit: "×".into(),
                provenance: d.clone(),
            });
            report.figures.push(Figure {
                label: format!("{name}: INT8 / FP32 latency, batch 1"),
                value: q.latency1.median / f.latency1.median,
                unit: "×".into(),
                provenance: d,
            });
            // The largest layer's GEMM alone, which the verdict's "why" reads; its times are a table.
            if let Some(g) = &r.gemm {
                report.figures.push(Figure {
                    label: format!("{name}: largest layer's GEMM, INT8 / FP32 time"),
                    value: g.int8.median / g.f32.median,
                    unit: "×".into(),
                    provenance: Provenance::derived("the two measured GEMM times (medians)"),
                });
            }
            report.figures.push(Figure {
                label: format!("{name}: accuracy drop, FP32 to INT8"),
                value: (f.accuracy - q.accuracy) * 100.0,
                unit: "pp".into(),
                provenance: Provenance::derived("the measured accuracies"),
            });
        }
    }
    report.verdict = verdict(runs, batch);
}
