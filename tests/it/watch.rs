//! Watching the device: the CPU's bf16 GEMM (AVX-512 BF16 where the CPU has it) against the
//! widening path with every epilogue, and the live GPU-busy and memory charts of the training
//! exercises, declared and filled; exercise 7's memory chart and peak table; the driver
//! telemetry every training run records (or the note naming the sources that were missing).

use gpulab::device::{Bf16Path, CpuBackend};
use gpulab::exercises::{self, CollectSink, Event, live};
use gpulab::tensor::{DType, Epilogue, MemCategory as M, prelude::*};

use crate::common::{random, require_gpu};

/// One matmul16 of every kind the training step uses, on bf16 operands; outputs as f32.
fn bf16_products(b: &mut CpuBackend, (m, n, k): (usize, usize, usize), ta: bool, tb: bool) -> Vec<Vec<f32>> {
    let dt = DType::BF16;
    let a_shape = if ta { [k, m] } else { [m, k] };
    let b_shape = if tb { [n, k] } else { [k, n] };
    let mut la = b.zeros(a_shape, dt, M::Inputs).unwrap();
    let mut lb = b.zeros(b_shape, dt, M::Inputs).unwrap();
    b.write_f32(&mut la, &random(m * k, 21, -1.0, 1.0)).unwrap();
    b.write_f32(&mut lb, &random(k * n, 22, -1.0, 1.0)).unwrap();
    let bias = b.upload_f32(&random(n, 23, -0.5, 0.5), [1, n], M::Parameters).unwrap();
    let mut out = Vec::new();
    let mut f = b.zeros([m, n], DType::F32, M::Activations).unwrap();
    b.fill(&mut f, f32::NAN).unwrap(); // poisoned
    b.matmul16(&la, &lb, &mut f, ta, tb, Epilogue::None, None).unwrap();
    out.push(b.read_f32(&f).unwrap());
    let mut act = b.zeros([m, n], dt, M::Activations).unwrap();
    b.fill(&mut act, f32::NAN).unwrap();
    b.matmul16(&la, &lb, &mut act, ta, tb, Epilogue::Bias { bias: &bias, relu: true }, None).unwrap();
    out.push(b.read_f32(&act).unwrap());
    let mut masked = b.zeros([m, n], dt, M::Activations).unwrap();
    let mut stats = b.zeros([1, 2], DType::U32, M::Other).unwrap();
    b.matmul16(&la, &lb, &mut masked, ta, tb, Epilogue::ReluMask(&act), Some(&mut stats)).unwrap();
    out.push(b.read_f32(&masked).unwrap());
    out.push(b.read_u32(&stats).unwrap().iter().map(|&v| v as f32).collect());
    out
}

#[test]
fn cpu_bf16_native_paths_match_the_widening_path_with_every_epilogue() {
    let native: Vec<Bf16Path> = [Bf16Path::Amx, Bf16Path::Avx512Bf16].into_iter().filter(|p| p.available()).collect();
    if native.is_empty() {
        eprintln!(
            "this CPU has neither AMX nor AVX-512 BF16 ({}): only the widening path runs, checked in amp.rs",
            CpuBackend::new().bf16_path().name()
        );
        return;
    }
    let best = CpuBackend::new();
    assert!(best.info().driver.contains(native[0].name()), "the backend names its bf16 kernel: {}", best.info().driver);
    for (path, (shape, ta, tb)) in native.iter().flat_map(|&p| {
        [
            ((1, 1, 1), false, false),
            ((7, 65, 33), false, false),
            ((70, 130, 9), true, false),
            ((25, 200, 257), false, true),
            ((49, 64, 128), true, true),
            // A weight gradient with the wider a (multiplied as cᵀ = bᵀ·a on AMX), a CNN's
            // first convolution and its weight gradient (the narrow kernels), the second's
            // input gradient.
            ((150, 40, 1250), true, false),
            ((37, 16, 9), false, false),
            ((9, 16, 300), true, false),
            ((65, 144, 32), false, true),
        ]
        .map(|c| (p, c))
    }) {
        let got = bf16_products(&mut CpuBackend::new().with_bf16_path(path), shape, ta, tb);
        let want = bf16_products(&mut CpuBackend::new().with_bf16_path(Bf16Path::Widen), shape, ta, tb);
        // f32 outputs: only the summation order differs (k ≤ 257 terms of |x| ≤ 1).
        let k = shape.2 as f32;
        for (g, w) in got[0].iter().zip(&want[0]) {
            assert!((g - w).abs() <= k * 1e-6 * (1.0 + w.abs()), "{path:?} {shape:?} ta={ta} tb={tb}: {g} vs {w}");
        }
        // bf16 outputs may round to a neighbouring value where the f32 sums differ in the last bit.
        for (i, (gs, ws)) in got[1..3].iter().zip(&want[1..3]).enumerate() {
            for (g, w) in gs.iter().zip(ws) {
                assert!(!g.is_nan(), "every output written");
                assert!((g - w).abs() <= 1e-2 * (1.0 + w.abs()), "{path:?} {shape:?} epilogue {i}: {g} vs {w}");
                // The same zeros, except where a value within rounding of 0 fell on the other side.
                assert!((*g == 0.0) == (*w == 0.0) || (g - w).abs() <= 1e-2, "{shape:?} epilogue {i}: the ReLU zeros differ: {g} vs {w}");
            }
        }
        assert_eq!(got[3][0], want[3][0], "{shape:?}: the same count of nonzero values");
    }
}

