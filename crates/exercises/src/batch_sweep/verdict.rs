//! Exercise 2's verdict: each batch's numbers as the verdict reads them, and the sentences it
//! asserts about them (re-checked by a property test).

use super::OOM_RESPONSE;
use crate::common::{self, mib, peak, percent};
use crate::noise::{Judged, judge, throughput_spread};
use gpulab_core::stats::{MIN_REPEATS, Spread};
use gpulab_core::tensor::MemCategory;
use gpulab_systems::report::Claims;
use gpulab_systems::train::TrainReport;

/// One batch size's finished run, as the verdict reads it.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct BatchFigures {
    pub(super) batch: u64,
    pub(super) samples_per_s: f64,
    /// The spread of the epochs' throughputs (`noise::epoch_throughputs`).
    pub(super) spread: Option<Spread>,
    pub(super) val_accuracy: f64,
    pub(super) steps: u64,
    pub(super) epochs: usize,
    /// Peak bytes of parameters, gradients and optimizer state (the ledger).
    pub(super) fixed_bytes: u64,
    /// Peak bytes of activations and inputs.
    pub(super) varying_bytes: u64,
}

impl BatchFigures {
    pub(super) fn of(batch: u64, r: &TrainReport) -> Self {
        let p = |c| peak(&r.memory, c);
        BatchFigures {
            batch,
            samples_per_s: r.samples_per_s,
            spread: throughput_spread(r),
            val_accuracy: r.final_val_accuracy,
            steps: r.steps,
            epochs: r.epochs.len(),
            fixed_bytes: p(MemCategory::Parameters) + p(MemCategory::Gradients) + p(MemCategory::OptimizerState),
            varying_bytes: p(MemCategory::Activations) + p(MemCategory::Inputs),
        }
    }
}

/// The conditions the verdict's sentences assert (the property test re-checks each one).
mod cond {
    pub const BEST: &str = "no batch size had a higher throughput than this one, and none was within noise of it";
    pub const BEST_NEAR: &str = "no batch size had a higher throughput than this one, and the batches named were within noise of it";
    pub const RECOMMEND: &str =
        "the highest throughput among the batches within a point of the best accuracy, and no other such batch within noise of it";
    pub const RECOMMEND_TIED: &str = "within noise of the fastest batch within a point of the best accuracy (the batches named), and of those the best accuracy, then the smallest batch";
    pub const ONCE: &str = "some batch had under three epochs to judge its throughput's spread";
    pub const ROSE: &str = "throughput judged higher at every step up in batch size";
    pub const ROSE_UNEVENLY: &str = "the largest batch judged faster than the smallest, but not at every step up";
    pub const WITHIN_NOISE: &str = "the largest and smallest batches' throughputs within noise";
    pub const DID_NOT_RISE: &str = "the largest batch's throughput judged lower than the smallest's, or within 5% in one measurement";
    pub const PEAKED_INSIDE: &str = "the highest throughput was at a batch between the smallest and the largest, judged higher than both";
    pub const ACCURACY_FELL: &str = "over the same epochs, the largest batch took fewer steps and lost more than a point of accuracy";
    pub const ACCURACY_MOVED: &str = "accuracy fell by at most a point, rose, or the epochs differ";
    pub const FIXED_STEADY: &str = "parameter, gradient and optimizer bytes were within 2% of each other at every batch";
    pub const FIXED_VARIED: &str = "parameter, gradient and optimizer bytes differed by more than 2% between batches";
    pub const GREW: &str = "activation and input bytes grew from the smallest batch to the largest";
    pub const DID_NOT_GROW: &str = "activation and input bytes did not grow from the smallest batch to the largest";
    pub const OUT_OF_MEMORY: &str = "this batch ran out of memory";
    pub const SOME_OUT_OF_MEMORY: &str = "some batch ran out of memory";
    pub const NONE: &str = "no batch size finished or ran out of memory";
}

/// `a`'s throughput against `b`'s, judged by the epochs' spreads (`noise::judge`).
pub(super) fn pace(a: &BatchFigures, b: &BatchFigures) -> Judged {
    judge(a.spread.as_ref(), b.spread.as_ref(), a.samples_per_s / b.samples_per_s.max(1e-12))
}

/// Whether throughput was judged higher from each batch size to the next larger one.
fn rose_every_step(trained: &[BatchFigures]) -> bool {
    let mut by_batch: Vec<&BatchFigures> = trained.iter().collect();
    by_batch.sort_by_key(|t| t.batch);
    by_batch.windows(2).all(|w| pace(w[1], w[0]).higher())
}

