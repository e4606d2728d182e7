//! The device work a GPU run counts, bounded: steady-state training creates no bind groups and
//! no buffers, submits about once per step and waits on the GPU once per log window (the
//! timestamps ride in the totals' copy); the inference engine submits once and waits once per
//! batch; the counts reach the report; every dispatch's workgroup size and count are logged.

use gpulab::data::{self, DatasetSpec};
use gpulab::nn::{AmpConfig, ModelKind, Precision};
use gpulab::tensor::{DType, prelude::*};
use gpulab::train::{NullSink, RunCounts, TrainConfig, train};

use crate::common::with_gpu;

fn config(model: ModelKind, precision: Precision) -> TrainConfig {
    TrainConfig { hidden: vec![64], batch: 32, epochs: 2, log_every: 4, model, amp: AmpConfig::new(precision), ..TrainConfig::default() }
}

fn dataset(model: ModelKind) -> data::Dataset {
    let spec = match model {
        ModelKind::Mlp => DatasetSpec::Digits,
        ModelKind::Cnn => "shapes:res=12,channels=3,n=400".parse::<DatasetSpec>().unwrap(),
    };
    data::load(&spec, 5).unwrap()
}

fn counted<B: Backend>(b: &mut B, model: ModelKind, precision: Precision) -> RunCounts {
    b.log_dispatches(true);
    let r = train(b, &dataset(model), &config(model, precision), &mut NullSink).unwrap();
    let log = b.take_dispatches();
    b.log_dispatches(false);
    // The loss step is one dispatch (10 or 4 classes, a batch of 32): no separate loss sum or
    // correct count (three dispatches per step before `loss_step`).
    let loss = |k: &str| log.iter().filter(|d| d.kernel == k).count();
    assert_eq!(loss("AccumulateSum") + loss("CountCorrect") + loss("SoftmaxXentRowwise"), 0, "{model:?} {precision:?}");
    assert!(loss("SoftmaxXentTotals") > 0, "{model:?} {precision:?}");
    r.device_counts.expect("a GPU run counts its device work")
}

/// The bounds of issue 43 for one run: after the first log window (one-time costs) nothing is
/// created, the CPU waits once per log window, and about one submission per step.
fn check(what: &str, c: &RunCounts) {
    assert_eq!(c.total.waits, c.windows, "{what}: the CPU must wait on the GPU once per log window, no more: {c:?}");
    let (steps, windows, t) = c.steady();
    assert!(steps >= 12 && windows >= 3, "{what}: {c:?}");
    assert_eq!(t.buffers_created, 0, "{what}: buffers created in steady-state training: {c:?}");
    assert_eq!(t.bind_groups_created, 0, "{what}: bind groups created in steady-state training: {c:?}");
    // One per step, and per window the totals' read and the flush of the counters' reset.
    assert!(t.submits <= steps + 2 * windows, "{what}: submissions: {c:?}");
    assert!(t.dispatches >= 5 * steps && t.workgroups >= t.dispatches, "{what}: {c:?}");
    assert!(t.bytes_read_back > 0 && t.bytes_uploaded > 0, "{what}: {c:?}");
}

#[test]
fn steady_state_training_creates_nothing_and_waits_once_per_log_window() {
    with_gpu("steady_state_training_creates_nothing_and_waits_once_per_log_window", |gpu| {
        for model in [ModelKind::Mlp, ModelKind::Cnn] {
            for precision in Precision::ALL {
                let dt = match precision {
                    Precision::F32 => None,
                    Precision::F16 => Some(DType::F16),
                    Precision::BF16 => Some(DType::BF16),
                };
                if let Some(why) = dt.and_then(|dt| gpu.amp_unavailable(dt)) {
                    eprintln!("{model:?} {precision:?} not run: {why}");
                    continue;
                }
                let c = counted(gpu, model, precision);
                eprintln!("{model:?} {precision:?}: {c:?}");
                check(&format!("{model:?} {precision:?}"), &c);
            }
        }
    });
}

