//! `cargo bench`: GEMM GFLOP/s (CPU and every GPU matmul variant) and MLP and CNN training
//! throughput, through the same code as `gpulab bench`. Speed lives here, not in tests.

use gpulab::bench::{MatmulDType, TrainBenchConfig, bench_matmul, bench_train, bench_train_amp, random_matrix, time_op};
use gpulab::device::{Bf16Path, CpuBackend, GpuBackend, GpuSelector};
use gpulab::nn::{AmpConfig, DenseStack, Mlp, MlpConfig, ModelKind, Optimizer, OptimizerKind, Precision};
use gpulab::quant::{HostLayer, ObserverKind, calibrate, quantize_model};
use gpulab::stats::median;
use gpulab::tensor::{Dequant, MemCategory, matmul_i8_dequant_unfused, prelude::*};
use gpulab::train::{F32Phases, Step};

/// Medians of alternating rounds: FP32, static INT8 and dynamic INT8 seconds (measured), and
/// the two int8/fp32 ratios (derived, the median of the rounds' ratios).
struct Latency {
    f32_s: f64,
    static_s: f64,
    dynamic_s: f64,
    static_ratio: f64,
    dynamic_ratio: f64,
}

/// One FP32 forward (the training step's predict path) and one INT8 forward (`DenseStack::quantized`,
/// per-channel weights; static scales calibrated min/max, and dynamic scales) of MLP
/// 784-256-128-10 at `batch` rows, timed in `rounds` alternating rounds of `runs` each, so a
/// noisy neighbour slows all alike.
fn inference_latency<B: Backend>(b: &mut B, batch: usize, rounds: usize, runs: usize) -> gpulab::Result<Latency> {
    let cfg = MlpConfig { input: 784, hidden: vec![256, 128], classes: 10, conv: None };
    let model = Mlp::new(b, cfg.clone(), Optimizer::new(OptimizerKind::Sgd, 0.1, 0.9, 0.0), 1)?;
    let x: Vec<f32> = random_matrix(batch * 784, 5).iter().map(|v| v.abs()).collect();
    let mut step = Step::new(b, &model, F32Phases, batch)?;
    let mut ws = step.predict_buffers(b, &model, batch)?;
    b.write_f32(gpulab::train::StepBuffers::inputs(&mut ws).0, &x)?;
    let layers = HostLayer::from_parameters(&model.read_parameters(b)?, &cfg.widths())?;
    let ranges = calibrate(b, &layers, &x, batch, ObserverKind::MinMax)?;
    let q = DenseStack::quantize(b, &layers, &ranges)?;
    let dynamic = quantize_model(b, &layers, None, gpulab::tensor::QuantGranularity::PerChannel)?;
    let qd = DenseStack::quantized(b, &dynamic)?;
    let xt = b.upload_f32(&x, [batch, 784], MemCategory::Inputs)?;
    let mut t: [Vec<f64>; 5] = Default::default();
    for _ in 0..rounds {
        let f = time_op(b, runs, |b| step.predict(b, &model, &mut ws).map(drop))?;
        let s = time_op(b, runs, |b| q.forward(b, &xt).map(drop))?;
        let d = time_op(b, runs, |b| qd.forward(b, &xt).map(drop))?;
        for (v, x) in t.iter_mut().zip([f, s, d, s / f, d / f]) {
            v.push(x);
        }
    }
    let [f32_s, static_s, dynamic_s, static_ratio, dynamic_ratio] = t.map(|mut v| median(&mut v));
    Ok(Latency { f32_s, static_s, dynamic_s, static_ratio, dynamic_ratio })
}

