//! Exercise 6's verdict: each run's numbers as the verdict reads them, the setup it judges them
//! in, and the sentences it asserts about them (re-checked by a property test).

use super::Mode;
use super::report::{Prov, per_epoch};
use crate::common::{self, percent};
use crate::cost::Price;
use crate::settings::distributed::Config;
use gpulab_core::error::Result;
use gpulab_systems::parallel::{DpReport, StepSplit};
use gpulab_systems::profile::verdict::{Bottleneck, communication_bound};
use gpulab_systems::report::Claims;

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

/// One finished run, as the verdict reads it.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct RunFigures {
    pub(super) mode: Mode,
    pub(super) replicas: usize,
    pub(super) label: String,
    pub(super) samples_per_s: f64,
    pub(super) global_batch: usize,
    pub(super) split: StepSplit,
    pub(super) allreduce_s: f64,
    pub(super) grad_bytes: u64,
    pub(super) sent_per_step: f64,
    pub(super) buckets: usize,
    pub(super) val_accuracy: f64,
    pub(super) identical: bool,
    /// US dollars per finished epoch, every replica counted; None before an epoch finished.
    pub(super) usd_per_epoch: Option<f64>,
    /// The largest replica's optimizer-state peak, bytes (the ledger's).
    pub(super) state_peak: u64,
}

