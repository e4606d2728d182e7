//! Exercise 7's verdict: each run's numbers as the verdict reads them, and the sentences it
//! asserts about them (re-checked by a property test).

use gpulab_systems::profile::session::ProfiledRun;
use gpulab_systems::report::{Claims, Verdict};

/// One profiled run, as the verdict reads it.
#[derive(Clone, Debug, PartialEq)]
struct Profiled {
    samples_per_s: f64,
    bottleneck: &'static str,
    /// The diagnosis's own sentences (checked by profile::verdict's property test).
    summary: String,
    evidence: Vec<String>,
}

impl Profiled {
    fn of(r: &ProfiledRun) -> Self {
        Profiled {
            samples_per_s: r.train.samples_per_s,
            bottleneck: r.diagnosis.bottleneck.name(),
            summary: r.diagnosis.summary.clone(),
            evidence: r.diagnosis.evidence.clone(),
        }
    }
}

/// The conditions the verdict's sentences assert (the property test re-checks each one).
mod cond {
    pub const GAINED: &str = "the second run's throughput was above the first's";
    pub const NOT_GAINED: &str = "the second run's throughput was not above the first's";
}

pub(super) fn verdict(runs: &[ProfiledRun], fix: Option<&str>) -> Verdict {
    claims(&runs.iter().map(Profiled::of).collect::<Vec<_>>(), fix).verdict()
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
            let up = second.samples_per_s > first.samples_per_s;
            c.one_of(
                Summary,
                vec![
                    (
                        cond::GAINED,
                        up,
                        format!("Applied it ({fix}) and measured again: {gain:.2}× the throughput; now {}.", second.bottleneck),
                    ),
                    (
                        cond::NOT_GAINED,
                        !up,
                        format!(
                            "Applied it ({fix}) and measured again: the throughput did not rise ({gain:.2}×); now {}.",
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
        (1.0f64..1e5).prop_map(|samples_per_s| Profiled {
            samples_per_s,
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
            let up = || Some(runs.get(1)?.samples_per_s > runs.first()?.samples_per_s);
            claims
                .audit(|c| match c.condition {
                    cond::GAINED => up(),
                    cond::NOT_GAINED => up().map(|u| !u),
                    _ => None,
                })
                .map_err(TestCaseError::fail)?;
            prop_assert_eq!(claims.has_summary(), !runs.is_empty());
        }
    }
}
