//! The device work a GPU run counts, bounded: steady-state training creates no bind groups and
//! no buffers, submits about once per step and waits on the GPU once per log window (the
//! timestamps ride in the totals' copy); the inference engine submits once and waits once per
//! batch; the counts reach the report; every dispatch's workgroup size and count are logged.

use gpulab::data::{self, DatasetSpec};
use gpulab::nn::{AmpConfig, ModelKind, OptimizerKind, Precision};
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

fn counted<B: Backend>(b: &mut B, model: ModelKind, precision: Precision, limit: u32) -> RunCounts {
    counted_with(b, model, precision, OptimizerKind::Sgd, limit)
}

fn counted_with<B: Backend>(b: &mut B, model: ModelKind, precision: Precision, optimizer: OptimizerKind, limit: u32) -> RunCounts {
    b.log_dispatches(true);
    let cfg = TrainConfig { optimizer, ..config(model, precision) };
    let r = train(b, &dataset(model), &cfg, &mut NullSink).unwrap();
    let log = b.take_dispatches();
    b.log_dispatches(false);
    optimizer_dispatches(&format!("{model:?} {precision:?} {optimizer:?}"), &log, model, precision, optimizer, r.steps, limit);
    // The loss step is one dispatch (10 or 4 classes, a batch of 32): no separate loss sum or
    // correct count (three dispatches per step before `loss_step`).
    let loss = |k: &str| log.iter().filter(|d| d.kernel == k).count();
    assert_eq!(loss("AccumulateSum") + loss("CountCorrect") + loss("SoftmaxXentRowwise"), 0, "{model:?} {precision:?}");
    assert!(loss("SoftmaxXentTotals") > 0, "{model:?} {precision:?}");
    r.device_counts.expect("a GPU run counts its device work")
}

/// The storage-buffer limit the optimizer's dispatches go by: the device's where the
/// multi-tensor path is on, 0 (one dispatch a parameter) on a CPU adapter, where it is off.
fn multi_limit(gpu: &gpulab::device::GpuBackend) -> u32 {
    if gpu.multi_tensor() { gpu.storage_buffers_per_dispatch() } else { 0 }
}

/// Dispatches a multi-tensor call of `n` parameters takes where one dispatch binds `per`
/// storage buffers a parameter and `shared` besides, on a device allowing `limit` (at most 16
/// parameters a dispatch; one dispatch each where fewer than two fit).
fn multi_dispatches(n: usize, per: u32, shared: u32, limit: u32) -> usize {
    let k = ((limit.saturating_sub(shared) / per) as usize).min(16);
    if k < 2 { n } else { n.div_ceil(k) }
}

/// The optimizer (and unscaling) runs as few dispatches a step as the device's storage-buffer
/// limit allows — several parameters each — not one per parameter (issue 43; the per-parameter
/// loop ran 2 dispatches a parameter at 16 bits, 1 at f32, which fails this).
fn optimizer_dispatches(
    what: &str,
    log: &[gpulab::tensor::DispatchRecord],
    model: ModelKind,
    precision: Precision,
    optimizer: OptimizerKind,
    steps: u64,
    limit: u32,
) {
    let count = |names: &[&str]| log.iter().filter(|d| names.contains(&d.kernel.as_str())).count() as u64;
    let updates = count(&["Sgd", "AdamW", "MultiSgd", "MultiAdamW", "AmpSgd", "AmpAdamW", "MultiAmpSgd", "MultiAmpAdamW"]);
    let unscales = count(&["UnscaleCheck", "MultiUnscale"]);
    // Weights (with 16-bit copies in mixed precision) and biases: one each per dense layer and
    // per convolution.
    let layers = config(model, precision).hidden.len() + 1;
    let convs = match model {
        ModelKind::Mlp => 0,
        ModelKind::Cnn => ModelKind::Cnn.config([3, 12, 12], 432, &[64], 4).unwrap().conv.unwrap().stages().len(),
    };
    let (weights, params) = (layers + convs, 2 * (layers + convs));
    let adam = (optimizer == OptimizerKind::AdamW) as u32;
    let (per_step, unscale_per_step) = match precision {
        Precision::F32 => (multi_dispatches(params, 3 + adam, 0, limit), 0),
        Precision::F16 | Precision::BF16 => (
            multi_dispatches(weights, 4 + adam, 1 + adam, limit) + multi_dispatches(weights, 3 + adam, 1 + adam, limit),
            multi_dispatches(params, 1, 1, limit),
        ),
    };
    let per_step = per_step as u64;
    // Every step, and the mixed-precision warm-up's one (a scratch state that skips it).
    let warm = (precision != Precision::F32) as u64;
    assert!(
        updates >= steps * per_step && updates <= (steps + warm) * per_step,
        "{what}: {updates} optimizer dispatches in {steps} steps, want {per_step} a step for {params} parameters (limit {limit}): {:?}",
        log.iter()
            .map(|d| d.kernel.as_str())
            .filter(|k| k.contains("Sgd") || k.contains("Adam"))
            .collect::<std::collections::BTreeSet<_>>()
    );
    if unscales > 0 {
        let u = unscale_per_step as u64;
        assert!(
            unscales >= steps * u && unscales <= (steps + warm) * u,
            "{what}: {unscales} unscale dispatches in {steps} steps, want {u} a step"
        );
    }
    eprintln!(
        "{what}: {per_step} optimizer + {} unscale dispatches a step for {params} parameters",
        if unscales > 0 { unscale_per_step } else { 0 }
    );
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
                let c = counted(gpu, model, precision, multi_limit(gpu));
                eprintln!("{model:?} {precision:?}: {c:?}");
                check(&format!("{model:?} {precision:?}"), &c);
            }
        }
    });
}

