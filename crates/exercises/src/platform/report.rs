//! Exercise 10's report: the serving platform's figures, charts and tables, the training job
//! with its checkpoint-interval sweep, the canary timeline, and a verdict from those numbers.

use super::{PlatformLab, simulated};
use crate::common::interval_h;
use crate::common::report_for;
use crate::settings::Settings;
use gpulab_systems::platform::monitoring;
use gpulab_systems::platform::serving::canary as gate;
use gpulab_systems::platform::training::{self, JobOutcome, SweepPoint};
use gpulab_systems::platform::{Scenario, ServingResult};
use gpulab_systems::report::{Attachment, Cell, Chart, ChartKind, Claims, Column, Figure, Metadata, Provenance, Report, Series, Table};

pub struct TrainingRuns {
    pub on_demand: JobOutcome,
    pub chosen: JobOutcome,
    pub at_daly: JobOutcome,
    pub sweep: Vec<SweepPoint>,
}

fn fig(label: &str, value: f64, unit: &str) -> Figure {
    Figure { label: label.into(), value, unit: unit.into(), provenance: simulated() }
}

fn chart(id: &str, title: &str, x: &str, y: &str, series: Vec<(&str, Vec<[f64; 2]>)>) -> Chart {
    Chart {
        id: id.into(),
        title: title.into(),
        x_label: x.into(),
        y_label: y.into(),
        kind: ChartKind::Line,
        log_x: false,
        series: series.into_iter().map(|(name, points)| Series { name: name.into(), points, provenance: simulated() }).collect(),
        markers: vec![],
    }
}

/// The serving figures the verdict and the tests read.
#[derive(Clone, Debug, PartialEq)]
pub struct ServingNumbers {
    pub within_slo: f64,
    pub cost_per_1k: f64,
    pub cost_per_h: f64,
    pub utilisation: f64,
}

pub fn serving_numbers(sc: &Scenario, r: &ServingResult) -> ServingNumbers {
    let t = &r.totals;
    let answered = (t.served + t.timed_out + t.rejected).max(1) as f64;
    let hours = r.samples.last().map_or(sc.duration_h, |s| s.t_h).max(1e-9);
    ServingNumbers {
        within_slo: t.good as f64 / answered,
        cost_per_1k: if t.served == 0 { 0.0 } else { t.cost / t.served as f64 * 1000.0 },
        cost_per_h: t.cost / hours,
        utilisation: if t.ready_area > 0.0 { t.busy_area / t.ready_area } else { 0.0 },
    }
}

