//! Exercise 3's verdict: each run's numbers as the verdict reads them, and the sentences it
//! asserts about them (each with its condition, re-checked by a property test).

use super::report::flushed;
use super::run::{MatmulPath, Run};
use crate::common::{peak, percent};
use crate::cost::Price;
use crate::noise::{Judged, judge, throughput_spread};
use gpulab_core::stats::Spread;
use gpulab_core::tensor::{BackendKind, MemCategory};
use gpulab_systems::nn::Precision;
use gpulab_systems::report::Claims;

/// One run's numbers, as the verdict reads them.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct RunFigures {
    label: String,
    precision: Precision,
    scaling: bool,
    /// The run's result: its numbers, or why it could not run.
    result: std::result::Result<Trained, String>,
    path: MatmulPath,
}

#[derive(Clone, Debug, PartialEq)]
struct Trained {
    samples_per_s: f64,
    /// The spread of the epochs' throughputs (`noise::epoch_throughputs`).
    spread: Option<Spread>,
    total_peak: u64,
    /// Peak bytes of activations and inputs, and of parameters (the ledger).
    act_bytes: u64,
    param_bytes: u64,
    val_accuracy: f64,
    /// Share of gradient elements flushed to zero (%), of a 16-bit run.
    flushed: Option<f64>,
    /// The first and last logged training loss.
    loss: Option<(f64, f64)>,
    /// US dollars per finished epoch at the assumed price; None before an epoch finished.
    usd_per_epoch: Option<f64>,
}

pub(super) fn figures_of(runs: &[Run], price: &Price) -> Vec<RunFigures> {
    runs.iter()
        .map(|r| RunFigures {
            label: r.label.clone(),
            precision: r.amp.precision,
            scaling: r.amp.scaling(),
            result: r
                .result
                .as_ref()
                .map(|t| Trained {
                    samples_per_s: t.samples_per_s,
                    spread: throughput_spread(t),
                    total_peak: t.memory.total_peak,
                    act_bytes: peak(&t.memory, MemCategory::Activations) + peak(&t.memory, MemCategory::Inputs),
                    param_bytes: peak(&t.memory, MemCategory::Parameters),
                    val_accuracy: t.final_val_accuracy,
                    flushed: flushed(t),
                    loss: r.loss.first().zip(r.loss.last()).map(|(a, b)| (a[1], b[1])),
                    usd_per_epoch: (!t.epochs.is_empty()).then(|| price.usd(t.train_wall_s) / t.epochs.len() as f64),
                })
                .map_err(Clone::clone),
            path: r.path.clone(),
        })
        .collect()
}

/// The conditions the verdict's sentences assert (the property test re-checks each one).
mod cond {
    pub const CANNOT_SHOW: &str = "16-bit runs finished, none on a path with fast 16-bit arithmetic, none judged faster than FP32";
    pub const FASTER_WITHOUT_FAST16: &str = "16-bit runs finished, none on a path with fast 16-bit arithmetic, one judged faster than FP32";
    pub const FAILED: &str = "this run could not train";
    pub const FASTER: &str = "the epochs' middle half of throughputs above FP32's";
    pub const SLOWER: &str = "the epochs' middle half of throughputs below FP32's";
    pub const WITHIN_NOISE: &str = "the epochs' middle half of throughputs overlaps FP32's";
    pub const ONCE_FASTER: &str = "under three epochs each, over 1.05× FP32's throughput";
    pub const ONCE_SLOWER: &str = "under three epochs each, under 0.95× FP32's throughput";
    pub const ONCE_SAME: &str = "under three epochs each, within 5% of FP32's throughput";
    pub const LESS_MEMORY: &str = "a lower total peak than FP32's";
    pub const NOT_LESS_MEMORY: &str = "a total peak not below FP32's";
    pub const LESS_ACTIVATION: &str = "activations and inputs peaked below FP32's";
    pub const NOT_LESS_ACTIVATION: &str = "activations and inputs did not peak below FP32's";
    pub const MORE_PARAMETERS: &str = "parameters peaked above FP32's";
    pub const FASTER_DESPITE: &str = "judged faster than FP32";
    pub const NOT_FASTER: &str = "not judged faster than FP32";
    pub const ONLY_FP32: &str = "only FP32 finished";
    pub const NO_FP32: &str = "16-bit runs finished, FP32 did not";
    pub const NONE: &str = "no run finished";
    pub const BF16_KEPT: &str = "the BF16 demo run flushed under 1% of its gradient elements";
    pub const BF16_FLUSHED: &str = "the BF16 demo run flushed 1% or more of its gradient elements";
    pub const CHEAPER: &str = "a lower cost per epoch than FP32's";
    pub const NOT_CHEAPER: &str = "a cost per epoch not below FP32's";
}