/// Where an INT8 layer's time goes on the CPU: each op of the 784→256 layer at batch 64, alone,
/// then matmul_i8 + dequantize + bias_add + relu as one unfused sequence and as the fused
/// `matmul_i8_dequant` (median seconds, measured).
fn int8_layer_ops(runs: usize) -> gpulab::Result<Vec<(&'static str, f64)>> {
    use gpulab::tensor::{DType, QuantGranularity};
    let b = &mut CpuBackend::new();
    let (m, k, n) = (64, 784, 256);
    let x = b.upload_f32(&random_matrix(m * k, 1).iter().map(|v| v.abs()).collect::<Vec<_>>(), [m, k], MemCategory::Inputs)?;
    let w = b.upload_f32(&random_matrix(k * n, 2), [k, n], MemCategory::Parameters)?;
    let mut wq = b.zeros([k, n], DType::I8, MemCategory::Parameters)?;
    let mut sw = b.zeros([1, n], DType::F32, MemCategory::Other)?;
    b.quantize(&w, &mut wq, &mut sw, QuantGranularity::PerChannel)?;
    let sx = b.upload_f32(&[1.0 / 127.0], [1, 1], MemCategory::Other)?;
    let mut xq = b.zeros([m, k], DType::I8, MemCategory::Activations)?;
    let mut acc = b.zeros([m, n], DType::I32, MemCategory::Activations)?;
    let mut y = b.zeros([m, n], DType::F32, MemCategory::Activations)?;
    let bias = b.zeros([1, n], DType::F32, MemCategory::Parameters)?;
    let mut out = vec![
        ("zeros i8 [64,784]", time_op(b, runs, |b| b.zeros([m, k], DType::I8, MemCategory::Activations).map(drop))?),
        ("quantize_with [64,784]", time_op(b, runs, |b| b.quantize_with(&x, &mut xq, &sx))?),
        ("matmul_i8 64x784x256", time_op(b, runs, |b| b.matmul_i8(&xq, &wq, &mut acc, false, false))?),
        ("matmul f32 64x784x256", time_op(b, runs, |b| b.matmul(&x, &w, &mut y, false, false, false))?),
        ("dequantize [64,256]", time_op(b, runs, |b| b.dequantize(&acc, &sw, &mut y))?),
        ("bias_add [64,256]", time_op(b, runs, |b| b.bias_add(&mut y, &bias))?),
    ];
    out.push(("relu [64,256]", time_op(b, runs, |b| b.relu(&mut y))?));
    let epi = |b| Dequant { scales: &sw, bias: Some(b), relu: true, act_scale: None };
    out.push(("the four above, unfused", time_op(b, runs, |b| matmul_i8_dequant_unfused(b, &xq, &wq, &mut y, false, false, epi(&bias)))?));
    out.push(("matmul_i8_dequant fused", time_op(b, runs, |b| b.matmul_i8_dequant(&xq, &wq, &mut y, false, false, epi(&bias)))?));
    Ok(out)
}

fn main() {
    // From a rayon worker, as gpulab's own compute threads drive the CPU backend.
    gpulab::device::cpu::drive(sections)
}

fn sections() {
    // `cargo test --benches` runs this too; keep that quick.
    let quick = std::env::args().any(|a| a == "--test");
    // `cargo bench -- inference` runs only the sections whose name contains the filter.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let wanted = |section: &str| filter.as_deref().is_none_or(|f| section.contains(f));
    let sizes: &[usize] = if quick { &[64] } else { &[256, 1024, 2048] };
    let mut gpu = match GpuBackend::open(&GpuSelector::Auto, None) {
        Ok(g) => Some(g),
        Err(e) => {
            eprintln!("GPU benchmarks skipped: {e}");
            None
        }
    };
    if wanted("gemm") {
        println!("GEMM (f32 and int8, median of 5 runs, measured; GOP/s = 2n³ / time)");
        let rows = bench_matmul(sizes, &[MatmulDType::F32, MatmulDType::Int8], if quick { 1 } else { 5 }, true, gpu.as_mut(), |r| {
            println!("  n={:<5} {:<4} {:>9.2} GOP/s  {:<60} {}", r.n, r.dtype, r.gflops, r.backend, r.variant);
        });
        if let Err(e) = rows {
            eprintln!("GEMM benchmark failed: {e}");
        }
    }

    if wanted("int8-ops") {
        println!("INT8 layer 784x256 at batch 64 on the CPU, op by op (median, measured)");
        match int8_layer_ops(if quick { 1 } else { 200 }) {
            Ok(rows) => rows.iter().for_each(|(op, s)| println!("  {op:<24} {:>8.2} us", s * 1e6)),
            Err(e) => eprintln!("  int8 ops: {e}"),
        }
    }

    if wanted("inference") {
        println!(
            "MLP 784-256-128-10 inference, FP32 vs INT8 forward, per-channel weights (medians of 7 alternating rounds, measured; int8/fp32 derived)"
        );
        for batch in [1, 64] {
            let (rounds, runs) = if quick { (1, 1) } else { (7, 30) };
            let report = |name: &str, r: gpulab::Result<Latency>| match r {
                Ok(l) => println!(
                    "  batch {batch:>3} {name:<4} fp32 {:>8.3} ms  int8 static {:>8.3} ms ({:.2}x)  dynamic {:>8.3} ms ({:.2}x)",
                    l.f32_s * 1e3,
                    l.static_s * 1e3,
                    l.static_ratio,
                    l.dynamic_s * 1e3,
                    l.dynamic_ratio
                ),
                Err(e) => eprintln!("  batch {batch} {name}: {e}"),
            };
            report("cpu", inference_latency(&mut CpuBackend::new(), batch, rounds, runs));
            if let Some(g) = gpu.as_mut() {
                report("gpu", inference_latency(g, batch, rounds, runs / 3));
            }
        }
    }

    if wanted("optim") {
        match gpu.as_mut() {
            Some(g) => optim_dispatch(g, quick),
            None => eprintln!("optimizer dispatch benchmark: no GPU"),
        }
    }

    if wanted("cpu-precision") {
        cpu_precision(quick);
    }

    if wanted("distributed") {
        distributed(quick);
    }

    if !wanted("train") {
        return;
    }
    println!("MLP 784-256-128-10 training steps (SGD momentum, random data, measured)");
    for batch in [32, 128, 512] {
        let cfg = train_cfg(ModelKind::Mlp, batch, quick);
        let report = |r: gpulab::Result<gpulab::bench::TrainBenchRow>| match r {
            Ok(r) => {
                println!("  batch {:>4} {:>10.0} samples/s {:>8.3} ms/step  {}", r.batch, r.samples_per_s, r.step_ms_median, r.backend)
            }
            Err(e) => eprintln!("  batch {batch}: {e}"),
        };
        report(bench_train(&mut CpuBackend::new(), &cfg));
        if let Some(g) = gpu.as_mut() {
            report(bench_train(g, &cfg));
        }
    }
    cpu_train_cases(quick);
}

