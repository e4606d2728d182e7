//! Exercise 7's verdict: each run's numbers as the verdict reads them, and the sentences it
//! asserts about them (re-checked by a property test).

use crate::noise::{Judged, judge, run_spread};
use gpulab_core::stats::Spread;
use gpulab_systems::profile::session::ProfiledRun;
use gpulab_systems::report::{Claims, Verdict};
use gpulab_systems::train::Window;

/// One profiled run, as the verdict reads it.
#[derive(Clone, Debug, PartialEq)]
struct Profiled {
    samples_per_s: f64,
    /// The spread of the throughput's repeats: epochs, or log windows (`noise::run_spread`).
    spread: Option<Spread>,
    bottleneck: &'static str,
    /// The diagnosis's own sentences (checked by profile::verdict's property test).
    summary: String,
    evidence: Vec<String>,
}

impl Profiled {
    fn of(r: &ProfiledRun, windows: &[Window]) -> Self {
        Profiled {
            samples_per_s: r.train.samples_per_s,
            spread: run_spread(&r.train, windows),
            bottleneck: r.diagnosis.bottleneck.name(),
            summary: r.diagnosis.summary.clone(),
            evidence: r.diagnosis.evidence.clone(),
        }
    }
}

/// The conditions the verdict's sentences assert (the property test re-checks each one).
mod cond {
    pub const GAINED: &str = "the second run's throughput judged above the first's";
    pub const WITHIN_NOISE: &str = "the two runs' throughputs within noise";
    pub const NOT_GAINED: &str = "the second run's throughput judged below the first's, or within 5% in one measurement";
}

pub(super) fn verdict(runs: &[ProfiledRun], windows: &[Vec<Window>], fix: Option<&str>) -> Verdict {
    let none = Vec::new();
    claims(&runs.iter().enumerate().map(|(i, r)| Profiled::of(r, windows.get(i).unwrap_or(&none))).collect::<Vec<_>>(), fix).verdict()
}

/// The first run's diagnosis, and what applying its fix changed.
fn claims(runs: &[Profiled], fix: Option<&str>) -> Claims {
    use gpulab_systems::report::Part::{Evidence, Summary};
    let mut c = Claims::new();
    let Some(first) = runs.first() else { return c };
    c.fact(Summary, first.summary.clone());
    for e in &first.evidence {
        c.fact(Evidence, e.clone());
    }
    match (runs.get(1), fix) {
        (Some(second), Some(fix)) => {
            let gain = second.samples_per_s / first.samples_per_s.max(1e-12);
            // Judged by the repeats' spread (`noise::judge`; epochs, or log windows: `noise::run_spread`).
            let j = judge(second.spread.as_ref(), first.spread.as_ref(), gain);
            c.one_of(
                Summary,
                vec![
                    (
                        cond::GAINED,
                        j.higher(),
                        format!("Applied it ({fix}) and measured again: {gain:.2}× the throughput{}; now {}.", j.tag(), second.bottleneck),
                    ),
                    (
                        cond::WITHIN_NOISE,
                        j == Judged::WithinNoise,
                        format!(
                            "Applied it ({fix}) and measured again: {gain:.2}× the throughput, within noise; now {}.",
                            second.bottleneck
                        ),
                    ),
                    (
                        cond::NOT_GAINED,
                        j.lower() || j == Judged::OnceSame,
                        format!(
                            "Applied it ({fix}) and measured again: the throughput did not rise ({gain:.2}×{}); now {}.",
                            j.tag().replace(" (", ", ").trim_end_matches(')'),
                            second.bottleneck
                        ),
                    ),
                ],
            );
            c.fact(
                Evidence,
                format!(
                    "Measured again after applying {fix}: {:.0} → {:.0} samples/s ({gain:.2}×); the second run is {}.",
                    first.samples_per_s, second.samples_per_s, second.bottleneck
                ),
            );
            for e in &second.evidence {
                c.fact(Evidence, format!("Run 2: {e}"));
            }
        }
        (None, Some(fix)) => {
            c.fact(Summary, format!("(Not applied: {fix}.)"));
        }
        (_, None) => {
            c.fact(Summary, "No one-click change applies here; the next step is the chapter's advice above.");
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run() -> impl Strategy<Value = Profiled> {
        (1.0f64..1e5, proptest::collection::vec(0.5f64..2.0, 0..5)).prop_map(|(samples_per_s, each)| Profiled {
            samples_per_s,
            spread: Spread::of(&each.iter().map(|e| e * samples_per_s).collect::<Vec<_>>()),
            bottleneck: "input-bound",
            summary: "This run is input-bound.".into(),
            evidence: vec!["e".into()],
        })
    }

    proptest! {
        /// A fix that helped or did not, applied or not: every sentence printed is true.
        #[test]
        fn every_printed_claim_holds(runs in proptest::collection::vec(run(), 0..3), fix in proptest::option::of(Just("more workers"))) {
            let claims = claims(&runs, fix);
            let judged = || {
                let (a, b) = (runs.get(1)?, runs.first()?);
                Some(crate::noise::restated(a.spread, b.spread, a.samples_per_s / b.samples_per_s))
            };
            claims
                .audit(|c| match c.condition {
                    cond::GAINED => judged().map(|j| j == "up"),
                    cond::WITHIN_NOISE => judged().map(|j| j == "noise"),
                    cond::NOT_GAINED => judged().map(|j| j == "down" || j == "same"),
                    _ => None,
                })
                .map_err(TestCaseError::fail)?;
            prop_assert_eq!(claims.has_summary(), !runs.is_empty());
        }
    }
}
