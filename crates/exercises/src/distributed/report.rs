//! Exercise 6's report: the scaling table, charts, the cost-model extrapolation and a verdict,
//! each number with its provenance.

use super::verdict::{RunFigures, losses, lost_total, setup, verdict};
use super::{Distributed, Mode, Run};
use crate::common::report_for;
use crate::cost::{self as pricing, Price};
use crate::settings::Settings;
use crate::settings::distributed::Config;
use gpulab_core::error::Result;
use gpulab_systems::data::Dataset;
use gpulab_systems::parallel::{DpReport, SimLink, cost};
use gpulab_systems::report::{Cell, Chart, Column, Figure, Metadata, Provenance, Report, Series, Table};

/// Provenance of the timing figures: measured, unless a link preset slowed the messages.
pub(super) struct Prov {
    pub(super) link: Option<cost::LinkPreset>,
}

impl Prov {
    pub(super) fn new(c: &Config) -> Result<Self> {
        Ok(Prov { link: cost::preset(&c.link)? })
    }
    pub(super) fn time(&self) -> Provenance {
        match self.link {
            Some(p) => Provenance::Simulated(format!("measured on a run whose every message waited as on {} (simulated link)", p.name)),
            None => Provenance::Measured,
        }
    }
    pub(super) fn derived(&self, from: &str) -> Provenance {
        match self.link {
            Some(p) => Provenance::Simulated(format!("{from}, with the simulated {} link", p.name)),
            None => Provenance::derived(from),
        }
    }
}

fn baseline(runs: &[Run], mode: Mode) -> Option<&DpReport> {
    runs.iter().find(|r| r.mode == mode && r.replicas == 1).and_then(|r| r.result.as_ref().ok())
}

/// Speed-up over one replica in the same mode: throughput ratio (for strong scaling that is
/// T₁ / T_N for the same work).
fn speedup(runs: &[Run], mode: Mode, r: &DpReport) -> Option<f64> {
    baseline(runs, mode).map(|b| r.samples_per_s / b.samples_per_s.max(1e-12))
}

/// The largest replica's optimizer-state peak, bytes (the ledger's).
fn state_peak(r: &DpReport) -> u64 {
    r.optimizer_state_peak.iter().copied().max().unwrap_or(0)
}

pub fn scaling_table(runs: &[Run], c: &Config) -> Result<Table> {
    let p = Prov::new(c)?;
    let clocks = "each replica's clock readings";
    let columns = vec![
        Column::text("scaling"),
        Column::text("replicas"),
        Column::num("global batch", "", 0, Provenance::Measured),
        Column::num("per-replica batch", "", 0, Provenance::Measured),
        Column::num("steps", "", 0, Provenance::Measured),
        Column::num("wall time", "s", 3, p.time()),
        Column::num("throughput", "samples/s", 0, p.time()),
        Column::num("speed-up", "×", 2, p.derived("throughput over one replica's")),
        Column::num("efficiency", "%", 1, p.derived("speed-up / N")),
        Column::num("compute", "ms/step", 2, p.derived(clocks)),
        Column::num("exposed communication", "ms/step", 2, p.derived(clocks)),
        Column::num("idle", "ms/step", 2, p.derived(clocks)),
        Column::num("data", "ms/step", 2, p.derived(clocks)),
        Column::num("busy", "%", 1, p.derived("compute / step time")),
        Column::num("all-reduce", "ms/step", 2, p.time()),
        Column::num("gradient S", "KiB", 1, Provenance::derived("parameters × 4 bytes")),
        Column::num("sent per replica", "KiB/step", 1, Provenance::Measured),
        Column::num("optimizer state per replica", "KiB", 1, Provenance::derived("gpulab's allocation ledger: the largest replica's peak")),
        Column::num("of one replica's", "%", 1, Provenance::derived("optimizer state per replica over the one-replica run's")),
        Column::num("buckets", "", 0, Provenance::derived("bucket_cap_mb and the layer sizes")),
        Column::num("validation accuracy", "%", 2, Provenance::Measured),
        Column::text("replicas identical"),
    ];
    let rows = runs
        .iter()
        .map(|run| {
            let mut row: Vec<Cell> = vec![run.mode.name().into()];
            match &run.result {
                Ok(r) => {
                    let sp = speedup(runs, run.mode, r);
                    let step = r.split.total();
                    let state = state_peak(r);
                    row.extend([
                        r.label.clone().into(),
                        Cell::Num(r.global_batch as f64),
                        Cell::Num(r.per_replica_batch as f64),
                        Cell::Num(r.steps as f64),
                        r.train_wall_s.into(),
                        r.samples_per_s.into(),
                        sp.into(),
                        sp.map(|x| x / r.replicas as f64 * 100.0).into(),
                        (r.split.compute_s * 1e3).into(),
                        (r.split.exposed_comm_s * 1e3).into(),
                        (r.split.idle_s * 1e3).into(),
                        (r.split.data_s * 1e3).into(),
                        (r.split.compute_s / step.max(1e-12) * 100.0).into(),
                        (r.allreduce_s_per_step * 1e3).into(),
                        (r.grad_bytes as f64 / 1024.0).into(),
                        (r.bytes_sent_per_step / 1024.0).into(),
                        (state as f64 / 1024.0).into(),
                        baseline(runs, run.mode).map(state_peak).filter(|&b| b > 0).map(|b| state as f64 / b as f64 * 100.0).into(),
                        Cell::Num(r.buckets as f64),
                        (r.final_val_accuracy * 100.0).into(),
                        if r.replicas_identical { "yes, bit for bit" } else { "NO" }.into(),
                    ]);
                }
                Err(m) => {
                    row.push(format!("{} failed: {m}", crate::common::plural(run.replicas, "replica")).into());
                    row.extend(std::iter::repeat_n(Cell::Empty, 20));
                }
            }
            row
        })
        .collect();
    Ok(Table { title: "Scaling".into(), columns, rows })
}

