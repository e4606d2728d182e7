//! The bottleneck verdict: a pure function of a run's spans (and the adapter's measured peaks)
//! that names where the time went, with the evidence numbers and the chapter's matching
//! optimization.

use serde::{Deserialize, Serialize};

use super::kernels;
use super::peaks::Peaks;
use gpulab_core::spans::{GPU, MAIN, Span, Timeline, stage, union_length};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Bottleneck {
    /// The training thread waits for data.
    Input,
    /// Moving batches to the device dominates.
    Transfer,
    /// The GPU is busy, mostly in kernels limited by arithmetic.
    Compute,
    /// The GPU is busy, mostly in kernels limited by memory bandwidth.
    Memory,
    /// The GPU idles between many tiny dispatches while the CPU records, submits and waits.
    Overhead,
    /// Replicas wait for the gradient all-reduce: exposed communication dominates the step.
    Communication,
}

impl Bottleneck {
    pub fn name(self) -> &'static str {
        match self {
            Bottleneck::Input => "input-bound",
            Bottleneck::Transfer => "transfer-bound",
            Bottleneck::Compute => "compute-bound",
            Bottleneck::Memory => "memory-bound",
            Bottleneck::Overhead => "synchronization/overhead-bound",
            Bottleneck::Communication => "communication-bound",
        }
    }

    /// The chapter's optimization for this bottleneck.
    pub fn optimization(self) -> &'static str {
        match self {
            Bottleneck::Input => {
                "feed the GPU: more loader workers (num_workers), prefetching (prefetch_factor), caching decoded samples, cheaper decode"
            }
            Bottleneck::Transfer => {
                "copy less and better: persistent staging buffers (pin_memory), larger batches per copy, keep data on the device"
            }
            Bottleneck::Compute => {
                "do less arithmetic per sample or do it faster: mixed precision (exercise 3), better kernels, a smaller model"
            }
            Bottleneck::Memory => {
                "move fewer bytes per FLOP: fuse element-wise kernels, use mixed precision (half the bytes), larger batches (matmuls reuse weights more)"
            }
            Bottleneck::Overhead => {
                "give each dispatch more work and sync less: larger batches, fused kernels, fewer read-backs (log less often)"
            }
            Bottleneck::Communication => {
                "hide or shrink the all-reduce: overlap it with backward (smaller buckets, bucket_cap_mb), more compute per byte sent (larger per-replica batches), a faster interconnect, or fewer replicas"
            }
        }
    }
}

/// The figures a verdict is computed from; all derived from the spans.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Analysis {
    /// From the first to the last span of the main thread, seconds.
    pub wall_s: f64,
    pub steps: usize,
    pub data_wait_s: f64,
    pub upload_s: f64,
    /// Recording and submitting on the CPU.
    pub cpu_issue_s: f64,
    /// Waiting for the device and reading back.
    pub wait_s: f64,
    /// Time the GPU lane was busy (union of kernel spans); None without GPU timestamps.
    pub gpu_busy_s: Option<f64>,
    pub kernels: usize,
    pub mean_kernel_s: f64,
    /// Share of kernel time in kernels below the roofline's ridge point; None without peaks.
    pub memory_bound_share: Option<f64>,
    /// Waiting for the gradient all-reduce (exposed communication; data parallelism only).
    #[serde(default)]
    pub comm_s: f64,
}

impl Analysis {
    pub fn of(t: &Timeline, peaks: Option<&Peaks>) -> Self {
        let main: Vec<&Span> = t.lane_spans(MAIN).collect();
        let lo = main.iter().map(|s| s.start_s).fold(f64::INFINITY, f64::min);
        let hi = main.iter().map(|s| s.end_s).fold(f64::NEG_INFINITY, f64::max);
        let wall_s = if hi > lo { hi - lo } else { 0.0 };
        let gpu: Vec<&Span> = t.lane_spans(GPU).collect();
        let kernel_total: f64 = gpu.iter().map(|s| s.duration()).sum();
        let memory_bound_share = peaks.filter(|_| kernel_total > 0.0).map(|p| {
            let rows = kernels::table(t);
            rows.iter().filter(|r| r.memory_bound(p)).map(|r| r.total_s).sum::<f64>() / kernel_total
        });
        Analysis {
            wall_s,
            steps: main.iter().filter(|s| s.name == stage::DATA_WAIT).count(),
            data_wait_s: t.total(MAIN, stage::DATA_WAIT),
            upload_s: t.total(MAIN, stage::UPLOAD),
            cpu_issue_s: t.total(MAIN, stage::RECORD) + t.total(MAIN, stage::SUBMIT),
            wait_s: t.total(MAIN, stage::WAIT) + t.total(MAIN, stage::READBACK),
            gpu_busy_s: (!gpu.is_empty()).then(|| union_length(&gpu)),
            kernels: gpu.len(),
            mean_kernel_s: kernel_total / gpu.len().max(1) as f64,
            memory_bound_share,
            comm_s: t.total(MAIN, stage::ALLREDUCE),
        }
    }

