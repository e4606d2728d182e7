//! Exercise 8's tables, charts, figures and verdict, all from the runs' measured numbers.

use super::InferenceBatching;
use super::runs::RunResult;
use crate::common::report_for;
use crate::common::{MEMORY_CATEGORIES, peak};
use crate::cost::{self, Price};
use crate::settings::Settings;
use gpulab_core::tensor::MemoryReport;
use gpulab_systems::report::{Cell, Chart, ChartKind, Claims, Column, Figure, Metadata, Provenance, Report, Series, Table};
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

fn offered(r: &RunResult) -> f64 {
    match r.arrivals {
        Arrivals::Open { rate_per_s } => rate_per_s,
        Arrivals::Closed { .. } => f64::NAN,
    }
}

fn meets(r: &RunResult, slo_ms: f64) -> bool {
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

fn charts(m: &Measured) -> Vec<Chart> {
    let mut curve = Chart {
        id: "latency_throughput".into(),
        title: "Latency against throughput".into(),
        x_label: "served (requests/s)".into(),
        y_label: "latency (ms)".into(),
        kind: ChartKind::Line,
        log_x: false,
        series: vec![],
        markers: vec![],
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
    let mut sizes = Chart {
        id: "formed_batches".into(),
        title: "Formed batch sizes (dynamic runs)".into(),
        x_label: "batch size".into(),
        y_label: "requests".into(),
        kind: ChartKind::Bars,
        log_x: false,
        series: vec![],
        markers: vec![],
    };
    for r in &m.dynamics {
        sizes.series.push(Series {
            name: r.label.clone(),
            points: r.summary.batch_sizes.iter().map(|(b, n)| [*b as f64, *n as f64]).collect(),
            provenance: Provenance::Measured,
        });
    }
    vec![curve, sizes]
}

pub fn build(ex: &InferenceBatching, s: &Settings, meta: Metadata, m: Measured, stopped_early: bool) -> Report {
    let slo = s.float("slo_p99_ms").unwrap_or(20.0);
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
    let price = cost::read(s, "price_per_hour", kind).unwrap_or_else(|e| Price { usd_per_hour: f64::NAN, label: e.to_string() });
    let statics: Vec<ServeRun> = m.statics.iter().map(|r| ServeRun::of(r, slo, &price)).collect();
    let dynamics: Vec<ServeRun> = m.dynamics.iter().map(|r| ServeRun::of(r, slo, &price)).collect();
    let v = claims(&statics, &dynamics, slo, (inf, tr, m.memory_batch)).verdict();
    if let Some(r) = best.map(|r| ServeRun::of(r, slo, &price)) {
        figures.push(Figure {
            label: format!("cost per 1,000 predictions, best setting with p99 ≤ {slo} ms"),
            value: r.usd_per_1000,
            unit: "USD".into(),
            provenance: price.provenance("1,000 ÷ measured throughput"),
        });
    }
    let mut tables = vec![
        static_table(&m.statics),
        dynamic_table(&m.dynamics, slo),
        cost_table(statics.iter().chain(&dynamics), &price),
        memory_table(&m),
    ];
    tables.retain(|t| !t.rows.is_empty());
    let mut report = Report { figures, tables, charts: charts(&m), verdict: v, stopped_early, ..report_for(ex, s, meta) };
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
    let d = cost::decimals(runs.clone().map(|r| r.usd_per_1000));
    Table {
        title: format!("Cost per 1,000 predictions (assumed price: {})", price.label),
        columns: vec![
            Column::text("run"),
            Column::num("throughput", "requests/s", 0, Provenance::Measured),
            Column::num("cost per 1,000 predictions", "USD", d, price.provenance("1,000 ÷ measured throughput")),
        ],
        rows: runs.map(|r| vec![Cell::from(r.label.clone()), r.throughput.into(), r.usd_per_1000.into()]).collect(),
    }
}

/// One serving run, as the verdict reads it.
#[derive(Clone, Debug, PartialEq)]
struct ServeRun {
    label: String,
    max_batch: usize,
    max_queue_delay_us: u64,
    /// Requests/s offered (open loop); None for a closed loop.
    offered: Option<f64>,
    throughput: f64,
    p99_ms: f64,
    mean_batch: f64,
    batch_ms: f64,
    max_depth: usize,
    refused: usize,
    overloaded: bool,
    meets_slo: bool,
    /// US dollars per 1,000 predictions served, at the assumed hourly price.
    usd_per_1000: f64,
}

impl ServeRun {
    fn of(r: &RunResult, slo_ms: f64, price: &Price) -> Self {
        ServeRun {
            label: r.label.clone(),
            max_batch: r.policy.max_batch,
            max_queue_delay_us: r.policy.max_queue_delay_us,
            offered: match r.arrivals {
                Arrivals::Open { rate_per_s } => Some(rate_per_s),
                Arrivals::Closed { .. } => None,
            },
            throughput: r.summary.throughput_per_s,
            p99_ms: r.summary.p99_ms,
            mean_batch: r.mean_batch(),
            batch_ms: r.batch_ms(),
            max_depth: r.max_depth,
            refused: r.summary.rejected + r.summary.unanswered,
            overloaded: r.overloaded(),
            meets_slo: meets(r, slo_ms),
            usd_per_1000: price.usd(1000.0 / r.summary.throughput_per_s),
        }
    }
}

/// The conditions the verdict's sentences assert (the property test re-checks each one).
mod cond {
    pub const FIXED_AND_GROWING: &str = "the largest static batch took longer than the smallest, with a positive fixed cost";
    pub const PROPORTIONAL: &str = "the largest static batch took longer than the smallest, with no positive fixed cost";
    pub const FLAT: &str = "the largest static batch took no longer than the smallest";
    pub const BEST: &str = "this run met the objective without overload, and no run that did served more";
    pub const NONE_MET: &str = "dynamic runs finished, none met the objective without overload";
    pub const NO_DYNAMIC: &str = "no dynamic run finished";
    pub const OVERLOADED: &str = "this run was overloaded";
    pub const FILLED: &str = "the mean formed batch grew from the lightest load to the heaviest";
    pub const NOT_FILLED: &str = "the mean formed batch did not grow from the lightest load to the heaviest";
    pub const LESS_THAN_TRAINING: &str = "serving held fewer bytes than training at the same batch";
    pub const NOT_LESS: &str = "serving held no fewer bytes than training at the same batch";
    pub const CHEAPER: &str = "the best setting's cost per 1,000 predictions below batch 1's";
    pub const NOT_CHEAPER: &str = "the best setting's cost per 1,000 predictions not below batch 1's";
}

/// The verdict: the batch-time model from the static runs, the best dynamic setting under the
/// objective, what overloaded, how the batcher filled batches, inference against training memory.
fn claims(statics: &[ServeRun], dynamics: &[ServeRun], slo: f64, (inf, tr, memory_batch): (u64, u64, usize)) -> Claims {
    use gpulab_systems::report::Part::{Evidence, Summary};
    let mut c = Claims::new();
    let b1 = statics.iter().find(|r| r.max_batch == 1);
    if let Some(b1) = b1 {
        c.fact(
            Evidence,
            format!(
                "Serving one request at a time saturated at {:.0} requests/s with p99 {:.2} ms; each batch took {:.3} ms.",
                b1.throughput, b1.p99_ms, b1.batch_ms
            ),
        );
    }
    // The smallest and largest static batch, whatever order static_batches gave.
    if let (Some(first), Some(last)) = (statics.iter().min_by_key(|r| r.max_batch), statics.iter().max_by_key(|r| r.max_batch))
        && first.max_batch != last.max_batch
    {
        let (b0, b1s) = (first.max_batch as f64, last.max_batch as f64);
        let (t0, t1) = (first.batch_ms, last.batch_ms);
        let slope = (t1 - t0) / (b1s - b0);
        let fixed = t0 - slope * b0;
        let took = format!("A batch of {} took {t0:.3} ms and one of {} took {t1:.3} ms", first.max_batch, last.max_batch);
        c.one_of(
            Evidence,
            vec![
                (
                    cond::FIXED_AND_GROWING,
                    t1 > t0 && fixed > 0.0,
                    format!(
                        "{took}: batch_time ≈ {fixed:.3} ms + {slope:.4} ms × B, so {:.0}% of a batch-{} request's time is the fixed cost.",
                        (fixed / t0.max(1e-9) * 100.0).min(100.0),
                        first.max_batch
                    ),
                ),
                (cond::PROPORTIONAL, t1 > t0 && fixed <= 0.0, format!("{took}: the batch time grew in proportion to B, with no fixed cost left to spread at these sizes, so batching buys little here.")),
                (cond::FLAT, t1 <= t0, format!("{took}: at these sizes the batch time did not grow with B — it is all fixed cost (dispatch, submit, read-back), so a fuller batch is nearly free.")),
            ],
        );
    }
    let best = dynamics.iter().filter(|r| r.meets_slo).max_by(|a, b| a.throughput.total_cmp(&b.throughput));
    if let Some(r) = best {
        c.about(&r.label).summary(
            cond::BEST,
            true,
            format!(
                "Best setting under the p99 ≤ {slo} ms objective: max batch {}, max queue delay {} µs at {:.0} requests/s (p99 {:.2} ms, mean batch {:.1}).",
                r.max_batch, r.max_queue_delay_us, r.throughput, r.p99_ms, r.mean_batch
            ),
        );
        if let Some(b1) = b1 {
            c.fact(Summary, format!("That is {:.1}× what batch-1 serving sustains.", r.throughput / b1.throughput.max(1e-9)));
            let at = format!(
                "At the assumed hourly price 1,000 predictions cost {} there against {} at batch 1",
                cost::usd_text(r.usd_per_1000),
                cost::usd_text(b1.usd_per_1000)
            );
            c.one_of(
                Summary,
                vec![
                    (cond::CHEAPER, r.usd_per_1000 < b1.usd_per_1000, format!("{at}: batching made each prediction cheaper.")),
                    (cond::NOT_CHEAPER, r.usd_per_1000 >= b1.usd_per_1000, format!("{at}: no cheaper.")),
                ],
            );
        }
        c.about("");
    }
    c.summary(
        cond::NONE_MET,
        best.is_none() && !dynamics.is_empty(),
        format!("No dynamic-batching run met p99 ≤ {slo} ms without overload; raise the objective, lower the load levels or the max queue delay."),
    );
    c.summary(cond::NO_DYNAMIC, dynamics.is_empty(), "No dynamic-batching run finished, so there is no setting to recommend.");
    if let Some(over) = dynamics.iter().find(|r| r.overloaded) {
        c.about(&over.label).summary(
            cond::OVERLOADED,
            true,
            format!(
                "At {} the queue grew ({} waiting at most, {} refused or unanswered): more arrived than the server could run.",
                over.label, over.max_depth, over.refused
            ),
        );
        c.about("");
    }
    // The lightest and the heaviest offered load, whatever order load_levels gave.
    let by_load = |a: &&ServeRun, b: &&ServeRun| a.offered.unwrap_or(0.0).total_cmp(&b.offered.unwrap_or(0.0));
    if let (Some(lo), Some(hi)) = (dynamics.iter().min_by(by_load), dynamics.iter().max_by(by_load))
        && lo.label != hi.label
    {
        let went = format!("Mean formed batch went from {:.1} at {} to {:.1} at {}", lo.mean_batch, lo.label, hi.mean_batch, hi.label);
        c.one_of(
            Evidence,
            vec![
                (cond::FILLED, hi.mean_batch > lo.mean_batch, format!("{went}: the batcher fills batches as traffic rises.")),
                (cond::NOT_FILLED, hi.mean_batch <= lo.mean_batch, format!("{went}: the batches did not fill up as traffic rose here.")),
            ],
        );
    }
    let held = format!(
        "Serving at batch {memory_batch} held {:.1} KiB against {:.1} KiB to train at the same batch",
        inf as f64 / 1024.0,
        tr as f64 / 1024.0
    );
    c.one_of(
        Evidence,
        vec![
            (cond::LESS_THAN_TRAINING, inf < tr, format!("{held}: no gradients, no optimizer state, no activation gradients.")),
            (cond::NOT_LESS, inf >= tr, format!("{held}.")),
        ],
    );
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpulab_systems::report::Claim;
    use proptest::prelude::*;

    fn run() -> impl Strategy<Value = ServeRun> {
        (
            // Batch 1 often, so the comparisons with batch-1 serving are exercised.
            (prop_oneof![Just(1usize), 1usize..64], proptest::option::of(1.0f64..1e4), 1.0f64..1e4, 0.1f64..100.0),
            (1.0f64..64.0, 0.01f64..10.0, 0usize..100, 0usize..3, any::<bool>(), any::<bool>()),
        )
            .prop_map(
                |((max_batch, offered, throughput, p99_ms), (mean_batch, batch_ms, max_depth, refused, overloaded, meets_slo))| ServeRun {
                    label: format!("run {max_batch} {:.3}", offered.unwrap_or(0.0)),
                    max_batch,
                    max_queue_delay_us: 2000,
                    offered,
                    throughput,
                    p99_ms,
                    mean_batch,
                    batch_ms,
                    max_depth,
                    refused,
                    overloaded,
                    meets_slo: meets_slo && !overloaded,
                    usd_per_1000: 0.8 / 3.6 / throughput,
                },
            )
    }

    fn oracle(statics: &[ServeRun], dynamics: &[ServeRun], (inf, tr): (u64, u64), c: &Claim) -> Option<bool> {
        let lo_b = || statics.iter().map(|r| r.max_batch).min();
        let hi_b = || statics.iter().map(|r| r.max_batch).max();
        let t = |b: Option<usize>| statics.iter().find(|r| Some(r.max_batch) == b).map(|r| r.batch_ms);
        let this = dynamics.iter().find(|r| r.label == c.subject);
        let load = |r: &&ServeRun| r.offered.unwrap_or(0.0);
        let lightest = dynamics.iter().min_by(|a, b| load(a).total_cmp(&load(b)));
        let heaviest = dynamics.iter().max_by(|a, b| load(a).total_cmp(&load(b)));
        let fixed = || {
            let (t0, t1) = (t(lo_b())?, t(hi_b())?);
            Some(t0 - (t1 - t0) / (hi_b()? - lo_b()?) as f64 * lo_b()? as f64)
        };
        Some(match c.condition {
            cond::FIXED_AND_GROWING => t(hi_b())? > t(lo_b())? && fixed()? > 0.0,
            cond::PROPORTIONAL => t(hi_b())? > t(lo_b())? && fixed()? <= 0.0,
            cond::FLAT => t(hi_b())? <= t(lo_b())?,
            cond::BEST => {
                let t = this?;
                t.meets_slo && dynamics.iter().filter(|r| r.meets_slo).all(|r| r.throughput <= t.throughput)
            }
            cond::NONE_MET => !dynamics.is_empty() && dynamics.iter().all(|r| !r.meets_slo),
            cond::NO_DYNAMIC => dynamics.is_empty(),
            cond::OVERLOADED => this?.overloaded,
            cond::FILLED => heaviest?.mean_batch > lightest?.mean_batch,
            cond::NOT_FILLED => heaviest?.mean_batch <= lightest?.mean_batch,
            cond::LESS_THAN_TRAINING => inf < tr,
            cond::NOT_LESS => inf >= tr,
            cond::CHEAPER | cond::NOT_CHEAPER => {
                let best = this?;
                let b1 = statics.iter().find(|r| r.max_batch == 1)?;
                let cheaper = best.meets_slo && best.usd_per_1000 < b1.usd_per_1000;
                if c.condition == cond::CHEAPER { cheaper } else { best.meets_slo && !cheaper }
            }
            _ => return None,
        })
    }

    proptest! {
        /// Batch time growing or flat, the objective met or not, overload or not, batches filling
        /// or not, runs in any order, no dynamic run at all: every sentence printed is true.
        #[test]
        fn every_printed_claim_holds(
            statics in proptest::collection::vec(run(), 0..4),
            dynamics in proptest::collection::vec(run(), 0..4),
            (inf, tr) in (0u64..1 << 20, 0u64..1 << 20),
        ) {
            let mut seen = std::collections::BTreeSet::new();
            let statics: Vec<ServeRun> = statics.into_iter().filter(|r| seen.insert(r.max_batch)).collect();
            let dynamics: Vec<ServeRun> = dynamics.into_iter().enumerate().map(|(i, r)| ServeRun { label: format!("dynamic {i}"), ..r }).collect();
            let claims = claims(&statics, &dynamics, 20.0, (inf, tr, 16));
            claims.audit(|c| oracle(&statics, &dynamics, (inf, tr), c)).map_err(TestCaseError::fail)?;
            prop_assert!(claims.has_summary());
        }
    }
}