/// `gpulab bench train`'s model at `batch`: the MLP 784-256-128-10 or the CNN on 1×28×28.
fn train_cfg(model: ModelKind, batch: usize, quick: bool) -> TrainBenchConfig {
    let conv = model.config([1, 28, 28], 784, &[256, 128], 10).expect("the benchmark's models are valid").conv;
    TrainBenchConfig {
        input: 784,
        hidden: vec![256, 128],
        classes: 10,
        batch,
        seconds: if quick { 0.01 } else { 1.0 },
        min_steps: if quick { 1 } else { 5 },
        optimizer: OptimizerKind::Sgd,
        conv,
    }
}

/// The CPU cases issue 40 compares with PyTorch (benches/reference/torch_mlp.py): MLP and CNN,
/// fp32 and bf16 (the fastest bf16 kernel here), batch 32, 128 and 512; short runs.
fn cpu_train_cases(quick: bool) {
    println!("CPU training, MLP and CNN, fp32 and bf16 (samples/s and wall ms/step measured; bf16/fp32 derived)");
    for model in [ModelKind::Mlp, ModelKind::Cnn] {
        for batch in [32, 128, 512] {
            let cfg = train_cfg(model, batch, quick);
            let mut fp32 = None;
            for precision in [Precision::F32, Precision::BF16] {
                match bench_train_amp(&mut CpuBackend::new(), &cfg, AmpConfig::new(precision)) {
                    Ok(r) => {
                        let ratio = fp32.map(|f| format!("  {:.2}x fp32", r.samples_per_s / f)).unwrap_or_default();
                        fp32 = fp32.or(Some(r.samples_per_s));
                        println!(
                            "  {:<3} {:<4} batch {:>4} {:>9.0} samples/s {:>8.3} ms/step wall{ratio}",
                            model.name(),
                            precision.name(),
                            batch,
                            r.samples_per_s,
                            r.step_ms_wall
                        );
                    }
                    Err(e) => eprintln!("  {} {} batch {batch}: {e}", model.name(), precision.name()),
                }
            }
        }
    }
}

