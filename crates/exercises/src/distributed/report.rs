//! Exercise 6's report: the scaling table, charts, the cost-model extrapolation and a verdict,
//! each number with its provenance.

use super::{Distributed, Mode, Run};
use crate::common::report_for;
use crate::common::{self, percent};
use crate::cost::{self as pricing, Price};
use crate::settings::Settings;
use gpulab_core::error::Result;
use gpulab_systems::data::Dataset;
use gpulab_systems::parallel::{DpReport, SimLink, StepSplit, cost};
use gpulab_systems::profile::verdict::{Bottleneck, communication_bound};
use gpulab_systems::report::{Cell, Chart, ChartKind, Claims, Column, Figure, Metadata, Provenance, Report, Series, Table};

/// Provenance of the timing figures: measured, unless a link preset slowed the messages.
struct Prov {
    link: Option<cost::LinkPreset>,
}

impl Prov {
    fn new(s: &Settings) -> Result<Self> {
        Ok(Prov { link: cost::preset(&s.choice("link")?)? })
    }
    fn time(&self) -> Provenance {
        match self.link {
            Some(p) => Provenance::Simulated(format!("measured on a run whose every message waited as on {} (simulated link)", p.name)),
            None => Provenance::Measured,
        }
    }
    fn derived(&self, from: &str) -> Provenance {
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

pub fn scaling_table(runs: &[Run], s: &Settings) -> Result<Table> {
    let p = Prov::new(s)?;
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
                        Cell::Num(r.buckets as f64),
                        (r.final_val_accuracy * 100.0).into(),
                        if r.replicas_identical { "yes, bit for bit" } else { "NO" }.into(),
                    ]);
                }
                Err(m) => {
                    row.push(format!("{} replicas failed: {m}", run.replicas).into());
                    row.extend(std::iter::repeat_n(Cell::Empty, 18));
                }
            }
            row
        })
        .collect();
    Ok(Table { title: "Scaling".into(), columns, rows })
}

/// The link the extrapolation uses besides the presets: this run's measured ring.
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
    let chart = Chart {
        id: "extrapolation".into(),
        title: "Extrapolated scaling efficiency (simulated)".into(),
        x_label: "GPUs N".into(),
        y_label: "efficiency (%)".into(),
        kind: ChartKind::Line,
        log_x: true,
        series: links
            .iter()
            .map(|(name, l)| Series {
                name: name.clone(),
                points: cost::EXTRAPOLATE_TO.iter().map(|&n| [n as f64, cost::efficiency(n, tc, bytes, *l) * 100.0]).collect(),
                provenance: sim.clone(),
            })
            .collect(),
        markers: vec![],
    };
    Some((Table { title: "Beyond this machine (simulated)".into(), columns, rows }, chart, why))
}

