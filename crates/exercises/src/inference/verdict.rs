//! Exercise 8's verdict: each serving run's numbers as the verdict reads them, and the sentences
//! it asserts about them (re-checked by a property test).

use super::report::meets;
use super::runs::RunResult;
use crate::cost::Price;
use gpulab_systems::report::Claims;
use gpulab_systems::serve::loadgen::Arrivals;

/// One serving run, as the verdict reads it.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct ServeRun {
    pub(super) label: String,
    pub(super) max_batch: usize,
    pub(super) max_queue_delay_us: u64,
    /// Requests/s offered (open loop); None for a closed loop.
    pub(super) offered: Option<f64>,
    pub(super) throughput: f64,
    pub(super) p99_ms: f64,
    pub(super) mean_batch: f64,
    pub(super) batch_ms: f64,
    pub(super) max_depth: usize,
    pub(super) refused: usize,
    pub(super) overloaded: bool,
    pub(super) meets_slo: bool,
    /// US dollars per 1,000 predictions served, at the assumed hourly price.
    pub(super) usd_per_1000: f64,
}

impl ServeRun {
    pub(super) fn of(r: &RunResult, slo_ms: f64, price: &Price) -> Self {
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
pub(super) fn claims(statics: &[ServeRun], dynamics: &[ServeRun], slo: f64, (inf, tr, memory_batch): (u64, u64, usize)) -> Claims {
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
                // The sweep varies the load, not the batching setting: it names the one it ran.
                "With max batch {} and max queue delay {} µs (as set), the most served within p99 ≤ {slo} ms was {:.0} requests/s, at {} (p99 {:.2} ms, mean batch {:.1}; one measurement per load).",
                r.max_batch, r.max_queue_delay_us, r.throughput, r.label, r.p99_ms, r.mean_batch
            ),
        );
        if let Some(b1) = b1 {
            c.fact(Summary, format!("That is {:.1}× what batch-1 serving sustains.", r.throughput / b1.throughput.max(1e-9)));
            let [x, y] = <[String; 2]>::try_from(gpulab_core::format::money_per_all(
                &[r.usd_per_1000 / 1000.0, b1.usd_per_1000 / 1000.0],
                "prediction",
            ))
            .unwrap_or_default();
            let at = format!("At the assumed hourly price predictions cost {} there against {} at batch 1", x, y);
            c.one_of(
                Evidence,
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
