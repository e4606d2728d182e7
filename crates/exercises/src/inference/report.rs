//! Exercise 8's tables, charts, figures and verdict, all from the runs' measured numbers.

use super::InferenceBatching;
use super::runs::RunResult;
use super::verdict::{ServeRun, claims};
use crate::common::report_for;
use crate::common::{MEMORY_CATEGORIES, peak};
use crate::cost::{self, Price};
use crate::settings::Settings;
use crate::settings::inference::Config;
use gpulab_core::tensor::MemoryReport;
use gpulab_systems::report::{Cell, Chart, Column, Figure, Metadata, Provenance, Report, Series, Table};
use gpulab_systems::serve::HostModel;
use gpulab_systems::serve::loadgen::Arrivals;

/// Everything the run measured.
pub struct Measured {
    pub model: HostModel,
    pub statics: Vec<RunResult>,
    pub dynamics: Vec<RunResult>,
    /// Requests/s of the static run at max batch (the load levels' 100%).
    pub capacity: f64,
    pub inference_mem: MemoryReport,
    pub training_mem: MemoryReport,
    /// The batch both memory ledgers were taken at (the dynamic policy's max batch).
    pub memory_batch: usize,
}

fn busy_col() -> Column {
    Column::num("GPU busy", "%", 1, Provenance::derived("GPU timestamp queries over the run's wall time"))
}

pub fn static_table(runs: &[RunResult]) -> Table {
    let columns = vec![
        Column::num("batch", "", 0, Provenance::Measured),
        Column::num("throughput", "requests/s", 0, Provenance::Measured),
        Column::num("p50", "ms", 2, Provenance::Measured),
        Column::num("p99", "ms", 2, Provenance::Measured),
        Column::num("batch time", "ms", 3, Provenance::Measured),
        busy_col(),
        Column::num("requests", "", 0, Provenance::Measured),
    ];
    let rows = runs
        .iter()
        .map(|r| {
            vec![
                Cell::Num(r.policy.max_batch as f64),
                r.summary.throughput_per_s.into(),
                r.summary.p50_ms.into(),
                r.summary.p99_ms.into(),
                r.batch_ms().into(),
                r.gpu_busy().map(|b| b * 100.0).into(),
                Cell::Num(r.summary.ok as f64),
            ]
        })
        .collect();
    Table { title: "Static batching".into(), columns, rows }
}

pub(super) fn offered(r: &RunResult) -> f64 {
    match r.arrivals {
        Arrivals::Open { rate_per_s } => rate_per_s,
        Arrivals::Closed { .. } => f64::NAN,
    }
}

pub(super) fn meets(r: &RunResult, slo_ms: f64) -> bool {
    !r.overloaded() && r.summary.ok > 0 && r.summary.p99_ms <= slo_ms
}

pub fn dynamic_table(runs: &[RunResult], slo_ms: f64) -> Table {
    let columns = vec![
        Column::text("run"),
        Column::num("offered", "requests/s", 0, Provenance::derived("the capacity measured with static batches × the load level")),
        Column::num("served", "requests/s", 0, Provenance::Measured),
        Column::num("p50", "ms", 2, Provenance::Measured),
        Column::num("p95", "ms", 2, Provenance::Measured),
        Column::num("p99", "ms", 2, Provenance::Measured),
        Column::num("mean batch", "", 2, Provenance::derived("samples / batches run")),
        Column::num("queue wait", "ms", 2, Provenance::Measured),
        Column::num("max queue", "requests", 0, Provenance::Measured),
        Column::num("refused", "", 0, Provenance::Measured),
        busy_col(),
        Column::text(&format!("p99 ≤ {slo_ms} ms")),
    ];
    let rows = runs
        .iter()
        .map(|r| {
            let verdict = if r.overloaded() {
                "overloaded"
            } else if meets(r, slo_ms) {
                "yes"
            } else {
                "no"
            };
            vec![
                r.label.clone().into(),
                offered(r).into(),
                r.summary.throughput_per_s.into(),
                r.summary.p50_ms.into(),
                r.summary.p95_ms.into(),
                r.summary.p99_ms.into(),
                r.mean_batch().into(),
                r.summary.mean_queue_wait_ms.into(),
                Cell::Num(r.max_depth as f64),
                Cell::Num((r.summary.rejected + r.summary.unanswered) as f64),
                r.gpu_busy().map(|b| b * 100.0).into(),
                verdict.into(),
            ]
        })
        .collect();
    Table { title: "Dynamic batching sweep".into(), columns, rows }
}

fn memory_table(m: &Measured) -> Table {
    let ledger = || Provenance::derived("gpulab's allocation ledger (peak bytes)");
    let mut columns = vec![Column::text("category")];
    columns.extend([Column::num("inference", "KiB", 1, ledger()), Column::num("training", "KiB", 1, ledger())]);
    let mut rows: Vec<Vec<Cell>> = MEMORY_CATEGORIES
        .iter()
        .map(|&c| {
            vec![c.name().into(), Cell::Num(peak(&m.inference_mem, c) as f64 / 1024.0), Cell::Num(peak(&m.training_mem, c) as f64 / 1024.0)]
        })
        .collect();
    rows.push(vec![
        "total".into(),
        Cell::Num(m.inference_mem.total_peak as f64 / 1024.0),
        Cell::Num(m.training_mem.total_peak as f64 / 1024.0),
    ]);
    Table { title: "Memory: inference vs training (same batch)".into(), columns, rows }
}