pub fn build(
    ex: &PlatformLab,
    s: &Settings,
    sc: &Scenario,
    r: &ServingResult,
    tr: &TrainingRuns,
    gpus: &[super::gpu_types::Compared],
    stopped_early: bool,
) -> Report {
    let n = serving_numbers(sc, r);
    let t = &r.totals;
    let x = "simulated time (h)";
    let pts = |f: &dyn Fn(&gpulab_systems::platform::Sample) -> Option<f64>| {
        r.samples.iter().filter_map(|s| f(s).map(|y| [s.t_h, y])).collect::<Vec<_>>()
    };
    let slo_line = vec![[0.0, sc.slo_latency_s * 1e3], [sc.duration_h, sc.slo_latency_s * 1e3]];
    let mut charts = vec![
        chart(
            "latency",
            "Latency percentiles",
            x,
            "latency (ms)",
            vec![
                ("p50", pts(&|s| s.p50_s.map(|v| v * 1e3))),
                ("p95", pts(&|s| s.p95_s.map(|v| v * 1e3))),
                ("p99", pts(&|s| s.p99_s.map(|v| v * 1e3))),
                ("SLO latency", slo_line),
            ],
        ),
        chart(
            "slo",
            "Requests within the SLO latency",
            x,
            "share (%)",
            vec![
                ("within SLO", pts(&|s| s.within_slo.map(|v| v * 100.0))),
                ("target", vec![[0.0, sc.slo_target * 100.0], [sc.duration_h, sc.slo_target * 100.0]]),
            ],
        ),
        chart(
            "workers",
            "Workers",
            x,
            "workers",
            vec![("serving", pts(&|s| Some(s.ready as f64))), ("starting", pts(&|s| Some(s.starting as f64)))],
        ),
        chart(
            "traffic",
            "Traffic",
            x,
            "requests/s",
            vec![("offered", pts(&|s| Some(s.offered_rps))), ("served", pts(&|s| Some(s.served_rps)))],
        ),
        chart(
            "utilisation",
            "Worker utilisation",
            x,
            "busy share of serving workers (%)",
            vec![("utilisation", pts(&|s| (s.ready > 0).then(|| s.busy as f64 / s.ready as f64 * 100.0)))],
        ),
        chart("queue", "Queue depth", x, "requests queued", vec![("queued", pts(&|s| Some(s.queue as f64)))]),
        chart(
            "dropped",
            "Rejected and timed out",
            x,
            "requests per sample period",
            vec![("rejected (rate limit)", pts(&|s| Some(s.rejected as f64))), ("timed out", pts(&|s| Some(s.timed_out as f64)))],
        ),
        chart("cost", "Cost per hour", x, "$/h", vec![("inference pool", pts(&|s| Some(s.cost_per_h)))]),
        chart("canary", "Canary: v2's share of traffic", x, "share (%)", vec![("v2 share", pts(&|s| Some(s.canary_share * 100.0)))]),
    ];
    for e in &r.canary {
        if let Some(c) = charts.last_mut() {
            c.markers.push((e.t_h, e.action.clone()));
        }
    }
    let train = &sc.training;
    let mut sweep = chart(
        "checkpoint_sweep",
        "Training time against checkpoint interval",
        "checkpoint interval (min)",
        "wall time (h)",
        vec![("mean wall time (simulated)", tr.sweep.iter().map(|p| [p.tau_h * 60.0, p.mean.wall_h]).collect())],
    );
    sweep.series.push(Series {
        name: "expected wall time (Daly's formula)".into(),
        points: tr.sweep.iter().map(|p| [p.tau_h * 60.0, p.expected_wall_h]).collect(),
        provenance: Provenance::Simulated("Daly's expected-time model M·e^(R/M)·(e^((τ+C)/M) − 1)·W/τ".into()),
    });
    let (young, daly) = (training::young_h(train), training::daly_h(train));
    sweep.markers = vec![
        (young * 60.0, "Young √(2CM)".into()),
        (daly * 60.0, "Daly".into()),
        (train.checkpoint_interval_h * 60.0, "this scenario".into()),
    ];
    let best = training::best(&tr.sweep);
    if let Some(b) = best {
        sweep.markers.push((b.tau_h * 60.0, "sweep minimum".into()));
    }
    charts.push(sweep);

    let price = if train.spot { train.gpu.spot_per_h } else { train.gpu.on_demand_per_h };
    let job_cost = |o: &JobOutcome, p: f64| o.wall_h * train.gpus as f64 * p;
    let mut figures = vec![
        fig("requests arrived", t.arrived as f64, ""),
        fig("requests served", t.served as f64, ""),
        fig("rejected by the rate limit", t.rejected as f64, ""),
        fig("timed out in the queue", t.timed_out as f64, ""),
        fig("served with an error", t.errors as f64, ""),
        fig("within the SLO (served, no error, in time)", n.within_slo * 100.0, "%"),
        fig("mean worker utilisation", n.utilisation * 100.0, "%"),
        fig("peak workers", t.max_alive as f64, ""),
        fig("mean batch size", t.batched_requests as f64 / t.batches.max(1) as f64, "requests"),
        fig("inference cost", t.cost, "$"),
        fig("inference cost per hour", n.cost_per_h, "$/h"),
        fig("cost per 1,000 requests", n.cost_per_1k, "$"),
        fig("the same worker-hours all on demand", t.worker_area / 3600.0 * sc.pool.gpu.on_demand_per_h, "$"),
        fig("spot reclaims (serving)", t.preemptions as f64, ""),
        fig("requests re-queued after a reclaim", t.requeued as f64, ""),
        fig("training wall time at this interval", tr.chosen.wall_h, "h"),
        fig("training cost at this interval", job_cost(&tr.chosen, price), "$"),
        fig("training work lost to preemptions", tr.chosen.lost_h, "h"),
        fig("Young's optimum interval", young * 60.0, "min"),
        fig("Daly's optimum interval", daly * 60.0, "min"),
    ];
    for (label, v) in [("p50 latency", r.p50_s), ("p95 latency", r.p95_s), ("p99 latency", r.p99_s)] {
        if let Some(v) = v {
            figures.push(fig(label, v * 1e3, "ms"));
        }
    }
    if let Some(b) = best {
        figures.push(fig("sweep's best interval", b.tau_h * 60.0, "min"));
    }
    // Inputs measured in this run are labelled measured; a replay shows them in the inputs table.
    if s.choice("calibration").is_ok_and(|c| c == "this-machine") {
        figures.extend(super::calibrate::measured_figures(sc));
    }

    let sim = || simulated();
    let scale = Table {
        title: "Autoscaler actions".into(),
        columns: vec![
            Column::num("time", "h", 2, sim()),
            Column::num("from", "workers", 0, sim()),
            Column::num("to", "workers", 0, sim()),
            Column::num("signal", sc.autoscaler.signal.name(), 2, sim()),
        ],
        rows: r.scale_actions.iter().map(|a| vec![a.t_h.into(), (a.from as f64).into(), (a.to as f64).into(), a.signal.into()]).collect(),
    };
    let canary = Table {
        title: "Canary timeline".into(),
        columns: vec![
            Column::num("time", "h", 2, sim()),
            Column::text("action"),
            Column::num("v2 share after", "%", 0, sim()),
            Column::num("v1 errors", "%", 2, sim()),
            Column::num("v2 errors", "%", 2, sim()),
            Column::num("v1 p95", "ms", 0, sim()),
            Column::num("v2 p95", "ms", 0, sim()),
            Column::text("why"),
        ],
        rows: r
            .canary
            .iter()
            .map(|e| {
                let pct = |v: Option<f64>| Cell::from(v.map(|x| x * 100.0));
                let ms = |v: Option<f64>| Cell::from(v.map(|x| x * 1e3));
                vec![
                    e.t_h.into(),
                    e.action.clone().into(),
                    (e.share * 100.0).into(),
                    pct(e.v1.map(|v| v.error_rate)),
                    pct(e.v2.map(|v| v.error_rate)),
                    ms(e.v1.map(|v| v.p95_s)),
                    ms(e.v2.map(|v| v.p95_s)),
                    e.reason.clone().into(),
                ]
            })
            .collect(),
    };
    let job_row = |name: &str, tau: Option<f64>, o: &JobOutcome, p: f64| {
        vec![
            name.into(),
            Cell::from(tau.map(|x| x * 60.0)),
            o.wall_h.into(),
            job_cost(o, p).into(),
            o.lost_h.into(),
            o.restart_h.into(),
            o.checkpoint_h.into(),
            o.preemptions.into(),
        ]
    };
    let training_table = Table {
        title: "Training job".into(),
        columns: vec![
            Column::text("capacity"),
            Column::num("interval", "min", 1, sim()),
            Column::num("wall time", "h", 2, sim()),
            Column::num("cost", "$", 0, sim()),
            Column::num("work lost", "h", 2, sim()),
            Column::num("restarting", "h", 2, sim()),
            Column::num("writing checkpoints", "h", 2, sim()),
            Column::num("preemptions", "mean", 1, sim()),
        ],
        rows: vec![
            job_row("on-demand", Some(train.checkpoint_interval_h), &tr.on_demand, train.gpu.on_demand_per_h),
            job_row(
                if train.spot { "spot, this interval" } else { "on-demand, this interval" },
                Some(train.checkpoint_interval_h),
                &tr.chosen,
                price,
            ),
            job_row(if train.spot { "spot, Daly's interval" } else { "on-demand, Daly's interval" }, Some(daly), &tr.at_daly, price),
        ],
    };

    let alerts = Table {
        title: "Monitoring alerts".into(),
        columns: vec![
            Column::text("layer"),
            Column::num("samples with an alert", "", 0, sim()),
            Column::num("share of samples", "%", 1, sim()),
            Column::num("first fired", "h", 2, sim()),
        ],
        rows: monitoring::summary(sc, &r.samples)
            .into_iter()
            .map(|(layer, n, first)| {
                vec![layer.name().into(), (n as f64).into(), (n as f64 / r.samples.len().max(1) as f64 * 100.0).into(), Cell::from(first)]
            })
            .collect(),
    };

    let mut meta = Metadata::new(sc.seed);
    meta.dataset = format!("scenario “{}” (simulated)", sc.name);
    meta.hyperparameters = s.to_map();
    meta.precision = format!("training speed-up ×{} from precision", train.precision_speedup);
    let mut report = Report {
        figures,
        tables: vec![scale, canary, training_table, alerts, super::calibrate::inputs_table(sc)]
            .into_iter()
            .chain((!gpus.is_empty()).then(|| super::gpu_types::table(sc, gpus)))
            .collect(),
        charts,
        verdict: {
            let mut c = claims(sc, r, &n, tr, young, daly);
            c.extend(super::gpu_types::claims(sc.slo_target, gpus));
            c.verdict()
        },
        stopped_early,
        attachments: vec![Attachment { file_name: "scenario.json".into(), text: sc.to_json(), ..Default::default() }],
        ..report_for(ex, s, meta)
    };
    report.notes.push(format!(
        "Every figure here is simulated from the scenario's inputs, except those labelled measured (calibration=this-machine). The worker speed curve is “{}”; GPU prices are “{}” — illustrative, not a price list. The inputs table says which inputs were measured on this machine and which are presets.",
        sc.pool.curve_source, sc.pool.gpu.name
    ));
    report.notes.push("scenario.json beside this report replays the run exactly: gpulab run platform --scenario scenario.json; architecture.svg beside it is the platform diagram at the end of the run".into());
    report
}