fn charts(runs: &[Run], p: &Prov) -> Vec<Chart> {
    let line = |id: &str, title: &str, y: &str| Chart {
        id: id.into(),
        title: title.into(),
        x_label: "replicas N".into(),
        y_label: y.into(),
        kind: ChartKind::Line,
        log_x: false,
        series: vec![],
        markers: vec![],
    };
    let mut sp = line("speedup", "Speed-up over one replica", "speed-up (×)");
    let mut split = Chart { kind: ChartKind::Bars, ..line("step_split", "Where a step's time goes", "ms per step") };
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

/// Exercise 7's communication-bound class applied to one run's step split (the same test and
/// the same words): Some(sentence) when exposed all-reduce time dominates the step.
fn communication_verdict(replicas: usize, split: &StepSplit) -> Option<String> {
    let step = split.total();
    communication_bound(split.exposed_comm_s, step).then(|| {
        let b = Bottleneck::Communication;
        format!(
            "At N={} the run is {}: {:.2} ms of exposed all-reduce in a {:.2} ms step ({:.0}%, against {:.2} ms of compute). Suggested optimization: {}.",
            replicas,
            b.name(),
            split.exposed_comm_s * 1e3,
            step * 1e3,
            split.exposed_comm_s / step * 100.0,
            split.compute_s * 1e3,
            b.optimization()
        )
    })
}

/// The assumed price of one replica's hour: `price_per_hour`, where auto on CPU replicas is the
/// vCPU list price × the threads each replica uses, and on GPU replicas a GPU's list price.
pub fn replica_price(s: &Settings) -> Result<Price> {
    let text = s.text("price_per_hour")?;
    if s.choice("kind")? == "cpu" && text.trim().eq_ignore_ascii_case("auto") {
        let threads = s.int("threads_per_replica")? as f64;
        return Ok(Price::parse("vcpu", "vcpu")?.times(threads, "vCPU"));
    }
    pricing::read(s, "price_per_hour", gpulab_core::tensor::BackendKind::Gpu)
}

/// US dollars per finished epoch of `r`, all its replicas counted: N × wall time × price ÷ epochs.
fn per_epoch(r: &DpReport, price: &Price) -> Option<f64> {
    let epochs = r.val_accuracy.len();
    (epochs > 0).then(|| r.replicas as f64 * price.usd(r.train_wall_s) / epochs as f64)
}

/// Each run's cost, every replica counted, and against one replica's in the same mode.
fn cost_table(runs: &[Run], price: &Price) -> Table {
    let per_run = |r: &DpReport| r.replicas as f64 * price.usd(r.train_wall_s);
    let ok = || runs.iter().filter_map(|r| r.result.as_ref().ok().map(|d| (r.mode, d)));
    let d = pricing::decimals(ok().flat_map(|(_, r)| [per_epoch(r, price).unwrap_or(f64::NAN), per_run(r)]));
    let from = "replicas × measured wall time × the assumed price per replica-hour";
    Table {
        title: format!("Cost, all replicas counted (assumed price per replica-hour: {})", price.label),
        columns: vec![
            Column::text("scaling"),
            Column::text("replicas"),
            Column::num("cost per epoch", "USD", d, Provenance::derived(&format!("{from} ÷ epochs"))),
            Column::num("cost per training run", "USD", d, Provenance::derived(from)),
            Column::num("cost per epoch ÷ one replica's", "×", 2, Provenance::derived("the two costs per epoch")),
        ],
        rows: ok()
            .map(|(mode, r)| {
                let one = baseline(runs, mode).and_then(|b| per_epoch(b, price));
                let mine = per_epoch(r, price);
                vec![
                    Cell::from(mode.name()),
                    Cell::from(r.label.clone()),
                    mine.into(),
                    per_run(r).into(),
                    mine.zip(one).map(|(a, b)| a / b).into(),
                ]
            })
            .collect(),
    }
}

/// One finished run, as the verdict reads it.
#[derive(Clone, Debug, PartialEq)]
struct RunFigures {
    mode: Mode,
    replicas: usize,
    label: String,
    samples_per_s: f64,
    global_batch: usize,
    split: StepSplit,
    allreduce_s: f64,
    grad_bytes: u64,
    sent_per_step: f64,
    buckets: usize,
    val_accuracy: f64,
    identical: bool,
    /// US dollars per finished epoch, every replica counted; None before an epoch finished.
    usd_per_epoch: Option<f64>,
}

impl RunFigures {
    fn of(mode: Mode, r: &DpReport, price: &Price) -> Self {
        RunFigures {
            mode,
            replicas: r.replicas,
            label: r.label.clone(),
            samples_per_s: r.samples_per_s,
            global_batch: r.global_batch,
            split: r.split,
            allreduce_s: r.allreduce_s_per_step,
            grad_bytes: r.grad_bytes,
            sent_per_step: r.bytes_sent_per_step,
            buckets: r.buckets,
            val_accuracy: r.final_val_accuracy,
            identical: r.replicas_identical,
            usd_per_epoch: per_epoch(r, price),
        }
    }
}

/// What the replicas ran on, for the sentence that says when this hardware cannot show the
/// speed-up data parallelism is for.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Hardware {
    /// CPU replicas: this machine's logical cores and the threads each replica uses.
    Cpu {
        cores: usize,
        threads: usize,
    },
    /// Devices on one adapter: they share its compute.
    OneAdapter,
    Other,
}

/// The settings the verdict's sentences depend on.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Setup<'a> {
    hardware: Hardware,
    overlap: bool,
    shard: bool,
    link: Option<&'a str>,
}