#[test]
fn every_dispatch_is_logged_with_its_workgroup_size_and_count() {
    with_gpu("every_dispatch_is_logged_with_its_workgroup_size_and_count", |gpu| {
        gpu.log_dispatches(true);
        let before = gpu.counts().unwrap();
        let x = gpu.upload_f32(&vec![1.0; 1000], [10, 100], gpulab::tensor::MemCategory::Inputs).unwrap();
        let mut y = gpu.zeros([1, 100], DType::F32, gpulab::tensor::MemCategory::Activations).unwrap();
        gpu.sum_cols(&x, &mut y).unwrap();
        assert_eq!(gpu.read_f32(&y).unwrap(), vec![10.0; 100]);
        let log = gpu.take_dispatches();
        gpu.log_dispatches(false);
        let c = gpu.counts().unwrap().since(&before);
        assert_eq!(log.len() as u64, c.dispatches, "{log:?}");
        assert_eq!(log.iter().map(|d| d.group_count()).sum::<u64>(), c.workgroups);
        assert_eq!(log.iter().map(|d| d.group_count() * d.invocations_per_group() as u64).sum::<u64>(), c.invocations);
        assert!(log.iter().any(|d| d.kernel.starts_with("SumCols")), "{log:?}");
        assert!(log.iter().all(|d| d.invocations_per_group() >= 1 && d.group_count() >= 1), "{log:?}");
        assert_eq!(c.waits, 1, "one read, one wait: {c:?}");
        assert!(gpu.take_dispatches().is_empty());
    });
}

/// The CNN's long, narrow reductions at default settings (shapes 16×16×1, batch 64), and one of
/// odd sizes: each stage's weight gradient (colsᵀ · grad over batch × height × width) on the
/// tiled GEMM a GPU gets (f32, and 16-bit operands with f32 sums), and its bias gradient
/// (`sum_cols`, of an f32 or a 16-bit gradient), split the long dimension so the largest
/// launches ≥ 120 workgroups — and still equal the CPU's.
#[test]
fn the_cnns_long_reductions_split_into_enough_workgroups_and_match_the_cpu() {
    use gpulab::device::CpuBackend;
    use gpulab::device::gpu::{Matmul16Variant, MatmulVariant};
    let batch = TrainConfig::default().batch;
    let cfg = ModelKind::Cnn.config([1, 16, 16], 256, &[64], 4).unwrap();
    let mut shapes: Vec<[usize; 3]> =
        cfg.conv.as_ref().unwrap().stages().iter().map(|s| [batch * s.input.height * s.input.width, s.taps(), s.out]).collect();
    shapes.push([3001, 27, 20]);
    with_gpu("the_cnns_long_reductions_split_into_enough_workgroups_and_match_the_cpu", |gpu| {
        let before = gpu.matmul_choice();
        gpu.set_matmul_variant(MatmulVariant::Tiled);
        for dt in [DType::F32, DType::F16, DType::BF16] {
            if dt.is_16bit() {
                if let Some(why) = gpu.amp_unavailable(dt) {
                    eprintln!("{dt:?} not run: {why}");
                    continue;
                }
                gpu.set_matmul16_variant(dt, Matmul16Variant::Tiled);
            }
            let tol = if dt.is_16bit() { 1e-3 } else { 1e-4 };
            for (i, &[rows, taps, out]) in shapes.iter().enumerate() {
                let cols = crate::common::random(rows * taps, 70 + i as u64, -1.0, 1.0);
                let grad = crate::common::random(rows * out, 80 + i as u64, -1.0, 1.0);
                gpu.log_dispatches(true);
                let (w, bias) = grads(gpu, dt, &cols, &grad, [rows, taps, out]);
                let log = gpu.take_dispatches();
                gpu.log_dispatches(false);
                let (cw, cb) = grads(&mut CpuBackend::new(), dt, &cols, &grad, [rows, taps, out]);
                let what = format!("{} {rows}×{taps}×{out}", dt.name());
                crate::common::assert_close(&format!("{what} weight gradient"), &w, &cw, tol);
                crate::common::assert_close(&format!("{what} bias gradient"), &bias, &cb, tol);
                let groups = |k: &[&str]| log.iter().filter(|d| k.contains(&d.kernel.as_str())).map(|d| d.group_count()).max().unwrap_or(0);
                let (gemm, sums) = (groups(&["MatmulTiled", "Matmul16Tiled"]), groups(&["SumColsPart", "SumCols16Part"]));
                eprintln!("{what}: GEMM {gemm} workgroups, sum_cols {sums} workgroups");
                assert!(log.iter().all(|d| d.invocations_per_group() >= 64), "{log:?}");
                // The first stage's reductions are the longest (the full image size); the odd
                // shape's split too, into slices of at least 64 rows (3001 / 64 → 46).
                if i == 0 {
                    assert!(gemm >= 120, "{what}: the largest weight-gradient GEMM: {log:?}");
                    assert!(sums >= 120, "{what}: the largest bias gradient: {log:?}");
                } else if i == shapes.len() - 1 {
                    assert!(gemm >= 32 && sums >= 32, "{what}: {log:?}");
                }
            }
        }
        gpu.set_matmul_choice(before);
    });
}