fn charts(m: &Measured, slo_ms: f64) -> Vec<Chart> {
    let mut curve = Chart {
        targets: vec![(slo_ms, format!("p99 SLO {} ms", gpulab_core::format::number(slo_ms)))],
        ..Chart::line("latency_throughput", "Latency against throughput", "served (requests/s)", "latency (ms)")
    };
    for (name, pick) in [("dynamic p50", 0), ("dynamic p99", 1)] {
        let points =
            m.dynamics.iter().map(|r| [r.summary.throughput_per_s, if pick == 0 { r.summary.p50_ms } else { r.summary.p99_ms }]).collect();
        curve.series.push(Series { name: name.into(), points, provenance: Provenance::Measured });
    }
    curve.series.push(Series {
        name: "static p99".into(),
        points: m.statics.iter().map(|r| [r.summary.throughput_per_s, r.summary.p99_ms]).collect(),
        provenance: Provenance::Measured,
    });
    let mut sizes = Chart::bars("formed_batches", "Formed batch sizes (dynamic runs)", "batch size", "requests");
    for r in &m.dynamics {
        sizes.series.push(Series {
            name: r.label.clone(),
            points: r.summary.batch_sizes.iter().map(|(b, n)| [*b as f64, *n as f64]).collect(),
            provenance: Provenance::Measured,
        });
    }
    vec![curve, sizes]
}

pub fn build(ex: &InferenceBatching, s: &Settings, c: &Config, meta: Metadata, m: Measured, stopped_early: bool) -> Report {
    let slo = c.slo_p99_ms;
    let mut figures = Vec::new();
    let b1 = m.statics.iter().find(|r| r.policy.max_batch == 1);
    let best = m.dynamics.iter().filter(|r| meets(r, slo)).max_by(|a, b| a.summary.throughput_per_s.total_cmp(&b.summary.throughput_per_s));
    if let Some(b1) = b1 {
        figures.push(Figure {
            label: "batch-1 throughput (saturated)".into(),
            value: b1.summary.throughput_per_s,
            unit: "requests/s".into(),
            provenance: Provenance::Measured,
        });
    }
    if let Some(r) = best {
        figures.push(Figure {
            label: format!("best throughput with p99 ≤ {slo} ms"),
            value: r.summary.throughput_per_s,
            unit: "requests/s".into(),
            provenance: Provenance::Measured,
        });
        if let Some(b1) = b1 {
            let ratio = r.summary.throughput_per_s / b1.summary.throughput_per_s.max(1e-9);
            figures.push(Figure {
                label: "dynamic / batch-1 throughput".into(),
                value: ratio,
                unit: "×".into(),
                provenance: Provenance::derived("the two measured throughputs"),
            });
        }
    }
    let (inf, tr) = (m.inference_mem.total_peak, m.training_mem.total_peak);
    figures.push(Figure {
        label: "inference memory / training memory".into(),
        value: inf as f64 / (tr as f64).max(1.0),
        unit: "×".into(),
        provenance: Provenance::derived("gpulab's allocation ledger"),
    });
    let kind = meta.backends.first().map_or(gpulab_core::tensor::BackendKind::Cpu, |b| b.kind);
    let price = c.price.read(kind).unwrap_or_else(|e| Price { usd_per_hour: f64::NAN, label: e.to_string() });
    let statics: Vec<ServeRun> = m.statics.iter().map(|r| ServeRun::of(r, slo, &price)).collect();
    let dynamics: Vec<ServeRun> = m.dynamics.iter().map(|r| ServeRun::of(r, slo, &price)).collect();
    let v = claims(&statics, &dynamics, slo, (inf, tr, m.memory_batch)).verdict();
    if let Some(r) = best.map(|r| ServeRun::of(r, slo, &price)) {
        figures.push(Figure {
            label: format!("cost per prediction, most served with p99 ≤ {slo} ms"),
            value: r.usd_per_1000 / 1000.0,
            unit: "USD per prediction".into(),
            provenance: price.provenance("1 ÷ measured throughput"),
        });
    }
    let mut tables = vec![
        static_table(&m.statics),
        dynamic_table(&m.dynamics, slo),
        cost_table(statics.iter().chain(&dynamics), &price),
        memory_table(&m),
    ];
    tables.retain(|t| !t.rows.is_empty());
    let mut report = Report { figures, tables, charts: charts(&m, slo), verdict: v, stopped_early, ..report_for(ex, s, meta) };
    report.notes.push(format!("Model {} ({}), {}. Requests go in-process into the server's batcher and inference thread (the HTTP layer is measured by `gpulab loadgen`). The static runs keep 2 × batch requests outstanding (closed loop); the dynamic runs' arrival times are generated (Poisson, seeded); every latency is measured from the scheduled arrival.", m.model.version, m.model.arch.describe(), m.model.source));
    report.notes.push(format!("Capacity (the load levels' 100%) is the measured static throughput: {:.0} requests/s.", m.capacity));
    report.notes.push(format!(
        "{} A server is paid for by the hour whether busy or not, so a run at a light load costs more per prediction than the same server kept full.",
        cost::note(&[&price])
    ));
    report.note_software_backends();
    report
}

/// What each run's predictions cost: the assumed price of an hour ÷ the requests served in it.
fn cost_table<'a>(runs: impl Iterator<Item = &'a ServeRun> + Clone, price: &Price) -> Table {
    let each: Vec<f64> = runs.clone().map(|r| r.usd_per_1000 / 1000.0).collect();
    let (col, k) = cost::money_column("cost", "prediction", &each, price.provenance("1 ÷ measured throughput"));
    Table {
        title: format!("Cost per prediction (assumed price: {})", price.label),
        columns: vec![Column::text("run"), Column::num("throughput", "requests/s", 0, Provenance::Measured), col],
        rows: runs.map(|r| vec![Cell::from(r.label.clone()), r.throughput.into(), (r.usd_per_1000 / 1000.0 * k).into()]).collect(),
    }
}
