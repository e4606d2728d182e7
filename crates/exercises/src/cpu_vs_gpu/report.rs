//! Exercise 1's report: the training table, the charts and the figures, each number with its
//! provenance.

use super::run::Trained;
use super::verdict::{Point, RunFigures, SweepFigures, crossover, verdict};
use super::{CpuVsGpu, SPEED_RATIO, short_label};
use crate::common;
use crate::common::report_for;
use crate::cost::{self, Price, RunCost};
use crate::settings::Settings;
use crate::settings::cpu_vs_gpu::Config;
use gpulab_core::tensor::{BackendInfo, BackendKind};
use gpulab_systems::report::{Cell, Chart, Column, Figure, Metadata, Provenance, Report, Series, Table};
use gpulab_systems::train::TrainReport;

pub(super) fn training_table(trained: &[Trained]) -> Table {
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

pub(super) fn build_report(
    ex: &CpuVsGpu,
    s: &Settings,
    c: &Config,
    meta: Metadata,
    trained: &[Trained],
    sweep: &[(BackendInfo, Vec<Point>)],
    stopped_early: bool,
) -> Report {
    let mut report = Report { stopped_early, ..report_for(ex, s, meta) };
    report.tables.push(training_table(trained));

    // Sweep table: one row per size, one column per backend, plus GPU/CPU ratios.
    let cpu_points =
        sweep.iter().find(|(i, _)| i.kind == gpulab_core::tensor::BackendKind::Cpu).map(|(_, p)| p.clone()).unwrap_or_default();
    let gpus: Vec<&(BackendInfo, Vec<Point>)> = sweep.iter().filter(|(i, _)| i.kind != gpulab_core::tensor::BackendKind::Cpu).collect();
    // Each backend's median GFLOP/s and the middle half of its timed runs, which the verdict
    // judges "beats the CPU" by (`noise::judge`).
    let gflops = |name: &str| {
        let mut c = vec![Column::num(name, "GFLOP/s", 2, Provenance::derived("2n³ ÷ median measured time"))];
        c.extend(crate::noise::spread_columns(name, "GFLOP/s", 2));
        c
    };
    let mut columns = vec![Column::num("n", "", 0, Provenance::Measured)];
    columns.extend(gflops("CPU"));
    for (info, _) in &gpus {
        columns.extend(gflops(&short_label(info)));
        columns.push(Column::num(&format!("{} ÷ CPU", short_label(info)), "×", 3, Provenance::derived("the two GFLOP/s columns")));
    }
    let mut sizes: Vec<usize> = sweep.iter().flat_map(|(_, p)| p.iter().map(|(n, _)| *n)).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let at = |points: &[Point], n: usize| points.iter().find(|(m, _)| *m == n).map(|(_, g)| *g);
    let cells = |s: Option<gpulab_core::stats::Spread>| {
        let mut c = vec![s.map(|s| s.median).into()];
        c.extend(crate::noise::spread_cells(s.as_ref()));
        c
    };
    let rows = sizes
        .iter()
        .map(|&n| {
            let cpu = at(&cpu_points, n);
            let mut row = vec![Cell::Num(n as f64)];
            row.extend(cells(cpu));
            for (_, p) in &gpus {
                let g = at(p, n);
                row.extend(cells(g));
                row.push(g.zip(cpu).map(|(g, c)| g.median / c.median).into());
            }
            row
        })
        .collect();
    report.tables.push(Table { title: "Matmul sweep".into(), columns, rows });

    // Charts.
    let mut loss = Chart::line("loss", "Training loss", "step", "loss");
    let mut acc = Chart::line("val_accuracy", "Validation accuracy", "epoch", "accuracy (%)");
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
    let mut gflops = Chart::line("gflops", "Matmul throughput", "matrix size n", "GFLOP/s").log_x();
    for (info, p) in sweep {
        gflops.series.push(Series {
            name: short_label(info),
            points: p.iter().map(|(n, g)| [*n as f64, g.median]).collect(),
            provenance: Provenance::derived("2n³ ÷ median measured time"),
        });
    }

    // Costs: each run's measured training time × the assumed price of its backend.
    let price_of = |i: &BackendInfo| {
        let price = if i.kind == BackendKind::Cpu { &c.cpu_price } else { &c.price };
        price.read_for(i).unwrap_or_else(|_| Price { usd_per_hour: f64::NAN, label: format!("{} unreadable", price.key) })
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