    fn share(&self, x: f64) -> f64 {
        x / self.wall_s.max(1e-12)
    }
}

/// Waiting for data beyond this share of the wall time makes a run input-bound.
pub const INPUT_SHARE: f64 = 0.25;
/// Uploads beyond this share make it transfer-bound.
pub const TRANSFER_SHARE: f64 = 0.25;
/// A device busy at least this share of the time is the bottleneck itself.
pub const BUSY_SHARE: f64 = 0.5;
/// Exposed communication beyond this share of the step time makes a run communication-bound.
pub const COMM_SHARE: f64 = 0.25;

/// The communication-bound test both profilers use: exercise 7 on its spans, exercise 6 on its
/// step split (exposed all-reduce time against the whole step).
pub fn communication_bound(exposed_comm_s: f64, step_s: f64) -> bool {
    step_s > 0.0 && exposed_comm_s.is_finite() && exposed_comm_s / step_s >= COMM_SHARE
}

/// Kernels shorter than this on average are "tiny": launch overhead rivals their work.
pub const TINY_KERNEL_S: f64 = 20e-6;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    pub bottleneck: Bottleneck,
    pub summary: String,
    pub evidence: Vec<String>,
    pub analysis: Analysis,
}

fn ms(s: f64) -> String {
    format!("{:.1} ms", s * 1e3)
}
fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// Classifies a run. Pure: the same spans always give the same verdict.
pub fn diagnose(t: &Timeline, peaks: Option<&Peaks>) -> Diagnosis {
    classify(Analysis::of(t, peaks))
}

/// The conditions the diagnosis's sentences assert (the property test re-checks each one).
pub mod cond {
    pub const COMMUNICATION: &str = "exposed all-reduce at least COMM_SHARE of the wall time, and no less than data wait or uploads";
    pub const INPUT: &str = "data wait at least INPUT_SHARE of the wall time, and no less than uploads or the device's share";
    pub const TRANSFER: &str = "uploads at least TRANSFER_SHARE of the wall time, and no less than data wait or the device's share";
    pub const MEMORY: &str = "the device busy at least BUSY_SHARE, over half its kernel time below the ridge";
    pub const COMPUTE: &str = "the device busy at least BUSY_SHARE, at most half its kernel time below the ridge";
    pub const DEVICE: &str = "the device busy at least BUSY_SHARE, no peaks to place its kernels";
    pub const OVERHEAD: &str = "the device busy under BUSY_SHARE, or under 80% in tiny kernels";
    pub const BELOW_RIDGE: &str = "over half the kernel time below the ridge";
    pub const ABOVE_RIDGE: &str = "at most half the kernel time below the ridge";
    pub const TINY_KERNELS: &str = "GPU kernels averaged under TINY_KERNEL_S";
}

/// The diagnosis of an analysis: the first bottleneck whose rule holds, in the order
/// communication, input, transfer, the device itself, overhead.
pub fn classify(a: Analysis) -> Diagnosis {
    let (bottleneck, claims) = claims(&a);
    let v = claims.verdict();
    Diagnosis { bottleneck, summary: v.summary, evidence: v.evidence, analysis: a }
}

