//! Exercise 9's verdict: each backend's numbers as the verdict reads them, and the sentences it
//! asserts about them (re-checked by a property test).

use super::measure::{BackendRun, Kind, Measured};
use crate::common::percent;
use crate::cpu_vs_gpu::short_label;
use crate::noise::{Judged, judge};
use gpulab_core::stats::Spread;
use gpulab_core::tensor::BackendKind;
use gpulab_systems::report::{Claims, Verdict};

/// INT8's time against FP32's in words, judged by the timed runs' spreads (`noise::judge`):
/// "1.25× faster", "1.10× slower", within noise, or the word "in one measurement" under three runs.
fn speed_words(j: Judged, ratio: f64) -> String {
    j.words(&format!("{ratio:.2}× slower"), &format!("{:.2}× faster", 1.0 / ratio), "no faster", "timed runs")
}

/// `int8` against `f32` seconds: the judgement and the time ratio (int8 ÷ f32).
fn judged(f32: &Spread, int8: &Spread) -> (Judged, f64) {
    let ratio = int8.median / f32.median.max(1e-15);
    (judge(Some(int8), Some(f32), ratio), ratio)
}

/// One backend's FP32 and headline INT8 numbers, as the verdict reads them.
#[derive(Clone, Debug, PartialEq)]
struct QuantFigures {
    name: String,
    kind: BackendKind,
    software: bool,
    int8_kernel: String,
    /// Seconds per forward pass at the batch and at batch 1: (FP32, INT8).
    batch_s: (Spread, Spread),
    one_s: (Spread, Spread),
    weight_bytes: (u64, u64),
    accuracy: (f64, f64),
    /// The largest layer's GEMM alone: its m, k, n and seconds in f32 and int8.
    gemm: Option<([usize; 3], Spread, Spread)>,
    /// Every time of the latency and GEMM tables: the sentences print theirs in those tables'
    /// units and decimals.
    table_secs: Vec<f64>,
    gemm_secs: Vec<f64>,
}

impl QuantFigures {
    fn of(r: &BackendRun, f: &Measured, q: &Measured, runs: &[BackendRun]) -> Self {
        QuantFigures {
            name: short_label(&r.info),
            kind: r.info.kind,
            software: r.info.software,
            int8_kernel: r.int8_kernel.clone(),
            batch_s: (f.latency_batch, q.latency_batch),
            one_s: (f.latency1, q.latency1),
            weight_bytes: (f.weight_bytes, q.weight_bytes),
            accuracy: (f.accuracy, q.accuracy),
            gemm: r.gemm.as_ref().map(|g| (g.mkn, g.f32, g.int8)),
            table_secs: super::report::latency_secs(runs),
            gemm_secs: super::report::gemm_secs(runs),
        }
    }
}

/// The conditions the verdict's sentences assert (the property test re-checks each one).
/// "Faster" is judged by the timed runs' spreads (`noise::judge`; by 5% in one measurement).
mod cond {
    pub const EPILOGUE_COST: &str = "the int8 GEMM alone judged faster, end to end at least 0.1 further from it";
    pub const FOLLOWS_GEMM: &str = "the int8 GEMM alone judged faster, end to end within 0.1 of it";
    pub const SOFTWARE_NO_GAIN: &str = "a software GPU, the int8 GEMM and the forward pass not judged faster, fewer weight bytes";
    pub const NO_GAIN: &str = "a hardware backend, the int8 GEMM and the forward pass not judged faster, fewer weight bytes";
    pub const OTHER_GAIN: &str = "the int8 GEMM alone not judged faster, the forward pass judged faster";
    pub const NO_VNNI: &str = "a CPU whose int8 kernel is not the VNNI one";
}