/// The conditions the verdict's sentences assert (the property test re-checks each one).
mod cond {
    pub const CORES_TAKEN: &str = "the largest replica count's threads take every logical core";
    pub const ONE_ADAPTER: &str = "the replicas are devices sharing one adapter";
    pub const LARGEST_LOSS: &str = "efficiency under 80%, and this loss the largest and positive";
    pub const EFFICIENT: &str = "efficiency at least 80%";
    pub const COMPUTE_OVER_ALLREDUCE: &str = "compute per step longer than the all-reduce per step";
    pub const ALLREDUCE_OVER_COMPUTE: &str = "the all-reduce per step at least as long as the compute";
    pub const COMMUNICATION_BOUND: &str = "efficiency under 80%, exposed all-reduce at least COMM_SHARE of the step";
    pub const HIDDEN: &str = "overlap on, several buckets, an all-reduce measured";
    pub const SENT_AS_ALLREDUCE: &str = "sharded: sent within 5% of a ring all-reduce's 2(N−1)/N·S";
    pub const SENT_OTHER: &str = "sharded: sent more than 5% away from 2(N−1)/N·S";
    pub const IDENTICAL: &str = "every finished run with several replicas ended bit-identical, and one did";
    pub const DIFFERENT: &str = "some run's replicas ended with different weights";
    pub const CHEAPER: &str = "the largest count's cost per epoch, all replicas counted, below one replica's";
    pub const NOT_CHEAPER: &str = "the largest count's cost per epoch, all replicas counted, not below one replica's";
    pub const NO_SPEEDUP: &str = "no mode has both one replica and a larger count finished";
}