/// CPU training throughput at each precision, interleaved round by round (this machine is
/// shared and noisy): FP32, BF16 through AVX-512 BF16 where the CPU has it, BF16 widened to
/// f32 (the portable path), FP16 (always widened). Ratios are derived from the medians.
fn cpu_precision(quick: bool) {
    let cfg = |hidden: &[usize], batch| TrainBenchConfig {
        input: 784,
        hidden: hidden.to_vec(),
        classes: 10,
        batch,
        seconds: if quick { 0.01 } else { 2.0 },
        min_steps: if quick { 1 } else { 20 },
        optimizer: OptimizerKind::Sgd,
        conv: None,
    };
    let runs: [(&str, Precision, Bf16Path); 5] = [
        ("fp32", Precision::F32, Bf16Path::Widen),
        ("bf16 AMX", Precision::BF16, Bf16Path::Amx),
        ("bf16 AVX-512", Precision::BF16, Bf16Path::Avx512Bf16),
        ("bf16 widened", Precision::BF16, Bf16Path::Widen),
        ("fp16 widened", Precision::F16, Bf16Path::Widen),
    ];
    println!(
        "CPU MLP training by precision (samples/s measured, median of rounds; ratios derived); bf16 kernel here: {}",
        Bf16Path::detect().name()
    );
    for (hidden, batch) in [(&[256, 128][..], 128), (&[1024, 1024][..], 128), (&[1024, 1024][..], 512)] {
        let mut rates = vec![Vec::new(); runs.len()];
        for _ in 0..if quick { 1 } else { 3 } {
            for (i, &(_, precision, path)) in runs.iter().enumerate().filter(|(_, r)| r.2.available()) {
                match bench_train_amp(&mut CpuBackend::new().with_bf16_path(path), &cfg(hidden, batch), AmpConfig::new(precision)) {
                    Ok(r) => rates[i].push(r.samples_per_s),
                    Err(e) => eprintln!("  {hidden:?} batch {batch} {}: {e}", runs[i].0),
                }
            }
        }
        let med: Vec<f64> = rates.iter_mut().map(|r| if r.is_empty() { f64::NAN } else { gpulab::stats::median(r) }).collect();
        for (i, (name, _, path)) in runs.iter().enumerate() {
            if !path.available() {
                println!("  784-{hidden:?}-10 batch {batch:>4} {name:<13} not on this CPU");
                continue;
            }
            println!("  784-{hidden:?}-10 batch {batch:>4} {name:<13} {:>9.0} samples/s  {:.2}x fp32", med[i], med[i] / med[0]);
        }
    }
}

/// Exercise 6's benchmark: MLP 784-512-256-10 at global batch 256 on 1 CPU replica × 1 thread
/// and on 2 × 1 thread, interleaved round by round (this machine is shared and noisy); the
/// speed-up is the ratio of the rounds' median throughputs (derived), beside the all-reduce
/// time and the step split per replica (derived from the replicas' clocks).
fn distributed(quick: bool) {
    use gpulab::parallel::{self, DpConfig, ReplicaKind};
    use gpulab::train::TrainConfig;
    let n = if quick { 600 } else { 8000 };
    let data = match gpulab::data::load(&format!("shapes:res=28,n={n},classes=4").parse().expect("a data set spec"), 42) {
        Ok(d) => d,
        Err(e) => return eprintln!("  distributed: {e}"),
    };
    let cfg = TrainConfig {
        hidden: vec![512, 256],
        batch: 256,
        epochs: if quick { 1 } else { 3 },
        lr: 0.05,
        log_every: 1000,
        ..Default::default()
    };
    let dp = |replicas, overlap, shard_optimizer| DpConfig {
        replicas,
        kind: ReplicaKind::Cpu { threads: 1 },
        bucket_cap_mb: 25.0,
        overlap,
        shard_optimizer,
        link: None,
        timeline_steps: 0,
        checkpoints: None,
    };
    println!(
        "Data parallel, MLP 784-512-256-10, global batch 256, CPU replicas × 1 thread (median of rounds, interleaved; speed-up derived)"
    );
    // 2 replicas with the all-reduce on a communication thread (overlap), on the training
    // thread (inline, the exercise's default: no thread beside the replicas on a 2-core
    // machine), and inline with the optimizer step sharded (ZeRO-1: each replica updates half
    // the parameters).
    let runs = [
        (1, true, false, "1 replica"),
        (2, true, false, "2 replicas, overlap"),
        (2, false, false, "2 replicas, inline"),
        (2, false, true, "2 replicas, ZeRO-1"),
    ];
    let mut rate = vec![Vec::new(); runs.len()];
    let mut split = vec![Vec::new(); runs.len()];
    for _ in 0..if quick { 1 } else { 7 } {
        for (i, &(replicas, overlap, shard, _)) in runs.iter().enumerate() {
            match parallel::train(&data, &cfg, &dp(replicas, overlap, shard), &mut gpulab::train::NullSink) {
                Ok(r) => {
                    rate[i].push(r.samples_per_s);
                    split[i].push((r.split.compute_s, r.split.exposed_comm_s, r.split.idle_s, r.allreduce_s_per_step));
                }
                Err(e) => return eprintln!("  {replicas} replicas: {e}"),
            }
        }
    }
    let med = |v: &mut Vec<f64>| median(v);
    let base = med(&mut rate[0]);
    for (i, &(_, _, _, name)) in runs.iter().enumerate() {
        let col = |f: fn(&(f64, f64, f64, f64)) -> f64| med(&mut split[i].iter().map(f).collect()) * 1e3;
        println!(
            "  {name:<20} {:>9.0} samples/s  {:.2}x one replica  per step: compute {:.2} ms, exposed comm {:.2} ms, idle {:.2} ms, all-reduce {:.2} ms",
            med(&mut rate[i]),
            med(&mut rate[i]) / base,
            col(|s| s.0),
            col(|s| s.1),
            col(|s| s.2),
            col(|s| s.3)
        );
    }
}