/// The link the extrapolation uses besides the presets: this run's measured ring.
/// Where the time per sample went at each mode's largest N against one replica: the losses the
/// verdict names, each with its share of the time lost.
fn loss_table(runs: &[RunFigures]) -> Option<Table> {
    let columns = vec![
        Column::text("scaling"),
        Column::num("N", "", 0, Provenance::derived("the run")),
        Column::text("where the time went"),
        Column::num("time per sample", "µs", 3, Provenance::derived("the step split ÷ the global batch, against one replica's ÷ N")),
        Column::num("share of the time lost", "%", 1, Provenance::derived("this loss ÷ the sum of the positive losses")),
    ];
    let mut rows = Vec::new();
    for mode in [Mode::Strong, Mode::Weak] {
        let of = runs.iter().filter(|r| r.mode == mode);
        let (Some(base), Some(big)) = (of.clone().find(|r| r.replicas == 1), of.filter(|r| r.replicas > 1).max_by_key(|r| r.replicas))
        else {
            continue;
        };
        let l = losses(base, big);
        let lost = lost_total(&l);
        for (what, secs) in l {
            let share = if lost > 0.0 && secs > 0.0 { Cell::Num(secs / lost * 100.0) } else { Cell::Empty };
            rows.push(vec![mode.name().into(), Cell::Num(big.replicas as f64), what.into(), Cell::Num(secs * 1e6), share]);
        }
    }
    (!rows.is_empty()).then(|| Table { title: "Where the time per sample went".into(), columns, rows })
}

fn measured_link(runs: &[Run]) -> Option<SimLink> {
    runs.iter()
        .filter_map(|r| r.result.as_ref().ok())
        .find_map(|r| r.probe)
        .map(|p| SimLink { bytes_per_s: p.bytes_per_s, latency_s: p.latency_s })
}

/// The run whose measured compute feeds the extrapolation: the most replicas, weak first (a
/// fixed per-GPU batch is what a larger cluster would run).
fn reference(runs: &[Run]) -> Option<&DpReport> {
    let ok = |m: Mode| runs.iter().filter(move |r| r.mode == m).filter_map(|r| r.result.as_ref().ok()).max_by_key(|r| r.replicas);
    ok(Mode::Weak).or_else(|| ok(Mode::Strong))
}

fn extrapolation(runs: &[Run]) -> Option<(Table, Chart, String)> {
    let r = reference(runs)?;
    let (tc, bytes) = (r.split.compute_s, r.grad_bytes as f64);
    let why = format!(
        "ring cost model 2(N−1)/N·S/bandwidth + 2(N−1)·latency with this run's measured compute {:.2} ms/step at {} samples per replica and S = {:.1} KiB, nominal link figures, no overlap",
        tc * 1e3,
        r.per_replica_batch,
        bytes / 1024.0
    );
    let mut links: Vec<(String, SimLink)> = cost::PRESETS.iter().map(|p| (p.name.to_string(), p.link)).collect();
    if let Some(m) = measured_link(runs) {
        links.push(("this machine's ring (measured link)".into(), m));
    }
    let sim = Provenance::Simulated(why.clone());
    let mut columns =
        vec![Column::text("link"), Column::num("bandwidth", "GB/s", 2, sim.clone()), Column::num("latency", "µs", 1, sim.clone())];
    columns.extend(cost::EXTRAPOLATE_TO.iter().map(|n| Column::num(&format!("N={n}"), "% efficiency", 1, sim.clone())));
    let rows = links
        .iter()
        .map(|(name, l)| {
            let mut row: Vec<Cell> = vec![name.clone().into(), (l.bytes_per_s / 1e9).into(), (l.latency_s * 1e6).into()];
            row.extend(cost::EXTRAPOLATE_TO.iter().map(|&n| Cell::Num(cost::efficiency(n, tc, bytes, *l) * 100.0)));
            row
        })
        .collect();
    let chart =
        Chart::line("extrapolation", "Extrapolated scaling efficiency (simulated)", "GPUs N", "efficiency (%)").log_x().with_series(
            links
                .iter()
                .map(|(name, l)| Series {
                    name: name.clone(),
                    points: cost::EXTRAPOLATE_TO.iter().map(|&n| [n as f64, cost::efficiency(n, tc, bytes, *l) * 100.0]).collect(),
                    provenance: sim.clone(),
                })
                .collect(),
        );
    Some((Table { title: "Beyond this machine (simulated)".into(), columns, rows }, chart, why))
}

