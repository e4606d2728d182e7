//! Exercise 10's report: the serving platform's figures, charts and tables, the training job
//! with its checkpoint-interval sweep, the canary timeline, and a verdict from those numbers.

use super::verdict::claims;
use super::{PlatformLab, simulated};
use crate::common::report_for;
use crate::settings::Settings;
use crate::settings::platform::Config;
use gpulab_systems::platform::monitoring;
use gpulab_systems::platform::training::{self, JobOutcome, SweepPoint};
use gpulab_systems::platform::{Scenario, ServingResult};
use gpulab_systems::report::{Attachment, Cell, Chart, Column, Figure, Metadata, Provenance, Report, Series, Table};

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
    Chart::line(id, title, x, y)
        .with_series(series.into_iter().map(|(name, points)| Series { name: name.into(), points, provenance: simulated() }).collect())
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
    c: &Config,
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
    if c.calibration == "this-machine" {
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