/// Median seconds per call of two variants of `op` (0 and 1) and the median of the
/// repetitions' ratios (0 over 1), alternated within each repetition with the order flipping,
/// so host noise hits both alike: `calls` calls then one wait per variant and repetition. The
/// first repetition warms up (pipelines compile on first use).
fn alternated(
    b: &mut GpuBackend,
    reps: usize,
    calls: usize,
    mut op: impl FnMut(&mut GpuBackend, usize) -> gpulab::Result<()>,
) -> gpulab::Result<[f64; 3]> {
    let (mut t, mut ratio) = ([Vec::new(), Vec::new()], Vec::new());
    for r in 0..=reps {
        let mut s = [0.0; 2];
        for k in [r % 2, 1 - r % 2] {
            b.sync()?;
            let start = std::time::Instant::now();
            for _ in 0..calls {
                op(b, k)?;
            }
            b.sync()?;
            s[k] = start.elapsed().as_secs_f64() / calls as f64;
        }
        if r > 0 {
            t[0].push(s[0]);
            t[1].push(s[1]);
            ratio.push(s[0] / s[1]);
        }
    }
    Ok([median(&mut t[0]), median(&mut t[1]), median(&mut ratio)])
}

/// Issue 43's multi-tensor optimizer and split reductions against the per-parameter loop and
/// the single-workgroup kernels they replaced, on the GPU adapter, in one process (wall time,
/// one wait per repetition; ratios derived). The parameters are the MLP's and the CNN's own.
fn optim_dispatch(gpu: &mut GpuBackend, quick: bool) {
    let (reps, calls) = if quick { (1, 1) } else { (31, 20) };
    let split = gpu.split_reductions();
    println!(
        "Optimizer step, multi-tensor vs per parameter, on {} (median wall µs per step of {reps} alternated repetitions × {calls} steps, measured; ratio derived)",
        gpu.info().label()
    );
    for model in [ModelKind::Mlp, ModelKind::Cnn] {
        for amp in [false, true] {
            let label = format!("{:<3} {}", model.name(), if amp { "fp16 GradScaler SGD" } else { "fp32 SGD" });
            match optim_case(gpu, model, amp, reps, calls) {
                Ok([multi, single, ratio]) => println!(
                    "  {label:<24} multi {:>8.1} µs  per-parameter {:>8.1} µs  multi/per-parameter {ratio:.2}x",
                    multi * 1e6,
                    single * 1e6
                ),
                Err(e) => eprintln!("  {label}: {e}"),
            }
        }
    }
    println!("Long reductions, split over workgroups vs one workgroup (same timing)");
    for rows in [512, 1024, 4096] {
        match reduction_case(gpu, rows, reps, calls) {
            Ok(r) => {
                for (name, [split, one, ratio]) in r {
                    println!(
                        "  {name:<28} rows {rows:>5} split {:>8.1} µs  one workgroup {:>8.1} µs  split/one {ratio:.2}x",
                        split * 1e6,
                        one * 1e6
                    );
                }
            }
            Err(e) => eprintln!("  reductions at {rows} rows: {e}"),
        }
    }
    gpu.set_split_reductions(split);
}

