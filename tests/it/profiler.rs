//! The profiler: spans nest and never overlap partially, the trace JSON parses and has events
//! for every lane, GPU kernel timestamps exist on llvmpipe and are monotonic, the bottleneck
//! verdict sees a starved GPU.

use std::sync::Arc;

use gpulab::data::{self, DatasetSpec, SourceCost};
use gpulab::device::CpuBackend;
use gpulab::profile::session::{PipelineConfig, ProfiledRun, profile_on_gpu};
use gpulab::profile::spans::{GPU, MAIN, Span, stage};
use gpulab::profile::{Bottleneck, Timeline, trace};
use gpulab::train::{NullSink, TrainConfig};

use crate::common::with_gpu;

fn setup() -> (Arc<data::Dataset>, TrainConfig) {
    let spec: DatasetSpec = "shapes:res=8,n=400".parse().unwrap();
    let cfg = TrainConfig { hidden: vec![32], batch: 32, epochs: 2, log_every: 4, ..Default::default() };
    (Arc::new(data::load(&spec, 1).unwrap()), cfg)
}

fn pipe(workers: usize, latency_ms: f64) -> PipelineConfig {
    PipelineConfig {
        num_workers: workers,
        prefetch_factor: 1,
        cache: true,
        pin_memory: workers.is_multiple_of(2),
        cost: SourceCost { storage_latency_ms: latency_ms, decode_passes: 1, rotate_deg: 5.0, noise: 0.02 },
    }
}

/// On every lane, two spans either do not overlap or one holds the other.
fn assert_nested_or_disjoint(t: &Timeline) {
    for lane in &t.lanes {
        let mut v: Vec<&Span> = t.lane_spans(lane).collect();
        v.sort_by(|a, b| a.start_s.total_cmp(&b.start_s).then(b.end_s.total_cmp(&a.end_s)));
        let mut open: Vec<&Span> = Vec::new();
        for s in v {
            assert!(s.end_s >= s.start_s, "{lane}: {s:?} ends before it starts");
            while open.last().is_some_and(|o| o.end_s <= s.start_s + 1e-9) {
                open.pop();
            }
            if let Some(o) = open.last() {
                assert!(s.end_s <= o.end_s + 1e-9, "{lane}: {s:?} overlaps {o:?} without nesting in it");
            }
            open.push(s);
        }
    }
}

fn check_trace(t: &Timeline) {
    let text = serde_json::to_string(&trace::to_json(t)).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    for (i, lane) in t.lanes.iter().enumerate() {
        let tid = i as u64 + 1;
        assert!(
            events.iter().any(|e| e["ph"] == "M" && e["name"] == "thread_name" && e["tid"] == tid && e["args"]["name"] == lane.as_str()),
            "no thread_name for {lane}"
        );
        if lane != GPU || t.lane_spans(GPU).next().is_some() {
            assert!(
                events.iter().any(|e| e["ph"] == "X" && e["tid"] == tid && e["dur"].as_f64().is_some()),
                "no complete events on {lane}"
            );
        }
    }
}

#[test]
fn cpu_run_spans_nest_and_the_trace_has_every_lane() {
    let (data, cfg) = setup();
    for workers in [0, 2] {
        let mut engine = gpulab::device::Engine::Cpu(CpuBackend::with_budget(None));
        let r =
            gpulab::profile::session::profile_training(&mut engine, data.clone(), &cfg, &pipe(workers, 0.0), "cpu", None, &mut NullSink)
                .unwrap();
        assert_nested_or_disjoint(&r.timeline);
        let lanes = &r.timeline.lanes;
        assert_eq!(lanes.iter().filter(|l| l.starts_with("loader worker")).count(), workers, "{lanes:?}");
        assert!(lanes.iter().any(|l| l == MAIN));
        assert_eq!(r.steps.len(), 2 * 320usize.div_ceil(32), "one step record per training step");
        for name in [stage::DATA_WAIT, stage::UPLOAD, stage::RECORD, stage::SUBMIT, stage::WAIT, stage::READBACK] {
            assert!(r.timeline.lane_spans(MAIN).any(|s| s.name == name), "no {name} span on the main thread");
        }
        let loads_on = if workers == 0 { MAIN.to_string() } else { "loader worker 1".to_string() };
        assert!(r.timeline.lane_spans(&loads_on).any(|s| s.name == stage::LOAD), "no load span on {loads_on}");
        assert!(r.timeline.lane_spans(GPU).next().is_none(), "a CPU run has no GPU kernels");
        // Every sample is read once per epoch. On one thread the second epoch comes wholly
        // from the cache; with workers, a sample that another worker is still decoding for the
        // end of epoch 1 is decoded again (a real miss), at most a batch per worker.
        assert_eq!(r.cache.hits + r.cache.misses, 640, "{:?}", r.cache);
        if workers == 0 {
            assert_eq!(r.cache.hits, 320, "the second epoch came from the cache");
        } else {
            assert!(
                r.cache.hits >= 320 - 32 * workers as u64,
                "the second epoch came from the cache, but for the batches in flight: {:?}",
                r.cache
            );
        }
        check_trace(&r.timeline);
    }
}