/// The canary's steps that decide nothing: the last decision is the last action not among them.
const STEPS: [&str; 3] = ["share raised", "canary started", gate::PASSED];

/// The conditions the verdict's sentences assert (the property test re-checks each one).
mod cond {
    pub const SLO_MET: &str = "the share within the SLO reached the target";
    pub const SLO_MISSED: &str = "the share within the SLO fell short of the target";
    pub const DROPPED: &str = "some request timed out or was rejected";
    pub const NONE_LOST: &str = "spot reclaims re-queued requests, none timed out and none was left in flight";
    pub const REQUEUED_AT_RISK: &str = "spot reclaims re-queued requests, and some request timed out or was left in flight";
    pub const ON_DEMAND: &str = "part of the pool was spot, and workers were paid for";
    pub const ROLLED_BACK: &str = "the canary's last decision was a rollback";
    pub const PROMOTED: &str = "the canary's last decision was a promotion";
    pub const REFUSED: &str = "the canary's last decision was the evaluation gate's refusal";
    pub const GATE_PASSED: &str = "the candidate passed the evaluation gate";
    pub const UNFINISHED_CANARY: &str = "the canary was on, started, and made no decision";
    pub const NEVER_FINISHED_LONG: &str = "training gave up, at an interval longer than Daly's optimum";
    pub const NEVER_FINISHED_SHORT: &str = "training gave up, at an interval no longer than Daly's optimum";
}