impl RunFigures {
    pub(super) fn of(mode: Mode, r: &DpReport, price: &Price) -> Self {
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
            state_peak: r.optimizer_state_peak.iter().copied().max().unwrap_or(0),
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
pub(super) struct Setup<'a> {
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
    pub const STATE_SHARDED: &str = "sharded: the largest count's optimizer-state peak per replica within 10% of one replica's ÷ N";
    pub const STATE_NOT_SHARDED: &str = "sharded: the largest count's optimizer-state peak per replica not within 10% of one replica's ÷ N";
    pub const IDENTICAL: &str = "every finished run with several replicas ended bit-identical, and one did";
    pub const DIFFERENT: &str = "some run's replicas ended with different weights";
    pub const CHEAPER: &str = "the largest count's cost per epoch, all replicas counted, below one replica's";
    pub const NOT_CHEAPER: &str = "the largest count's cost per epoch, all replicas counted, not below one replica's";
    pub const NO_SPEEDUP: &str = "no mode has both one replica and a larger count finished";
}

/// Where the time per sample went at the largest N against one replica, seconds per sample
/// (the verdict's evidence and the report's loss table).
pub(super) fn losses(base: &RunFigures, big: &RunFigures) -> [(&'static str, f64); 4] {
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

/// The losses that cost time (a negative one is a gain), summed: what each loss is a share of.
pub(super) fn lost_total(l: &[(&'static str, f64)]) -> f64 {
    l.iter().map(|x| x.1.max(0.0)).sum()
}

/// The verdict, from the numbers: how well the largest run scaled and where the time went.
pub(super) fn verdict(runs: &[RunFigures], setup: &Setup) -> Claims {
    use gpulab_systems::report::Part::{Evidence, Summary};
    let mut c = Claims::new();
    let most = runs.iter().map(|r| r.replicas).max().unwrap_or(1);
    match setup.hardware {
        Hardware::Cpu { cores, threads } => {
            let need = most * threads;
            c.evidence(
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
            c.evidence(
                cond::ONE_ADAPTER,
                true,
                "These replicas are devices on one adapter and share its compute, so they show the all-reduce's synchronisation and transfer cost, not a speed-up; CPU replicas (kind=cpu), or one replica per GPU (kind=adapters), show real parallel compute.",
            );
        }
        Hardware::Other => {}
    }
    // Each mode's one replica and largest count, for the summary's one sentence of speed-ups.
    let pairs: Vec<(Mode, &RunFigures, &RunFigures)> = [Mode::Strong, Mode::Weak]
        .into_iter()
        .filter_map(|mode| {
            let of = runs.iter().filter(move |r| r.mode == mode);
            Some((mode, of.clone().find(|r| r.replicas == 1)?, of.filter(|r| r.replicas > 1).max_by_key(|r| r.replicas)?))
        })
        .collect();
    let any = !pairs.is_empty();
    let scaled: Vec<String> = pairs
        .iter()
        .map(|(mode, base, big)| {
            let sp = big.samples_per_s / base.samples_per_s.max(1e-12);
            format!(
                "{} scaling to {} ({}): {sp:.2}× one replica, {} efficiency",
                mode.name(),
                big.replicas,
                big.label,
                percent(sp / big.replicas as f64)
            )
        })
        .collect();
    if any {
        let joined = scaled.join("; ");
        let mut chars = joined.chars();
        let first = chars.next().map(|f| f.to_uppercase().collect::<String>()).unwrap_or_default();
        // Each replica count trains once (a multi-process run does not repeat cheaply): say so.
        c.fact(Summary, format!("{first}{} (one measurement each).", chars.as_str()));
    }
    // The summary's second sentence: replicas that disagree (a broken all-reduce) outrank
    // where the time went, which goes to the evidence then.
    let different = runs.iter().any(|r| !r.identical);
    let mut loss_told = different;
    for &(mode, base, big) in &pairs {
        c.about(mode.name());
        let n = big.replicas;
        let sp = big.samples_per_s / base.samples_per_s.max(1e-12);
        let eff = sp / n as f64;
        if let (Some(a), Some(b)) = (big.usd_per_epoch, base.usd_per_epoch) {
            let [x, y] = <[String; 2]>::try_from(gpulab_core::format::money_per_all(&[a, b], "epoch")).unwrap_or_default();
            let at =
                format!("Counting all {n} replicas at the assumed price per replica-hour, epochs cost {} against {} on one replica", x, y);
            c.one_of(
                Evidence,
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
        let lost = lost_total(&l);
        if let Some((what, secs)) = l.iter().max_by(|a, b| a.1.total_cmp(&b.1)) {
            let holds = eff < 0.8 && *secs > 0.0;
            let part = if loss_told { Evidence } else { Summary };
            loss_told |= holds;
            c.claim(
                part,
                cond::LARGEST_LOSS,
                holds,
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
            c.evidence(cond::COMMUNICATION_BOUND, eff < 0.8, s);
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
        if setup.shard && base.state_peak > 0 {
            let share = big.state_peak as f64 / base.state_peak as f64;
            let near = (share * n as f64 - 1.0).abs() <= 0.1;
            let held = format!(
                "Optimizer state, the ledger's peak: {:.1} KiB on the largest of {n} replicas against {:.1} KiB on one replica, which updates every parameter ({share:.3} of it; 1/N = {:.3})",
                big.state_peak as f64 / 1024.0,
                base.state_peak as f64 / 1024.0,
                1.0 / n as f64
            );
            c.one_of(
                Evidence,
                vec![
                    (cond::STATE_SHARDED, near, format!("{held}: each replica holds only the state of the parameters it updates.")),
                    (cond::STATE_NOT_SHARDED, !near, format!("{held}: not the 1/N share ZeRO-1 is for.")),
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
        different,
        "Replicas ended with DIFFERENT weights: the all-reduce did not give every replica the same sums.",
    );
    if let Some(l) = setup.link {
        c.fact(Evidence, format!("The interconnect was simulated as {l}: every message waited latency + bytes / bandwidth."));
    }
    c.summary(cond::NO_SPEEDUP, !any, "Include 1 and at least one larger replica count that finishes to see a speed-up.");
    c
}

/// The verdict's setup from the settings: what the replicas run on, overlap, ZeRO-1, the link.
pub(super) fn setup<'a>(c: &Config, p: &'a Prov) -> Result<Setup<'a>> {
    let hardware = match c.kind.as_str() {
        "cpu" => Hardware::Cpu {
            cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            threads: c.threads_per_replica as usize,
        },
        "gpu" => Hardware::OneAdapter,
        _ => Hardware::Other,
    };
    Ok(Setup { hardware, overlap: c.overlap, shard: c.shard_optimizer, link: p.link.map(|l| l.name) })
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
                        // Half the time exactly 1/N of one replica's state.
                        state_peak: if identical { (1 << 20) / replicas as u64 } else { sent as u64 % (1 << 21) },
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
            cond::STATE_SHARDED | cond::STATE_NOT_SHARDED => {
                let (b, g) = (base()?.state_peak, big()?);
                let near = (g.state_peak as f64 / b as f64 * g.replicas as f64 - 1.0).abs() <= 0.1;
                setup.shard && b > 0 && near == (c.condition == cond::STATE_SHARDED)
            }
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
            let summary = claims.verdict().summary;
            prop_assert!(summary.split_terminator(". ").count() <= 2, "more than two sentences: {}", summary);
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