fn gpu_run(g: &mut gpulab::device::GpuBackend, workers: usize, latency_ms: f64) -> ProfiledRun {
    let (data, cfg) = setup();
    profile_on_gpu(g, data, &cfg, &pipe(workers, latency_ms), "gpu", None, &mut NullSink).unwrap()
}

#[test]
fn gpu_kernel_timestamps_are_present_monotonic_and_after_their_submit() {
    with_gpu("gpu_kernel_timestamps_are_present_monotonic_and_after_their_submit", |g| {
        let r = gpu_run(g, 1, 0.0);
        let t = &r.timeline;
        let kernels: Vec<&Span> = t.lane_spans(GPU).collect();
        assert!(!kernels.is_empty(), "no GPU kernel times ({})", t.gpu_note);
        assert!(
            kernels.iter().any(|k| k.name.starts_with("Matmul")),
            "no matmul among {:?}",
            kernels.iter().map(|k| &k.name).collect::<Vec<_>>()
        );
        // Kernels run one after another on the queue: monotonic starts, no overlap.
        for w in kernels.windows(2) {
            assert!(w[1].start_s >= w[0].end_s - 1e-7, "kernel {:?} starts before {:?} ends", w[1], w[0]);
        }
        assert!(kernels.iter().all(|k| k.flops.is_some_and(|f| f > 0.0) && k.bytes.is_some_and(|b| b > 0.0)));
        // No kernel before the first submit.
        let first_submit = t.lane_spans(MAIN).filter(|s| s.name == stage::SUBMIT).map(|s| s.start_s).fold(f64::INFINITY, f64::min);
        assert!(kernels[0].start_s >= first_submit - 1e-7);
        // That shift is chosen to satisfy the line above; this one can fail: with a wrong
        // timestamp period or shift, kernels would run on past the training thread's last wait.
        let main_end = t.lane_spans(MAIN).map(|s| s.end_s).fold(f64::NEG_INFINITY, f64::max);
        assert!(kernels.iter().all(|k| k.end_s <= main_end + 1e-3), "a kernel ends after the training thread's last span ({main_end} s)");
        assert_nested_or_disjoint(t);
        check_trace(t);
        let busy = r.train.gpu_busy_s.expect("busy time from the profiled kernels");
        assert!(busy > 0.0, "profiling mode must still count GPU busy time");
        // The normal mode comes back after profiling: new work records no per-kernel times
        // but still counts busy time.
        use gpulab::tensor::{DType, MemCategory, prelude::*};
        let a = g.upload_f32(&[1.0; 64 * 64], [64, 64], MemCategory::Other).unwrap();
        let mut c = g.zeros([64, 64], DType::F32, MemCategory::Other).unwrap();
        g.take_busy_seconds().unwrap();
        g.matmul(&a, &a, &mut c, false, false, false).unwrap();
        g.flush().unwrap();
        g.sync().unwrap();
        assert!(g.take_kernel_times().unwrap().is_empty(), "kernel profiling is still on");
        assert!(g.take_busy_seconds().unwrap().is_some_and(|s| s > 0.0), "busy time is no longer measured");
    });
}

#[test]
fn a_slow_source_makes_the_gpu_run_input_bound() {
    with_gpu("a_slow_source_makes_the_gpu_run_input_bound", |g| {
        let r = gpu_run(g, 0, 1.0); // 1 ms per sample on the training thread: ~32 ms per batch
        assert_eq!(r.diagnosis.bottleneck, Bottleneck::Input, "{:?}", r.diagnosis);
    });
}