fn charts(runs: &[Run], p: &Prov) -> Vec<Chart> {
    let line = |id: &str, title: &str, y: &str| Chart::line(id, title, "replicas N", y);
    let mut sp = line("speedup", "Speed-up over one replica", "speed-up (×)");
    let mut split = Chart::bars("step_split", "Where a step's time goes", "replicas N", "ms per step");
    let ns: Vec<usize> = runs.iter().map(|r| r.replicas).collect();
    for mode in [Mode::Strong, Mode::Weak] {
        let ok: Vec<&DpReport> = runs.iter().filter(|r| r.mode == mode).filter_map(|r| r.result.as_ref().ok()).collect();
        if ok.is_empty() {
            continue;
        }
        let pts: Vec<[f64; 2]> = ok.iter().filter_map(|r| speedup(runs, mode, r).map(|x| [r.replicas as f64, x])).collect();
        if !pts.is_empty() {
            sp.series.push(Series {
                name: format!("{} scaling", mode.name()),
                points: pts,
                provenance: p.derived("throughput over one replica's"),
            });
        }
        let parts: [(&str, fn(&DpReport) -> f64); 4] = [
            ("compute", |r| r.split.compute_s),
            ("exposed communication", |r| r.split.exposed_comm_s),
            ("idle", |r| r.split.idle_s),
            ("data", |r| r.split.data_s),
        ];
        for (name, f) in parts {
            split.series.push(Series {
                name: format!("{} · {name}", mode.name()),
                points: ok.iter().map(|r| [r.replicas as f64, f(r) * 1e3]).collect(),
                provenance: p.derived("each replica's clock readings"),
            });
        }
    }
    let max_n = ns.iter().copied().max().unwrap_or(1) as f64;
    sp.series.push(Series {
        name: "ideal (speed-up = N)".into(),
        points: vec![[1.0, 1.0], [max_n, max_n]],
        provenance: Provenance::derived("the definition of linear scaling"),
    });
    vec![sp, split]
}

/// The assumed price of one replica's hour: `price_per_hour`, where auto on CPU replicas is the
/// vCPU list price × the threads each replica uses, and on GPU replicas a GPU's list price.
pub fn replica_price(c: &Config) -> Result<Price> {
    if c.kind == "cpu" && c.price.text.trim().eq_ignore_ascii_case("auto") {
        let threads = c.threads_per_replica as f64;
        return Ok(Price::parse("vcpu", "vcpu")?.times(threads, "vCPU"));
    }
    c.price.read(gpulab_core::tensor::BackendKind::Gpu)
}

/// US dollars per finished epoch of `r`, all its replicas counted: N × wall time × price ÷ epochs.
pub(super) fn per_epoch(r: &DpReport, price: &Price) -> Option<f64> {
    let epochs = r.val_accuracy.len();
    (epochs > 0).then(|| r.replicas as f64 * price.usd(r.train_wall_s) / epochs as f64)
}

/// Each run's cost, every replica counted, and against one replica's in the same mode.
fn cost_table(runs: &[Run], price: &Price) -> Table {
    let per_run = |r: &DpReport| r.replicas as f64 * price.usd(r.train_wall_s);
    let ok = || runs.iter().filter_map(|r| r.result.as_ref().ok().map(|d| (r.mode, d)));
    let from = "replicas × measured wall time × the assumed price per replica-hour";
    let epochs: Vec<f64> = ok().filter_map(|(_, r)| per_epoch(r, price)).collect();
    let whole: Vec<f64> = ok().map(|(_, r)| per_run(r)).collect();
    let (epoch_col, ke) = pricing::money_column("cost", "epoch", &epochs, Provenance::derived(&format!("{from} ÷ epochs")));
    let (run_col, kr) = pricing::money_column("cost", "training run", &whole, Provenance::derived(from));
    Table {
        title: format!("Cost, all replicas counted (assumed price per replica-hour: {})", price.label),
        columns: vec![
            Column::text("scaling"),
            Column::text("replicas"),
            epoch_col,
            run_col,
            Column::num("cost per epoch ÷ one replica's", "×", 2, Provenance::derived("the two costs per epoch")),
        ],
        rows: ok()
            .map(|(mode, r)| {
                let one = baseline(runs, mode).and_then(|b| per_epoch(b, price));
                let mine = per_epoch(r, price);
                vec![
                    Cell::from(mode.name()),
                    Cell::from(r.label.clone()),
                    mine.map(|v| v * ke).into(),
                    (per_run(r) * kr).into(),
                    mine.zip(one).map(|(a, b)| a / b).into(),
                ]
            })
            .collect(),
    }
}