/// What INT8 did against FP32 on one backend, and why, from the GEMM probe.
fn backend_claims(c: &mut Claims, x: &QuantFigures, batch: usize) {
    use gpulab_systems::report::Part::{Evidence, Summary};
    let name = &x.name;
    let (j, ratio) = judged(&x.batch_s.0, &x.batch_s.1);
    let (j1, ratio1) = judged(&x.one_s.0, &x.one_s.1);
    let drop_pp = (x.accuracy.0 - x.accuracy.1) * 100.0;
    // Both times of the comparison in one unit and to the same decimals: the table's.
    let t = gpulab_core::format::durations_as(&[x.batch_s.1.median, x.batch_s.0.median], &x.table_secs);
    c.fact(
        Summary,
        format!(
            "On {name}, INT8 (static, per-channel) took {} against FP32's {} at batch {batch}: {}; at batch 1, {}; its weights are {:.0}% of FP32's bytes and its validation accuracy {} ({:+.2} pp).",
            t[0],
            t[1],
            speed_words(j, ratio),
            speed_words(j1, ratio1),
            x.weight_bytes.1 as f64 / x.weight_bytes.0 as f64 * 100.0,
            percent(x.accuracy.1),
            -drop_pp,
        ),
    );
    c.fact(Evidence, format!("{name}: the int8 GEMM kernel here is {}.", x.int8_kernel));
    if let Some(([m, k, n], f32_s, int8_s)) = x.gemm {
        let (gj, gr) = judged(&f32_s, &int8_s);
        let g = gpulab_core::format::durations_as(&[f32_s.median, int8_s.median], &x.gemm_secs);
        c.fact(
            Evidence,
            format!("{name}: the largest layer's GEMM alone ({m}×{k}·{k}×{n}) takes {} in f32 and {} in int8 ({gr:.2}×).", g[0], g[1]),
        );
        let smaller = x.weight_bytes.1 < x.weight_bytes.0;
        let (gemm_faster, faster) = (gj.lower(), j.lower());
        // Where the dequantize runs: fused into the GEMM's epilogue, or (CUDA) a pass of its own.
        let passes = if x.kind == BackendKind::Cuda {
            "each layer adds a quantize pass over its activations and a dequantize pass over its outputs"
        } else {
            "each layer adds a quantize pass over its activations (the dequantize rides in the GEMM's epilogue)"
        };
        let gw = speed_words(gj, gr);
        c.one_of(
            Summary,
            vec![
                (cond::EPILOGUE_COST, gemm_faster && ratio >= gr + 0.1, format!("Why: the int8 GEMM itself is {gw} here, but {passes}, which eats into that gain end to end.")),
                (cond::FOLLOWS_GEMM, gemm_faster && ratio < gr + 0.1, format!("Why: the int8 GEMM itself is {gw} here, and the whole forward pass follows it ({ratio:.2}× against the GEMM's {gr:.2}×).")),
                (
                    cond::SOFTWARE_NO_GAIN,
                    !gemm_faster && !faster && x.software && smaller,
                    format!("Why: the int8 GEMM itself is {gw} at this size: {name} emulates the packed dot product on your CPU's cores, so int8 saves memory but not time."),
                ),
                (
                    cond::NO_GAIN,
                    !gemm_faster && !faster && !x.software && smaller,
                    format!("Why: at this size ({m}×{k}·{k}×{n}) the int8 GEMM itself is {gw} on this backend, so int8 saves memory but not time; try wider layers and a larger model."),
                ),
                (
                    cond::OTHER_GAIN,
                    !gemm_faster && faster,
                    format!("The int8 GEMM alone is {gw} at this size, yet the whole forward pass is {}: the gain came from outside the largest layer's GEMM.", speed_words(j, ratio)),
                ),
            ],
        );
    }
    c.evidence(
        cond::NO_VNNI,
        x.kind == BackendKind::Cpu && !x.int8_kernel.contains("VNNI"),
        format!(
            "{name}: no VNNI int8 dot-product instructions were found on this CPU, so the int8 GEMM ran on the {} path.",
            x.int8_kernel
        ),
    );
}

