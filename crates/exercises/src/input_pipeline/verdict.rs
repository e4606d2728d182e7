//! Exercise 4's verdict: each pipeline step's numbers as the verdict reads them, and the
//! sentences it asserts about them (re-checked by a property test).

use crate::common;
use crate::noise::{Judged, judge, run_spread};
use gpulab_core::stats::Spread;
use gpulab_systems::profile::session::ProfiledRun;
use gpulab_systems::report::{Claims, Verdict};
use gpulab_systems::train::Window;

/// One pipeline step's run, as the verdict reads it.
#[derive(Clone, Debug, PartialEq)]
struct StepFigures {
    label: String,
    samples_per_s: f64,
    /// The spread of the throughput's repeats: epochs, or log windows (`noise::run_spread`).
    spread: Option<Spread>,
    /// Mean data wait per step, seconds.
    data_wait_s: f64,
    /// Data wait over the main thread's wall time.
    wait_share: f64,
    busy: Option<f64>,
    bottleneck: &'static str,
    /// The diagnosis's first evidence line.
    why: String,
    /// (hits, misses) with the cache on.
    cache: Option<(u64, u64)>,
}

impl StepFigures {
    fn of(r: &ProfiledRun, windows: &[Window]) -> Self {
        let a = &r.diagnosis.analysis;
        StepFigures {
            label: r.label.clone(),
            samples_per_s: r.train.samples_per_s,
            spread: run_spread(&r.train, windows),
            data_wait_s: r.mean_data_wait_s(),
            wait_share: a.data_wait_s / a.wall_s.max(1e-12),
            busy: r.gpu_busy_fraction(),
            bottleneck: r.diagnosis.bottleneck.name(),
            why: r.diagnosis.evidence.first().cloned().unwrap_or_default(),
            cache: r.pipeline.cache.then_some((r.cache.hits, r.cache.misses)),
        }
    }
}

/// The conditions the verdict's sentences assert (the property test re-checks each one).
mod cond {
    pub const GAINED: &str = "the last step's throughput judged above the slow pipeline's";
    pub const WITHIN_NOISE: &str = "the last step's and the slow pipeline's throughputs within noise";
    pub const NOT_GAINED: &str = "the last step's throughput judged below the slow pipeline's, or within 5% in one measurement";
    pub const NONE: &str = "no pipeline step finished";
}

pub(super) fn verdict(runs: &[ProfiledRun], windows: &[Vec<Window>]) -> Verdict {
    let none = Vec::new();
    claims(&runs.iter().enumerate().map(|(i, r)| StepFigures::of(r, windows.get(i).unwrap_or(&none))).collect::<Vec<_>>()).verdict()
}

/// Computed from the runs: how starved the slow pipeline left the device, and what each change
/// bought.
fn claims(runs: &[StepFigures]) -> Claims {
    use gpulab_systems::report::Part::{Evidence, Summary};
    let mut c = Claims::new();
    let (Some(first), Some(last)) = (runs.first(), runs.last()) else {
        c.summary(cond::NONE, runs.is_empty(), "No pipeline step finished.");
        return c;
    };
    let busy = |r: &StepFigures| r.busy.map(|f| format!(", GPU busy {}", common::percent(f))).unwrap_or_default();
    c.fact(
        Summary,
        format!(
            "The slow pipeline spent {} of its time waiting for data ({:.2} ms per step{}) and was {}.",
            common::percent(first.wait_share),
            first.data_wait_s * 1e3,
            busy(first),
            first.bottleneck
        ),
    );
    if runs.len() > 1 {
        let gain = last.samples_per_s / first.samples_per_s.max(1e-12);
        let waited = format!(
            "\"{}\" waited {} ({:.2} ms per step{})",
            last.label,
            common::percent(last.wait_share),
            last.data_wait_s * 1e3,
            busy(last)
        );
        // Judged by the repeats' spread (`noise::judge`; epochs, or log windows: `noise::run_spread`).
        let j = judge(last.spread.as_ref(), first.spread.as_ref(), gain);
        c.one_of(
            Summary,
            vec![
                (cond::GAINED, j.higher(), format!("{waited} and ran at {gain:.1}× the throughput{}.", j.tag())),
                (
                    cond::WITHIN_NOISE,
                    j == Judged::WithinNoise,
                    format!("{waited} and ran at {gain:.2}× the throughput, within noise: no gain beyond the run-to-run spread."),
                ),
                (
                    cond::NOT_GAINED,
                    j.lower() || j == Judged::OnceSame,
                    format!("{waited} but ran at only {gain:.2}× the throughput{}: these fixes did not pay off on this machine.", j.tag()),
                ),
            ],
        );
    }
    for w in runs.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        c.fact(
            Evidence,
            format!(
                "{}: {:.0} → {:.0} samples/s ({:+.0}%), data wait {:.2} → {:.2} ms per step.",
                b.label,
                a.samples_per_s,
                b.samples_per_s,
                (b.samples_per_s / a.samples_per_s.max(1e-12) - 1.0) * 100.0,
                a.data_wait_s * 1e3,
                b.data_wait_s * 1e3
            ),
        );
    }
    if let Some((hits, misses)) = runs.iter().find_map(|r| r.cache) {
        c.fact(Evidence, format!("With the cache on, {hits} reads were served from memory and {misses} decoded."));
    }
    c.fact(Evidence, format!("After the last change the run is {}: {}", last.bottleneck, last.why));
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn step() -> impl Strategy<Value = StepFigures> {
        let each = proptest::collection::vec(0.5f64..2.0, 0..5);
        (1.0f64..1e5, each, 0.0f64..0.1, 0.0f64..1.0, proptest::option::of(0.0f64..1.0), any::<bool>()).prop_map(
            |(samples_per_s, each, data_wait_s, wait_share, busy, cache)| StepFigures {
                label: "step".into(),
                samples_per_s,
                spread: Spread::of(&each.iter().map(|e| e * samples_per_s).collect::<Vec<_>>()),
                data_wait_s,
                wait_share,
                busy,
                bottleneck: "input-bound",
                why: "evidence".into(),
                cache: cache.then_some((3, 1)),
            },
        )
    }

    proptest! {
        /// Fixes that pay off or do not: every sentence printed is true of the numbers, and each
        /// change has its evidence line.
        #[test]
        fn every_printed_claim_holds(runs in proptest::collection::vec(step(), 0..5)) {
            let claims = claims(&runs);
            let judged = || {
                let (a, b) = (runs.last()?, runs.first()?);
                Some(crate::noise::restated(a.spread, b.spread, a.samples_per_s / b.samples_per_s))
            };
            claims
                .audit(|c| match c.condition {
                    cond::GAINED => judged().map(|j| j == "up"),
                    cond::WITHIN_NOISE => judged().map(|j| j == "noise"),
                    cond::NOT_GAINED => judged().map(|j| j == "down" || j == "same"),
                    cond::NONE => Some(runs.is_empty()),
                    _ => None,
                })
                .map_err(TestCaseError::fail)?;
            prop_assert!(claims.has_summary());
            let v = claims.verdict();
            prop_assert_eq!(v.evidence.len(), if runs.is_empty() { 0 } else { runs.len() - 1 + 1 + runs.iter().any(|r| r.cache.is_some()) as usize });
        }
    }
}