/// The bottleneck and the diagnosis's sentences, each with its condition.
fn claims(a: &Analysis) -> (Bottleneck, crate::report::Claims) {
    use crate::report::{Claims, Part::Evidence};
    let mut c = Claims::new();
    c.fact(
        Evidence,
        format!(
            "Over {} ({} of the main thread): waiting for data {} ({}), uploads {} ({}), recording and submitting {} ({}), waiting for the device and reading back {} ({}).",
            gpulab_core::format::plural(a.steps as u64, "step"),
            ms(a.wall_s),
            ms(a.data_wait_s),
            pct(a.share(a.data_wait_s)),
            ms(a.upload_s),
            pct(a.share(a.upload_s)),
            ms(a.cpu_issue_s),
            pct(a.share(a.cpu_issue_s)),
            ms(a.wait_s),
            pct(a.share(a.wait_s))
        ),
    );
    c.fact(
        Evidence,
        match a.gpu_busy_s {
            Some(b) => format!(
                "The GPU was busy {} of the time ({}) in {} averaging {:.1} µs each.",
                pct(a.share(b)),
                ms(b),
                gpulab_core::format::plural(a.kernels as u64, "kernel"),
                a.mean_kernel_s * 1e6
            ),
            None => "No GPU kernel times (a CPU backend, or an adapter without timestamp queries): the device's share is read from the CPU's record and wait spans.".into(),
        },
    );
    let busy = a.gpu_busy_s.map(|b| a.share(b));
    // Without GPU timestamps, the device's work shows on the CPU as recording (CPU backend) and
    // waiting (GPU backend).
    let device_share = busy.unwrap_or_else(|| a.share(a.cpu_issue_s + a.wait_s));
    if a.comm_s > 0.0 {
        c.fact(Evidence, format!("Waiting for the gradient all-reduce took {} ({}).", ms(a.comm_s), pct(a.share(a.comm_s))));
    }
    let tiny = busy.is_some() && a.mean_kernel_s < TINY_KERNEL_S;
    let device = device_share >= BUSY_SHARE && !(tiny && device_share < 0.8);
    let below = a.memory_bound_share.map(|m| m > 0.5);
    let rules = [
        (
            Bottleneck::Communication,
            cond::COMMUNICATION,
            communication_bound(a.comm_s, a.wall_s) && a.comm_s >= a.data_wait_s.max(a.upload_s),
        ),
        // A stage is the bottleneck only if no other share printed beside it is larger: 32 % of
        // the time waiting for data beside 62 % waiting for the device is not input-bound.
        (
            Bottleneck::Input,
            cond::INPUT,
            a.share(a.data_wait_s) >= INPUT_SHARE && a.data_wait_s >= a.upload_s && a.share(a.data_wait_s) >= device_share,
        ),
        (
            Bottleneck::Transfer,
            cond::TRANSFER,
            a.share(a.upload_s) >= TRANSFER_SHARE && a.upload_s >= a.data_wait_s && a.share(a.upload_s) >= device_share,
        ),
        (Bottleneck::Memory, cond::MEMORY, device && below == Some(true)),
        (Bottleneck::Compute, cond::COMPUTE, device && below == Some(false)),
        (Bottleneck::Compute, cond::DEVICE, device && below.is_none()),
        (Bottleneck::Overhead, cond::OVERHEAD, !device),
    ];
    let (bottleneck, ..) = rules.iter().find(|r| r.2).copied().unwrap_or(rules[rules.len() - 1]);
    let mut summary = Claims::new();
    summary.one_of(
        crate::report::Part::Summary,
        rules
            .iter()
            .map(|&(b, cond, holds)| (cond, holds, format!("This run is {}; suggested optimization: {}.", b.name(), b.optimization())))
            .collect(),
    );
    if matches!(bottleneck, Bottleneck::Memory | Bottleneck::Compute) {
        let m = a.memory_bound_share.unwrap_or(0.0);
        c.one_of(
            Evidence,
            vec![
                (
                    cond::BELOW_RIDGE,
                    below == Some(true),
                    format!("{} of kernel time was in kernels below the roofline's ridge point (memory-bound).", pct(m)),
                ),
                (
                    cond::ABOVE_RIDGE,
                    below == Some(false),
                    format!("{} of kernel time was in kernels above the roofline's ridge point (compute-bound).", pct(1.0 - m)),
                ),
            ],
        );
    }
    if bottleneck == Bottleneck::Overhead {
        c.evidence(
            cond::TINY_KERNELS,
            tiny,
            format!("Kernels averaged under {:.0} µs: per-dispatch overhead rivals the work.", TINY_KERNEL_S * 1e6),
        );
    }
    summary.extend(c);
    (bottleneck, summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn analysis() -> impl Strategy<Value = Analysis> {
        (
            (1e-3f64..10.0, 0.0f64..1.0, 0.0f64..1.0, 0.0f64..1.0, 0.0f64..1.0),
            (proptest::option::of(0.0f64..1.2), 1e-7f64..1e-3, proptest::option::of(0.0f64..1.0), prop_oneof![Just(0.0), 0.0f64..1.0]),
        )
            .prop_map(|((wall_s, data, upload, issue, wait), (busy, mean_kernel_s, memory_bound_share, comm))| Analysis {
                wall_s,
                steps: 10,
                data_wait_s: data * wall_s,
                upload_s: upload * wall_s,
                cpu_issue_s: issue * wall_s,
                wait_s: wait * wall_s,
                gpu_busy_s: busy.map(|b| b * wall_s),
                kernels: 100,
                mean_kernel_s,
                memory_bound_share,
                comm_s: comm * wall_s,
            })
    }

    /// Each rule, re-evaluated from the analysis.
    fn oracle(a: &Analysis, c: &crate::report::Claim) -> Option<bool> {
        let share = |x: f64| x / a.wall_s;
        let busy = a.gpu_busy_s.map(share).unwrap_or_else(|| share(a.cpu_issue_s + a.wait_s));
        let tiny = a.gpu_busy_s.is_some() && a.mean_kernel_s < TINY_KERNEL_S;
        let device = busy >= BUSY_SHARE && !(tiny && busy < 0.8);
        Some(match c.condition {
            cond::COMMUNICATION => share(a.comm_s) >= COMM_SHARE && a.comm_s >= a.data_wait_s && a.comm_s >= a.upload_s,
            cond::INPUT => share(a.data_wait_s) >= INPUT_SHARE && a.data_wait_s >= a.upload_s && share(a.data_wait_s) >= busy,
            cond::TRANSFER => share(a.upload_s) >= TRANSFER_SHARE && a.upload_s >= a.data_wait_s && share(a.upload_s) >= busy,
            cond::MEMORY => device && a.memory_bound_share? > 0.5,
            cond::COMPUTE => device && a.memory_bound_share? <= 0.5,
            cond::DEVICE => device && a.memory_bound_share.is_none(),
            cond::OVERHEAD => !device,
            cond::BELOW_RIDGE => a.memory_bound_share? > 0.5,
            cond::ABOVE_RIDGE => a.memory_bound_share? <= 0.5,
            cond::TINY_KERNELS => tiny,
            _ => return None,
        })
    }

    proptest! {
        /// Input-, transfer-, compute-, memory-, overhead- or communication-bound, with GPU times or
        /// without: every sentence printed is true of the analysis, and the summary names the
        /// bottleneck returned.
        #[test]
        fn every_printed_claim_holds(a in analysis()) {
            let (b, claims) = claims(&a);
            claims.audit(|c| oracle(&a, c)).map_err(TestCaseError::fail)?;
            prop_assert!(claims.verdict().summary.contains(b.name()));
        }
    }

    /// `steps` steps of the given stage lengths (ms) on the main thread, and GPU kernels of
    /// `kernel_ms` each, `per_step` per step, each with `intensity` FLOPs per byte.
    fn run(steps: usize, wait: f64, upload: f64, record: f64, sync: f64, kernel_ms: f64, per_step: usize, intensity: f64) -> Timeline {
        let mut v = Vec::new();
        let mut t = 0.0;
        let at = |v: &mut Vec<Span>, t: &mut f64, name: &str, d: f64| {
            v.push(Span::new(MAIN, name, *t, *t + d * 1e-3));
            *t += d * 1e-3;
        };
        for _ in 0..steps {
            at(&mut v, &mut t, stage::DATA_WAIT, wait);
            at(&mut v, &mut t, stage::UPLOAD, upload);
            at(&mut v, &mut t, stage::RECORD, record);
            at(&mut v, &mut t, stage::SUBMIT, 0.01);
            let gpu_start = t;
            at(&mut v, &mut t, stage::WAIT, sync);
            for k in 0..per_step {
                let s = gpu_start + k as f64 * kernel_ms * 1e-3;
                let mut span = Span::new(GPU, "kernel", s, s + kernel_ms * 1e-3);
                span.bytes = Some(1e6);
                span.flops = Some(1e6 * intensity);
                v.push(span);
            }
        }
        Timeline::new("test", v, String::new())
    }

    const PEAKS: Peaks = Peaks { flops_per_s: 1e12, bytes_per_s: 1e11, timing: crate::profile::peaks::PeakTiming::WallClock }; // ridge at 10 FLOP/byte

    #[test]
    fn a_loader_that_keeps_the_gpu_waiting_is_input_bound() {
        let d = diagnose(&run(20, 8.0, 0.1, 0.3, 2.0, 0.5, 4, 50.0), Some(&PEAKS));
        assert_eq!(d.bottleneck, Bottleneck::Input, "{d:?}");
        assert!(d.evidence[0].contains("waiting for data"));
    }

    /// Exercise 7 once printed "input-bound" beside "waiting for data 79.4 ms (32 %) … waiting
    /// for the device 152.4 ms (62 %)".
    #[test]
    fn a_larger_device_share_outranks_a_data_wait_over_the_threshold() {
        let d = diagnose(&run(20, 3.2, 0.1, 0.3, 6.2, 1.5, 4, 50.0), Some(&PEAKS));
        assert!(d.analysis.share(d.analysis.data_wait_s) >= INPUT_SHARE, "{:?}", d.analysis);
        assert_eq!(d.bottleneck, Bottleneck::Compute, "{d:?}");
    }

    #[test]
    fn slow_uploads_are_transfer_bound() {
        assert_eq!(diagnose(&run(20, 0.2, 6.0, 0.3, 2.0, 0.5, 4, 50.0), Some(&PEAKS)).bottleneck, Bottleneck::Transfer);
    }

    #[test]
    fn a_busy_gpu_in_high_intensity_kernels_is_compute_bound() {
        let d = diagnose(&run(20, 0.1, 0.1, 0.2, 8.0, 2.0, 4, 50.0), Some(&PEAKS));
        assert_eq!(d.bottleneck, Bottleneck::Compute, "{d:?}");
    }

    #[test]
    fn a_busy_gpu_in_low_intensity_kernels_is_memory_bound() {
        assert_eq!(diagnose(&run(20, 0.1, 0.1, 0.2, 8.0, 2.0, 4, 0.5), Some(&PEAKS)).bottleneck, Bottleneck::Memory);
    }

    #[test]
    fn many_tiny_kernels_and_an_idle_gpu_are_overhead_bound() {
        let d = diagnose(&run(20, 0.1, 0.1, 1.5, 1.0, 0.005, 30, 50.0), Some(&PEAKS));
        assert_eq!(d.bottleneck, Bottleneck::Overhead, "{d:?}");
        assert!(d.evidence.iter().any(|e| e.contains("per-dispatch overhead")));
    }

    #[test]
    fn waiting_for_the_all_reduce_is_communication_bound() {
        // Ten steps of 2 ms compute, then 3 ms of exposed all-reduce each: 60% of the wall.
        let mut v = Vec::new();
        for i in 0..10 {
            let t = i as f64 * 5e-3;
            v.push(Span::new(MAIN, stage::DATA_WAIT, t, t + 0.1e-3));
            v.push(Span::new(MAIN, stage::RECORD, t + 0.1e-3, t + 2e-3));
            v.push(Span::new(MAIN, stage::ALLREDUCE, t + 2e-3, t + 5e-3));
        }
        let d = diagnose(&Timeline::new("dp", v.clone(), String::new()), None);
        assert_eq!(d.bottleneck, Bottleneck::Communication, "{d:?}");
        assert!((d.analysis.comm_s - 0.03).abs() < 1e-9);
        assert!(d.summary.contains("communication-bound") && d.summary.contains("bucket_cap_mb"));
        // The same run with the all-reduce hidden (0.2 ms exposed) is not.
        let hidden: Vec<Span> = v
            .iter()
            .map(|s| if s.name == stage::ALLREDUCE { Span::new(MAIN, stage::ALLREDUCE, s.start_s, s.start_s + 0.2e-3) } else { s.clone() })
            .collect();
        assert_ne!(diagnose(&Timeline::new("dp", hidden, String::new()), None).bottleneck, Bottleneck::Communication);
    }

    #[test]
    fn the_communication_test_is_a_share_of_the_step() {
        assert!(communication_bound(1.0, 2.0));
        assert!(communication_bound(COMM_SHARE, 1.0));
        assert!(!communication_bound(0.2, 1.0));
        assert!(!communication_bound(1.0, 0.0), "an empty step is not communication-bound");
        assert!(!communication_bound(f64::NAN, 1.0));
    }

    #[test]
    fn without_gpu_times_the_cpu_spans_still_decide() {
        let mut t = run(10, 5.0, 0.1, 0.5, 0.5, 1.0, 1, 1.0);
        t.spans.retain(|s| s.lane != GPU);
        let d = diagnose(&t, None);
        assert_eq!(d.bottleneck, Bottleneck::Input);
        assert!(d.analysis.gpu_busy_s.is_none());
        assert_eq!(d.analysis.steps, 10);
    }
}