/// Below this share of gradient elements flushed, the BF16 demo run "needs no scaler".
const BF16_KEPT_PERCENT: f64 = 1.0;

/// Why 16-bit arithmetic cannot pay off on a run's path, where it cannot.
fn no_fast_path(p: &MatmulPath) -> String {
    match p.kind {
        BackendKind::Cpu => format!("the CPU backend multiplies these 16-bit operands as f32 ({})", p.kernel),
        _ if p.software => "a software GPU has no fast 16-bit arithmetic (it runs on your CPU)".into(),
        _ => format!("{} stores 16-bit values but multiplies them in f32", p.kernel),
    }
}

/// A 16-bit run's throughput against FP32's, judged against the epochs' spread.
fn pace_of(r: &RunFigures, fp32: Option<&Trained>) -> Option<Judged> {
    let (t, base) = (r.result.as_ref().ok()?, fp32?);
    Some(judge(t.spread.as_ref(), base.spread.as_ref(), t.samples_per_s / base.samples_per_s.max(1e-12)))
}

pub(super) fn verdict(runs: &[RunFigures], demo: &[RunFigures], weight: f32) -> Claims {
    use gpulab_systems::report::Part::{Evidence, Summary};
    let mut c = Claims::new();
    let ok16: Vec<&RunFigures> = runs.iter().filter(|r| r.precision != Precision::F32 && r.result.is_ok()).collect();
    let mut why: Vec<String> = ok16.iter().map(|r| no_fast_path(&r.path)).collect();
    why.dedup();
    let fp32 = runs.iter().find(|r| r.precision == Precision::F32).and_then(|r| r.result.as_ref().ok());
    let speed_of = |r: &RunFigures| Some(r.result.as_ref().ok()?.samples_per_s / fp32?.samples_per_s.max(1e-12));
    let no_fast16 = !ok16.is_empty() && ok16.iter().all(|r| !r.path.fast16);
    let faster16 = ok16.iter().any(|r| pace_of(r, fp32).is_some_and(Judged::higher));
    // A 16-bit run that beat FP32 without fast 16-bit arithmetic is not "16 bits cannot pay
    // off": it says where the gain came from instead.
    c.one_of(
        Evidence,
        vec![
            (
                cond::CANNOT_SHOW,
                no_fast16 && !faster16,
                format!(
                    "This backend cannot show 16-bit arithmetic paying off: {}. On a GPU with fast 16-bit arithmetic (tensor cores through a CUDA build, or an adapter with cooperative matrices), the \"big enough for a GPU\" preset shows 16-bit training outrun FP32.",
                    why.join("; ")
                ),
            ),
            (
                cond::FASTER_WITHOUT_FAST16,
                no_fast16 && faster16,
                format!(
                    "No fast 16-bit arithmetic ran here ({}), so the speed-up below did not come from the multiplies: 16-bit values halve the bytes each step moves.",
                    why.join("; ")
                ),
            ),
        ],
    );
    // The answer in one sentence of numbers: each 16-bit run's throughput and peak memory
    // against FP32's (the words — faster, less — follow in the evidence, each with its test).
    if let Some(base) = fp32 {
        let parts: Vec<String> = ok16
            .iter()
            .filter_map(|r| {
                let t = r.result.as_ref().ok()?;
                // "peak memory -16360.0 KiB" read as a negative peak: say which way it moved.
                let d = (t.total_peak as f64 - base.total_peak as f64) / 1024.0;
                let way = if d < 0.0 {
                    "lower"
                } else if d > 0.0 {
                    "higher"
                } else {
                    "the same"
                };
                Some(format!(
                    "{} at {:.2}× the throughput{}, peak memory {:.1} KiB {way}, accuracy {}",
                    r.label,
                    speed_of(r)?,
                    pace_of(r, fp32)?.tag(),
                    d.abs(),
                    percent(t.val_accuracy)
                ))
            })
            .collect();
        if !parts.is_empty() {
            c.fact(Summary, format!("Against FP32 ({} accuracy): {}.", percent(base.val_accuracy), parts.join("; ")));
        }
    }
    for run in runs.iter().filter(|r| r.precision != Precision::F32) {
        c.about(&run.label);
        let r = match &run.result {
            Ok(r) => r,
            Err(e) => {
                c.summary(cond::FAILED, true, format!("{} could not run here: {e}.", run.label));
                continue;
            }
        };
        let Some(base) = fp32 else { continue };
        let speed = r.samples_per_s / base.samples_per_s.max(1e-12);
        let judged = judge(r.spread.as_ref(), base.spread.as_ref(), speed);
        let saved = base.total_peak as f64 - r.total_peak as f64;
        let d_acc = (r.val_accuracy - base.val_accuracy) * 100.0;
        // Faster or slower only where the epochs' spreads do not overlap (`noise::judge`).
        let pace = format!("{}: {speed:.2}× FP32's throughput — {}.", run.label, judged.words("faster", "slower", "no faster", "epochs"));
        c.one_of(
            Evidence,
            [
                (cond::FASTER, Judged::Higher),
                (cond::SLOWER, Judged::Lower),
                (cond::WITHIN_NOISE, Judged::WithinNoise),
                (cond::ONCE_FASTER, Judged::OnceHigher),
                (cond::ONCE_SLOWER, Judged::OnceLower),
                (cond::ONCE_SAME, Judged::OnceSame),
            ]
            .into_iter()
            .map(|(cond, j)| (cond, judged == j, pace.clone()))
            .collect(),
        );
        let memory = |word: &str| {
            format!(
                "It held {:.1} KiB {word} peak memory, with accuracy {} ({d_acc:+.2} points).",
                saved.abs() / 1024.0,
                percent(r.val_accuracy)
            )
        };
        c.one_of(Evidence, vec![(cond::LESS_MEMORY, saved > 0.0, memory("less")), (cond::NOT_LESS_MEMORY, saved <= 0.0, memory("more"))]);
        if let (Some(a), Some(b)) = (r.usd_per_epoch, base.usd_per_epoch) {
            let [x, y] = <[String; 2]>::try_from(gpulab_core::format::money_per_all(&[a, b], "epoch")).unwrap_or_default();
            let at = format!("At the assumed hourly price epochs cost {} against FP32's {}", x, y);
            c.one_of(
                Evidence,
                vec![
                    (cond::CHEAPER, a < b, format!("{at}: cheaper per epoch, since the same hour buys more epochs.")),
                    (cond::NOT_CHEAPER, a >= b, format!("{at}: no cheaper per epoch.")),
                ],
            );
        }
        let act = format!(
            "{}: activations and inputs peaked at {:.1} KiB against FP32's {:.1} KiB ({:.0}% of FP32's",
            run.label,
            r.act_bytes as f64 / 1024.0,
            base.act_bytes as f64 / 1024.0,
            100.0 * r.act_bytes as f64 / (base.act_bytes as f64).max(1.0)
        );
        c.one_of(
            Evidence,
            vec![
                (
                    cond::LESS_ACTIVATION,
                    r.act_bytes < base.act_bytes,
                    format!("{act}: 16-bit hidden activations, while logits and the loss stay f32)."),
                ),
                (cond::NOT_LESS_ACTIVATION, r.act_bytes >= base.act_bytes, format!("{act}).")),
            ],
        );
        let params = format!(
            "{}: parameters peaked at {:.1} KiB against FP32's {:.1} KiB",
            run.label,
            r.param_bytes as f64 / 1024.0,
            base.param_bytes as f64 / 1024.0
        );
        c.one_of(
            Evidence,
            vec![
                (
                    cond::MORE_PARAMETERS,
                    r.param_bytes > base.param_bytes,
                    format!("{params} (FP32 master weights plus a 16-bit working copy)."),
                ),
                (gpulab_systems::report::FACT, true, format!("{params}.")),
            ],
        );
        // How the 16-bit path runs on this backend, from the run's own kernel choice.
        let p = &run.path;
        let mut how: Vec<String> = Vec::new();
        match p.kind {
            BackendKind::Cpu if p.fast16 => how.push(format!("{}, but every matmul first packs both operands into bf16 pairs and every activation is rounded to 16 bits, passes FP32 does not make", p.kernel)),
            BackendKind::Cpu => how.push(format!("{}: 16 bits save memory but not arithmetic", p.kernel)),
            BackendKind::Cuda => how.push(format!("{}, against {} for FP32; gpulab's own kernels round each activation to 16 bits", p.kernel, p.f32_kernel)),
            BackendKind::Gpu if p.fast16 => how.push(format!("{}, against {} for FP32", p.kernel, p.f32_kernel)),
            BackendKind::Gpu => how.push(format!("{}, which unpacks two 16-bit values from each u32 and multiplies in f32, against {} for FP32", p.kernel, p.f32_kernel)),
        }
        if p.software {
            how.push("a software GPU has no fast 16-bit arithmetic (it runs on your CPU)".into());
        }
        if run.scaling {
            how.push("the GradScaler adds an unscale-and-check pass per gradient and one scaler-update kernel per step (no read-back: the skip is decided on the device)".into());
        }
        let measured = format!("{}: measured {:.0} samples/s against FP32's {:.0}", run.label, r.samples_per_s, base.samples_per_s);
        c.one_of(
            Evidence,
            vec![
                (cond::FASTER_DESPITE, judged.higher(), format!("{measured} — faster; how the 16-bit path runs here: {}.", how.join("; "))),
                (
                    cond::NOT_FASTER,
                    !judged.higher(),
                    format!("{measured} — not faster; how the 16-bit path runs here: {}.", how.join("; ")),
                ),
            ],
        );
    }
    c.about("");
    let by =
        |p: Precision, scaling: bool| demo.iter().find(|r| r.precision == p && r.scaling == scaling).and_then(|r| r.result.as_ref().ok());
    let path = |t: &Trained| match t.loss {
        Some((a, b)) => format!("went from {a:.3} to {b:.3}"),
        None => "was not logged".into(),
    };
    if let (Some(tp), Some(ts)) = (by(Precision::F16, false), by(Precision::F16, true)) {
        c.fact(
            Summary,
            format!(
                "Underflow: with gradients scaled by {weight:.2e}, FP16 without scaling flushed {:.1}% of its nonzero gradient elements to zero and its loss {}; with the GradScaler {:.1}% flushed and the loss {}.",
                tp.flushed.unwrap_or(0.0),
                path(tp),
                ts.flushed.unwrap_or(0.0),
                path(ts)
            ),
        );
        c.fact(
            Evidence,
            format!("Demo accuracy: FP16 unscaled {}, FP16 + GradScaler {}.", percent(tp.val_accuracy), percent(ts.val_accuracy)),
        );
        if let Some(t32) = by(Precision::F32, false) {
            c.fact(
                Evidence,
                format!(
                    "Demo FP32 reference (weight 1 and the plain learning rate: the same updates): accuracy {}.",
                    percent(t32.val_accuracy)
                ),
            );
        }
    }
    if let Some(tb) = by(Precision::BF16, false)
        && let Some(flushed) = tb.flushed
    {
        c.fact(Evidence, format!("Demo accuracy: BF16 without a scaler {}.", percent(tb.val_accuracy)));
        c.one_of(
            Evidence,
            vec![
                (
                    cond::BF16_KEPT,
                    flushed < BF16_KEPT_PERCENT,
                    format!(
                        "BF16 without any scaler flushed {flushed:.1}% and its loss {}: its 8 exponent bits are FP32's, so gradients this small stay representable and it needs no loss scaling (it pays in precision instead: 7 mantissa bits to FP16's 10).",
                        path(tb)
                    ),
                ),
                (
                    cond::BF16_FLUSHED,
                    flushed >= BF16_KEPT_PERCENT,
                    format!(
                        "BF16 without a scaler still flushed {flushed:.1}% of its gradient elements and its loss {}: at this loss weight some gradients fall below even its FP32-sized range.",
                        path(tb)
                    ),
                ),
            ],
        );
    }
    let any16 = runs.iter().any(|r| r.precision != Precision::F32 && r.result.is_ok());
    c.one_of(
        Summary,
        vec![
            (
                cond::ONLY_FP32,
                fp32.is_some() && !any16,
                fp32.map(|f| {
                    format!("Only FP32 trained ({:.0} samples/s); add fp16 or bf16 to the precisions to compare.", f.samples_per_s)
                })
                .unwrap_or_default(),
            ),
            (
                cond::NO_FP32,
                fp32.is_none() && any16,
                "FP32 did not train, so there is no baseline to compare the 16-bit runs with; add fp32 to the precisions.".into(),
            ),
            (cond::NONE, fp32.is_none() && !any16, "No run finished; see the status column.".into()),
        ],
    );
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpulab_systems::report::Claim;
    use proptest::prelude::*;

    fn path() -> impl Strategy<Value = MatmulPath> {
        (0..3usize, any::<bool>(), any::<bool>()).prop_map(|(k, software, fast16)| {
            let kind = [BackendKind::Cpu, BackendKind::Gpu, BackendKind::Cuda][k];
            MatmulPath { kind, software: software && kind == BackendKind::Gpu, kernel: "k16".into(), f32_kernel: "k32".into(), fast16 }
        })
    }

    fn trained() -> impl Strategy<Value = Trained> {
        let epochs = proptest::collection::vec(0.5f64..2.0, 0..6);
        (1.0f64..1e5, epochs, 1u64..1 << 30, 0u64..1 << 28, 0u64..1 << 28, 0.0f64..1.0, proptest::option::of(0.0f64..1.0)).prop_map(
            |(samples_per_s, epochs, total_peak, act_bytes, param_bytes, val_accuracy, usd_per_epoch)| Trained {
                samples_per_s,
                // Epochs around the run's mean throughput: none, too few, overlapping or apart.
                spread: Spread::of(&epochs.iter().map(|e| e * samples_per_s).collect::<Vec<_>>()),
                total_peak,
                act_bytes,
                param_bytes,
                val_accuracy,
                flushed: Some(1.0),
                loss: Some((2.3, 0.5)),
                usd_per_epoch,
            },
        )
    }

    fn run(precision: Precision) -> impl Strategy<Value = RunFigures> {
        (any::<bool>(), any::<bool>(), trained(), path()).prop_map(move |(ok, scaling, t, path)| RunFigures {
            label: format!("{}{}", precision.name(), if scaling { " + GradScaler" } else { "" }),
            precision,
            scaling: scaling && precision != Precision::F32,
            result: if ok { Ok(t) } else { Err("unsupported here".into()) },
            path,
        })
    }

    fn oracle(runs: &[RunFigures], demo: &[RunFigures], c: &Claim) -> Option<bool> {
        let bf16_flushed = || demo.iter().find(|r| r.precision == Precision::BF16)?.result.as_ref().ok()?.flushed;
        let ok = |r: &RunFigures| r.result.as_ref().ok().cloned();
        let base = runs.iter().find(|r| r.precision == Precision::F32).and_then(ok);
        let this = runs.iter().find(|r| r.label == c.subject);
        let t = || this.and_then(ok);
        let speed = || Some(t()?.samples_per_s / base.as_ref()?.samples_per_s);
        // The rule restated: quartiles apart with 3 or more epochs each, else the ratio by 5%.
        let n3 = |s: Option<Spread>| s.is_some_and(|s| s.n >= 3);
        let repeated = || Some(n3(t()?.spread) && n3(base.as_ref()?.spread));
        let apart = |above: bool| -> Option<bool> {
            if !repeated()? {
                return Some(false);
            }
            let (a, b) = (t()?.spread?, base.as_ref()?.spread?);
            Some(if above { a.low > b.high } else { a.high < b.low })
        };
        let faster = || Some(apart(true)? || (!repeated()? && speed()? > 1.05));
        let judged_faster = |r: &RunFigures| -> bool {
            let (Some(b), Ok(t)) = (base.as_ref(), &r.result) else { return false };
            match (t.spread, b.spread) {
                (Some(x), Some(y)) if x.n >= 3 && y.n >= 3 => x.low > y.high,
                _ => t.samples_per_s / b.samples_per_s > 1.05,
            }
        };
        let done16: Vec<&RunFigures> = runs.iter().filter(|r| r.precision != Precision::F32 && r.result.is_ok()).collect();
        Some(match c.condition {
            cond::CANNOT_SHOW | cond::FASTER_WITHOUT_FAST16 => {
                let faster = done16.iter().any(|r| judged_faster(r));
                !done16.is_empty() && done16.iter().all(|r| !r.path.fast16) && (faster == (c.condition == cond::FASTER_WITHOUT_FAST16))
            }
            cond::FAILED => this?.result.is_err(),
            cond::FASTER => apart(true)?,
            cond::SLOWER => apart(false)?,
            cond::WITHIN_NOISE => repeated()? && !apart(true)? && !apart(false)?,
            cond::ONCE_FASTER => !repeated()? && speed()? > 1.05,
            cond::ONCE_SLOWER => !repeated()? && speed()? < 0.95,
            cond::ONCE_SAME => !repeated()? && (0.95..=1.05).contains(&speed()?),
            cond::FASTER_DESPITE => faster()?,
            cond::NOT_FASTER => !faster()?,
            cond::LESS_MEMORY => t()?.total_peak < base?.total_peak,
            cond::NOT_LESS_MEMORY => t()?.total_peak >= base?.total_peak,
            cond::LESS_ACTIVATION => t()?.act_bytes < base?.act_bytes,
            cond::NOT_LESS_ACTIVATION => t()?.act_bytes >= base?.act_bytes,
            cond::MORE_PARAMETERS => t()?.param_bytes > base?.param_bytes,
            cond::ONLY_FP32 => base.is_some() && done16.is_empty(),
            cond::NO_FP32 => base.is_none() && !done16.is_empty(),
            cond::NONE => base.is_none() && done16.is_empty(),
            cond::BF16_KEPT => bf16_flushed()? < 1.0,
            cond::BF16_FLUSHED => bf16_flushed()? >= 1.0,
            cond::CHEAPER => t()?.usd_per_epoch? < base?.usd_per_epoch?,
            cond::NOT_CHEAPER => t()?.usd_per_epoch? >= base?.usd_per_epoch?,
            _ => return None,
        })
    }

    proptest! {
        /// Faster or slower, more or less memory, fast 16-bit paths or none, runs that could not
        /// train: every sentence printed is true of the numbers.
        #[test]
        fn every_printed_claim_holds(
            fp32 in proptest::option::of(run(Precision::F32)),
            f16 in run(Precision::F16),
            bf16 in proptest::option::of(run(Precision::BF16)),
            demo_f16 in proptest::option::of((run(Precision::F16), run(Precision::F16), 0.0f64..100.0, 0.0f64..100.0)),
            demo_bf16 in proptest::option::of((run(Precision::BF16), 0.0f64..3.0)),
        ) {
            let runs: Vec<RunFigures> = fp32.into_iter().chain([f16]).chain(bf16).collect();
            // The demo's runs: FP16 unscaled and scaled, and BF16 flushing a little or more
            // than the "needs no scaler" line.
            let mut demo = Vec::new();
            let flush = |mut r: RunFigures, scaling: bool, share: f64| {
                r.scaling = scaling;
                if let Ok(t) = &mut r.result {
                    t.flushed = Some(share);
                }
                r
            };
            if let Some((plain, scaled, a, b)) = demo_f16 {
                demo.push(flush(plain, false, a));
                demo.push(flush(scaled, true, b));
            }
            if let Some((r, share)) = demo_bf16 {
                demo.push(flush(r, false, share));
            }
            let claims = verdict(&runs, &demo, 2f32.powi(-24));
            claims.audit(|c| oracle(&runs, &demo, c)).map_err(TestCaseError::fail)?;
            prop_assert!(claims.has_summary());
        }
    }
}