/// AdamW binds one more state buffer a parameter, so fewer parameters a dispatch: still a few
/// dispatches a step, not one per parameter.
#[test]
fn adamw_steps_take_a_few_dispatches_not_one_per_parameter() {
    with_gpu("adamw_steps_take_a_few_dispatches_not_one_per_parameter", |gpu| {
        let limit = multi_limit(gpu);
        for precision in [Precision::F32, Precision::BF16] {
            check(&format!("AdamW {precision:?}"), &counted_with(gpu, ModelKind::Mlp, precision, OptimizerKind::AdamW, limit));
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

/// Row sums, a whole-array sum into an accumulator and the correct count, as a step records them.
fn reductions<B: Backend>(b: &mut B, x: &[f32], labels: &[u32], [rows, cols]: [usize; 2]) -> (Vec<f32>, Vec<f32>, Vec<u32>) {
    use gpulab::tensor::MemCategory as M;
    let xt = b.upload_f32(x, [rows, cols], M::Inputs).unwrap();
    let lt = b.upload_u32(labels, [1, rows], M::Inputs).unwrap();
    let mut sums = b.zeros([1, rows], DType::F32, M::Activations).unwrap();
    b.sum_rows(&xt, &mut sums).unwrap();
    let mut acc = b.upload_f32(&[1.5, 2.5], [1, 2], M::Other).unwrap();
    b.accumulate_sum(&xt, &mut acc, 1).unwrap();
    let mut correct = b.upload_u32(&[3, 4], [1, 2], M::Other).unwrap();
    b.count_correct(&xt, &lt, &mut correct, 1).unwrap();
    (b.read_f32(&sums).unwrap(), b.read_f32(&acc).unwrap(), b.read_u32(&correct).unwrap())
}

/// The reductions that ran in one workgroup — a large batch's loss sum and correct count (past
/// the fused loss kernel's 256 rows), the row sums of a few long rows — split over workgroups
/// (parts, then the parts added in order), and still equal the CPU's: counts exactly, sums to
/// rounding.
#[test]
fn long_sums_and_counts_split_over_workgroups_and_match_the_cpu() {
    use gpulab::device::CpuBackend;
    with_gpu("long_sums_and_counts_split_over_workgroups_and_match_the_cpu", |gpu| {
        // Split on any adapter but a CPU's; forced here so llvmpipe checks the split kernels.
        let split = gpu.split_reductions();
        gpu.set_split_reductions(true);
        for (i, &[rows, cols]) in [[4099, 10], [300, 4], [3, 5000], [257, 1], [5, 7]].iter().enumerate() {
            let x = crate::common::random(rows * cols, 40 + i as u64, 0.0, 1.0);
            let labels: Vec<u32> = (0..rows).map(|r| (r * 7 % cols) as u32).collect();
            gpu.log_dispatches(true);
            let got = reductions(gpu, &x, &labels, [rows, cols]);
            let log = gpu.take_dispatches();
            gpu.log_dispatches(false);
            let want = reductions(&mut CpuBackend::new(), &x, &labels, [rows, cols]);
            let what = format!("{rows}×{cols}");
            crate::common::assert_close(&format!("{what} row sums"), &got.0, &want.0, 1e-5);
            crate::common::assert_close(&format!("{what} accumulated sum"), &got.1, &want.1, 1e-5);
            assert_eq!(got.2, want.2, "{what}: correct counts");
            let groups = |k: &str| log.iter().filter(|d| d.kernel == k).map(|d| d.group_count()).max().unwrap_or(0);
            eprintln!("{what}: {:?}", log.iter().map(|d| (d.kernel.as_str(), d.group_count())).collect::<Vec<_>>());
            if rows * cols > 4096 {
                assert!(groups("AccumulatePart") >= 16, "{what}: the sum did not split: {log:?}");
            }
            if rows > 4096 {
                assert!(groups("CountPart") >= 16, "{what}: the count did not split: {log:?}");
            }
            if rows < 8 && cols >= 5000 {
                assert!(groups("SumRowsPart") >= 120, "{what}: the row sums did not split: {log:?}");
            }
        }
        gpu.set_split_reductions(split);
    });
}