/// The verdict: the batch to train with, the fastest batch, how throughput, accuracy and memory moved from the smallest
/// batch to the largest (whatever order `batch_sizes` gave), and the out-of-memory batches.
pub(super) fn verdict(trained: &[BatchFigures], oom: &[(u64, String)], budget: Option<u64>) -> Claims {
    use gpulab_systems::report::Part::{Evidence, Summary};
    let mut c = Claims::new();
    let best = trained.iter().max_by(|a, b| a.samples_per_s.total_cmp(&b.samples_per_s));
    // The lesson's question is which batch to train with: the fastest that does not give up
    // accuracy (within a point of the best). Where other such batches are within noise of it,
    // speed does not decide, so the best accuracy among them does (then the smaller batch,
    // which needs less memory).
    let top_acc = trained.iter().map(|t| t.val_accuracy).fold(f64::NAN, f64::max);
    let ok = |t: &&BatchFigures| (top_acc - t.val_accuracy) * 100.0 <= 1.0;
    let fastest = trained.iter().filter(ok).max_by(|a, b| a.samples_per_s.total_cmp(&b.samples_per_s));
    if let Some(f) = fastest {
        let tied: Vec<&BatchFigures> =
            trained.iter().filter(ok).filter(|t| t.batch != f.batch && pace(t, f) == Judged::WithinNoise).collect();
        let pick = std::iter::once(f)
            .chain(tied.iter().copied())
            .max_by(|a, b| a.val_accuracy.total_cmp(&b.val_accuracy).then(b.batch.cmp(&a.batch)))
            .unwrap_or(f);
        c.about(pick.batch.to_string()).one_of(
            Summary,
            vec![
                (
                    cond::RECOMMEND,
                    tied.is_empty(),
                    format!(
                        "Train with batch {}: {:.0} samples/s at {} accuracy, the fastest batch within a point of the best accuracy ({}).",
                        pick.batch,
                        pick.samples_per_s,
                        percent(pick.val_accuracy),
                        percent(top_acc)
                    ),
                ),
                (
                    cond::RECOMMEND_TIED,
                    !tied.is_empty(),
                    format!(
                        "Train with batch {}: {} {} {} within noise of the fastest, batch {} ({:.0} samples/s), so speed does not decide, and batch {} had the best accuracy of them, {}.",
                        pick.batch,
                        if tied.len() == 1 { "batch" } else { "batches" },
                        tied.iter().map(|t| t.batch.to_string()).collect::<Vec<_>>().join(" and "),
                        if tied.len() == 1 { "was" } else { "were" },
                        f.batch,
                        f.samples_per_s,
                        pick.batch,
                        percent(pick.val_accuracy)
                    ),
                ),
            ],
        );
        c.about("");
        c.evidence(
            cond::ONCE,
            trained.iter().any(|t| t.spread.is_none_or(|s| s.n < MIN_REPEATS)),
            "These throughputs are one measurement per batch (under three epochs): train more epochs to see how much they vary.",
        );
    }
    if let Some(best) = best {
        let mut near: Vec<u64> =
            trained.iter().filter(|t| t.batch != best.batch && pace(t, best) == Judged::WithinNoise).map(|t| t.batch).collect();
        near.sort_unstable();
        let near: Vec<String> = near.iter().map(u64::to_string).collect();
        let top = trained.iter().all(|t| t.samples_per_s <= best.samples_per_s);
        let said = format!("Batch {} gave the highest throughput, {:.0} samples/s", best.batch, best.samples_per_s);
        c.about(best.batch.to_string()).one_of(
            Evidence,
            vec![
                (cond::BEST, top && near.is_empty(), format!("{said}.")),
                (
                    cond::BEST_NEAR,
                    top && !near.is_empty(),
                    format!("{said}, but within noise of batch {}: no faster beyond the spread.", near.join(" and ")),
                ),
            ],
        );
        c.about("");
    }
    let lo = trained.iter().min_by_key(|t| t.batch);
    let hi = trained.iter().max_by_key(|t| t.batch);
    if let (Some(lo), Some(hi), Some(best)) = (lo, hi, best)
        && lo.batch != hi.batch
    {
        let ratio = hi.samples_per_s / lo.samples_per_s.max(1e-12);
        let overall = pace(hi, lo);
        let went = format!(
            "Throughput went from {:.0} samples/s at batch {} to {:.0} at batch {} ({ratio:.2}×{})",
            lo.samples_per_s,
            lo.batch,
            hi.samples_per_s,
            hi.batch,
            overall.tag().replace(" (", ", ").trim_end_matches(')')
        );
        c.one_of(
            Evidence,
            vec![
                (
                    cond::ROSE,
                    overall.higher() && rose_every_step(trained),
                    format!("{went}: bigger batches spread each step's fixed costs over more samples."),
                ),
                (
                    cond::ROSE_UNEVENLY,
                    overall.higher() && !rose_every_step(trained),
                    format!(
                        "{went}, but not at every step up: between some sizes the difference was inside the noise, or throughput fell."
                    ),
                ),
                (
                    cond::WITHIN_NOISE,
                    overall == Judged::WithinNoise,
                    format!("{went}: the batch size did not change the throughput beyond its spread at these sizes."),
                ),
                (
                    cond::DID_NOT_RISE,
                    overall.lower() || overall == Judged::OnceSame,
                    format!("{went}: larger batches did not raise the throughput on this backend at these sizes."),
                ),
            ],
        );
        c.evidence(
            cond::PEAKED_INSIDE,
            best.batch != lo.batch && best.batch != hi.batch && pace(best, lo).higher() && pace(best, hi).higher(),
            format!("Throughput peaked in between, at batch {}.", best.batch),
        );
        let d_acc = (hi.val_accuracy - lo.val_accuracy) * 100.0;
        let same_epochs = lo.epochs == hi.epochs;
        c.one_of(
            Evidence,
            vec![(
                cond::ACCURACY_FELL,
                same_epochs && hi.steps < lo.steps && d_acc < -1.0,
                format!(
                    "But accuracy after the same {} fell from {} to {}: batch {} took only {} against {} — fewer, larger steps learn less per epoch at the same learning rate.",
                    common::plural(lo.epochs, "epoch"),
                    percent(lo.val_accuracy),
                    percent(hi.val_accuracy),
                    hi.batch,
                    gpulab_core::format::plural(hi.steps, "step"),
                    lo.steps
                ),
            )],
        );
        c.evidence(
            cond::ACCURACY_MOVED,
            !(same_epochs && hi.steps < lo.steps && d_acc < -1.0),
            format!("Accuracy after the epoch budget moved by {d_acc:+.2} points between batch {} and {}.", lo.batch, hi.batch),
        );
        let (fmin, fmax) = trained.iter().fold((u64::MAX, 0), |(a, b), t| (a.min(t.fixed_bytes), b.max(t.fixed_bytes)));
        let kib = |b: u64| b as f64 / 1024.0;
        let steady = (fmax - fmin) as f64 <= 0.02 * fmax as f64;
        c.one_of(
            Evidence,
            vec![
                (
                    cond::FIXED_STEADY,
                    steady,
                    if fmin == fmax {
                        format!("Parameters, gradients and optimizer state stayed at {:.1} KiB at every batch size.", kib(fmax))
                    } else {
                        format!(
                            "Parameters, gradients and optimizer state stayed between {:.1} and {:.1} KiB at every batch size.",
                            kib(fmin),
                            kib(fmax)
                        )
                    },
                ),
                (
                    cond::FIXED_VARIED,
                    !steady,
                    format!(
                        "Parameters, gradients and optimizer state ranged from {:.1} to {:.1} KiB across the batch sizes.",
                        kib(fmin),
                        kib(fmax)
                    ),
                ),
            ],
        );
        let per_sample = (hi.varying_bytes as f64 - lo.varying_bytes as f64) / (hi.batch - lo.batch) as f64;
        c.one_of(
            Evidence,
            vec![
                (
                    cond::GREW,
                    hi.varying_bytes > lo.varying_bytes,
                    format!("Activations and inputs grew by about {per_sample:.0} bytes per sample in the batch."),
                ),
                (
                    cond::DID_NOT_GROW,
                    hi.varying_bytes <= lo.varying_bytes,
                    format!(
                        "Activations and inputs did not grow from batch {} to batch {} ({:.1} → {:.1} KiB).",
                        lo.batch,
                        hi.batch,
                        kib(lo.varying_bytes),
                        kib(hi.varying_bytes)
                    ),
                ),
            ],
        );
    }
    // One summary sentence for every batch that did not fit, so the summary stays two sentences.
    if !oom.is_empty() {
        let names: Vec<String> = oom.iter().map(|(b, _)| b.to_string()).collect();
        c.summary(
            cond::SOME_OUT_OF_MEMORY,
            true,
            format!(
                "{} {} did not fit{}.",
                if names.len() == 1 { "Batch" } else { "Batches" },
                names.join(", "),
                budget.map(|x| format!(" in the {:.2} MiB budget", mib(x))).unwrap_or_default()
            ),
        );
    }
    for (b, m) in oom {
        c.about(b.to_string());
        c.evidence(cond::OUT_OF_MEMORY, true, format!("Batch {b}: {m}"));
    }
    c.about("");
    c.evidence(cond::SOME_OUT_OF_MEMORY, !oom.is_empty(), format!("The systematic response to an out-of-memory: {OOM_RESPONSE}."));
    c.summary(cond::NONE, trained.is_empty() && oom.is_empty(), "No batch size finished; see the status column.");
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpulab_systems::report::Claim;
    use proptest::prelude::*;

    fn batch() -> impl Strategy<Value = BatchFigures> {
        let each = proptest::collection::vec(0.5f64..2.0, 0..5);
        (1u64..5000, 1.0f64..1e5, each, 0.0f64..1.0, 1u64..1000, 1usize..4, 1000u64..1_000_000, 0u64..10_000_000).prop_map(
            |(batch, samples_per_s, each, val_accuracy, steps, epochs, fixed_bytes, varying_bytes)| BatchFigures {
                batch,
                samples_per_s,
                // Epochs around the run's throughput: none, too few, overlapping or apart.
                spread: Spread::of(&each.iter().map(|e| e * samples_per_s).collect::<Vec<_>>()),
                val_accuracy,
                steps,
                epochs,
                fixed_bytes,
                varying_bytes,
            },
        )
    }

    fn oracle(t: &[BatchFigures], oom: &[(u64, String)], c: &Claim) -> Option<bool> {
        let lo = || t.iter().min_by_key(|x| x.batch);
        let hi = || t.iter().max_by_key(|x| x.batch);
        let of = |b: &str| t.iter().find(|x| x.batch.to_string() == b);
        let best = t.iter().map(|x| x.samples_per_s).fold(f64::MIN, f64::max);
        let fell =
            || Some(lo()?.epochs == hi()?.epochs && hi()?.steps < lo()?.steps && (hi()?.val_accuracy - lo()?.val_accuracy) * 100.0 < -1.0);
        let spread = || {
            let (fmin, fmax) = (t.iter().map(|x| x.fixed_bytes).min()?, t.iter().map(|x| x.fixed_bytes).max()?);
            Some((fmax - fmin) as f64 / fmax as f64)
        };
        let vs = |a: &BatchFigures, b: &BatchFigures| crate::noise::restated(a.spread, b.spread, a.samples_per_s / b.samples_per_s);
        let peak_batch: u64 = c.text.split("at batch ").nth(1).and_then(|s| s.split('.').next()).and_then(|s| s.parse().ok()).unwrap_or(0);
        Some(match c.condition {
            cond::BEST | cond::BEST_NEAR => {
                let b = of(&c.subject)?;
                let near: Vec<u64> = t.iter().filter(|x| x.batch != b.batch && vs(x, b) == "noise").map(|x| x.batch).collect();
                let named: Vec<u64> =
                    c.text.split("within noise of batch ").nth(1).map_or(vec![], |r| {
                        r.split(':').next().unwrap_or("").split(" and ").filter_map(|x| x.trim().parse().ok()).collect()
                    });
                let mut near_sorted = near.clone();
                near_sorted.sort_unstable();
                b.samples_per_s >= best
                    && if c.condition == cond::BEST { near.is_empty() } else { !near.is_empty() && named == near_sorted }
            }
            cond::RECOMMEND | cond::RECOMMEND_TIED => {
                let top = t.iter().map(|x| x.val_accuracy).fold(f64::NAN, f64::max);
                let ok = |x: &BatchFigures| (top - x.val_accuracy) * 100.0 <= 1.0;
                let p = of(&c.subject)?;
                // The fastest acceptable batch, and the acceptable batches within noise of it.
                let f = t.iter().filter(|x| ok(x)).fold(None::<&BatchFigures>, |m, x| match m {
                    Some(m) if m.samples_per_s >= x.samples_per_s => Some(m),
                    _ => Some(x),
                })?;
                let tied: Vec<&BatchFigures> = t.iter().filter(|x| ok(x) && x.batch != f.batch && vs(x, f) == "noise").collect();
                if c.condition == cond::RECOMMEND {
                    tied.is_empty() && p.batch == f.batch
                } else {
                    let group: Vec<&BatchFigures> = tied.iter().copied().chain([f]).collect();
                    !tied.is_empty()
                        && group.iter().any(|x| x.batch == p.batch)
                        && group.iter().all(|x| x.val_accuracy < p.val_accuracy || (x.val_accuracy == p.val_accuracy && x.batch >= p.batch))
                }
            }
            cond::ROSE | cond::ROSE_UNEVENLY => {
                let mut s: Vec<&BatchFigures> = t.iter().collect();
                s.sort_by_key(|x| x.batch);
                let every = s.windows(2).all(|w| vs(w[1], w[0]) == "up");
                vs(hi()?, lo()?) == "up" && every == (c.condition == cond::ROSE)
            }
            cond::WITHIN_NOISE => vs(hi()?, lo()?) == "noise",
            cond::DID_NOT_RISE => matches!(vs(hi()?, lo()?), "down" | "same"),
            cond::ONCE => t.iter().any(|x| x.spread.is_none_or(|s| s.n < 3)),
            cond::PEAKED_INSIDE => {
                let p = t.iter().find(|x| x.batch == peak_batch)?;
                p.samples_per_s >= best && lo()?.batch < p.batch && p.batch < hi()?.batch && vs(p, lo()?) == "up" && vs(p, hi()?) == "up"
            }
            cond::ACCURACY_FELL => fell()?,
            cond::ACCURACY_MOVED => !fell()?,
            cond::FIXED_STEADY => spread()? <= 0.02,
            cond::FIXED_VARIED => spread()? > 0.02,
            cond::GREW => hi()?.varying_bytes > lo()?.varying_bytes,
            cond::DID_NOT_GROW => hi()?.varying_bytes <= lo()?.varying_bytes,
            cond::OUT_OF_MEMORY => oom.iter().any(|(b, _)| b.to_string() == c.subject),
            cond::SOME_OUT_OF_MEMORY => !oom.is_empty(),
            cond::NONE => t.is_empty() && oom.is_empty(),
            _ => return None,
        })
    }

    /// Where the fastest batch is within noise of another, speed does not decide: the summary
    /// says so and recommends the better accuracy (it recommended the fastest alone before).
    #[test]
    fn a_batch_within_noise_of_the_fastest_is_recommended_by_accuracy() {
        let b = |batch, sps: f64, acc| BatchFigures {
            batch,
            samples_per_s: sps,
            spread: Spread::of(&[sps * 0.95, sps, sps * 1.05]),
            val_accuracy: acc,
            steps: 10,
            epochs: 3,
            fixed_bytes: 1000,
            varying_bytes: batch * 100,
        };
        let v = verdict(&[b(32, 1000.0, 0.91), b(64, 1020.0, 0.905), b(128, 1500.0, 0.85)], &[], None).verdict();
        assert!(
            v.summary.starts_with("Train with batch 32: batch 32 was within noise of the fastest, batch 64 (1020 samples/s)"),
            "{}",
            v.summary
        );
        assert!(!v.evidence.iter().any(|e| e.contains("peaked")), "128 is the highest, not a peak in between: {:?}", v.evidence);
    }

    proptest! {
        /// Throughput up or down, memory steady or not, accuracy lost or not, out-of-memory or
        /// not, batch sizes in any order: every sentence printed is true of the numbers.
        #[test]
        fn every_printed_claim_holds(
            runs in proptest::collection::vec(batch(), 0..5),
            oom in proptest::collection::vec(1u64..100_000, 0..2),
        ) {
            let mut t: Vec<BatchFigures> = Vec::new();
            for r in runs {
                if !t.iter().any(|x| x.batch == r.batch) {
                    t.push(r);
                }
            }
            let oom: Vec<(u64, String)> = oom.into_iter().map(|b| (b, "out of memory".into())).collect();
            let claims = verdict(&t, &oom, Some(1 << 20));
            claims
                .audit(|c| oracle(&t, &oom, c))
                .map_err(TestCaseError::fail)?;
            prop_assert!(claims.has_summary());
        }
    }
}