pub fn build(ex: &Distributed, s: &Settings, c: &Config, data: &Dataset, runs: Vec<Run>, stopped_early: bool) -> Result<Report> {
    let p = Prov::new(c)?;
    let mut meta = Metadata::new(c.training.seed as u64);
    meta.dataset = format!("{} — {}", data.name, data.source);
    meta.hyperparameters = s.to_map();
    meta.hyperparameters.insert("architecture".into(), c.training.architecture(data)?);
    let amp = c.training.amp_config()?;
    if amp.precision != gpulab_systems::nn::Precision::F32 {
        meta.precision = amp.label();
    }
    let ok: Vec<&DpReport> = runs.iter().filter_map(|r| r.result.as_ref().ok()).collect();
    if let Some(r) = ok.iter().max_by_key(|r| r.replicas) {
        meta.backends = r.backends.clone();
        meta.backends.dedup();
    }
    let mut figures = Vec::new();
    if let Some(pr) = ok.iter().find_map(|r| r.probe) {
        figures.push(Figure {
            label: "ring latency per message (host memory)".into(),
            value: pr.latency_s * 1e6,
            unit: "µs".into(),
            provenance: p.derived("20 one-float all-reduces before training"),
        });
        figures.push(Figure {
            label: "ring bandwidth (host memory)".into(),
            value: pr.bytes_per_s / 1e9,
            unit: "GB/s".into(),
            provenance: p.derived(&format!(
                "the median of {} gradient-sized all-reduces before training (after an untimed one), latency removed",
                gpulab_systems::parallel::replica::PROBE_CALLS
            )),
        });
    }
    for mode in [Mode::Strong, Mode::Weak] {
        if let Some(big) =
            runs.iter().filter(|r| r.mode == mode && r.replicas > 1).filter_map(|r| r.result.as_ref().ok()).max_by_key(|r| r.replicas)
            && let Some(sp) = speedup(&runs, mode, big)
        {
            let what = format!("{} scaling, {}", mode.name(), big.label);
            figures.push(Figure {
                label: format!("speed-up ({what})"),
                value: sp,
                unit: "×".into(),
                provenance: p.derived("throughput over one replica's"),
            });
            figures.push(Figure {
                label: format!("efficiency ({what})"),
                value: sp / big.replicas as f64 * 100.0,
                unit: "%".into(),
                provenance: p.derived("speed-up / N"),
            });
            figures.push(Figure {
                label: format!("all-reduce per step ({what})"),
                value: big.allreduce_s_per_step * 1e3,
                unit: "ms".into(),
                provenance: p.time(),
            });
        }
    }
    let mut tables = vec![scaling_table(&runs, c)?];
    let mut charts = charts(&runs, &p);
    let mut notes = Vec::new();
    if let Some((t, c, why)) = extrapolation(&runs) {
        tables.push(t);
        charts.push(c);
        notes.push(format!("Beyond this machine is simulated: {why}."));
    }
    let labels: Vec<&str> = ok.iter().map(|r| r.label.as_str()).collect();
    if let Some(l) = labels.iter().find(|l| l.contains("one adapter")) {
        notes.push(format!("Every figure here: {l}."));
    }
    let price = replica_price(c)?;
    tables.push(cost_table(&runs, &price));
    notes.push(format!(
        "{} Each replica is counted as a machine of its own (N GPUs × the time), as a cluster bills.",
        pricing::note(&[&price])
    ));
    let figures_for_verdict: Vec<RunFigures> =
        runs.iter().filter_map(|r| r.result.as_ref().ok().map(|d| RunFigures::of(r.mode, d, &price))).collect();
    tables.extend(loss_table(&figures_for_verdict));
    notes.push("Each epoch takes only whole global batches (the remainder is dropped so every replica gets an equal shard); validation time is excluded from the wall time.".into());
    let mut report = Report {
        figures,
        tables,
        charts,
        verdict: verdict(&figures_for_verdict, &setup(c, &p)?).verdict(),
        notes,
        stopped_early,
        timelines: ok.iter().map(|r| r.timeline.clone()).collect(),
        ..report_for(ex, s, meta)
    };
    report.note_software_backends();
    Ok(report)
}
