//! Exercise 2's report: the results table, the memory and time charts and the figures, each
//! number with its provenance.

use super::run::Outcome;
use super::verdict::{BatchFigures, verdict};
use super::{BatchSweep, oom_ladder};
use crate::common::report_for;
use crate::common::{MEMORY_CATEGORIES, mib, peak};
use crate::settings::Settings;
use gpulab_systems::report::{Cell, Chart, Column, Figure, Metadata, Provenance, Report, Series, Table};
use gpulab_systems::train::TrainReport;

pub(super) fn results_table(outcomes: &[(u64, Outcome)]) -> Table {
    let ledger = || Provenance::derived("gpulab's allocation ledger (peak bytes)");
    let mut columns = vec![Column::num("batch", "", 0, Provenance::Measured), Column::text("status")];
    columns.extend(MEMORY_CATEGORIES.iter().map(|c| Column::num(c.name(), "KiB", 1, ledger())));
    columns.extend([Column::num("total peak", "MiB", 2, ledger()), Column::num("throughput", "samples/s", 0, Provenance::Measured)]);
    columns.extend(crate::noise::spread_columns("epochs' throughput", "samples/s", 0));
    columns.extend([
        Column::num("epoch time", "s", 3, Provenance::Measured),
        Column::num("steps", "", 0, Provenance::Measured),
        Column::num("validation accuracy", "%", 2, Provenance::Measured),
    ]);
    let rows = outcomes
        .iter()
        .map(|(batch, o)| {
            let mut row = vec![Cell::Num(*batch as f64)];
            match o {
                Outcome::Trained(r) => {
                    row.push(if r.stopped_early { "stopped" } else { "ok" }.into());
                    row.extend(MEMORY_CATEGORIES.iter().map(|c| Cell::Num(peak(&r.memory, *c) as f64 / 1024.0)));
                    let epoch_s = r.epochs.iter().map(|e| e.train_wall_s).sum::<f64>() / r.epochs.len().max(1) as f64;
                    row.extend([mib(r.memory.total_peak).into(), r.samples_per_s.into()]);
                    row.extend(crate::noise::spread_cells(crate::noise::throughput_spread(r).as_ref()));
                    row.extend([epoch_s.into(), Cell::Num(r.steps as f64), (r.final_val_accuracy * 100.0).into()]);
                }
                Outcome::OutOfMemory(m) => {
                    row.push(format!("OUT OF MEMORY: {m}").into());
                    row.extend(std::iter::repeat_n(Cell::Empty, MEMORY_CATEGORIES.len() + 7));
                }
                Outcome::Failed(m) => {
                    row.push(format!("failed: {m}").into());
                    row.extend(std::iter::repeat_n(Cell::Empty, MEMORY_CATEGORIES.len() + 7));
                }
            }
            row
        })
        .collect();
    Table { title: "Batch sizes".into(), columns, rows }
}

pub(super) fn build_report(
    ex: &BatchSweep,
    s: &Settings,
    meta: Metadata,
    outcomes: &[(u64, Outcome)],
    budget: Option<u64>,
    stopped_early: bool,
    ladder: Option<&(u64, Vec<oom_ladder::Rung>)>,
) -> Report {
    let trained: Vec<(u64, &TrainReport)> = outcomes
        .iter()
        .filter_map(|(b, o)| match o {
            Outcome::Trained(r) => Some((*b, r.as_ref())),
            _ => None,
        })
        .collect();
    let line = |id: &str, title: &str, y: &str| Chart::line(id, title, "batch size", y).log_x();
    let mut throughput = line("throughput", "Throughput", "samples/s");
    throughput.series.push(Series {
        name: "throughput".into(),
        points: trained.iter().map(|(b, r)| [*b as f64, r.samples_per_s]).collect(),
        provenance: Provenance::Measured,
    });
    let mut accuracy = line("accuracy_by_batch", "Validation accuracy after the epoch budget", "accuracy (%)");
    accuracy.series.push(Series {
        name: "validation accuracy".into(),
        points: trained.iter().map(|(b, r)| [*b as f64, r.final_val_accuracy * 100.0]).collect(),
        provenance: Provenance::Measured,
    });
    let mut memory = Chart::bars("memory", "Peak memory by category", "batch size", "KiB");
    for c in MEMORY_CATEGORIES {
        memory.series.push(Series {
            name: c.name().into(),
            points: trained.iter().map(|(b, r)| [*b as f64, peak(&r.memory, c) as f64 / 1024.0]).collect(),
            provenance: Provenance::derived("gpulab's allocation ledger"),
        });
    }
    if let Some(b) = budget {
        memory.markers.push((0.0, format!("budget {:.2} MiB", mib(b))));
    }

    let mut figures = Vec::new();
    if let Some((best_b, best)) = trained.iter().max_by(|a, b| a.1.samples_per_s.total_cmp(&b.1.samples_per_s)) {
        figures.push(Figure {
            label: format!("highest throughput (batch {best_b})"),
            value: best.samples_per_s,
            unit: "samples/s".into(),
            provenance: Provenance::Measured,
        });
    }
    let numbers: Vec<BatchFigures> = trained.iter().map(|(b, r)| BatchFigures::of(*b, r)).collect();
    let oom: Vec<(u64, String)> = outcomes
        .iter()
        .filter_map(|(b, o)| match o {
            Outcome::OutOfMemory(m) => Some((*b, m.clone())),
            _ => None,
        })
        .collect();
    let mut claims = verdict(&numbers, &oom, budget);
    let mut tables = vec![results_table(outcomes)];
    if let Some((batch, rungs)) = ladder {
        oom_ladder::claims(&mut claims, *batch, rungs);
        tables.push(oom_ladder::table(*batch, rungs));
    }
    let v = claims.verdict();

    let mut report =
        Report { figures, tables, charts: vec![throughput, accuracy, memory], verdict: v, stopped_early, ..report_for(ex, s, meta) };
    report.note_software_backends();
    if budget.is_some() {
        report.notes.push("The VRAM budget is simulated: gpulab's ledger refuses allocations beyond it, as a smaller GPU would.".into());
    }
    report
}
