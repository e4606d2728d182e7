//! Exercise 9's verdict: each backend's numbers as the verdict reads them, and the sentences it
//! asserts about them (re-checked by a property test).

use super::measure::{BackendRun, Kind, Measured};
use crate::common::percent;
use crate::cpu_vs_gpu::short_label;
use gpulab_core::tensor::BackendKind;
use gpulab_systems::report::{Claims, Verdict};

fn ratio_words(r: f64) -> String {
    if r < 0.95 {
        format!("{:.2}× faster", 1.0 / r)
    } else if r > 1.05 {
        format!("{:.2}× slower", r)
    } else {
        "no faster".into()
    }
}

/// One backend's FP32 and headline INT8 numbers, as the verdict reads them.
#[derive(Clone, Debug, PartialEq)]
struct QuantFigures {
    name: String,
    kind: BackendKind,
    software: bool,
    int8_kernel: String,
    /// Latency at the batch and at batch 1, seconds: (FP32, INT8).
    batch_s: (f64, f64),
    one_s: (f64, f64),
    weight_bytes: (u64, u64),
    accuracy: (f64, f64),
    /// The largest layer's GEMM alone: its m, k, n and seconds in f32 and int8.
    gemm: Option<([usize; 3], f64, f64)>,
}

impl QuantFigures {
    fn of(r: &BackendRun, f: &Measured, q: &Measured) -> Self {
        QuantFigures {
            name: short_label(&r.info),
            kind: r.info.kind,
            software: r.info.software,
            int8_kernel: r.int8_kernel.clone(),
            batch_s: (f.latency_batch_s, q.latency_batch_s),
            one_s: (f.latency1_s, q.latency1_s),
            weight_bytes: (f.weight_bytes, q.weight_bytes),
            accuracy: (f.accuracy, q.accuracy),
            gemm: r.gemm.as_ref().map(|g| (g.mkn, g.f32_s, g.int8_s)),
        }
    }
}

/// The conditions the verdict's sentences assert (the property test re-checks each one).
mod cond {
    pub const EPILOGUE_COST: &str = "the int8 GEMM alone over 5% faster, end to end at least 0.1 further from it";
    pub const FOLLOWS_GEMM: &str = "the int8 GEMM alone over 5% faster, end to end within 0.1 of it";
    pub const SOFTWARE_NO_GAIN: &str = "a software GPU, the int8 GEMM and the forward pass not over 5% faster, fewer weight bytes";
    pub const NO_GAIN: &str = "a hardware backend, the int8 GEMM and the forward pass not over 5% faster, fewer weight bytes";
    pub const OTHER_GAIN: &str = "the int8 GEMM alone not over 5% faster, the forward pass over 5% faster";
    pub const NO_VNNI: &str = "a CPU whose int8 kernel is not the VNNI one";
}