pub(super) fn verdict(runs: &[BackendRun], batch: usize) -> Verdict {
    use gpulab_systems::report::Part::{Evidence, Summary};
    let mut c = Claims::new();
    for r in runs {
        let name = short_label(&r.info);
        c.about(&name);
        match (r.variant(Kind::F32), r.variant(Kind::headline())) {
            (Some(f), Some(q)) => backend_claims(&mut c, &QuantFigures::of(r, f, q, runs), batch),
            _ => {
                c.fact(Summary, format!("{name}: INT8 could not be compared with FP32 (see the status column)."));
            }
        }
        // Two different measures, named as such: the accuracy with one layer alone in int8, and
        // the output SQNR with every layer in int8 (where error accumulates towards the output).
        // Naming one layer "most sensitive" beside a table whose lowest SQNR is another's read as
        // a contradiction.
        let least_accurate = r.layers.iter().enumerate().min_by(|a, b| a.1.only_this_accuracy.total_cmp(&b.1.only_this_accuracy));
        let lowest_sqnr = r.layers.iter().enumerate().filter_map(|(i, l)| Some((i, l.output_sqnr?))).min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((i, l)) = least_accurate {
            c.fact(
                Evidence,
                format!(
                    "{name}: with one layer alone in int8, layer {i} ({}×{} weights) costs the most accuracy: {}.",
                    l.shape[0],
                    l.shape[1],
                    percent(l.only_this_accuracy)
                ),
            );
        }
        if let Some((j, db)) = lowest_sqnr {
            c.fact(
                Evidence,
                format!(
                    "{name}: with every layer in int8, the output SQNR is lowest at layer {j} ({db:.1} dB){}.",
                    if least_accurate.is_some_and(|(i, _)| i != j) {
                        ": rounding error adds up layer after layer towards the output"
                    } else {
                        ""
                    }
                ),
            );
        }
        if let Some(best) = r.observers.iter().max_by(|a, b| a.accuracy.total_cmp(&b.accuracy)) {
            let worst = r.observers.iter().min_by(|a, b| a.accuracy.total_cmp(&b.accuracy)).unwrap_or(best);
            c.fact(
                Evidence,
                format!(
                    "{name}: calibration observers range from {} ({}) to {} ({}).",
                    percent(worst.accuracy),
                    worst.kind.name(),
                    percent(best.accuracy),
                    best.kind.name()
                ),
            );
        }
    }
    c.about("");
    if runs.is_empty() {
        c.fact(Summary, "No backend finished; see the status column.");
    }
    c.verdict()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Timed runs around `median`: none too few to judge (one or two), or five spread by `width`.
    fn timed() -> impl Strategy<Value = Spread> {
        (1e-6f64..1e-1, 0.0f64..0.4, prop_oneof![Just(1usize), Just(5)]).prop_map(|(m, width, n)| {
            let v: Vec<f64> = (0..n).map(|i| m * (1.0 + width * (i as f64 / 4.0 - 0.5))).collect();
            Spread::of(&v).unwrap()
        })
    }

    fn figures() -> impl Strategy<Value = QuantFigures> {
        (
            (0..3usize, any::<bool>(), any::<bool>()),
            (timed(), timed(), timed(), timed()),
            (1u64..1 << 24, 1u64..1 << 24),
            proptest::option::of((timed(), timed())),
        )
            .prop_map(|((k, software, vnni), (f, q, f1, q1), (fb, qb), gemm)| {
                let kind = [BackendKind::Cpu, BackendKind::Gpu, BackendKind::Cuda][k];
                QuantFigures {
                    name: "b".into(),
                    kind,
                    software: software && kind == BackendKind::Gpu,
                    int8_kernel: if vnni { "AVX-512 VNNI".into() } else { "AVX2".into() },
                    batch_s: (f, q),
                    one_s: (f1, q1),
                    weight_bytes: (fb, qb),
                    accuracy: (0.9, 0.89),
                    gemm: gemm.map(|(a, b)| ([64, 256, 128], a, b)),
                    table_secs: vec![f.median, q.median, f1.median, q1.median],
                    gemm_secs: gemm.map_or(vec![], |(a, b)| vec![a.median, b.median]),
                }
            })
    }

    /// Spreads that overlap say "within noise", never "faster" or "slower".
    #[test]
    fn overlapping_runs_are_within_noise() {
        let s = |v: &[f64]| Spread::of(v).unwrap();
        let x = QuantFigures {
            name: "b".into(),
            kind: BackendKind::Cpu,
            software: false,
            int8_kernel: "AVX-512 VNNI".into(),
            batch_s: (s(&[6.0e-6, 5.0e-6, 7.0e-6]), s(&[4.87e-6, 4.0e-6, 6.5e-6])),
            one_s: (s(&[2.0e-6, 2.1e-6, 2.2e-6]), s(&[1.0e-6, 1.1e-6, 1.2e-6])),
            weight_bytes: (4, 1),
            accuracy: (0.9, 0.9),
            gemm: None,
            table_secs: vec![6.0e-6, 4.87e-6, 2.1e-6, 1.1e-6],
            gemm_secs: vec![],
        };
        let mut c = Claims::new();
        backend_claims(&mut c, &x, 64);
        let v = c.verdict();
        assert!(v.summary.contains("took 4.870 µs against FP32's 6.000 µs at batch 64: within noise"), "{}", v.summary);
        assert!(v.summary.contains("at batch 1, 1.91× faster;"), "{}", v.summary);
    }

    proptest! {
        /// INT8 faster or slower, alone and end to end, on software or hardware, with or without
        /// VNNI: every sentence printed is true of the numbers.
        #[test]
        fn every_printed_claim_holds(x in figures()) {
            let mut c = Claims::new();
            backend_claims(&mut c, &x, 64);
            let ratio = x.batch_s.1.median / x.batch_s.0.median;
            let gr = || x.gemm.map(|g| g.2.median / g.1.median);
            // Faster: int8's time judged lower than f32's by the rule restated.
            let faster = crate::noise::restated(Some(x.batch_s.1), Some(x.batch_s.0), ratio) == "down";
            let gemm_faster = || x.gemm.map(|g| crate::noise::restated(Some(g.2), Some(g.1), g.2.median / g.1.median) == "down");
            let smaller = x.weight_bytes.1 < x.weight_bytes.0;
            c.audit(|cl| Some(match cl.condition {
                cond::EPILOGUE_COST => gemm_faster()? && ratio >= gr()? + 0.1,
                cond::FOLLOWS_GEMM => gemm_faster()? && ratio < gr()? + 0.1,
                cond::SOFTWARE_NO_GAIN => !gemm_faster()? && !faster && x.software && smaller,
                cond::NO_GAIN => !gemm_faster()? && !faster && !x.software && smaller,
                cond::OTHER_GAIN => !gemm_faster()? && faster,
                cond::NO_VNNI => x.kind == BackendKind::Cpu && !x.int8_kernel.contains("VNNI"),
                _ => return None,
            }))
            .map_err(TestCaseError::fail)?;
            prop_assert!(c.has_summary());
        }
    }
}