fn losses(base: &RunFigures, big: &RunFigures) -> [(&'static str, f64); 4] {
    let n = big.replicas as f64;
    // Per sample, one replica's step costs base/B₁; N replicas should take 1/N of that.
    let per_sample = |r: &RunFigures, f: fn(&StepSplit) -> f64| f(&r.split) / r.global_batch.max(1) as f64;
    [
        ("exposed communication (the all-reduce not hidden behind compute)", per_sample(big, |x| x.exposed_comm_s)),
        ("idle time waiting for the slowest replica", per_sample(big, |x| x.idle_s)),
        (
            "compute that did not shrink with N (fixed per-step cost, smaller and less efficient matrix products)",
            per_sample(big, |x| x.compute_s) - per_sample(base, |x| x.compute_s) / n,
        ),
        ("data gathering that did not shrink with N", per_sample(big, |x| x.data_s) - per_sample(base, |x| x.data_s) / n),
    ]
}

/// The verdict, from the numbers: how well the largest run scaled and where the time went.
fn verdict(runs: &[RunFigures], setup: &Setup) -> Claims {
    use gpulab_systems::report::Part::{Evidence, Summary};
    let mut c = Claims::new();
    let most = runs.iter().map(|r| r.replicas).max().unwrap_or(1);
    match setup.hardware {
        Hardware::Cpu { cores, threads } => {
            let need = most * threads;
            c.summary(
                cond::CORES_TAKEN,
                most > 1 && need >= cores,
                format!(
                    "This machine has {} and {most} CPU replicas × {} take {}: whatever else runs (the lab's window, the system) delays a replica, and every all-reduce waits for the slowest one. On a machine with at least {} cores, the default settings (or the \"a model worth splitting\" preset) give each replica a core of its own with room to spare.",
                    common::plural(cores, "logical core"),
                    common::plural(threads, "thread"),
                    if need > cores { "more than all of them" } else { "all of them" },
                    need + 2
                ),
            );
        }
        Hardware::OneAdapter => {
            c.summary(
                cond::ONE_ADAPTER,
                true,
                "These replicas are devices on one adapter and share its compute, so they show the all-reduce's synchronisation and transfer cost, not a speed-up; CPU replicas (kind=cpu), or one replica per GPU (kind=adapters), show real parallel compute.",
            );
        }
        Hardware::Other => {}
    }
    let mut any = false;
    for mode in [Mode::Strong, Mode::Weak] {
        let of = runs.iter().filter(|r| r.mode == mode);
        let Some(base) = of.clone().find(|r| r.replicas == 1) else { continue };
        let Some(big) = of.filter(|r| r.replicas > 1).max_by_key(|r| r.replicas) else { continue };
        any = true;
        c.about(mode.name());
        let n = big.replicas;
        let sp = big.samples_per_s / base.samples_per_s.max(1e-12);
        let eff = sp / n as f64;
        c.fact(Summary, format!("{} scaling to {n} ({}): {sp:.2}× one replica, {} efficiency.", mode.name(), big.label, percent(eff)));
        if let (Some(a), Some(b)) = (big.usd_per_epoch, base.usd_per_epoch) {
            let at = format!(
                "Counting all {n} replicas at the assumed price per replica-hour, an epoch cost {} against {} on one replica",
                pricing::usd_text(a),
                pricing::usd_text(b)
            );
            c.one_of(
                Summary,
                vec![
                    (cond::CHEAPER, a < b, format!("{at}: cheaper per epoch as well as faster.")),
                    (
                        cond::NOT_CHEAPER,
                        a >= b,
                        format!("{at} ({:.2}×): {n} replicas bought {sp:.2}× the speed, so each epoch cost more.", a / b.max(1e-300)),
                    ),
                ],
            );
        }
        let l = losses(base, big);
        let lost: f64 = l.iter().map(|x| x.1.max(0.0)).sum();
        if let Some((what, secs)) = l.iter().max_by(|a, b| a.1.total_cmp(&b.1)) {
            c.summary(
                cond::LARGEST_LOSS,
                eff < 0.8 && *secs > 0.0,
                format!("The largest loss was {what}: {:.1}% of the time lost per sample.", secs / lost.max(1e-15) * 100.0),
            );
        }
        for (w, x) in &l {
            c.fact(Evidence, format!("{} N={n}: {w}: {:+.3} µs per sample.", mode.name(), x * 1e6));
        }
        c.evidence(cond::EFFICIENT, eff >= 0.8, format!("{} scaling kept at least 80% efficiency at N={n}.", mode.name()));
        let kib = big.grad_bytes as f64 / 1024.0;
        c.one_of(
            Evidence,
            vec![
                (
                    cond::COMPUTE_OVER_ALLREDUCE,
                    big.split.compute_s > big.allreduce_s,
                    format!(
                        "At N={n}, compute per step ({:.2} ms) outweighed the all-reduce of {kib:.1} KiB ({:.2} ms per step).",
                        big.split.compute_s * 1e3,
                        big.allreduce_s * 1e3
                    ),
                ),
                (
                    cond::ALLREDUCE_OVER_COMPUTE,
                    big.split.compute_s <= big.allreduce_s,
                    format!(
                        "At N={n}, the all-reduce of {kib:.1} KiB ({:.2} ms per step) took at least as long as the compute ({:.2} ms).",
                        big.allreduce_s * 1e3,
                        big.split.compute_s * 1e3
                    ),
                ),
            ],
        );
        if let Some(s) = communication_verdict(n, &big.split) {
            c.summary(cond::COMMUNICATION_BOUND, eff < 0.8, s);
        }
        if setup.overlap && big.buckets > 1 && big.allreduce_s > 0.0 {
            let hidden = 1.0 - (big.split.exposed_comm_s / big.allreduce_s).min(1.0);
            c.evidence(
                cond::HIDDEN,
                true,
                format!(
                    "Overlap with {} buckets hid {} of the {:.2} ms all-reduce per step behind backward.",
                    big.buckets,
                    percent(hidden),
                    big.allreduce_s * 1e3
                ),
            );
        }
        if setup.shard {
            let ring = 2.0 * (n as f64 - 1.0) / n as f64 * big.grad_bytes as f64;
            let close = (big.sent_per_step - ring).abs() <= 0.05 * ring;
            let sharded = format!(
                "The optimizer step was sharded (ZeRO-1): each of the {n} replicas updated its 1/{n} of the parameters between the gradients' reduce-scatter and the parameters' all-gather, and sent {:.1} KiB per step",
                big.sent_per_step / 1024.0
            );
            c.one_of(
                Evidence,
                vec![
                    (
                        cond::SENT_AS_ALLREDUCE,
                        close,
                        format!("{sharded}, as a ring all-reduce of S = {kib:.1} KiB does (2(N−1)/N·S = {:.1} KiB).", ring / 1024.0),
                    ),
                    (
                        cond::SENT_OTHER,
                        !close,
                        format!("{sharded}; a ring all-reduce of S = {kib:.1} KiB sends 2(N−1)/N·S = {:.1} KiB.", ring / 1024.0),
                    ),
                ],
            );
        }
        let d_acc = (big.val_accuracy - base.val_accuracy) * 100.0;
        c.fact(
            Evidence,
            format!(
                "Validation accuracy: {} with one replica, {} with {n} ({d_acc:+.2} points).",
                percent(base.val_accuracy),
                percent(big.val_accuracy)
            ),
        );
    }
    c.about("");
    let several: Vec<&RunFigures> = runs.iter().filter(|r| r.replicas > 1).collect();
    c.evidence(
        cond::IDENTICAL,
        !several.is_empty() && several.iter().all(|r| r.identical),
        if setup.shard {
            "Every replica ended with bit-identical weights: each replica's updated part of them, all-gathered every step, kept them in step."
        } else {
            "Every replica ended with bit-identical weights: the averaged gradients kept them in step without ever sending weights."
        },
    );
    c.summary(
        cond::DIFFERENT,
        runs.iter().any(|r| !r.identical),
        "Replicas ended with DIFFERENT weights: the all-reduce did not give every replica the same sums.",
    );
    if let Some(l) = setup.link {
        c.fact(Evidence, format!("The interconnect was simulated as {l}: every message waited latency + bytes / bandwidth."));
    }
    c.summary(cond::NO_SPEEDUP, !any, "Include 1 and at least one larger replica count that finishes to see a speed-up.");
    c
}

/// The verdict's setup from the settings: what the replicas run on, overlap, ZeRO-1, the link.
fn setup<'a>(s: &Settings, p: &'a Prov) -> Result<Setup<'a>> {
    let hardware = match s.choice("kind")?.as_str() {
        "cpu" => Hardware::Cpu {
            cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            threads: s.int("threads_per_replica")? as usize,
        },
        "gpu" => Hardware::OneAdapter,
        _ => Hardware::Other,
    };
    Ok(Setup { hardware, overlap: s.bool("overlap")?, shard: s.bool("shard_optimizer")?, link: p.link.map(|l| l.name) })
}