/// What INT8 did against FP32 on one backend, and why, from the GEMM probe.
fn backend_claims(c: &mut Claims, x: &QuantFigures, batch: usize) {
    use gpulab_systems::report::Part::{Evidence, Summary};
    let name = &x.name;
    let ratio = x.batch_s.1 / x.batch_s.0;
    let drop_pp = (x.accuracy.0 - x.accuracy.1) * 100.0;
    c.fact(
        Summary,
        format!(
            "On {name}, INT8 (static, per-channel) is {} than FP32 at batch {batch} ({} vs {}) and {} at batch 1, with weights at {:.0}% of FP32's bytes and validation accuracy {} ({:+.2} pp).",
            ratio_words(ratio),
            gpulab_core::format::duration(x.batch_s.1),
            gpulab_core::format::duration(x.batch_s.0),
            ratio_words(x.one_s.1 / x.one_s.0),
            x.weight_bytes.1 as f64 / x.weight_bytes.0 as f64 * 100.0,
            percent(x.accuracy.1),
            -drop_pp,
        ),
    );
    c.fact(Evidence, format!("{name}: the int8 GEMM kernel here is {}.", x.int8_kernel));
    if let Some(([m, k, n], f32_s, int8_s)) = x.gemm {
        let gr = int8_s / f32_s;
        c.fact(
            Evidence,
            format!(
                "{name}: the largest layer's GEMM alone ({m}×{k}·{k}×{n}) takes {} in f32 and {} in int8 ({gr:.2}×).",
                gpulab_core::format::duration(f32_s),
                gpulab_core::format::duration(int8_s)
            ),
        );
        let smaller = x.weight_bytes.1 < x.weight_bytes.0;
        // Where the dequantize runs: fused into the GEMM's epilogue, or (CUDA) a pass of its own.
        let passes = if x.kind == BackendKind::Cuda {
            "each layer adds a quantize pass over its activations and a dequantize pass over its outputs"
        } else {
            "each layer adds a quantize pass over its activations (the dequantize rides in the GEMM's epilogue)"
        };
        c.one_of(
            Summary,
            vec![
                (cond::EPILOGUE_COST, gr < 0.95 && ratio >= gr + 0.1, format!("Why: the int8 GEMM itself is {} here, but {passes}, which eats into that gain end to end.", ratio_words(gr))),
                (cond::FOLLOWS_GEMM, gr < 0.95 && ratio < gr + 0.1, format!("Why: the int8 GEMM itself is {} here, and the whole forward pass follows it ({ratio:.2}× against the GEMM's {gr:.2}×).", ratio_words(gr))),
                (
                    cond::SOFTWARE_NO_GAIN,
                    gr >= 0.95 && ratio >= 0.95 && x.software && smaller,
                    format!("Why: the int8 GEMM itself is {} at this size: {name} emulates the packed dot product on your CPU's cores, so int8 saves memory but not time.", ratio_words(gr)),
                ),
                (
                    cond::NO_GAIN,
                    gr >= 0.95 && ratio >= 0.95 && !x.software && smaller,
                    format!("Why: at this size ({m}×{k}·{k}×{n}) the int8 GEMM itself is {} on this backend, so int8 saves memory but not time; try wider layers and a larger model.", ratio_words(gr)),
                ),
                (
                    cond::OTHER_GAIN,
                    gr >= 0.95 && ratio < 0.95,
                    format!("The int8 GEMM alone is {} at this size, yet the whole forward pass is {}: the gain came from outside the largest layer's GEMM.", ratio_words(gr), ratio_words(ratio)),
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
            (Some(f), Some(q)) => backend_claims(&mut c, &QuantFigures::of(r, f, q), batch),
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

    fn figures() -> impl Strategy<Value = QuantFigures> {
        (
            (0..3usize, any::<bool>(), any::<bool>()),
            (1e-5f64..1e-1, 1e-5f64..1e-1, 1e-5f64..1e-1, 1e-5f64..1e-1),
            (1u64..1 << 24, 1u64..1 << 24),
            proptest::option::of((1e-6f64..1e-2, 1e-6f64..1e-2)),
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
                }
            })
    }

    proptest! {
        /// INT8 faster or slower, alone and end to end, on software or hardware, with or without
        /// VNNI: every sentence printed is true of the numbers.
        #[test]
        fn every_printed_claim_holds(x in figures()) {
            let mut c = Claims::new();
            backend_claims(&mut c, &x, 64);
            let ratio = x.batch_s.1 / x.batch_s.0;
            let gr = || x.gemm.map(|g| g.2 / g.1);
            let smaller = x.weight_bytes.1 < x.weight_bytes.0;
            c.audit(|cl| Some(match cl.condition {
                cond::EPILOGUE_COST => gr()? < 0.95 && ratio >= gr()? + 0.1,
                cond::FOLLOWS_GEMM => gr()? < 0.95 && ratio < gr()? + 0.1,
                cond::SOFTWARE_NO_GAIN => gr()? >= 0.95 && ratio >= 0.95 && x.software && smaller,
                cond::NO_GAIN => gr()? >= 0.95 && ratio >= 0.95 && !x.software && smaller,
                cond::OTHER_GAIN => gr()? >= 0.95 && ratio < 0.95,
                cond::NO_VNNI => x.kind == BackendKind::Cpu && !x.int8_kernel.contains("VNNI"),
                _ => return None,
            }))
            .map_err(TestCaseError::fail)?;
            prop_assert!(c.has_summary());
        }
    }
}