fn optim_case(gpu: &mut GpuBackend, model: ModelKind, amp: bool, reps: usize, calls: usize) -> gpulab::Result<[f64; 3]> {
    use gpulab::tensor::scaler::{self, AmpOptimizer};
    use gpulab::tensor::{DType, OptStep, ParamRefs, Sgd};
    let cfg = model.config([1, 28, 28], 784, &[256, 128], 10)?;
    let mut net = Mlp::new(gpu, cfg, Optimizer::new(OptimizerKind::Sgd, 0.01, 0.9, 0.0), 1)?;
    let hp = Sgd { lr: 0.01, momentum: 0.9, weight_decay: 0.0 };
    let mut params: Vec<_> = net.params_mut().collect();
    // Mixed precision: 16-bit copies of the weights (not the biases, rows of 1), as the AMP step keeps.
    let mut w16 = Vec::new();
    for p in &params {
        let shape = p.value.shape();
        w16.push(if amp && shape[0] > 1 { Some(gpu.zeros(shape, DType::F16, MemCategory::Parameters)?) } else { None });
    }
    let mut state = gpu.zeros([1, scaler::STATE_WORDS], DType::U32, MemCategory::Other)?;
    gpu.write_u32(&mut state, &scaler::state_words(1.0, 0, 0))?;
    let multi = gpu.multi_tensor();
    let r = alternated(gpu, reps, calls, |b, k| {
        // Variant 0 the multi-tensor path, forced on (a CPU adapter runs per parameter anyway).
        b.set_multi_tensor(k == 0);
        if amp {
            let opt = AmpOptimizer::Sgd(hp);
            let mut grads: Vec<_> = params.iter_mut().map(|p| &mut p.grad).collect();
            if k == 0 {
                b.unscale_checks(&mut grads, &mut state)?;
            } else {
                grads.into_iter().try_for_each(|g| b.unscale_check(g, &mut state))?;
            }
            let mut refs: Vec<_> = params
                .iter_mut()
                .zip(w16.iter_mut())
                .map(|(p, w)| ParamRefs { value: &mut p.value, grad: &p.grad, state: &mut p.state, w16: w.as_mut() })
                .collect();
            if k == 0 {
                return b.amp_updates(&mut refs, opt, &state);
            }
            return refs.into_iter().try_for_each(|r| b.amp_update(r.value, r.grad, r.state, opt, &state, r.w16));
        }
        if k == 0 {
            let mut refs: Vec<_> =
                params.iter_mut().map(|p| ParamRefs { value: &mut p.value, grad: &p.grad, state: &mut p.state, w16: None }).collect();
            return b.optimizer_steps(&mut refs, OptStep::Sgd(hp));
        }
        params.iter_mut().try_for_each(|p| b.sgd_step(&mut p.value, &p.grad, &mut p.state[0], hp))
    });
    gpu.set_multi_tensor(multi);
    r
}

/// `accumulate_sum` of a [rows, 1] loss, `count_correct` of [rows, 10] logits and `sum_rows` of
/// [10, rows] (a few long rows), split (variant 0) and in one workgroup (variant 1).
fn reduction_case(gpu: &mut GpuBackend, rows: usize, reps: usize, calls: usize) -> gpulab::Result<Vec<(&'static str, [f64; 3])>> {
    use gpulab::tensor::DType;
    let loss = gpu.upload_f32(&random_matrix(rows, 3), [rows, 1], MemCategory::Activations)?;
    let logits = gpu.upload_f32(&random_matrix(rows * 10, 4), [rows, 10], MemCategory::Activations)?;
    let labels: Vec<u32> = (0..rows as u32).map(|i| i % 10).collect();
    let mut labels_t = gpu.zeros([1, rows], DType::U32, MemCategory::Inputs)?;
    gpu.write_u32(&mut labels_t, &labels)?;
    let wide = gpu.upload_f32(&random_matrix(rows * 10, 5), [10, rows], MemCategory::Activations)?;
    let mut acc = gpu.zeros([1, 1], DType::F32, MemCategory::Other)?;
    let mut correct = gpu.zeros([1, 1], DType::U32, MemCategory::Other)?;
    let mut sums = gpu.zeros([1, 10], DType::F32, MemCategory::Other)?;
    let mut out = Vec::new();
    let mut each = |name, gpu: &mut GpuBackend, op: &mut dyn FnMut(&mut GpuBackend) -> gpulab::Result<()>| -> gpulab::Result<()> {
        let r = alternated(gpu, reps, calls, |b, k| {
            b.set_split_reductions(k == 0);
            op(b)
        })?;
        out.push((name, r));
        Ok(())
    };
    each("accumulate_sum [rows,1]", gpu, &mut |b| b.accumulate_sum(&loss, &mut acc, 0))?;
    each("count_correct [rows,10]", gpu, &mut |b| b.count_correct(&logits, &labels_t, &mut correct, 0))?;
    each("sum_rows [10,rows]", gpu, &mut |b| b.sum_rows(&wide, &mut sums))?;
    Ok(out)
}
