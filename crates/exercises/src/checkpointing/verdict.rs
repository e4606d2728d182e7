//! Exercise 5's verdict: the run's outcome as the verdict reads it, and the sentences it asserts
//! about it (re-checked by a property test).

use super::report::{Comparison, GPU_TOLERANCE};
use crate::common::plural;
use gpulab_systems::report::{Claims, Part};

/// What the crash and the resume gave, as the verdict reads it.
pub(super) struct Outcome<'a> {
    pub(super) stopped_early: bool,
    pub(super) finished: bool,
    /// The last step the crashed process reported.
    pub(super) crash: u64,
    pub(super) steps_lost: u64,
    /// The step of the checkpoint the resume used; None when it started over.
    pub(super) resumed_from: Option<u64>,
    pub(super) cmp: &'a Comparison,
    /// Whether the final weights are bit-identical; None when they could not be compared.
    pub(super) weights_same: Option<bool>,
    pub(super) on_cpu: bool,
}

/// The conditions the verdict's sentences assert (the property test re-checks each one).
mod cond {
    pub const STOPPED: &str = "the run was stopped";
    pub const UNFINISHED: &str = "the resumed run did not finish, and nobody stopped it";
    pub const NOTHING_COMPARED: &str = "finished, with no loss step in common with the reference";
    pub const BIT_IDENTICAL: &str = "every compared loss and the final weights are bit-identical";
    pub const WEIGHTS_UNCOMPARED: &str = "every compared loss is bit-identical; the final weights were not compared";
    pub const WITHIN_TOLERANCE: &str = "off the CPU, some compared loss differs, every one within the f32 tolerance";
    pub const LOSSES_DIFFER: &str = "some compared loss differs (beyond tolerance, or on the CPU)";
    pub const WEIGHTS_DIFFER: &str = "every compared loss is bit-identical, the final weights are not";
}

/// The summary: what the crash lost and whether the resumed run reproduced the reference.
pub(super) fn summary(o: &Outcome) -> Claims {
    let mut c = Claims::new();
    let lost = format!("The crash after step {} lost {} of work", o.crash, plural(o.steps_lost as usize, "step"));
    let how = match o.resumed_from {
        Some(step) => format!("resuming from the checkpoint at step {step}"),
        None => "with no checkpoint that validated, starting over from step 0".into(),
    };
    let cmp = o.cmp;
    let done = !o.stopped_early && o.finished;
    let compared = done && cmp.steps > 0;
    let within = cmp.max_rel <= GPU_TOLERANCE;
    c.one_of(
        Part::Summary,
        vec![
            (cond::STOPPED, o.stopped_early, "The run was stopped before the resumed training finished, so there is no comparison yet.".into()),
            (cond::UNFINISHED, !o.stopped_early && !o.finished, "The resumed training did not finish (see the log), so there is no comparison.".into()),
            (cond::NOTHING_COMPARED, done && cmp.steps == 0, format!("{lost}; the resumed run logged no step the reference logged, so nothing could be compared.")),
            (
                cond::BIT_IDENTICAL,
                compared && cmp.identical && o.weights_same == Some(true),
                format!("{lost}; {how} reproduced the uninterrupted run bit for bit: all {} losses compared are identical (max difference 0) and so are the final weights.", cmp.steps),
            ),
            (
                cond::WEIGHTS_UNCOMPARED,
                compared && cmp.identical && o.weights_same.is_none(),
                format!("{lost}; {how} reproduced the uninterrupted run's losses bit for bit: all {} compared are identical (the final weights could not be compared).", cmp.steps),
            ),
            (
                cond::WITHIN_TOLERANCE,
                compared && !cmp.identical && !o.on_cpu && within,
                format!(
                    "{lost}; the resumed run matches the reference within f32 tolerance (max loss difference {:.2e}, relative {:.2e}) over {} — GPU reductions need not repeat bit for bit.",
                    cmp.max_abs,
                    cmp.max_rel,
                    gpulab_core::format::plural(cmp.steps as u64, "step")
                ),
            ),
            (
                cond::LOSSES_DIFFER,
                compared && !cmp.identical,
                format!(
                    "The resumed run is NOT identical to the reference: the loss first differs at step {}, max difference {:.3e} over {}{}.",
                    cmp.first_difference.map_or("—".into(), |s| s.to_string()),
                    cmp.max_abs,
                    gpulab_core::format::plural(cmp.steps as u64, "step"),
                    if o.weights_same == Some(false) { ", and the final weights differ" } else { "" }
                ),
            ),
            (
                cond::WEIGHTS_DIFFER,
                compared && cmp.identical && o.weights_same == Some(false),
                format!("The resumed run is NOT identical to the reference: its {} losses compared are, but its final weights differ.", cmp.steps),
            ),
        ],
    );
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Stopped or not, identical or not, on the CPU or a GPU, weights compared or not: the
        /// summary's one sentence is true of the outcome.
        #[test]
        fn the_printed_summary_holds(
            (stopped_early, finished, on_cpu) in (any::<bool>(), any::<bool>(), any::<bool>()),
            (steps, identical, max_rel) in (0usize..50, any::<bool>(), prop_oneof![Just(0.0), 0.0f64..1e-3]),
            weights_same in proptest::option::of(any::<bool>()),
            resumed_from in proptest::option::of(0u64..100),
        ) {
            let cmp = Comparison { steps, identical, first_difference: (!identical).then_some(7), max_abs: max_rel, max_rel };
            let o = Outcome { stopped_early, finished, crash: 120, steps_lost: 20, resumed_from, cmp: &cmp, weights_same, on_cpu };
            let claims = summary(&o);
            let compared = !stopped_early && finished && steps > 0;
            claims
                .audit(|c| Some(match c.condition {
                    cond::STOPPED => stopped_early,
                    cond::UNFINISHED => !stopped_early && !finished,
                    cond::NOTHING_COMPARED => !stopped_early && finished && steps == 0,
                    cond::BIT_IDENTICAL => compared && identical && weights_same == Some(true),
                    cond::WEIGHTS_UNCOMPARED => compared && identical && weights_same.is_none(),
                    cond::WITHIN_TOLERANCE => compared && !identical && !on_cpu && max_rel <= GPU_TOLERANCE,
                    cond::LOSSES_DIFFER => compared && !identical,
                    cond::WEIGHTS_DIFFER => compared && identical && weights_same == Some(false),
                    _ => return None,
                }))
                .map_err(TestCaseError::fail)?;
            prop_assert_eq!(claims.printed().count(), 1, "exactly one summary sentence");
            if let (true, Some(step)) = (compared && identical && weights_same == Some(true), resumed_from) {
                let want = format!("checkpoint at step {step}");
                prop_assert!(claims.verdict().summary.contains(&want));
            }
        }
    }
}
