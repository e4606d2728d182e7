//! Exercise 1's verdict: where the GPU's matmuls overtake the CPU's, each run's numbers as the
//! verdict reads them, and the sentences it asserts about them (re-checked by a property test).

use super::short_label;
use crate::common::{self, percent};
use crate::noise::{Judged, judge, throughput_spread};
use gpulab_core::stats::Spread;
use gpulab_core::tensor::BackendInfo;
use gpulab_systems::report::Claims;
use gpulab_systems::train::TrainReport;

/// One size of the matmul sweep: n and the GFLOP/s of its timed runs (median and middle half).
pub(super) type Point = (usize, Spread);

/// The sizes both backends measured, ascending (whatever order `sweep_sizes` gave), each with
/// whether the GPU beat the CPU there: its GFLOP/s judged higher by the noise rule
/// (`noise::judge`: within noise is no win; under three runs, by 5%).
fn wins(cpu: &[Point], gpu: &[Point]) -> Vec<(usize, bool)> {
    let beat = |g: &Spread, c: &Spread| judge(Some(g), Some(c), g.median / c.median.max(1e-12)).higher();
    let mut w: Vec<(usize, bool)> =
        gpu.iter().filter_map(|(n, g)| cpu.iter().find(|(m, _)| m == n).map(|(_, c)| (*n, beat(g, c)))).collect();
    w.sort_unstable();
    w.dedup_by_key(|x| x.0);
    w
}

/// The smallest size from which the GPU beats the CPU at every larger size, if any.
pub(super) fn crossover(cpu: &[Point], gpu: &[Point]) -> Option<usize> {
    let w = wins(cpu, gpu);
    match w.iter().rposition(|(_, won)| !won) {
        None => w.first().map(|(n, _)| *n),
        Some(i) => w.get(i + 1).map(|(n, _)| *n),
    }
}

/// One finished training run's numbers, as the verdict reads them.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct RunFigures {
    pub(super) name: String,
    pub(super) software: bool,
    pub(super) train_s: f64,
    pub(super) samples_per_s: f64,
    /// The spread of the epochs' throughputs (`noise::epoch_throughputs`).
    pub(super) spread: Option<Spread>,
    pub(super) median_step_ms: f64,
    /// GPU busy share of the training time (derived from timestamps); None where unmeasured.
    pub(super) busy: Option<f64>,
    /// Mean NVML utilisation, NVIDIA only.
    pub(super) nvml: Option<f64>,
    pub(super) val_accuracy: f64,
    /// Epochs finished, and the assumed price of an hour of this backend (USD).
    pub(super) epochs: usize,
    pub(super) usd_per_hour: f64,
}

impl RunFigures {
    /// US dollars per finished epoch at the assumed price; None before an epoch finished.
    pub(super) fn usd_per_epoch(&self) -> Option<f64> {
        (self.epochs > 0).then(|| self.train_s / 3600.0 * self.usd_per_hour / self.epochs as f64)
    }

    pub(super) fn of(info: &BackendInfo, r: &TrainReport, nvml: Option<f64>, usd_per_hour: f64) -> Self {
        RunFigures {
            name: short_label(info),
            software: info.software,
            train_s: r.train_wall_s,
            samples_per_s: r.samples_per_s,
            spread: throughput_spread(r),
            median_step_ms: r.median_step_ms,
            busy: r.gpu_busy_fraction,
            nvml,
            val_accuracy: r.final_val_accuracy,
            epochs: r.epochs.len(),
            usd_per_hour,
        }
    }
}

/// `s` times `k` (k > 0): a spread in other units.
fn scale(s: &Spread, k: f64) -> Spread {
    Spread { low: s.low * k, median: s.median * k, high: s.high * k, ..*s }
}

/// One GPU's matmul sweep: (n, GFLOP/s), in the order measured.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct SweepFigures {
    pub(super) name: String,
    pub(super) points: Vec<Point>,
}