/// A convolution's weight gradient (colsᵀ · grad, poisoned output; 16-bit operands when `dt`
/// is) and bias gradient.
fn grads<B: Backend>(b: &mut B, dt: DType, cols: &[f32], grad: &[f32], [rows, taps, out]: [usize; 3]) -> (Vec<f32>, Vec<f32>) {
    use gpulab::tensor::{Epilogue, MemCategory as M};
    let mut tc = b.zeros([rows, taps], dt, M::Activations).unwrap();
    b.write_f32(&mut tc, cols).unwrap();
    let mut td = b.zeros([rows, out], dt, M::Activations).unwrap();
    b.write_f32(&mut td, grad).unwrap();
    let mut w = b.upload_f32(&vec![f32::NAN; taps * out], [taps, out], M::Gradients).unwrap();
    let mut bias = b.upload_f32(&vec![f32::NAN; out], [1, out], M::Gradients).unwrap();
    if dt.is_16bit() {
        b.matmul16(&tc, &td, &mut w, true, false, Epilogue::None, None).unwrap();
    } else {
        b.matmul(&tc, &td, &mut w, true, false, false).unwrap();
    }
    b.sum_cols(&td, &mut bias).unwrap();
    (b.read_f32(&w).unwrap(), b.read_f32(&bias).unwrap())
}

/// What a discrete GPU would run (`tuning::candidates` for a discrete adapter's description),
/// run here for a CNN training run at default sizes at f32, fp16 and bf16: every dispatch
/// runs ≥ 64 invocations per workgroup (but the loss scaler's one-number update), and the
/// largest weight- and bias-gradient reductions launch ≥ 120 workgroups.
#[test]
fn a_discrete_gpus_kernels_run_64_invocations_and_fill_it() {
    use gpulab::device::gpu::tuning::{AdapterTraits, candidates};
    let discrete = AdapterTraits {
        device_type: "DiscreteGpu".into(),
        software: false,
        max_invocations_per_workgroup: 256,
        max_workgroup_size_x: 256,
        max_workgroup_storage_bytes: 16384,
        coop16: false,
    };
    let data = data::load(&"shapes:res=16,channels=1,n=160".parse::<DatasetSpec>().unwrap(), 5).unwrap();
    with_gpu("a_discrete_gpus_kernels_run_64_invocations_and_fill_it", |gpu| {
        let before = gpu.matmul_choice();
        for precision in Precision::ALL {
            let dt = match precision {
                Precision::F32 => DType::F32,
                Precision::F16 => DType::F16,
                Precision::BF16 => DType::BF16,
            };
            if let Some(why) = dt.is_16bit().then(|| gpu.amp_unavailable(dt)).flatten() {
                eprintln!("{precision:?} not run: {why}");
                continue;
            }
            let (v32, v16) = candidates(&discrete, dt);
            gpu.set_matmul_variant(v32[0]);
            let chosen16 = if dt.is_16bit() { Some(gpu.matmul16_choice(dt).unwrap()) } else { None };
            if dt.is_16bit() {
                gpu.set_matmul16_variant(dt, v16[0]);
            }
            let cfg = TrainConfig { model: ModelKind::Cnn, epochs: 1, amp: AmpConfig::new(precision), ..TrainConfig::default() };
            gpu.log_dispatches(true);
            train(gpu, &data, &cfg, &mut NullSink).unwrap();
            let log = gpu.take_dispatches();
            gpu.log_dispatches(false);
            gpu.set_matmul_choice(before);
            if let Some(v) = chosen16 {
                gpu.set_matmul16_choice(dt, v);
            }
            let narrow: Vec<_> = log.iter().filter(|d| d.kernel != "ScalerUpdate" && d.invocations_per_group() < 64).collect();
            assert!(narrow.is_empty(), "{precision:?}: dispatches under 64 invocations per workgroup: {narrow:?}");
            let most = |names: &[&str]| {
                log.iter().filter(|d| names.iter().any(|n| d.kernel.starts_with(n))).map(|d| d.group_count()).max().unwrap_or(0)
            };
            let (gemm, sums) = (most(&["MatmulTiled", "Matmul16Tiled"]), most(&["SumColsPart", "SumCols16Part"]));
            eprintln!("{precision:?}: {} dispatches; largest GEMM {gemm} workgroups, largest column sum {sums}", log.len());
            assert!(gemm >= 120 && sums >= 120, "{precision:?}: GEMM {gemm}, column sums {sums} workgroups");
        }
    });
}