fn claims(sc: &Scenario, r: &ServingResult, n: &ServingNumbers, tr: &TrainingRuns, young: f64, daly: f64) -> Claims {
    use gpulab_systems::report::Part::{Evidence, Summary};
    let t = &r.totals;
    let mut c = Claims::new();
    let met = n.within_slo >= sc.slo_target;
    let slo = |word: &str| {
        format!(
            "{word} {:.2}% of requests were answered within {:.0} ms without error (target {:.1}%), at ${:.3} per 1,000 requests and ${:.2}/h with {:.0}% mean utilisation.",
            n.within_slo * 100.0,
            sc.slo_latency_s * 1e3,
            sc.slo_target * 100.0,
            n.cost_per_1k,
            n.cost_per_h,
            n.utilisation * 100.0
        )
    };
    c.one_of(Summary, vec![(cond::SLO_MET, met, slo("SLO met:")), (cond::SLO_MISSED, !met, slo("SLO missed:"))]);
    if let Some(worst) =
        r.samples.iter().filter(|s| s.p95_s.is_some()).max_by(|a, b| a.p95_s.unwrap_or(0.0).total_cmp(&b.p95_s.unwrap_or(0.0)))
    {
        c.fact(
            Evidence,
            format!(
                "The worst p95 latency, {:.0} ms, came at {:.2} h with {} workers serving, {} starting and {} requests queued at {:.1} requests/s offered.",
                worst.p95_s.unwrap_or(0.0) * 1e3,
                worst.t_h,
                worst.ready,
                worst.starting,
                worst.queue,
                worst.offered_rps
            ),
        );
    }
    c.evidence(
        cond::DROPPED,
        t.timed_out + t.rejected > 0,
        format!(
            "{} requests timed out in the queue and {} were rejected by the rate limit, of {} that arrived.",
            t.timed_out, t.rejected, t.arrived
        ),
    );
    if t.preemptions > 0 {
        // A re-queued request is served, times out in the queue, or is still in flight at the end.
        let left = r.samples.last().map_or(0, |s| s.in_flight);
        let put = format!("{} spot reclaims put {} in-flight requests back at the front of the queue", t.preemptions, t.requeued);
        c.one_of(
            Evidence,
            vec![
                (cond::NONE_LOST, t.timed_out == 0 && left == 0, format!("{put}; none was lost: no request timed out and none was left in flight.")),
                (
                    cond::REQUEUED_AT_RISK,
                    t.timed_out > 0 || left > 0,
                    format!("{put} instead of dropping them; a re-queued request can still time out ({} timed out in all, re-queued or not, and {left} were still in flight at the end).", t.timed_out),
                ),
            ],
        );
    }
    let on_demand_cost = t.worker_area / 3600.0 * sc.pool.gpu.on_demand_per_h;
    c.evidence(
        cond::ON_DEMAND,
        on_demand_cost > 0.0 && sc.pool.spot_share > 0.0,
        format!("All on-demand, the same worker-hours would have cost ${on_demand_cost:.2} instead of ${:.2}.", t.cost),
    );
    let last = r.canary.iter().rev().find(|e| !STEPS.contains(&e.action.as_str()));
    if let Some(e) = r.canary.iter().find(|e| e.action == gate::PASSED) {
        c.evidence(cond::GATE_PASSED, true, format!("v2 passed the evaluation gate before any traffic reached it: {}.", e.reason));
    }
    let start = r.canary.first().map_or(0.0, |s| s.t_h);
    c.one_of(
        Summary,
        vec![
            (
                cond::ROLLED_BACK,
                last.is_some_and(|e| e.action == "rolled back"),
                last.map(|e| {
                    format!(
                        "The canary rolled back automatically at {:.2} h, {:.0} min after it started: {}.",
                        e.t_h,
                        (e.t_h - start) * 60.0,
                        e.reason
                    )
                })
                .unwrap_or_default(),
            ),
            (
                cond::REFUSED,
                last.is_some_and(|e| e.action == gate::REFUSED),
                last.map(|e| format!("v2 never reached production: it was refused by the evaluation gate at {:.2} h ({}), so no request was served by it.", e.t_h, e.reason))
                    .unwrap_or_default(),
            ),
            (
                cond::PROMOTED,
                last.is_some_and(|e| e.action == "promoted to production"),
                last.map(|e| format!("v2 was promoted to production at {:.2} h after every canary window passed.", e.t_h))
                    .unwrap_or_default(),
            ),
            (
                cond::UNFINISHED_CANARY,
                last.is_none() && sc.canary.enabled && !r.canary.is_empty(),
                "The canary had not finished when the simulation ended.".into(),
            ),
        ],
    );
    let interval = sc.training.checkpoint_interval_h;
    let gave_up = format!(
        "Training never finished in the simulation: with checkpoints every {:.0} min and a preemption every {:.2} h on average, the job gave up after {:.0} preemptions per run or 1000 times its work",
        interval * 60.0,
        sc.training.mtbf_h,
        training::MAX_PREEMPTIONS
    );
    c.one_of(
        Summary,
        vec![
            (
                cond::NEVER_FINISHED_LONG,
                !tr.chosen.finished && interval > daly,
                format!("{gave_up}; checkpoint more often (Daly's optimum: {}).", interval_h(daly)),
            ),
            (
                cond::NEVER_FINISHED_SHORT,
                !tr.chosen.finished && interval <= daly,
                format!(
                    "{gave_up}, though its interval is no longer than Daly's optimum ({}): preemptions come too often for this job.",
                    interval_h(daly)
                ),
            ),
        ],
    );
    let pen = tr.chosen.wall_h / tr.at_daly.wall_h.max(1e-12) - 1.0;
    if sc.training.spot {
        c.fact(
            Summary,
            format!(
                "Training on spot took {:.1} h with checkpoints every {}, {:+.1}% against Daly's optimum of {} ({:.1} h).",
                tr.chosen.wall_h,
                interval_h(interval),
                pen * 100.0,
                interval_h(daly),
                tr.at_daly.wall_h
            ),
        );
        let spot_cost = tr.chosen.wall_h * sc.training.gpus as f64 * sc.training.gpu.spot_per_h;
        let od_cost = tr.on_demand.wall_h * sc.training.gpus as f64 * sc.training.gpu.on_demand_per_h;
        c.fact(
            Evidence,
            format!("Training on spot cost ${spot_cost:.0} against ${od_cost:.0} on demand ({:.1} h), losing {:.2} h of work to preemptions on average.", tr.on_demand.wall_h, tr.chosen.lost_h),
        );
    }
    if let Some(b) = training::best(&tr.sweep) {
        c.fact(
            Evidence,
            format!(
                "The interval sweep's shortest mean time was at {}; Young's √(2CM) gives {}, Daly's higher-order form {}.",
                interval_h(b.tau_h),
                interval_h(young),
                interval_h(daly)
            ),
        );
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpulab_systems::platform::{CanaryEvent, Sample, SimTotals};
    use proptest::prelude::*;

    fn sample(in_flight: u64) -> Sample {
        Sample {
            t_h: 1.0,
            offered_rps: 10.0,
            arrived_rps: 10.0,
            served_rps: 10.0,
            rejected: 0,
            timed_out: 0,
            ready: 2,
            starting: 0,
            busy: 1,
            queue: 0,
            p50_s: Some(0.01),
            p95_s: Some(0.02),
            p99_s: Some(0.03),
            within_slo: Some(0.99),
            cost_per_h: 1.0,
            canary_share: 0.0,
            arrived_total: 100,
            served_total: 100,
            rejected_total: 0,
            timed_out_total: 0,
            in_flight,
        }
    }

    fn job(finished: bool) -> JobOutcome {
        JobOutcome { wall_h: 10.0, lost_h: 1.0, restart_h: 0.5, checkpoint_h: 0.2, preemptions: 3.0, finished }
    }

    proptest! {
        /// SLO met or missed, reclaims with or without loss, each canary outcome, training that
        /// finished or gave up at a short or a long interval: every sentence printed is true.
        #[test]
        fn every_printed_claim_holds(
            (within, target) in (0.0f64..1.0, 0.5f64..1.0),
            (timed_out, rejected, preemptions, in_flight) in (0u64..3, 0u64..3, 0u64..3, 0u64..3),
            actions in proptest::collection::vec(0usize..6, 0..4),
            (finished, interval_h, spot_share) in (any::<bool>(), 0.01f64..10.0, prop_oneof![Just(0.0), 0.1f64..1.0]),
        ) {
            let mut sc = Scenario::preset("steady-day").expect("a preset");
            sc.slo_target = target;
            sc.training.checkpoint_interval_h = interval_h;
            sc.pool.spot_share = spot_share;
            let names = ["canary started", "share raised", "rolled back", "promoted to production", gate::REFUSED, gate::PASSED];
            let r = ServingResult {
                samples: vec![sample(in_flight)],
                totals: SimTotals { arrived: 100, served: 95, timed_out, rejected, preemptions, requeued: preemptions * 4, worker_area: 7200.0, cost: 3.0, ..Default::default() },
                canary: actions.iter().enumerate().map(|(i, &a)| CanaryEvent { t_h: i as f64, action: names[a].into(), share: 0.1, v1: None, v2: None, reason: "why".into() }).collect(),
                ..Default::default()
            };
            let n = ServingNumbers { within_slo: within, cost_per_1k: 0.1, cost_per_h: 1.0, utilisation: 0.5 };
            let tr = TrainingRuns { on_demand: job(true), chosen: job(finished), at_daly: job(true), sweep: Vec::new() };
            let daly = training::daly_h(&sc.training);
            let claims = claims(&sc, &r, &n, &tr, training::young_h(&sc.training), daly);
            let last = r.canary.iter().rev().find(|e| !["share raised", "canary started", gate::PASSED].contains(&e.action.as_str()));
            claims
                .audit(|c| Some(match c.condition {
                    cond::SLO_MET => within >= target,
                    cond::SLO_MISSED => within < target,
                    cond::DROPPED => timed_out + rejected > 0,
                    cond::NONE_LOST => preemptions > 0 && timed_out == 0 && in_flight == 0,
                    cond::REQUEUED_AT_RISK => preemptions > 0 && (timed_out > 0 || in_flight > 0),
                    cond::ON_DEMAND => spot_share > 0.0,
                    cond::ROLLED_BACK => last?.action == "rolled back",
                    cond::PROMOTED => last?.action == "promoted to production",
                    cond::REFUSED => last?.action == gate::REFUSED,
                    cond::GATE_PASSED => r.canary.iter().any(|e| e.action == gate::PASSED),
                    cond::UNFINISHED_CANARY => last.is_none() && !r.canary.is_empty() && sc.canary.enabled,
                    cond::NEVER_FINISHED_LONG => !finished && interval_h > daly,
                    cond::NEVER_FINISHED_SHORT => !finished && interval_h <= daly,
                    _ => return None,
                }))
                .map_err(TestCaseError::fail)?;
            prop_assert!(claims.has_summary());
        }
    }
}