/// The conditions the verdict's sentences assert (the property test re-checks each one).
mod cond {
    pub const NO_HARDWARE_GPU: &str = "GPUs trained, and every one is a software GPU";
    // "Faster", "slower" and "level" are the epochs' throughputs judged by the noise rule
    // (`noise::judge`): level is within noise, or within 5% in one measurement.
    pub const FASTER: &str = "the GPU judged faster than the CPU";
    pub const SLOWER: &str = "the GPU judged slower than the CPU";
    pub const LEVEL: &str = "the GPU and the CPU level: within noise, or within 5% in one measurement";
    pub const SOFTWARE_SLOWER: &str = "a software GPU judged slower than the CPU";
    pub const SOFTWARE_FASTER: &str = "a software GPU judged faster than the CPU";
    pub const SOFTWARE_LEVEL: &str = "a software GPU level with the CPU";
    pub const IDLE_SLOWER: &str = "busy under half the time, and not judged faster than the CPU";
    pub const IDLE_FASTER: &str = "busy under half the time, and judged faster than the CPU";
    pub const BUSY_FASTER: &str = "busy at least half the time, and judged faster than the CPU";
    pub const BUSY_SLOWER: &str = "busy at least half the time, and judged slower than the CPU";
    pub const BUSY_LEVEL: &str = "busy at least half the time, and level with the CPU";
    pub const UNMEASURED_FASTER: &str = "busy time unmeasured, and judged faster than the CPU";
    pub const UNMEASURED_SLOWER: &str = "busy time unmeasured, and not judged faster than the CPU";
    pub const CROSSOVER: &str = "the GPU beat the CPU at every swept size from n up, and at none just below";
    pub const NEVER_WINS: &str = "the GPU beat the CPU at no swept size";
    pub const WINS_NOT_AT_TOP: &str = "the GPU beat the CPU at some swept sizes but not at the largest";
    pub const ONLY_CPU: &str = "only the CPU finished training";
    pub const NO_CPU: &str = "GPUs finished training, the CPU did not";
    pub const NONE: &str = "no backend finished training";
    // Cost per epoch is time × price: judged by the epochs' throughputs per dollar.
    pub const CHEAPER: &str = "the GPU's samples per dollar judged above the CPU's, at the assumed prices";
    pub const DEARER: &str = "the GPU's samples per dollar judged below the CPU's, at the assumed prices";
    pub const COST_LEVEL: &str = "the GPU's and the CPU's samples per dollar level, at the assumed prices";
}