pub fn build(ex: &Distributed, s: &Settings, data: &Dataset, runs: Vec<Run>, stopped_early: bool) -> Result<Report> {
    let p = Prov::new(s)?;
    let mut meta = Metadata::new(s.int("seed")? as u64);
    meta.dataset = format!("{} — {}", data.name, data.source);
    meta.hyperparameters = s.to_map();
    meta.hyperparameters.insert("architecture".into(), common::architecture(s, data)?);
    let amp = common::amp_config(s)?;
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
    let mut tables = vec![scaling_table(&runs, s)?];
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
    let price = replica_price(s)?;
    tables.push(cost_table(&runs, &price));
    notes.push(format!(
        "{} Each replica is counted as a machine of its own (N GPUs × the time), as a cluster bills.",
        pricing::note(&[&price])
    ));
    let figures_for_verdict: Vec<RunFigures> =
        runs.iter().filter_map(|r| r.result.as_ref().ok().map(|d| RunFigures::of(r.mode, d, &price))).collect();
    notes.push("Each epoch takes only whole global batches (the remainder is dropped so every replica gets an equal shard); validation time is excluded from the wall time.".into());
    let mut report = Report {
        figures,
        tables,
        charts,
        verdict: verdict(&figures_for_verdict, &setup(s, &p)?).verdict(),
        notes,
        stopped_early,
        timelines: ok.iter().map(|r| r.timeline.clone()).collect(),
        ..report_for(ex, s, meta)
    };
    report.note_software_backends();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpulab_systems::report::Claim;
    use proptest::prelude::*;

    fn run() -> impl Strategy<Value = RunFigures> {
        (
            (any::<bool>(), 1usize..5, 1.0f64..1e5, any::<bool>()),
            (1e-5f64..1e-2, 0.0f64..1e-2, 0.0f64..1e-2, 0.0f64..1e-3, 0.0f64..1e-2),
            (1u64..1 << 24, 0.0f64..1e8, 1usize..4),
        )
            .prop_map(
                |(
                    (weak, replicas, samples_per_s, identical),
                    (compute_s, exposed_comm_s, idle_s, data_s, allreduce_s),
                    (grad_bytes, sent, buckets),
                )| {
                    let ring = 2.0 * (replicas as f64 - 1.0) / replicas as f64 * grad_bytes as f64;
                    RunFigures {
                        mode: if weak { Mode::Weak } else { Mode::Strong },
                        replicas,
                        label: format!("{replicas} replicas"),
                        samples_per_s,
                        global_batch: 128,
                        split: StepSplit { data_s, compute_s, exposed_comm_s, idle_s },
                        allreduce_s,
                        grad_bytes,
                        // Half the time exactly what the ring sends.
                        sent_per_step: if identical { ring } else { sent },
                        buckets,
                        val_accuracy: 0.9,
                        identical: identical || replicas == 1 || sent > 1e7,
                        // Cost per epoch ∝ N ÷ throughput, or none before an epoch finished.
                        usd_per_epoch: (buckets > 1).then(|| replicas as f64 / samples_per_s),
                    }
                },
            )
    }

    fn hardware() -> impl Strategy<Value = Hardware> {
        prop_oneof![
            (1usize..9, 1usize..4).prop_map(|(cores, threads)| Hardware::Cpu { cores, threads }),
            Just(Hardware::OneAdapter),
            Just(Hardware::Other)
        ]
    }

    fn oracle(runs: &[RunFigures], setup: &Setup, c: &Claim) -> Option<bool> {
        let mode = [Mode::Strong, Mode::Weak].into_iter().find(|m| m.name() == c.subject);
        let of = |m: Mode| runs.iter().filter(move |r| r.mode == m);
        let base = || of(mode?).find(|r| r.replicas == 1);
        let big = || of(mode?).filter(|r| r.replicas > 1).max_by_key(|r| r.replicas);
        let eff = || Some(big()?.samples_per_s / base()?.samples_per_s / big()?.replicas as f64);
        let most = runs.iter().map(|r| r.replicas).max().unwrap_or(1);
        let ring = || {
            let b = big()?;
            Some(2.0 * (b.replicas as f64 - 1.0) / b.replicas as f64 * b.grad_bytes as f64)
        };
        Some(match c.condition {
            cond::CORES_TAKEN => match setup.hardware {
                Hardware::Cpu { cores, threads } => most > 1 && most * threads >= cores,
                _ => false,
            },
            cond::ONE_ADAPTER => setup.hardware == Hardware::OneAdapter,
            cond::LARGEST_LOSS => {
                let l = losses(base()?, big()?);
                let what = c.text.strip_prefix("The largest loss was ")?;
                eff()? < 0.8
                    && l.iter().all(|x| x.1 <= l.iter().find(|y| what.starts_with(y.0)).map_or(f64::NAN, |y| y.1))
                    && l.iter().any(|x| x.1 > 0.0)
            }
            cond::EFFICIENT => eff()? >= 0.8,
            cond::COMPUTE_OVER_ALLREDUCE => big()?.split.compute_s > big()?.allreduce_s,
            cond::ALLREDUCE_OVER_COMPUTE => big()?.split.compute_s <= big()?.allreduce_s,
            cond::COMMUNICATION_BOUND => {
                let s = big()?.split;
                eff()? < 0.8 && s.exposed_comm_s / s.total() >= gpulab_systems::profile::verdict::COMM_SHARE
            }
            cond::HIDDEN => setup.overlap && big()?.buckets > 1 && big()?.allreduce_s > 0.0,
            cond::SENT_AS_ALLREDUCE => setup.shard && (big()?.sent_per_step - ring()?).abs() <= 0.05 * ring()?,
            cond::SENT_OTHER => setup.shard && (big()?.sent_per_step - ring()?).abs() > 0.05 * ring()?,
            cond::IDENTICAL => runs.iter().any(|r| r.replicas > 1) && runs.iter().filter(|r| r.replicas > 1).all(|r| r.identical),
            cond::DIFFERENT => runs.iter().any(|r| !r.identical),
            cond::CHEAPER => big()?.usd_per_epoch? < base()?.usd_per_epoch?,
            cond::NOT_CHEAPER => big()?.usd_per_epoch? >= base()?.usd_per_epoch?,
            cond::NO_SPEEDUP => {
                [Mode::Strong, Mode::Weak].iter().all(|&m| !(of(m).any(|r| r.replicas == 1) && of(m).any(|r| r.replicas > 1)))
            }
            _ => return None,
        })
    }

    proptest! {
        /// Efficiency high or low, compute or communication dominating, overlap and ZeRO-1 on
        /// or off, replicas identical or not, cores to spare or not: every sentence printed is
        /// true of the numbers.
        #[test]
        fn every_printed_claim_holds(
            runs in proptest::collection::vec(run(), 0..6),
            hardware in hardware(),
            (overlap, shard) in (any::<bool>(), any::<bool>()),
        ) {
            let setup = Setup { hardware, overlap, shard, link: None };
            let claims = verdict(&runs, &setup);
            claims.audit(|c| oracle(&runs, &setup, c)).map_err(TestCaseError::fail)?;
            prop_assert!(claims.has_summary());
        }
    }

    #[test]
    fn exposed_all_reduce_that_dominates_the_step_is_called_communication_bound() {
        let split = |comm: f64| StepSplit { data_s: 0.1e-3, compute_s: 2e-3, exposed_comm_s: comm, idle_s: 0.2e-3 };
        let v = communication_verdict(4, &split(3e-3)).expect("3 ms of 5.3 ms is communication-bound");
        assert!(v.contains("N=4") && v.contains("communication-bound") && v.contains("57%"), "{v}");
        assert!(communication_verdict(4, &split(0.3e-3)).is_none(), "0.3 ms of 2.6 ms is not");
        assert!(communication_verdict(2, &StepSplit::default()).is_none(), "an empty split says nothing");
    }
}
