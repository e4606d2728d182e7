//! Exercise 10's verdict: the sentences it asserts about the simulated platform's numbers
//! (re-checked by a property test).

use super::report::{ServingNumbers, TrainingRuns};
use crate::common::interval_h;
use gpulab_core::format::plural;
use gpulab_systems::platform::serving::canary as gate;
use gpulab_systems::platform::training;
use gpulab_systems::platform::{Scenario, ServingResult};
use gpulab_systems::report::Claims;

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

pub(super) fn claims(sc: &Scenario, r: &ServingResult, n: &ServingNumbers, tr: &TrainingRuns, young: f64, daly: f64) -> Claims {
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
    let last = r.canary.iter().rev().find(|e| !STEPS.contains(&e.action.as_str()));
    if let Some(e) = r.canary.iter().find(|e| e.action == gate::PASSED) {
        c.evidence(cond::GATE_PASSED, true, format!("v2 passed the evaluation gate before any traffic reached it: {}.", e.reason));
    }
    let start = r.canary.first().map_or(0.0, |s| s.t_h);
    // The summary answers serving (the SLO and its cost) and training (spot and checkpoints) in
    // two sentences; the canary's outcome leads the evidence.
    c.one_of(
        Evidence,
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
    if let Some(worst) =
        r.samples.iter().filter(|s| s.p95_s.is_some()).max_by(|a, b| a.p95_s.unwrap_or(0.0).total_cmp(&b.p95_s.unwrap_or(0.0)))
    {
        c.fact(
            Evidence,
            format!(
                "The worst p95 latency, {:.0} ms, came at {:.2} h with {} serving, {} starting and {} queued at {:.1} requests/s offered.",
                worst.p95_s.unwrap_or(0.0) * 1e3,
                worst.t_h,
                plural(worst.ready as u64, "worker"),
                worst.starting,
                plural(worst.queue, "request"),
                worst.offered_rps
            ),
        );
    }
    c.evidence(
        cond::DROPPED,
        t.timed_out + t.rejected > 0,
        format!(
            "{} timed out in the queue and {} rejected by the rate limit, of {} that arrived.",
            plural(t.timed_out, "request"),
            t.rejected,
            t.arrived
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
        // A job that never finished has said so in the summary already.
        c.fact(
            if tr.chosen.finished { Summary } else { Evidence },
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
    use gpulab_systems::platform::training::JobOutcome;
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
            good_total: 99,
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
            let summary = claims.verdict().summary;
            prop_assert!(summary.split_terminator(". ").count() <= 2, "more than two sentences: {}", summary);
        }
    }
}