/// The verdict: how each GPU's training compared with the CPU's and why (from its busy time),
/// and where its matmuls overtake the CPU's.
pub(super) fn verdict(cpu: Option<&RunFigures>, gpus: &[RunFigures], cpu_sweep: &[Point], sweeps: &[SweepFigures]) -> Claims {
    use gpulab_systems::report::Part::{Evidence, Summary};
    let mut c = Claims::new();
    let software: Vec<&str> = gpus.iter().filter(|g| g.software).map(|g| g.name.as_str()).collect();
    c.summary(
        cond::NO_HARDWARE_GPU,
        !gpus.is_empty() && gpus.iter().all(|g| g.software),
        format!(
            "This machine cannot show what GPU hardware adds: {} {} on the same CPU cores as the CPU backend. On a machine with a hardware GPU, the default settings (the model sized from its measured peak) or the \"big enough for a GPU\" preset show the GPU pull ahead.",
            software.join(" and "),
            if software.len() == 1 { "runs" } else { "run" }
        ),
    );
    for g in gpus {
        c.about(&g.name);
        if let Some(cpu) = cpu {
            let speedup = cpu.train_s / g.train_s.max(1e-12);
            // The epochs' throughputs judged by the noise rule (`noise::judge`): faster, slower,
            // or level (within noise, or within 5% in one measurement).
            let j = judge(g.spread.as_ref(), cpu.spread.as_ref(), speedup);
            let (faster, slower) = (j.higher(), j.lower());
            let level = !faster && !slower;
            let tag = j.tag();
            let took =
                format!("Training on {} took {} against {} on the CPU", g.name, common::duration(g.train_s), common::duration(cpu.train_s));
            c.one_of(
                Summary,
                vec![
                    (cond::FASTER, faster, format!("{took}: {speedup:.1}× faster{tag}.")),
                    (cond::SLOWER, slower, format!("{took}: {:.1}× slower{tag}.", 1.0 / speedup.max(1e-12))),
                    (
                        cond::LEVEL,
                        level,
                        format!(
                            "{took}: {speedup:.2}× the CPU's speed, {}.",
                            if j == Judged::WithinNoise {
                                "within noise (the middle halves of the epochs' throughputs overlap)"
                            } else {
                                "no faster in one measurement (under three epochs: too few to judge noise)"
                            }
                        ),
                    ),
                ],
            );
            let busy = g.busy.map(percent).unwrap_or_default();
            let idle = g.busy.is_some_and(|b| b < 0.5);
            let fed = g.busy.is_some_and(|b| b >= 0.5);
            let hw = !g.software;
            c.one_of(
                Summary,
                vec![
                    (cond::SOFTWARE_SLOWER, g.software && slower, format!("{} is a software GPU: it runs on the same CPU cores as the CPU backend and also pays for emulating GPU threads.", g.name)),
                    (cond::SOFTWARE_FASTER, g.software && faster, format!("{} is a software GPU on the same CPU cores, so its lead means the CPU backend's kernels were the slower ones at these shapes, not that GPU hardware helped.", g.name)),
                    (cond::SOFTWARE_LEVEL, g.software && level, format!("{} is a software GPU on the same CPU cores as the CPU backend, so matching the CPU's pace is what to expect: no GPU hardware is involved.", g.name)),
                    (cond::IDLE_SLOWER, hw && idle && !faster, format!("The GPU was busy only {busy} of the training time: this model is too small to keep it fed, and per-step costs (submitting work, reading back results) dominate. Bigger batches or a bigger model move the balance.")),
                    (cond::IDLE_FASTER, hw && idle && faster, format!("It won while busy only {busy} of the training time: per-step costs (submitting work, reading back results) took the rest, so more work per step would use it better.")),
                    (cond::BUSY_FASTER, hw && fed && faster, format!("The GPU was busy {busy} of the time, so the win comes from its parallel arithmetic.")),
                    (cond::BUSY_SLOWER, hw && fed && slower, format!("The GPU was busy {busy} of the training time and still slower: its kernels themselves took longer than the CPU's at these shapes, not the per-step overheads; the matmul sweep shows from which size its kernels win.")),
                    (cond::BUSY_LEVEL, hw && fed && level, format!("The GPU was busy {busy} of the training time and only kept level with the CPU: at these shapes its kernels are no faster than the CPU's; the matmul sweep shows from which size they win.")),
                    (cond::UNMEASURED_FASTER, hw && g.busy.is_none() && faster, "Its busy time was not measurable (no timestamp queries), so this run cannot say how much of the win is arithmetic.".to_string()),
                    (cond::UNMEASURED_SLOWER, hw && g.busy.is_none() && !faster, "Its busy time was not measurable (no timestamp queries), so this run cannot tell slow kernels from per-step costs; the matmul sweep compares the kernels alone.".to_string()),
                ],
            );
            if let (Some(gc), Some(cc)) = (g.usd_per_epoch(), cpu.usd_per_epoch()) {
                let [gt, ct] = <[String; 2]>::try_from(gpulab_core::format::money_per_all(&[gc, cc], "epoch")).unwrap_or_default();
                let at = format!(
                    "At the assumed prices (${}/h for {}, ${}/h for the CPU) epochs cost {gt} against {ct} on the CPU",
                    g.usd_per_hour, g.name, cpu.usd_per_hour,
                );
                // Break-even: the speed-up at which the GPU's hour pays for itself.
                let even = g.usd_per_hour / cpu.usd_per_hour.max(1e-12);
                // Samples per dollar: each epoch's throughput ÷ the hourly price, judged by the rule.
                let per_usd = |r: &RunFigures| r.spread.map(|s| scale(&s, 1.0 / r.usd_per_hour.max(1e-12)));
                let value = judge(per_usd(g).as_ref(), per_usd(cpu).as_ref(), cc / gc.max(1e-15));
                c.one_of(
                    Summary,
                    vec![
                        (cond::CHEAPER, value.higher(), format!("{at}: cheaper per epoch on the GPU{}.", value.tag())),
                        (cond::DEARER, value.lower(), format!("{at}: the CPU is cheaper per epoch{}; at these prices the GPU pays off only above {even:.1}× the CPU's speed.", value.tag())),
                        (cond::COST_LEVEL, !value.higher() && !value.lower(), format!("{at}: the same per epoch{}; at these prices the GPU pays off only above {even:.1}× the CPU's speed.", if value == Judged::WithinNoise { " within noise" } else { " within 5% in one measurement" })),
                    ],
                );
            }
        }
        c.fact(
            Evidence,
            format!(
                "{}: {:.0} samples/s, median step {:.3} ms, GPU busy {}{}, validation accuracy {:.2}%.",
                g.name,
                g.samples_per_s,
                g.median_step_ms,
                g.busy.map(percent).unwrap_or_else(|| "not measurable (no timestamp queries)".into()),
                g.nvml.map(|u| format!(" (the NVIDIA driver reported {u:.0}% utilisation)")).unwrap_or_default(),
                g.val_accuracy * 100.0
            ),
        );
    }
    c.about("");
    if let Some(cpu) = cpu {
        c.fact(
            Evidence,
            format!(
                "CPU: {:.0} samples/s, median step {:.3} ms, validation accuracy {:.2}%.",
                cpu.samples_per_s,
                cpu.median_step_ms,
                cpu.val_accuracy * 100.0
            ),
        );
    }
    let peak = |p: &[Point]| p.iter().map(|(_, g)| g.median).fold(0.0, f64::max);
    // How the sweep's wins were judged: by the runs' spread, or in one run per size.
    let once = cpu_sweep.iter().chain(sweeps.iter().flat_map(|g| &g.points)).any(|(_, s)| s.n < gpulab_core::stats::MIN_REPEATS);
    let how =
        if once { "; one timed run per size, too few to judge noise" } else { "; a win is a middle half of timed runs above the CPU's" };
    for g in sweeps {
        c.about(&g.name);
        let w = wins(cpu_sweep, &g.points);
        let Some(&(top, won_top)) = w.last() else { continue };
        let peaks = format!("peaks {:.1} vs {:.1} GFLOP/s{how}", peak(&g.points), peak(cpu_sweep));
        let won: Vec<String> = w.iter().filter(|x| x.1).map(|x| x.0.to_string()).collect();
        let from = crossover(cpu_sweep, &g.points).unwrap_or(0);
        c.one_of(
            Evidence,
            vec![
                (cond::CROSSOVER, won_top, format!("Matmul: {} beats the CPU from n = {from} upward ({peaks}).", g.name)),
                (
                    cond::NEVER_WINS,
                    won.is_empty(),
                    format!("Matmul: {} does not beat the CPU at any size up to n = {top} on this machine ({peaks}).", g.name),
                ),
                (
                    cond::WINS_NOT_AT_TOP,
                    !won.is_empty() && !won_top,
                    format!("Matmul: {} beat the CPU at n = {} but not at the largest size, n = {top} ({peaks}).", g.name, won.join(", ")),
                ),
            ],
        );
    }
    c.about("");
    let names: Vec<&str> = gpus.iter().map(|g| g.name.as_str()).collect();
    c.one_of(
        Summary,
        vec![
            (
                cond::ONLY_CPU,
                gpus.is_empty() && cpu.is_some(),
                cpu.map(|c| {
                    format!("Only the CPU trained ({:.2} s, {:.0} samples/s); select a GPU backend to compare.", c.train_s, c.samples_per_s)
                })
                .unwrap_or_default(),
            ),
            (
                cond::NO_CPU,
                !gpus.is_empty() && cpu.is_none(),
                format!("The CPU did not train, so there is nothing to compare {} with; add cpu to the backends.", names.join(" and ")),
            ),
            (cond::NONE, gpus.is_empty() && cpu.is_none(), "No backend finished training; see the status column.".into()),
        ],
    );
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpulab_systems::report::Claim;
    use proptest::prelude::*;

    /// Three timed runs within ±1% of `v` GFLOP/s.
    fn tight(points: &[(usize, f64)]) -> Vec<Point> {
        points.iter().map(|&(n, v)| (n, Spread::of(&[v * 0.99, v, v * 1.01]).unwrap())).collect()
    }

    #[test]
    fn crossover_is_where_the_gpu_keeps_winning() {
        let cpu = tight(&[(64, 10.0), (128, 10.0), (256, 10.0), (512, 10.0)]);
        assert_eq!(crossover(&cpu, &tight(&[(64, 1.0), (128, 12.0), (256, 9.0), (512, 20.0)])), Some(512));
        assert_eq!(crossover(&cpu, &tight(&[(64, 11.0), (128, 12.0), (256, 13.0), (512, 20.0)])), Some(64));
        assert_eq!(crossover(&cpu, &tight(&[(64, 1.0), (128, 2.0), (256, 3.0), (512, 4.0)])), None);
        // sweep_sizes in any order: the same answer.
        assert_eq!(
            crossover(
                &tight(&[(512, 10.0), (64, 10.0), (256, 10.0), (128, 10.0)]),
                &tight(&[(256, 9.0), (512, 20.0), (64, 1.0), (128, 12.0)])
            ),
            Some(512)
        );
        // A lead inside the runs' spread is no win.
        let wide = |v: f64| Spread::of(&[v * 0.8, v, v * 1.2]).unwrap();
        assert_eq!(crossover(&[(64, wide(10.0))], &[(64, wide(11.0))]), None);
    }

    /// GFLOP/s of one (too few to judge) or three timed runs, spread by up to ±40%.
    fn timed(v: f64, width: f64, three: bool) -> Spread {
        Spread::of(&if three { vec![v * (1.0 - width), v, v * (1.0 + width)] } else { vec![v] }).unwrap()
    }

    fn sweep_and_cpu() -> impl Strategy<Value = (Vec<Point>, Vec<Point>)> {
        // Distinct sizes, shuffled; GFLOP/s anywhere from far below to far above the CPU's.
        (proptest::collection::btree_set(1usize..5000, 0..6), any::<u64>(), 0.0f64..0.4, any::<bool>()).prop_flat_map(
            |(sizes, seed, width, three)| {
                let sizes: Vec<usize> = sizes.into_iter().collect();
                let n = sizes.len();
                (Just(sizes), proptest::collection::vec(0.1f64..100.0, n), proptest::collection::vec(0.1f64..100.0, n), Just(seed))
                    .prop_map(move |(sizes, c, g, seed)| {
                        let mut cpu: Vec<Point> = sizes.iter().copied().zip(c).map(|(n, v)| (n, timed(v, width, three))).collect();
                        let mut gpu: Vec<Point> = sizes.iter().copied().zip(g).map(|(n, v)| (n, timed(v, width, three))).collect();
                        let k = seed as usize % (n.max(1));
                        cpu.rotate_left(k);
                        gpu.reverse();
                        (cpu, gpu)
                    })
            },
        )
    }

    fn run() -> impl Strategy<Value = RunFigures> {
        let each = proptest::collection::vec(0.5f64..2.0, 0..5);
        (
            any::<bool>(),
            0.01f64..100.0,
            proptest::option::of(0.0f64..1.0),
            proptest::option::of(0.0f64..100.0),
            0usize..4,
            0.01f64..20.0,
            each,
        )
            .prop_map(|(software, train_s, busy, nvml, epochs, usd_per_hour, each)| RunFigures {
                name: String::new(),
                software,
                train_s,
                samples_per_s: 1000.0 / train_s,
                // Epochs around the run's throughput: none, too few, overlapping or apart.
                spread: Spread::of(&each.iter().map(|e| e * 1000.0 / train_s).collect::<Vec<_>>()),
                median_step_ms: train_s,
                busy,
                nvml,
                val_accuracy: 0.9,
                epochs,
                usd_per_hour,
            })
    }

    /// Each condition, re-evaluated from the inputs without the verdict's own code.
    fn oracle(cpu: Option<&RunFigures>, gpus: &[RunFigures], cpu_sweep: &[Point], sweeps: &[SweepFigures], c: &Claim) -> Option<bool> {
        let gpu = gpus.iter().find(|g| g.name == c.subject);
        // The noise rule restated: "up" faster, "down" slower, "noise" or "same" level.
        let pace = || Some(crate::noise::restated(gpu?.spread, cpu?.spread, cpu?.train_s / gpu?.train_s));
        let faster = || Some(pace()? == "up");
        let slower = || Some(pace()? == "down");
        let level = || Some(matches!(pace()?, "noise" | "same"));
        let hw = || gpu.map(|g| !g.software);
        let busy = || gpu.and_then(|g| g.busy);
        let beats = |n: usize| -> Option<bool> {
            let g = sweeps.iter().find(|s| s.name == c.subject)?.points.iter().find(|p| p.0 == n)?.1;
            let cs = cpu_sweep.iter().find(|p| p.0 == n)?.1;
            Some(crate::noise::restated(Some(g), Some(cs), g.median / cs.median) == "up")
        };
        let common: Vec<usize> = {
            let s = sweeps.iter().find(|s| s.name == c.subject);
            let mut v: Vec<usize> =
                s.map(|s| s.points.iter().map(|p| p.0).filter(|n| cpu_sweep.iter().any(|p| p.0 == *n)).collect()).unwrap_or_default();
            v.sort_unstable();
            v
        };
        let number_after = |pat: &str| {
            c.text.split(pat).nth(1).and_then(|t| t.split(|ch: char| !ch.is_ascii_digit()).next()).and_then(|t| t.parse::<usize>().ok())
        };
        Some(match c.condition {
            cond::NO_HARDWARE_GPU => !gpus.is_empty() && gpus.iter().all(|g| g.software),
            cond::FASTER => faster()?,
            cond::SLOWER => slower()?,
            cond::LEVEL => level()?,
            cond::SOFTWARE_SLOWER => !hw()? && slower()?,
            cond::SOFTWARE_FASTER => !hw()? && faster()?,
            cond::SOFTWARE_LEVEL => !hw()? && level()?,
            cond::IDLE_SLOWER => hw()? && busy()? < 0.5 && !faster()?,
            cond::IDLE_FASTER => hw()? && busy()? < 0.5 && faster()?,
            cond::BUSY_FASTER => hw()? && busy()? >= 0.5 && faster()?,
            cond::BUSY_SLOWER => hw()? && busy()? >= 0.5 && slower()?,
            cond::BUSY_LEVEL => hw()? && busy()? >= 0.5 && level()?,
            cond::UNMEASURED_FASTER => hw()? && busy().is_none() && faster()?,
            cond::UNMEASURED_SLOWER => hw()? && busy().is_none() && !faster()?,
            cond::CROSSOVER => {
                let n = number_after("from n = ")?;
                let below = common.iter().filter(|&&m| m < n).max();
                common.contains(&n)
                    && common.iter().filter(|&&m| m >= n).all(|&m| beats(m) == Some(true))
                    && below.is_none_or(|&m| beats(m) == Some(false))
            }
            cond::NEVER_WINS => {
                !common.is_empty()
                    && common.iter().all(|&m| beats(m) == Some(false))
                    && number_after("up to n = ") == common.last().copied()
            }
            cond::WINS_NOT_AT_TOP => {
                common.iter().any(|&m| beats(m) == Some(true))
                    && beats(*common.last()?) == Some(false)
                    && number_after("largest size, n = ") == common.last().copied()
            }
            cond::ONLY_CPU => gpus.is_empty() && cpu.is_some(),
            cond::NO_CPU => !gpus.is_empty() && cpu.is_none(),
            cond::NONE => gpus.is_empty() && cpu.is_none(),
            cond::CHEAPER | cond::DEARER | cond::COST_LEVEL => {
                // Samples per dollar: each epoch's throughput ÷ the price, by the rule restated.
                let (g, cp) = (gpu?, cpu?);
                let per_usd = |r: &RunFigures| {
                    r.spread.map(|s| Spread {
                        low: s.low / r.usd_per_hour,
                        median: s.median / r.usd_per_hour,
                        high: s.high / r.usd_per_hour,
                        ..s
                    })
                };
                let per_epoch = |r: &RunFigures| (r.epochs > 0).then(|| r.train_s * r.usd_per_hour / r.epochs as f64);
                let judged = crate::noise::restated(per_usd(g), per_usd(cp), per_epoch(cp)? / per_epoch(g)?);
                match c.condition {
                    cond::CHEAPER => judged == "up",
                    cond::DEARER => judged == "down",
                    _ => matches!(judged, "noise" | "same"),
                }
            }
            _ => return None,
        })
    }

    proptest! {
        /// Faster or slower, software or hardware, busy high, low or unmeasured, sweeps in any
        /// order: every sentence printed is true of the numbers.
        #[test]
        fn every_printed_claim_holds(
            cpu in proptest::option::of(run()),
            gpus in proptest::collection::vec(run(), 0..3),
            (cpu_sweep, gpu_sweep) in sweep_and_cpu(),
        ) {
            let gpus: Vec<RunFigures> = gpus.into_iter().enumerate().map(|(i, g)| RunFigures { name: format!("gpu{i}"), ..g }).collect();
            let sweeps: Vec<SweepFigures> = gpus.iter().map(|g| SweepFigures { name: g.name.clone(), points: gpu_sweep.clone() }).collect();
            let claims = verdict(cpu.as_ref(), &gpus, &cpu_sweep, &sweeps);
            claims.audit(|c| oracle(cpu.as_ref(), &gpus, &cpu_sweep, &sweeps, c)).map_err(TestCaseError::fail)?;
            prop_assert!(claims.has_summary(), "an empty summary for {cpu:?} {gpus:?}");
            // With a CPU run, each GPU gets its comparison and its reason, and its cost where
            // both finished an epoch.
            if let Some(cpu) = &cpu {
                for g in &gpus {
                    let costed = usize::from(g.epochs > 0 && cpu.epochs > 0);
                    prop_assert_eq!(claims.printed().filter(|c| c.subject == g.name && c.part == gpulab_systems::report::Part::Summary).count(), 2 + costed);
                }
            }
        }
    }
}