/// Points on `chart`: (series, x, y).
fn points(events: &[Event], chart: &str) -> Vec<(String, f64, f64)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Point { chart: c, series, x, y, .. } if c == chart => Some((series.clone(), *x, *y)),
            _ => None,
        })
        .collect()
}

fn backend() -> &'static str {
    use gpulab::device::gpu::adapters;
    if require_gpu() || !adapters::enumerate(&adapters::instance()).is_empty() { "gpu" } else { "cpu" }
}

#[test]
fn profiling_charts_gpu_busy_and_memory_live_and_reports_memory_by_category() {
    let ex = exercises::find("profiling").unwrap();
    let mut s = ex.settings();
    let dev = backend();
    s.apply(
        &[
            "dataset=shapes:res=8,n=300",
            "hidden=32",
            "batch=32",
            "storage_latency_ms=0",
            "decode_passes=0",
            "epochs=1",
            "log_every=2",
            "measure_again=false",
            &format!("backend={dev}"),
        ]
        .map(String::from),
    )
    .unwrap();
    let mut sink = CollectSink::default();
    let r = ex.run(&s, &mut sink).unwrap();
    assert!(
        live::undeclared_ids(&ex.live_charts(), &sink.events).is_empty(),
        "{:?}",
        live::undeclared_ids(&ex.live_charts(), &sink.events)
    );
    let mem = points(&sink.events, "memory");
    assert!(mem.iter().any(|p| p.0.ends_with("parameters") && p.2 > 0.0), "{mem:?}");
    assert!(mem.iter().any(|p| p.0.ends_with("activations")), "{mem:?}");
    let busy = points(&sink.events, "gpu_busy");
    let timestamps = r.metadata.backends[0].timestamps;
    assert_eq!(!busy.is_empty(), timestamps, "busy % exactly where the backend has GPU timestamps");
    assert!(busy.iter().all(|p| (0.0..=100.0).contains(&p.2)), "{busy:?}");
    let chart = r.chart("memory_over_run").unwrap();
    assert!(
        chart.series.iter().any(|s| s.name == "parameters" && s.points.len() >= 2),
        "{:?}",
        chart.series.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let t = r.table("Peak memory by category (ledger)").unwrap();
    assert!(t.rows.iter().any(|row| format!("{:?}", row[0]).contains("activations")));
    let last = t.rows.last().unwrap();
    assert!(matches!(last[1], gpulab::report::Cell::Num(v) if v > 0.0), "{last:?}");
    check_driver_telemetry(&r);
}

/// The run's driver telemetry: charts and summary figures labelled with their source where a
/// source gave readings (always where NVML loads), else a note naming every source looked for.
fn check_driver_telemetry(r: &gpulab::report::Report) {
    use gpulab::device::monitor::SOURCE_NAMES;
    use gpulab::exercises::monitor::{FIGURE_PREFIX, NONE_RECORDED};
    let figures: Vec<_> = r.figures.iter().filter(|f| f.label.starts_with(FIGURE_PREFIX)).collect();
    let charts: Vec<_> = r.charts.iter().filter(|c| c.id.starts_with("telemetry_")).collect();
    let note = r.notes.iter().find(|n| n.starts_with(NONE_RECORDED));
    if gpulab::device::telemetry::init().is_some() {
        assert!(!figures.is_empty(), "NVML loads, so the run recorded it: {:?}", r.notes);
    }
    if figures.is_empty() {
        let note = note.expect("no telemetry and no note saying why");
        assert!(SOURCE_NAMES.iter().all(|s| note.contains(s)), "{note}");
        assert!(charts.is_empty(), "no empty telemetry chart");
    } else {
        assert!(note.is_none() && !charts.is_empty());
        assert!(figures.iter().all(|f| f.label.contains("(from ")), "{figures:?}");
        assert!(charts.iter().all(|c| c.series.iter().all(|s| !s.points.is_empty() && s.name.contains("(from "))));
    }
}

#[test]
fn precision_on_the_cpu_charts_memory_per_precision_and_no_busy() {
    let ex = exercises::find("precision").unwrap();
    let mut s = ex.settings();
    s.apply(
        &["backend=cpu", "precisions=fp32,bf16", "underflow_demo=false", "epochs=1", "hidden=32", "log_every=5", "size=as-set"]
            .map(String::from),
    )
    .unwrap();
    let mut sink = CollectSink::default();
    let r = ex.run(&s, &mut sink).unwrap();
    assert!(live::undeclared_ids(&ex.live_charts(), &sink.events).is_empty());
    check_driver_telemetry(&r);
    let mem = points(&sink.events, "memory");
    let series: std::collections::BTreeSet<&str> = mem.iter().map(|p| p.0.as_str()).collect();
    assert!(series.iter().any(|s| s.contains("parameters")) && series.len() >= 4, "{series:?}");
    assert!(points(&sink.events, "gpu_busy").is_empty(), "the CPU has no GPU timestamps");
}
